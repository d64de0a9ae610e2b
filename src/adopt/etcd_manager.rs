//! A kops control plane's etcd, as etcd-manager runs it, carried onto
//! pinfleet's control-plane machines the way kops itself replaces one: the
//! new machine runs the cluster's own etcd-manager manifests with the
//! cluster's own etcd CAs, and etcd-manager on it takes over the member
//! whose EBS volume (tagged `k8s.io/etcd/<cluster>`, in its zone) the old
//! machine let go. The member's identity and data travel with the volume;
//! no membership changes.
//!
//! ```text
//! kops's state store: pki/private/{etcd-manager-ca,etcd-peers-ca}-{main,events},
//!                     pki/private/etcd-clients-ca, manifests/etcd/<cluster>-<group>.yaml,
//!                     secrets/encryptionconfig (when config's spec.encryptionConfig)
//!     │ read (at adopt): each CA's key its certificate's, a CA valid now; each
//!     │   manifest an etcd-manager Pod for that cluster's volumes; each
//!     │   Secrets key one pinfleet's API servers can carry
//!     ▼
//! EtcdManager (pinfleet's state, KEY) + kube-apiserver's etcd client certificate
//!     │ machine_files (at each roll of the control plane); its Secrets keys
//!     │   go into the PKI ahead of pinfleet's own (cli::adopt)
//!     ▼
//! machine/etcd-manager/… ─▶ the control-plane machine's bootstrap fetches them
//! ```
//!
//! Secrets stay readable through the roll: kops's API servers and
//! pinfleet's new ones hold the same keys and write with the same one.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use base64::Engine as _;

use crate::spec::{Cluster, Role};
use crate::state::pki::EncryptionKey;
use crate::state::Store;

/// Where the record lives in the cluster's own state.
pub const KEY: &str = "adopt/etcd-manager.json";
/// Where machines fetch its files (beside the join material).
pub const MACHINE_PREFIX: &str = "machine/etcd-manager/";
/// The etcd clusters kops runs: the API's objects, and its events.
pub use crate::kube::etcd::ETCD_MANAGER_CLUSTERS as CLUSTERS;

/// A certificate and its key, PEM.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pair { <redacted> }")
    }
}

/// What pinfleet keeps of kops's etcd-manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdManager {
    /// kops's cluster folder it was read from.
    pub from: String,
    /// The CAs by kops's keyset name ([`keysets`]).
    pub keysets: BTreeMap<String, Pair>,
    /// `<cluster>-<pinfleet group>` → the manifest kops wrote for it.
    pub manifests: BTreeMap<String, String>,
    /// Each etcd cluster's members: the control-plane groups running one.
    pub members: BTreeMap<String, Vec<String>>,
    /// kube-apiserver's client certificate for etcd, signed by `etcd-clients-ca`.
    pub apiserver_client: Pair,
    /// The keys kops's API servers encrypt Secrets with (its
    /// `secrets/encryptionconfig`, when its spec turns encryption on), its
    /// writing key first: taken into pinfleet's PKI with the record, ahead
    /// of pinfleet's own key, so the control plane's new machines read and
    /// write Secrets as kops's do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encryption_keys: Vec<EncryptionKey>,
}

/// The keysets read, in order: each cluster's etcd-manager CA and peers'
/// CA, and the clients' CA they share.
pub fn keysets() -> Vec<String> {
    let mut out: Vec<String> =
        CLUSTERS.iter().flat_map(|c| [format!("etcd-manager-ca-{c}"), format!("etcd-peers-ca-{c}")]).collect();
    out.push("etcd-clients-ca".into());
    out
}

/// Where kops writes the etcd-manager manifest of cluster `c` for instance group `ig`.
pub fn manifest_key(c: &str, ig: &str) -> String {
    format!("manifests/etcd/{c}-{ig}.yaml")
}

