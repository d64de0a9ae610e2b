//! `pinfleet adopt CLUSTER`: take over, in place, the running cluster an
//! imported cluster file describes (kops's, or one made with kubeadm on EC2). Shows what it claims (a dry run by
//! default); with `--yes` records the claims in pinfleet's state store,
//! then tags each resource. The judging is [`crate::adopt::claim`]'s, the
//! reading and tagging [`crate::adopt::aws`]'s.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::adopt::claim;
use crate::output::{print_data, Format};

pub use crate::adopt::CLAIMS_KEY;

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The cluster file `pinfleet import kops` wrote (its name or path).
    pub cluster: String,
    /// Claim and tag (default: show what would be claimed).
    #[arg(long)]
    pub yes: bool,
    /// Claim this resource (an EC2 id) though another tool owns it.
    #[arg(long = "take", value_name = "ID")]
    pub take: Vec<String>,
    /// A kubeadm cluster's PKI, as kubeadm keeps it on a control-plane
    /// machine (/etc/kubernetes/pki, copied here): ca.crt and ca.key,
    /// front-proxy-ca.crt and .key, sa.pub and sa.key, etcd/ca.crt and
    /// etcd/ca.key (with etcd/peer.crt, which that CA signed). Needed once, for a cluster `pinfleet import aws` mapped
    /// (again to take etcd's CA into an adoption made without it).
    #[arg(long, value_name = "DIR")]
    pub pki: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: AdoptArgs) -> anyhow::Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let cluster = &s.loaded.cluster;
    let name = cluster.metadata.name.clone();
    let notes = &cluster.metadata.annotations;
    let source = if let Some(kops_name) = notes.get("pinfleet.dev/kops-name") {
        let groups: BTreeMap<String, String> = cluster
            .spec
            .instance_groups
            .iter()
            .map(|grp| {
                (grp.labels.get(claim::KOPS_GROUP_TAG).cloned().unwrap_or_else(|| grp.name.clone()), grp.name.clone())
            })
            .collect();
        claim::Source::Kops { name: kops_name.clone(), groups }
    } else if let Some(tag) = notes.get(crate::adopt::ec2::TAG_ANNOTATION) {
        let machines = notes.get(crate::adopt::ec2::MACHINES_ANNOTATION).map(|m| crate::adopt::ec2::parse_machines(m));
        let Some(machines) = machines.filter(|m| !m.is_empty()) else {
            bail!(
                "{name}: no metadata.annotations[{}]: adopt claims the machines `pinfleet import aws` recorded",
                crate::adopt::ec2::MACHINES_ANNOTATION
            );
        };
        let kubernetes = notes.get(crate::adopt::ec2::KUBEADM_NAME_ANNOTATION).cloned().unwrap_or("kubernetes".into());
        claim::Source::Ec2 { tag: tag.clone(), machines, kubernetes }
    } else {
        bail!(
            "{name}: no metadata.annotations[pinfleet.dev/kops-name] nor [{}]: adopt takes over the cluster an imported file names (`pinfleet import kops`, `pinfleet import aws`)",
            crate::adopt::ec2::TAG_ANNOTATION
        );
    };
    // The file's network and security groups (the machines' images and
    // user-data are not needed to match what exists).
    let mut inputs = crate::cloud::model::Inputs::default();
    for grp in &cluster.spec.instance_groups {
        inputs.images.insert(grp.name.clone(), ("ami-adopt".into(), "/dev/sda1".into()));
        inputs.user_data.insert(grp.name.clone(), String::new());
    }
    let desired = crate::cloud::model::desired(cluster, &inputs)?;
    let found = match &source {
        claim::Source::Kops { name: kops_name, .. } => crate::adopt::aws::find(&s.aws, kops_name).await?,
        claim::Source::Ec2 { tag, .. } => {
            let (k, v) = crate::adopt::ec2::parse_tag(tag).map_err(anyhow::Error::msg)?;
            crate::adopt::aws::find_ec2(&s.aws, &k, &v).await?
        }
    };
    if found.is_empty() {
        let by = match &source {
            claim::Source::Kops { name: kops_name, .. } => format!("{}={kops_name}", claim::KOPS_CLUSTER_TAG),
            claim::Source::Ec2 { tag, .. } => tag.clone(),
        };
        bail!("no AWS resource is tagged {by} in {}: nothing to adopt (is the region right?)", s.aws.region);
    }
    let mut claims = claim::judge(&found, &desired, &source, &args.take);
    // Read only (a dry run creates no bucket).
    let existing = crate::state::Store::open_existing(&cluster.spec.state_store, &name, Some(&s.aws))
        .await
        .with_context(|| format!("opening {name}'s state store"))?;
    // The trust comes along: kops's keysets, read (and checked) before
    // anything is written.
    let (pki, take_over) = match &source {
        claim::Source::Kops { .. } => trust(cluster, &s.aws, existing.as_ref()).await?,
        claim::Source::Ec2 { .. } => trust_kubeadm(cluster, args.pki.as_deref(), existing.as_ref()).await?,
    };
    claims.pki = Some(take_over);
    // kops's etcd-manager comes along too: its control plane rolls with it.
    let etcd_manager = match &source {
        claim::Source::Kops { .. } => Some(etcd_manager(cluster, &s.aws, existing.as_ref()).await?),
        claim::Source::Ec2 { .. } => None,
    };
    claims.etcd_manager = etcd_manager.as_ref().map(|(_, t)| t.clone());
    // kops's Secrets' keys come with etcd-manager's record: into the PKI,
    // ahead of pinfleet's own, before a machine of the control plane rolls.
    let pki = match &etcd_manager {
        Some((Some(em), _)) if !em.encryption_keys.is_empty() => {
            let pki = with_kops_keys(pki, em, existing.as_ref()).await?;
            if let (Some(_), Some(p)) = (&pki, claims.pki.as_mut()) {
                p.keysets.push(crate::adopt::etcd_manager::ENCRYPTION_CONFIG_KEY.into());
                p.already = false;
            }
            pki
        }
        _ => pki,
    };
    let write = args.yes && claims.refused.is_empty() && !claims.is_noop();
    if write {
        let store = crate::state::Store::open(&cluster.spec.state_store, &name, Some(&s.aws))
            .await
            .with_context(|| format!("opening {name}'s state store"))?;
        // The PKI, then the record: a run killed while tagging is resumed
        // by the next (a tag already there is no change), and the record
        // says what this cluster took over.
        if let Some((pki, condition)) = pki {
            match store.put(crate::state::pki::PKI_KEY, serde_json::to_vec(&pki)?, condition).await {
                Ok(_) => {}
                Err(e) if e.is::<crate::state::PreconditionFailed>() => {
                    bail!("{name}'s PKI was written by another run meanwhile: run adopt again")
                }
                Err(e) => return Err(e),
            }
        }
        if let Some((Some(em), take_over)) = &etcd_manager {
            if !take_over.already {
                store.put_json(crate::adopt::etcd_manager::KEY, em).await?;
            }
        }
        let mut record = serde_json::json!({"from": source.from_tag(), "at": chrono::Utc::now(), "claims": claims});
        if let claim::Source::Kops { name: kops_name, .. } = &source {
            record["kopsName"] = serde_json::json!(kops_name);
        }
        store.put_json(CLAIMS_KEY, &record).await?;
        for c in claims.claim.iter().filter(|c| !c.already) {
            let mut tags = claim::claim_tags(&name, &c.key);
            if c.key == crate::cloud::key::ResourceKey::Vpc {
                tags.extend(claims.vpc_tags.iter().cloned());
            }
            crate::adopt::aws::tag(&s.aws, std::slice::from_ref(&c.id), &tags).await?;
            crate::etcd::failpoint("adopt:tagging");
        }
        let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in claims.roll.iter().filter(|r| !r.already) {
            by_group.entry(r.group.as_str()).or_default().push(r.id.clone());
        }
        for (grp, ids) in by_group {
            crate::adopt::aws::tag(&s.aws, &ids, &claim::roll_tags(&name, grp)).await?;
        }
    }
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", text(&claims, &name, write))?,
        other => print_data(other, &claims)?,
    }
    s.report_calls(g);
    Ok(if claims.refused.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// kops's keysets made into pinfleet's PKI for the cluster (None when
/// pinfleet's state holds that very CA already), and what to say of it.
/// A PKI of another CA in pinfleet's state is refused: that cluster is
/// not this kops cluster.
async fn trust(
    cluster: &crate::spec::Cluster,
    aws: &crate::cloud::aws::Aws,
    store: Option<&crate::state::Store>,
) -> anyhow::Result<(Option<PkiWrite>, claim::PkiTakeOver)> {
    let name = &cluster.metadata.name;
    let Some(url) = cluster.metadata.annotations.get("pinfleet.dev/imported-from") else {
        bail!("{name}: no metadata.annotations[pinfleet.dev/imported-from]: adopt reads kops's keysets from the state store the import read");
    };
    let (base, kops_name) = super::import::split_state(url)?;
    let s3 = base.starts_with("s3://").then_some(aws as &dyn crate::state::S3Access);
    let kops = crate::state::Store::open_existing(&base, &kops_name, s3)
        .await
        .with_context(|| format!("opening kops's state store {url}"))?
        .with_context(|| format!("{url}: no such bucket"))?;
    let keys = crate::adopt::read_keysets(&kops).await?;
    for ((name, _), k) in crate::adopt::keyset::KEYSETS.iter().zip(&keys) {
        let at = kops.describe(&crate::adopt::keyset::keyset_key(name));
        crate::state::pki::check_key_pair(&k.cert_pem, &k.key_pem).with_context(|| format!("{at}: its primary key"))?;
    }
    let [ca, front_proxy, sa] = [&keys[0], &keys[1], &keys[2]];
    let take_over = |already| claim::PkiTakeOver {
        by: "kops".into(),
        keysets: crate::adopt::keyset::KEYSETS.iter().map(|(k, _)| k.to_string()).collect(),
        from: url.clone(),
        already,
    };
    if let Some((have, _, at)) = held(store).await? {
        if have.ca_cert.trim() != ca.cert_pem.trim() {
            bail!(
                "{name}'s state ({at}) holds another cluster CA than kops's {}: it is not this kops cluster's; nothing was written",
                kops.describe(&crate::adopt::keyset::keyset_key("kubernetes-ca"))
            );
        }
        return Ok((None, take_over(true)));
    }
    let pki = crate::state::pki::Pki::adopted(
        name,
        (&ca.cert_pem, &ca.key_pem),
        (&front_proxy.cert_pem, &front_proxy.key_pem),
        (&sa.cert_pem, &sa.key_pem),
        None,
    )
    .with_context(|| format!("taking over kops's keysets from {url}"))?;
    Ok((Some((pki, crate::state::Condition::IfAbsent)), take_over(false)))
}

/// kops's etcd-manager material for the cluster (read from kops's state,
/// or the record pinfleet's state holds already; None: it could not be
/// read), and what to say.
/// What cannot be read is said, not refused: the cluster is adopted, and
/// its control plane's roll is refused for that reason.
async fn etcd_manager(
    cluster: &crate::spec::Cluster,
    aws: &crate::cloud::aws::Aws,
    store: Option<&crate::state::Store>,
) -> anyhow::Result<(Option<crate::adopt::etcd_manager::EtcdManager>, claim::EtcdManagerTakeOver)> {
    use crate::adopt::etcd_manager as em;
    if let Some(store) = store {
        if let Some(mut have) = em::load(store).await? {
            let mut said = format!("etcd-manager's CAs and {} manifests from {}", have.manifests.len(), have.from);
            // Kept as it is, but for kops's Secrets' keys: read again (kops
            // may have rotated them since), and checked into the PKI.
            let s3 = Some(aws as &dyn crate::state::S3Access);
            let already = match em::kops_keys_now(&have, s3).await {
                Ok(Some(now)) if now != have.encryption_keys => {
                    let names: Vec<String> =
                        now.iter().map(|k| format!("{} ({})", k.name, k.provider.name())).collect();
                    said.push_str(&format!("; kops's Secrets' keys are now {}", names.join(", ")));
                    have.encryption_keys = now;
                    false
                }
                Ok(_) => true,
                Err(e) => {
                    let why = crate::escape::escaped(&format!("{e:#}"), false).replace('\n', " ");
                    said.push_str(&format!("; kops's Secrets' keys not read again: {why}"));
                    true
                }
            };
            return Ok((Some(have), claim::EtcdManagerTakeOver { said, taken: true, already }));
        }
    }
    let url = cluster.metadata.annotations.get("pinfleet.dev/imported-from").cloned().unwrap_or_default();
    let (base, kops_name) = super::import::split_state(&url)?;
    let s3 = base.starts_with("s3://").then_some(aws as &dyn crate::state::S3Access);
    let kops = crate::state::Store::open_existing(&base, &kops_name, s3)
        .await?
        .with_context(|| format!("{url}: no such bucket"))?;
    Ok(match em::read(&kops, cluster).await {
        Ok(have) => {
            let mut said = format!("etcd-manager's CAs and {} manifests from {}", have.manifests.len(), have.from);
            if !have.encryption_keys.is_empty() {
                let keys: Vec<String> =
                    have.encryption_keys.iter().map(|k| format!("{} ({})", k.name, k.provider.name())).collect();
                said.push_str(&format!(
                    "; the Secrets' encryption keys {} from {}, kops's writing key first",
                    keys.join(", "),
                    crate::adopt::etcd_manager::ENCRYPTION_CONFIG_KEY
                ));
            }
            (Some(have), claim::EtcdManagerTakeOver { said, taken: true, already: false })
        }
        Err(e) => {
            // One line, nothing of kops's files shown raw.
            let why = crate::escape::escaped(&format!("{e:#}"), false).replace('\n', " ");
            let said =
                format!("{why}: not taken, so the control plane will not be rolled (its new machines would lack it)");
            (None, claim::EtcdManagerTakeOver { said, taken: false, already: false })
        }
    })
}

/// `pki` (to be written, or else the one pinfleet's state holds) with
/// kops's Secrets' encryption keys ahead of its own; None when nothing
/// is to be written.
async fn with_kops_keys(
    pki: Option<PkiWrite>,
    em: &crate::adopt::etcd_manager::EtcdManager,
    store: Option<&crate::state::Store>,
) -> anyhow::Result<Option<PkiWrite>> {
    let (mut have, condition, written) = match pki {
        Some((p, c)) => (p, c, true),
        None => match held(store).await? {
            Some((p, etag, _)) => (p, crate::state::Condition::IfMatch(etag), false),
            None => return Ok(None),
        },
    };
    let taken = have
        .take_encryption_keys(&em.encryption_keys)
        .with_context(|| format!("taking kops's Secrets' encryption keys from {}: nothing was written", em.from))?;
    Ok((written || taken).then_some((have, condition)))
}

/// A PKI to write, and on what condition: absent (the first), or still
/// the one read (etcd's CA or kops's Secrets' keys added to it).
type PkiWrite = (crate::state::pki::Pki, crate::state::Condition);

/// The PKI pinfleet's state holds for the cluster, its ETag, and where.
async fn held(store: Option<&crate::state::Store>) -> anyhow::Result<Option<(crate::state::pki::Pki, String, String)>> {
    let Some(store) = store else { return Ok(None) };
    let Some((bytes, etag)) = store.get(crate::state::pki::PKI_KEY).await? else { return Ok(None) };
    let at = store.describe(crate::state::pki::PKI_KEY);
    // Where, never serde's words: they may quote a key the PKI holds.
    let pki = serde_json::from_slice(&bytes).map_err(|e| {
        anyhow::anyhow!("reading {at}: unreadable at line {} column {} ({:?})", e.line(), e.column(), e.classify())
    })?;
    Ok(Some((pki, etag, at)))
}

/// kubeadm's PKI (copied off a control-plane machine into `dir`) made
/// into pinfleet's PKI for the cluster, as [`trust`] does kops's.
async fn trust_kubeadm(
    cluster: &crate::spec::Cluster,
    dir: Option<&std::path::Path>,
    store: Option<&crate::state::Store>,
) -> anyhow::Result<(Option<PkiWrite>, claim::PkiTakeOver)> {
    let name = &cluster.metadata.name;
    let have = held(store).await?;
    // etcd's CA too: the control plane's new machines join kubeadm's
    // stacked etcd as peers of its members.
    let files = ["ca", "front-proxy-ca", "sa", "etcd/ca"];
    let take_over = |already, from: String| claim::PkiTakeOver {
        by: "kubeadm".into(),
        keysets: files.iter().map(|f| f.to_string()).collect(),
        from,
        already,
    };
    let Some(dir) = dir else {
        if let Some((have, _, at)) = have {
            // What the state holds, said as it is: etcd's CA only when taken.
            let mut over = take_over(true, at);
            over.keysets.retain(|k| k != "etcd/ca" || have.etcd_ca_from.is_some());
            return Ok((None, over));
        }
        bail!(
            "{name}: --pki DIR is needed: kubeadm keeps the cluster's CAs and service-account key on its control-plane machines (/etc/kubernetes/pki); copy that folder here and name it. Nothing was written"
        );
    };
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("{}: kubeadm keeps it there", path.display()))
    };
    let pair = |stem: &str, public: &str| -> anyhow::Result<(String, String)> {
        let (cert, key) = (read(&format!("{stem}.{public}"))?, read(&format!("{stem}.key"))?);
        crate::state::pki::check_key_pair(&cert, &key)
            .with_context(|| format!("{}: {stem}.key checked against {stem}.{public}", dir.display()))?;
        Ok((cert, key))
    };
    let ca = pair("ca", "crt")?;
    let front_proxy = pair("front-proxy-ca", "crt")?;
    let sa = pair("sa", "pub")?;
    let etcd = pair("etcd/ca", "crt")?;
    // The etcd CA is the members': their peer certificate, kept beside
    // it, is signed by it (a CA from elsewhere is not taken).
    crate::state::pki::check_signed_by(&read("etcd/peer.crt")?, &etcd.0).with_context(|| {
        format!("{}: etcd/peer.crt checked against etcd/ca.crt (the CA of this cluster's etcd members)", dir.display())
    })?;
    let etcd_from = format!("kubeadm's {}", dir.join("etcd/ca.crt").display());
    if let Some((mut have, etag, at)) = have {
        if have.ca_cert.trim() != ca.0.trim() {
            bail!(
                "{name}'s state ({at}) holds another cluster CA than {}: it is not this cluster's; nothing was written",
                dir.join("ca.crt").display()
            );
        }
        if have.etcd_ca_from.is_some() {
            if have.etcd_ca_cert.trim() != etcd.0.trim() {
                bail!(
                    "{name}'s state ({at}) holds another etcd CA than {}: it is not this cluster's; nothing was written",
                    dir.join("etcd/ca.crt").display()
                );
            }
            return Ok((None, take_over(true, dir.display().to_string())));
        }
        // Adopted before etcd's CA came along: taken now (pinfleet's own,
        // which it replaces, signed for no machine).
        have.take_etcd_ca(&etcd.0, &etcd.1, &etcd_from)
            .with_context(|| format!("taking over kubeadm's etcd CA from {}", dir.display()))?;
        let over = claim::PkiTakeOver {
            by: "kubeadm".into(),
            keysets: vec!["etcd/ca".into()],
            from: dir.display().to_string(),
            already: false,
        };
        return Ok((Some((have, crate::state::Condition::IfMatch(etag))), over));
    }
    let pki = crate::state::pki::Pki::adopted(
        name,
        (&ca.0, &ca.1),
        (&front_proxy.0, &front_proxy.1),
        (&sa.0, &sa.1),
        Some((&etcd.0, &etcd.1, &etcd_from)),
    )
    .with_context(|| format!("taking over kubeadm's PKI from {}", dir.display()))?;
    Ok((Some((pki, crate::state::Condition::IfAbsent)), take_over(false, dir.display().to_string())))
}

