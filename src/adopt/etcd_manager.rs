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
//!                     pki/private/etcd-clients-ca, manifests/etcd/<cluster>-<group>.yaml
//!     │ read (at adopt): each CA's key its certificate's, a CA valid now; each
//!     │   manifest an etcd-manager Pod for that cluster's volumes
//!     ▼
//! EtcdManager (pinfleet's state, KEY) + kube-apiserver's etcd client certificate
//!     │ machine_files (at each roll of the control plane)
//!     ▼
//! machine/etcd-manager/… ─▶ the control-plane machine's bootstrap fetches them
//! ```

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::spec::{Cluster, Role};
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
    let clients = &held["etcd-clients-ca"];
    let (cert, key) = crate::state::pki::client_certificate(&clients.cert, &clients.key, "kube-apiserver")?;
    Ok(EtcdManager {
        from: kops.describe("").trim_end_matches('/').to_string(),
        keysets: held,
        manifests,
        members,
        apiserver_client: Pair { cert, key },
    })
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

    /// How many members etcd cluster `c` has (0: none known).
    pub fn member_count(&self, c: &str) -> usize {
        self.members.get(c).map_or(0, Vec::len)
    }
}

/// The record, when the cluster was taken over from kops with it.
pub async fn load(store: &Store) -> Result<Option<EtcdManager>> {
    match store.get(KEY).await? {
        Some((bytes, _)) => {
            Ok(Some(serde_json::from_slice(&bytes).with_context(|| format!("{}: unreadable", store.describe(KEY)))?))
        }
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