/// Checks that `text` (at `at`) is an etcd-manager Pod for etcd cluster
/// `c` of kops's cluster `kops_name`: its container runs etcd-manager and
/// finds that cluster's volumes (no other cluster's), and it holds no
/// control character.
pub fn check_manifest(at: &str, c: &str, kops_name: &str, text: &str) -> Result<()> {
    if let Some((line, ch)) = text
        .lines()
        .enumerate()
        .find_map(|(n, l)| l.chars().find(|ch| *ch != '\t' && crate::escape::hidden(*ch)).map(|ch| (n + 1, ch)))
    {
        bail!("{at}:{line}: holds a control character (U+{:04X}): not a manifest kops writes", ch as u32);
    }
    let pod: serde_json::Value = serde_saphyr::from_str(text).with_context(|| format!("{at}: not YAML"))?;
    // Escapes YAML decodes (`"\e"`) are control characters too.
    if let Some(ch) = hidden_in(&pod) {
        bail!("{at}: holds a control character (U+{:04X}) in a value: not a manifest kops writes", ch as u32);
    }
    if pod["kind"] != "Pod" {
        bail!("{at}: kind is {}, not Pod: not a manifest kops writes for etcd-manager", pod["kind"]);
    }
    let words: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .flat_map(|c| {
            let list = |k: &str| c[k].as_array().cloned().unwrap_or_default();
            list("command").into_iter().chain(list("args"))
        })
        .filter_map(|w| w.as_str().map(str::to_string))
        .flat_map(|w| w.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect();
    if !words.iter().any(|w| w.ends_with("/etcd-manager") || w == "etcd-manager") {
        bail!("{at}: no container runs etcd-manager");
    }
    let tag = format!("--volume-tag=k8s.io/etcd/{c}");
    if !words.iter().any(|w| *w == tag) {
        bail!("{at}: etcd-manager is not given {tag}: it would not find the {c} cluster's volumes");
    }
    let own = format!("--volume-tag=kubernetes.io/cluster/{kops_name}=owned");
    if let Some(other) = words.iter().find(|w| w.starts_with("--volume-tag=kubernetes.io/cluster/") && **w != own) {
        bail!("{at}: etcd-manager is given {other}: another cluster's volumes, not {kops_name}'s");
    }
    Ok(())
}

/// The first control character in any string of `v` (keys included).
fn hidden_in(v: &serde_json::Value) -> Option<char> {
    let hidden = |s: &str| s.chars().find(|c| crate::escape::hidden(*c));
    match v {
        serde_json::Value::String(s) => hidden(s),
        serde_json::Value::Array(a) => a.iter().find_map(hidden_in),
        serde_json::Value::Object(o) => o.iter().find_map(|(k, v)| hidden(k).or_else(|| hidden_in(v))),
        _ => None,
    }
}

/// Reads kops's etcd-manager material for `cluster` (its control-plane
/// groups, each named for kops by its `kops.k8s.io/instancegroup` label)
/// from kops's cluster folder `kops`, checked, with kube-apiserver's
/// client certificate issued. Anything missing or broken is named.
pub async fn read(kops: &Store, cluster: &Cluster) -> Result<EtcdManager> {
    let text = |key: String| async move {
        let at = kops.describe(&key);
        match kops.get(&key).await? {
            Some((bytes, _)) => {
                String::from_utf8(bytes).map(|t| (at.clone(), t)).map_err(|_| anyhow::anyhow!("{at}: not UTF-8 text"))
            }
            None => bail!("{at}: missing (kops writes it for etcd-manager)"),
        }
    };
    let mut held = BTreeMap::new();
    for name in keysets() {
        let (at, t) = text(super::keyset::keyset_key(&name)).await?;
        let p = super::keyset::primary(&at, &t)?;
        crate::state::pki::check_ca_pair(&p.cert_pem, &p.key_pem, &at)?;
        held.insert(name, Pair { cert: p.cert_pem, key: p.key_pem });
    }
    let mut manifests = BTreeMap::new();
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let groups = cluster.spec.instance_groups.iter().filter(|g| g.role == Role::ControlPlane);
    for g in groups {
        let ig = g.labels.get(crate::cloud::tags::KOPS_INSTANCE_GROUP).unwrap_or(&g.name);
        for c in CLUSTERS {
            let (at, t) = text(manifest_key(c, ig)).await?;
            check_manifest(&at, c, kops.cluster(), &t)?;
            manifests.insert(format!("{c}-{}", g.name), t);
            members.entry(c.to_string()).or_default().push(g.name.clone());
        }
    }
    if members.is_empty() {
        bail!("{}: no control-plane group: nothing runs etcd-manager", cluster.metadata.name);
    }
    let encryption_keys = kops_encryption(kops).await?;
    let clients = &held["etcd-clients-ca"];
    let (cert, key) = crate::state::pki::client_certificate(&clients.cert, &clients.key, "kube-apiserver")?;
    Ok(EtcdManager {
        from: kops.describe("").trim_end_matches('/').to_string(),
        keysets: held,
        manifests,
        members,
        apiserver_client: Pair { cert, key },
        encryption_keys,
    })
}

/// Where kops keeps its API servers' EncryptionConfiguration (a kops
/// secret: `{"Data": <base64>}`).
pub const ENCRYPTION_CONFIG_KEY: &str = "secrets/encryptionconfig";

/// kops's Secrets' keys as kops's state store holds them now (read again
/// from where the record was read: kops may have changed them since the
/// adopt). None: kops's state store is not there any more.
pub async fn kops_keys_now(
    em: &EtcdManager,
    s3: Option<&dyn crate::state::S3Access>,
) -> Result<Option<Vec<EncryptionKey>>> {
    let Some((base, name)) = em.from.trim_end_matches('/').rsplit_once('/') else {
        bail!("{}: not where a kops cluster's state lives", em.from);
    };
    let s3 = s3.filter(|_| base.starts_with("s3://"));
    match Store::open_existing(base, name, s3).await? {
        // kops's cluster deleted from it (`kops delete cluster` after the
        // take-over): gone too.
        Some(kops) if kops.get("config").await?.is_some() => kops_encryption(&kops).await.map(Some),
        _ => Ok(None),
    }
}

/// kops's Secrets' encryption keys, when its cluster spec (`config`)
/// turns encryption on (`spec.encryptionConfig: true`: its API servers
/// read [`ENCRYPTION_CONFIG_KEY`]); none when it is off.
async fn kops_encryption(kops: &Store) -> Result<Vec<EncryptionKey>> {
    let at = kops.describe("config");
    let Some((bytes, _)) = kops.get("config").await? else { bail!("{at}: missing (kops's cluster spec)") };
    let spec: serde_json::Value = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| serde_saphyr::from_str(t).ok())
        .with_context(|| format!("{at}: not YAML"))?;
    if spec.pointer("/spec/encryptionConfig") != Some(&serde_json::Value::Bool(true)) {
        return Ok(Vec::new());
    }
    let at = kops.describe(ENCRYPTION_CONFIG_KEY);
    let Some((bytes, _)) = kops.get(ENCRYPTION_CONFIG_KEY).await? else {
        bail!("{at}: missing, though kops's spec.encryptionConfig is true (its API servers encrypt Secrets with the keys it holds)")
    };
    let secret: serde_json::Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{at}: not a kops secret (JSON with Data)"))?;
    let text = secret["Data"]
        .as_str()
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .and_then(|d| String::from_utf8(d).ok())
        .with_context(|| format!("{at}: its Data is not base64 of text"))?;
    encryption_keys(&at, &text)
}