/// The claims as text: a table per part, then what was (or would be)
/// written. `written`: this run claimed and tagged.
pub fn text(c: &claim::Claims, cluster: &str, written: bool) -> String {
    let state = |already: bool| match (already, written) {
        (true, _) => "claimed",
        (false, true) => "claimed now",
        (false, false) => "to claim",
    };
    let notes = |v: &[claim::Note]| {
        let rows: Vec<Vec<String>> = v.iter().map(|n| vec![n.kind.clone(), n.id.clone(), n.why.clone()]).collect();
        crate::output::table(&["KIND", "ID", "WHY"], &rows)
    };
    let mut s = String::new();
    if !c.claim.is_empty() {
        s += &if written || c.claim.iter().all(|x| x.already) {
            format!("claimed for {cluster} (tags added, nothing replaced):\n")
        } else {
            format!("to claim for {cluster} (tags only, nothing replaced):\n")
        };
        let rows: Vec<Vec<String>> = c
            .claim
            .iter()
            .map(|x| vec![x.kind.clone(), x.id.clone(), x.key.to_string(), state(x.already).into()])
            .collect();
        s += &crate::output::table(&["KIND", "ID", "PINFLEET", "STATE"], &rows);
    }
    if !c.roll.is_empty() {
        s += "machines to roll onto pinfleet's launch templates (`pinfleet upgrade`):\n";
        let rows: Vec<Vec<String>> = c
            .roll
            .iter()
            .map(|r| vec![r.id.clone(), r.kops_group.clone(), r.group.clone(), state(r.already).into()])
            .collect();
        s += &crate::output::table(&["INSTANCE", "WAS IN", "GROUP", "STATE"], &rows);
    }
    if let Some(p) = &c.pki {
        let how = match (p.already, written) {
            (true, _) => "(taken over)",
            (false, true) => "(taken over now, into pinfleet's state)",
            (false, false) => "(to take over into pinfleet's state)",
        };
        s += &format!("trust: {}'s {} from {} {how}\n", p.by, p.keysets.join(", "), p.from);
    }
    if let Some(e) = &c.etcd_manager {
        let how = match (e.taken, e.already, written) {
            (false, _, _) => "(not taken)",
            (true, true, _) => "(taken over)",
            (true, false, true) => "(taken over now, into pinfleet's state)",
            (true, false, false) => "(to take over into pinfleet's state)",
        };
        s += &format!("etcd: {} {how}\n", e.said);
    }
    if !c.left.is_empty() {
        s += "left as they are:\n";
        s += &notes(&c.left);
    }
    if !c.refused.is_empty() {
        s += "refused (nothing is written while any is here; `--take ID` claims one anyway):\n";
        s += &notes(&c.refused);
    }
    s += &if !c.refused.is_empty() {
        "nothing was written\n".to_string()
    } else if c.is_noop() {
        format!("{cluster} is adopted already: nothing to do\n")
    } else if written {
        format!("{cluster} adopted: claims recorded and tagged\n")
    } else {
        "dry run: run again with --yes to claim\n".to_string()
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::key::ResourceKey;

    fn claims(already: bool, refused: bool) -> claim::Claims {
        let note = |kind: &str, id: &str, why: &str| claim::Note { kind: kind.into(), id: id.into(), why: why.into() };
        claim::Claims {
            claim: vec![claim::Claim { kind: "vpc".into(), id: "vpc-1".into(), key: ResourceKey::Vpc, already }],
            roll: vec![claim::Roll { id: "i-1".into(), group: "nodes".into(), kops_group: "nodes".into(), already }],
            left: vec![note("auto-scaling-group", "nodes.c.example.com", "kops's: deleted once empty")],
            refused: if refused { vec![note("security-group", "sg-9", "Terraform manages it")] } else { vec![] },
            pki: Some(claim::PkiTakeOver {
                by: "kops".into(),
                keysets: vec!["kubernetes-ca".into()],
                from: "s3://kops/c.example.com".into(),
                already,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn adopt_says_what_it_would_claim_what_it_claimed_and_what_it_refused() {
        let all = [
            ("dry run", text(&claims(false, false), "prod", false)),
            ("refused", text(&claims(false, true), "prod", false)),
            ("written", text(&claims(false, false), "prod", true)),
            ("again", text(&claims(true, false), "prod", false)),
        ]
        .map(|(what, t)| format!("--- {what}\n{t}"))
        .join("");
        insta::assert_snapshot!("adopt_text", all);
    }
}