/// The keys of an EncryptionConfiguration (`text`, read from `at`) that
/// pinfleet's API servers can carry, in order (the first writes): each
/// `aescbc`, `aesgcm` or `secretbox` key, checked (a name, a secret of a
/// length its provider takes). Refused: a configuration that encrypts
/// anything but Secrets (pinfleet's API servers encrypt Secrets alone,
/// so the rest would be unreadable after the roll), a KMS provider (its
/// plugin runs on kops's machines), control characters.
pub fn encryption_keys(at: &str, text: &str) -> Result<Vec<EncryptionKey>> {
    use crate::state::pki::Cipher;
    if let Some(ch) = text.chars().find(|ch| *ch != '\t' && *ch != '\n' && crate::escape::hidden(*ch)) {
        bail!("{at}: holds a control character (U+{:04X}): not an EncryptionConfiguration", ch as u32);
    }
    let v: serde_json::Value = serde_saphyr::from_str(text).with_context(|| format!("{at}: not YAML"))?;
    if let Some(ch) = hidden_in(&v) {
        bail!("{at}: holds a control character (U+{:04X}) in a value: not an EncryptionConfiguration", ch as u32);
    }
    if !matches!(v["kind"].as_str(), Some("EncryptionConfiguration" | "EncryptionConfig")) {
        bail!("{at}: kind is {}, not EncryptionConfiguration", v["kind"]);
    }
    let mut keys: Vec<EncryptionKey> = Vec::new();
    for (i, r) in v["resources"].as_array().into_iter().flatten().enumerate() {
        let names: Vec<&str> = r["resources"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
        if let Some(other) = names.iter().find(|n| **n != "secrets") {
            bail!(
                "{at}: resources[{i}] encrypts {other}: pinfleet's API servers encrypt Secrets alone, so those would be unreadable once its control plane runs; not carried"
            );
        }
        for (j, p) in r["providers"].as_array().into_iter().flatten().enumerate() {
            // One provider per item, as the API server reads it.
            let Some((kind, body)) = p.as_object().filter(|o| o.len() == 1).and_then(|o| o.iter().next()) else {
                bail!("{at}: resources[{i}].providers[{j}]: not one provider (an item names exactly one)");
            };
            if kind == "identity" {
                continue;
            }
            let Some(cipher) = Cipher::from_name(kind) else {
                bail!(
                    "{at}: resources[{i}].providers[{j}] is {kind}: pinfleet carries aescbc, aesgcm and secretbox keys alone (a KMS plugin runs on kops's machines); not carried"
                );
            };
            let Some(list) = body["keys"].as_array().filter(|l| !l.is_empty()) else {
                bail!("{at}: resources[{i}].providers[{j}].{kind}: no keys (a list of name and secret)");
            };
            for (n, k) in list.iter().enumerate() {
                let here = format!("{at}: resources[{i}].providers[{j}].{kind}.keys[{n}]");
                let name = k["name"].as_str().unwrap_or_default();
                if name.is_empty() || name.contains(':') || name.chars().any(char::is_whitespace) {
                    bail!("{here}: its name must be a word without `:` (the API server prefixes a value with it)");
                }
                let secret = k["secret"].as_str().unwrap_or_default();
                let len = base64::engine::general_purpose::STANDARD.decode(secret).map(|b| b.len());
                match len {
                    Ok(l) if cipher.key_lengths().contains(&l) => {}
                    _ => bail!(
                        "{here} ({name}): its secret is not base64 of {} bytes",
                        cipher.key_lengths().iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                }
                if keys.iter().any(|k| k.provider == cipher && k.name == name) {
                    bail!("{here}: {kind} key {name} is named twice");
                }
                keys.push(EncryptionKey { name: name.to_string(), secret: secret.to_string(), provider: cipher });
            }
        }
    }
    Ok(keys)
}

impl EtcdManager {
    /// The files a control-plane machine fetches (under [`MACHINE_PREFIX`]),
    /// by name, and where kops's nodeup puts each on the machine.
    pub fn machine_files(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for c in CLUSTERS {
            for (kind, keyset) in [
                ("etcd-manager-ca", format!("etcd-manager-ca-{c}")),
                ("etcd-peers-ca", format!("etcd-peers-ca-{c}")),
                ("etcd-clients-ca", "etcd-clients-ca".to_string()),
            ] {
                if let Some(p) = self.keysets.get(&keyset) {
                    out.push((format!("{c}/{kind}.crt"), p.cert.clone()));
                    out.push((format!("{c}/{kind}.key"), p.key.clone()));
                }
            }
        }
        if let Some(p) = self.keysets.get("etcd-clients-ca") {
            out.push(("etcd-ca.crt".into(), p.cert.clone()));
        }
        out.push(("etcd-client.crt".into(), self.apiserver_client.cert.clone()));
        out.push(("etcd-client.key".into(), self.apiserver_client.key.clone()));
        for (name, text) in &self.manifests {
            out.push((format!("manifests/{name}.yaml"), text.clone()));
        }
        out
    }

    /// Why the control plane cannot roll as the record says its etcd runs
    /// (None: it can): each etcd cluster (main and events) must name at
    /// least 3 members, each a control-plane group of the file
    /// (`groups`), none twice. With fewer, the one volume moving would
    /// stop the API meanwhile.
    pub fn members_problem(&self, groups: &[&str]) -> Option<String> {
        let shown = |m: &str| crate::escape::escaped(m, false).into_owned();
        for c in CLUSTERS {
            let list = self.members.get(c).map(Vec::as_slice).unwrap_or_default();
            let mut seen = std::collections::BTreeSet::new();
            if let Some(twice) = list.iter().find(|m| !seen.insert(m.as_str())) {
                return Some(format!("its etcd {c} names member {} twice", shown(twice)));
            }
            if let Some(other) = list.iter().find(|m| !groups.contains(&m.as_str())) {
                return Some(format!(
                    "its etcd {c} names member {}, which is no control-plane group of the file",
                    shown(other)
                ));
            }
            if list.len() < 3 {
                return Some(format!(
                    "its etcd {c} has {} member(s), and a member's volume moves from the old machine to the new one, so with fewer than 3 the cluster's API would stop meanwhile",
                    list.len()
                ));
            }
        }
        None
    }
}

/// The record, when the cluster was taken over from kops with it.
pub async fn load(store: &Store) -> Result<Option<EtcdManager>> {
    match store.get(KEY).await? {
        Some((bytes, _)) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
            // Where, never serde's words: they may quote a key it holds.
            anyhow::anyhow!(
                "{}: unreadable at line {} column {} ({:?}) (`pinfleet adopt` wrote it; delete it and adopt again to read kops's state afresh)",
                store.describe(KEY),
                e.line(),
                e.column(),
                e.classify()
            )
        })?)),
        None => Ok(None),
    }
}

/// Publishes the machine files (what is there already is left as it is).
pub async fn publish(store: &Store, em: &EtcdManager) -> Result<()> {
    for (name, content) in em.machine_files() {
        let key = format!("{MACHINE_PREFIX}{name}");
        if store.get(&key).await?.is_some_and(|(b, _)| b == content.as_bytes()) {
            continue;
        }
        store.put(&key, content.into_bytes(), crate::state::Condition::None).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd-manager-main\n  namespace: kube-system\nspec:\n  containers:\n  - command:\n    - /bin/sh\n    - -c\n    - mkfifo /tmp/pipe; /etcd-manager --backup-store=s3://kops/prod/backups/etcd/main --volume-tag=k8s.io/etcd/main --volume-tag=k8s.io/role/control-plane=1\n    image: registry.k8s.io/etcd-manager/etcd-manager-slim:v3.0.20250704\n    name: etcd-manager\n";

    #[test]
    fn a_manifest_must_run_etcd_manager_for_its_cluster_s_volumes() {
        check_manifest("m", "main", "prod", MANIFEST).unwrap();
        let e = check_manifest("m", "events", "prod", MANIFEST).unwrap_err().to_string();
        assert_eq!(
            e,
            "m: etcd-manager is not given --volume-tag=k8s.io/etcd/events: it would not find the events cluster's volumes"
        );
        let e =
            check_manifest("m", "main", "prod", &MANIFEST.replace("/etcd-manager ", "/etcd ")).unwrap_err().to_string();
        assert_eq!(e, "m: no container runs etcd-manager");
        let e = check_manifest("m", "main", "prod", "kind: Deployment\n").unwrap_err().to_string();
        assert_eq!(e, "m: kind is \"Deployment\", not Pod: not a manifest kops writes for etcd-manager");
        assert!(check_manifest("m", "main", "prod", "kind: [").is_err());
        let other =
            MANIFEST.replace("control-plane=1\n", "control-plane=1 --volume-tag=kubernetes.io/cluster/other=owned\n");
        let e = check_manifest("m", "main", "prod", &other).unwrap_err().to_string();
        assert_eq!(e, "m: etcd-manager is given --volume-tag=kubernetes.io/cluster/other=owned: another cluster's volumes, not prod's");
        let own =
            MANIFEST.replace("control-plane=1\n", "control-plane=1 --volume-tag=kubernetes.io/cluster/prod=owned\n");
        check_manifest("m", "main", "prod", &own).unwrap();
        let e = check_manifest("m", "main", "prod", &MANIFEST.replace("--v", "--\u{1b}]0;x\u{7}v"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "m:11: holds a control character (U+001B): not a manifest kops writes");
        let escaped = MANIFEST.replace("name: etcd-manager\n", "name: \"etcd-manager\\a\"\n");
        let e = check_manifest("m", "main", "prod", &escaped).unwrap_err().to_string();
        assert_eq!(e, "m: holds a control character (U+0007) in a value: not a manifest kops writes");
    }

    const KEY32: &str = "OWmYTUAym3ITsAnrgBxhNHAUHunA12qCWbkMUiGaZkM=";

    fn config(providers: &str) -> String {
        format!(
            "kind: EncryptionConfiguration\napiVersion: apiserver.config.k8s.io/v1\nresources:\n  - resources:\n    - secrets\n    providers:\n{providers}"
        )
    }

    #[test]
    fn kops_s_secrets_keys_are_carried_in_order_and_what_cannot_be_is_refused_located() {
        use crate::state::pki::Cipher;
        let two = config(&format!(
            "    - identity: {{}}\n    - aescbc:\n        keys:\n        - name: key2\n          secret: {KEY32}\n        - name: key1\n          secret: AAAAAAAAAAAAAAAAAAAAAA==\n    - secretbox:\n        keys:\n        - name: box\n          secret: {KEY32}\n"
        ));
        let keys = encryption_keys("e", &two).unwrap();
        let got: Vec<(&str, Cipher)> = keys.iter().map(|k| (k.name.as_str(), k.provider)).collect();
        assert_eq!(got, [("key2", Cipher::Aescbc), ("key1", Cipher::Aescbc), ("box", Cipher::Secretbox)]);
        assert!(encryption_keys("e", &config("    - identity: {}\n")).unwrap().is_empty());

        let refused = |providers: &str| encryption_keys("e", &config(providers)).unwrap_err().to_string();
        assert_eq!(
            refused("    - kms:\n        name: vault\n        endpoint: unix:///kms.sock\n"),
            "e: resources[0].providers[0] is kms: pinfleet carries aescbc, aesgcm and secretbox keys alone (a KMS plugin runs on kops's machines); not carried"
        );
        assert_eq!(
            refused(
                "    - secretbox:\n        keys:\n        - name: short\n          secret: AAAAAAAAAAAAAAAAAAAAAA==\n"
            ),
            "e: resources[0].providers[0].secretbox.keys[0] (short): its secret is not base64 of 32 bytes"
        );
        assert_eq!(
            refused(&format!("    - aesgcm:\n        keys:\n        - name: \"a:b\"\n          secret: {KEY32}\n")),
            "e: resources[0].providers[0].aesgcm.keys[0]: its name must be a word without `:` (the API server prefixes a value with it)"
        );
        assert_eq!(
            refused(&format!(
                "    - aescbc:\n        keys:\n        - name: k\n          secret: {KEY32}\n        - name: k\n          secret: {KEY32}\n"
            )),
            "e: resources[0].providers[0].aescbc.keys[1]: aescbc key k is named twice"
        );
        for (providers, want) in [
            (format!("    - aescbc:\n        keys: {KEY32}\n"), "e: resources[0].providers[0].aescbc: no keys (a list of name and secret)"),
            ("    - aescbc:\n        keys: []\n".to_string(), "e: resources[0].providers[0].aescbc: no keys (a list of name and secret)"),
            (format!("    - aescbc: {KEY32}\n"), "e: resources[0].providers[0].aescbc: no keys (a list of name and secret)"),
            (
                format!("    - aescbc:\n        keys:\n        - name: k\n          secret: {KEY32}\n      secretbox:\n        keys:\n        - name: s\n          secret: {KEY32}\n"),
                "e: resources[0].providers[0]: not one provider (an item names exactly one)",
            ),
        ] {
            assert_eq!(refused(&providers), want, "{providers}");
        }
        let more = two.replace("    - secrets\n", "    - secrets\n    - configmaps\n");
        assert_eq!(
            encryption_keys("e", &more).unwrap_err().to_string(),
            "e: resources[0] encrypts configmaps: pinfleet's API servers encrypt Secrets alone, so those would be unreadable once its control plane runs; not carried"
        );
        let hidden = two.replace("name: key2", "name: \"key2\\e\"");
        assert_eq!(
            encryption_keys("e", &hidden).unwrap_err().to_string(),
            "e: holds a control character (U+001B) in a value: not an EncryptionConfiguration"
        );
        assert_eq!(
            encryption_keys("e", "kind: Pod\n").unwrap_err().to_string(),
            "e: kind is \"Pod\", not EncryptionConfiguration"
        );
        assert!(encryption_keys("e", "kind: [").is_err());
    }

    #[test]
    fn the_record_s_members_must_be_three_distinct_control_plane_groups_in_each_etcd() {
        let groups = ["a", "b", "c"];
        let with = |main: &[&str], events: &[&str]| EtcdManager {
            from: "s3://kops/prod".into(),
            keysets: BTreeMap::new(),
            manifests: BTreeMap::new(),
            members: [("main", main), ("events", events)]
                .into_iter()
                .map(|(c, m)| (c.to_string(), m.iter().map(|x| x.to_string()).collect()))
                .collect(),
            apiserver_client: Pair { cert: String::new(), key: String::new() },
            encryption_keys: Vec::new(),
        };
        assert_eq!(with(&groups, &groups).members_problem(&groups), None);
        let why = |main: &[&str], events: &[&str]| with(main, events).members_problem(&groups).unwrap();
        assert!(why(&groups, &["a"]).starts_with("its etcd events has 1 member(s), and a member's volume moves"));
        assert!(why(&["a", "b"], &groups).starts_with("its etcd main has 2 member(s)"));
        assert_eq!(why(&["a", "a", "b"], &groups), "its etcd main names member a twice");
        assert_eq!(
            why(&["a", "b", "x\u{1b}"], &groups),
            "its etcd main names member x\\u{1b}, which is no control-plane group of the file"
        );
        assert!(why(&groups, &[]).starts_with("its etcd events has 0 member(s)"));
    }

    #[test]
    fn the_keysets_are_each_cluster_s_two_cas_and_the_clients_ca() {
        assert_eq!(
            keysets(),
            [
                "etcd-manager-ca-main",
                "etcd-peers-ca-main",
                "etcd-manager-ca-events",
                "etcd-peers-ca-events",
                "etcd-clients-ca"
            ]
        );
        assert_eq!(
            manifest_key("events", "control-plane-us-east-1a"),
            "manifests/etcd/events-control-plane-us-east-1a.yaml"
        );
    }
}
