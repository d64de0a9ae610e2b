//! What `kubeadm join` asks of a cluster kubeadm did not make (one taken
//! over from kops): before pinfleet's first machine joins it, the cluster
//! gets the objects `kubeadm init` would have left behind, each created
//! only when absent (a cluster that has them keeps its own).
//!
//! ```text
//! adopted PKI (the cluster CA) + the bootstrap token minted for the roll + spec
//!     │ cluster_info (pure): kube-public/cluster-info's kubeconfig, signed
//!     │   for the token as the bootstrap signer would (detached JWS, HS256)
//!     ▼
//! ensure: cluster-info, kubeadm-config, kubelet-config, and the RBAC that
//!         lets a bootstrap token read them and have its node's CSR approved
//! ```

use anyhow::{Context as _, Result};
use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{json, Value};

use crate::spec::Cluster;

/// The group kubeadm's node bootstrap tokens carry.
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

/// kube-public/cluster-info's data for `server` and the cluster CA
/// (`ca_pem`), signed for bootstrap token `token` (`id.secret`):
/// `kubeconfig`, and `jws-kubeconfig-<id>` (a detached JWS over it, HS256
/// keyed with the token's secret, as kube-controller-manager's bootstrap
/// signer writes it).
pub fn cluster_info(ca_pem: &str, server: &str, token: &str) -> Result<(String, String, String)> {
    let (id, secret) = token.split_once('.').context("a bootstrap token is <id>.<secret>")?;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let kubeconfig = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nkind: Config\npreferences: {{}}\nusers: null\n"
    );
    let jws = detached_jws(&kubeconfig, id, secret)?;
    Ok((kubeconfig, format!("jws-kubeconfig-{id}"), jws))
}

/// cluster-info's signature of `kubeconfig` for bootstrap token `token`
/// (`id.secret`), as kube-controller-manager's bootstrap signer writes it
/// under `jws-kubeconfig-<id>`.
pub fn signature(kubeconfig: &str, token: &str) -> Result<String> {
    let (id, secret) = token.split_once('.').context("a bootstrap token is <id>.<secret>")?;
    detached_jws(kubeconfig, id, secret)
}

/// A detached compact JWS (`header..signature`) over `payload`, HS256.
fn detached_jws(payload: &str, kid: &str, secret: &str) -> Result<String> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = b64(json!({"alg": "HS256", "kid": kid}).to_string().as_bytes());
    let signing_input = format!("{header}.{}", b64(payload.as_bytes()));
    let key = jsonwebtoken::EncodingKey::from_secret(secret.as_bytes());
    let signature = jsonwebtoken::crypto::sign(signing_input.as_bytes(), &key, jsonwebtoken::Algorithm::HS256)?;
    Ok(format!("{header}..{signature}"))
}

/// kubeadm's ClusterConfiguration for the cluster (what a join reads of
/// it). With `etcd_manager` (kops's), etcd is external to kubeadm: each
/// control-plane machine's own etcd-manager, on kops's client ports, with
/// kube-apiserver's client files where kops keeps them.
pub fn cluster_configuration(cluster: &Cluster, endpoint: &str, etcd_manager: bool) -> String {
    let n = &cluster.spec.network;
    let mut doc = format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nclusterName: {}\nkubernetesVersion: v{}\ncontrolPlaneEndpoint: {endpoint}\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: {}\n  serviceSubnet: {}\n",
        cluster.metadata.name, cluster.spec.kubernetes_version, n.pod_cidr, n.service_cidr
    );
    if etcd_manager {
        use crate::kube::etcd::{ETCD_MANAGER_CLIENT_PORTS as P, KOPS_APISERVER_DIR as D};
        doc += &format!(
            "etcd:\n  external:\n    endpoints:\n    - https://127.0.0.1:{}\n    caFile: {D}/etcd-ca.crt\n    certFile: {D}/etcd-client.crt\n    keyFile: {D}/etcd-client.key\napiServer:\n  extraArgs:\n  - name: etcd-servers-overrides\n    value: /events#https://127.0.0.1:{}\n",
            P[0], P[1]
        );
    }
    doc
}

/// The kubelets' configuration: the cluster's DNS at the service range's
/// tenth address, as kops and kubeadm both place it.
fn kubelet_configuration(cluster: &Cluster) -> Result<String> {
    let range: ipnet::Ipv4Net =
        cluster.spec.network.service_cidr.to_string().parse().context("spec.network.serviceCidr")?;
    let dns = std::net::Ipv4Addr::from(u32::from(range.network()) + 10);
    Ok(format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\nclusterDNS:\n- {dns}\nclusterDomain: cluster.local\nrotateCertificates: true\n"
    ))
}

/// Creates `obj` unless one of its name is there. Returns whether it was made.
async fn create_absent<K>(api: kube::Api<K>, obj: Value) -> Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    // Read first: an identity that may read what exists but not create it
    // (RBAC answers a create with 403 before it looks for the object) is
    // not refused for something already there.
    if api.get_opt(&name).await.with_context(|| format!("reading {name}"))?.is_some() {
        return Ok(false);
    }
    let obj: K = serde_json::from_value(obj)?;
    match api.create(&Default::default(), &obj).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e).with_context(|| format!("creating {name}")),
    }
}

/// Refuses a roll of a taken-over cluster whose `spec.api.dnsName` is not
/// the API name kubeadm's own configuration holds (kube-system/kubeadm-config's
/// `controlPlaneEndpoint`, the name the running API servers' certificates
/// carry): the machines it launches join by `spec.api.dnsName`, and would
/// fail TLS. Read before the roll's first write; nothing to compare when
/// kubeadm never configured the cluster (kops).
pub async fn refuse_another_api_name(client: &kube::Client, cluster: &Cluster) -> Result<()> {
    let sys = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    if let Some(theirs) = sys.get_opt("kubeadm-config").await.context("reading kube-system/kubeadm-config")? {
        let doc = theirs.data.as_ref().and_then(|d| d.get("ClusterConfiguration")).cloned().unwrap_or_default();
        if let Some(ep) = crate::kube::kubeadm::control_plane_endpoint(&doc) {
            let ours = cluster.spec.api.dns_name.as_deref().unwrap_or_default();
            let host = crate::kube::kubeadm::endpoint_host(&ep);
            if !host.trim_end_matches('.').eq_ignore_ascii_case(ours.trim_end_matches('.')) {
                anyhow::bail!(
                    "{}: spec.api.dnsName {ours} is not the API name in kube-system/kubeadm-config (controlPlaneEndpoint {ep}), the one the running API servers' certificates carry: machines joining by {ours} would fail TLS. Set spec.api.dnsName to {host}. Nothing was changed",
                    cluster.metadata.name
                );
            }
        }
    }
    Ok(())
}

/// Makes the cluster ready for kubeadm joins (see the module doc): returns
/// what it created or signed, for the roll to say.
pub async fn ensure(
    client: &kube::Client,
    cluster: &Cluster,
    ca_pem: &str,
    token: &str,
    etcd_manager: bool,
) -> Result<Vec<String>> {
    let endpoint = match &cluster.spec.api.dns_name {
        Some(d) => format!("{d}:{}", cluster.spec.api.port),
        None => anyhow::bail!(
            "{}: spec.api.dnsName is needed to join machines to a cluster kubeadm did not make (the API's name in its certificate)",
            cluster.metadata.name
        ),
    };
    let mut did = Vec::new();
    let public = "kube-public";
    let (kubeconfig, jws_key, jws) = cluster_info(ca_pem, &format!("https://{endpoint}"), token)?;
    let cms = kube::Api::<ConfigMap>::namespaced(client.clone(), public);
    match cms.get_opt("cluster-info").await.context("reading kube-public/cluster-info")? {
        None => {
            let cm = json!({"metadata": {"name": "cluster-info", "namespace": public},
                "data": {"kubeconfig": kubeconfig, jws_key.clone(): jws}});
            create_absent(cms.clone(), cm).await?;
            did.push("kube-public/cluster-info created".to_string());
        }
        Some(have) => {
            // The cluster's own kubeconfig kept, signed for this roll's token.
            let theirs = have.data.as_ref().and_then(|d| d.get("kubeconfig")).cloned().unwrap_or(kubeconfig);
            let (id, secret) = token.split_once('.').unwrap_or((token, ""));
            let jws = detached_jws(&theirs, id, secret)?;
            let patch = json!({"data": {"kubeconfig": theirs, jws_key.clone(): jws}});
            cms.patch("cluster-info", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                .await
                .context("signing kube-public/cluster-info for the roll's token")?;
            did.push(format!("kube-public/cluster-info signed for token {id}"));
        }
    }
    let sys = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let configs = [
        ("kubeadm-config", "ClusterConfiguration", cluster_configuration(cluster, &endpoint, etcd_manager)),
        ("kubelet-config", "kubelet", kubelet_configuration(cluster)?),
    ];
    for (name, key, data) in configs {
        let cm = json!({"metadata": {"name": name, "namespace": "kube-system"}, "data": {key: data}});
        if create_absent(sys.clone(), cm).await? {
            did.push(format!("kube-system/{name} created"));
        } else if etcd_manager && name == "kubeadm-config" {
            // kops runs no kubeadm: one pinfleet wrote before its control
            // plane rolled lacks the external etcd its joins need.
            let have = sys.get(name).await.with_context(|| format!("reading kube-system/{name}"))?;
            let doc = have.data.as_ref().and_then(|d| d.get(key)).cloned().unwrap_or_default();
            if !doc.lines().any(|l| l.starts_with("etcd:")) {
                let patch = json!({"data": {key: data}});
                sys.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("giving kube-system/{name} kops's etcd"))?;
                did.push(format!("kube-system/{name}: etcd is etcd-manager's (external, 127.0.0.1:4001)"));
            }
        }
    }
    for (kind, obj) in rbac() {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let made = match kind {
            "ClusterRole" => create_absent(kube::Api::<ClusterRole>::all(client.clone()), obj).await?,
            "ClusterRoleBinding" => create_absent(kube::Api::<ClusterRoleBinding>::all(client.clone()), obj).await?,
            "Role" => {
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
                create_absent(kube::Api::<Role>::namespaced(client.clone(), &ns), obj).await?
            }
            _ => {
                let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
                create_absent(kube::Api::<RoleBinding>::namespaced(client.clone(), &ns), obj).await?
            }
        };
        if made {
            did.push(format!("{kind} {name} created"));
        }
    }
    Ok(did)
}

/// The roles and bindings `kubeadm init` makes for joining nodes.
fn rbac() -> Vec<(&'static str, Value)> {
    let group = |g: &str| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g});
    let both = || json!([group(BOOTSTRAP_GROUP), group("system:nodes")]);
    let cluster_binding = |name: &str, role: &str, subjects: Value| {
        json!({"metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects})
    };
    let get_configmap = |ns: &str, name: &str, cm: &str| {
        json!({"metadata": {"name": name, "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [cm], "verbs": ["get"]}]})
    };
    let binding = |ns: &str, name: &str, subjects: Value| {
        json!({"metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects})
    };
    vec![
        (
            "ClusterRoleBinding",
            cluster_binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", json!([group(BOOTSTRAP_GROUP)])),
        ),
        (
            "ClusterRoleBinding",
            cluster_binding(
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                json!([group(BOOTSTRAP_GROUP)]),
            ),
        ),
        (
            "ClusterRoleBinding",
            cluster_binding(
                "kubeadm:node-autoapprove-certificate-rotation",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                json!([group("system:nodes")]),
            ),
        ),
        (
            "ClusterRole",
            json!({"metadata": {"name": "kubeadm:get-nodes"},
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
        ),
        (
            "ClusterRoleBinding",
            cluster_binding("kubeadm:get-nodes", "kubeadm:get-nodes", json!([group(BOOTSTRAP_GROUP)])),
        ),
        ("Role", get_configmap("kube-system", "kubeadm:nodes-kubeadm-config", "kubeadm-config")),
        ("RoleBinding", binding("kube-system", "kubeadm:nodes-kubeadm-config", both())),
        ("Role", get_configmap("kube-system", "kubeadm:kubelet-config", "kubelet-config")),
        ("RoleBinding", binding("kube-system", "kubeadm:kubelet-config", both())),
        ("Role", get_configmap("kube-public", "kubeadm:bootstrap-signer-clusterinfo", "cluster-info")),
        (
            "RoleBinding",
            binding(
                "kube-public",
                "kubeadm:bootstrap-signer-clusterinfo",
                json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "system:anonymous"}]),
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_info_is_signed_for_the_token_as_the_bootstrap_signer_signs_it() {
        let (kubeconfig, key, jws) = cluster_info(
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "https://api.x:443",
            "abcdef.0123456789abcdef",
        )
        .unwrap();
        assert_eq!(key, "jws-kubeconfig-abcdef");
        assert!(kubeconfig.contains("server: https://api.x:443"), "{kubeconfig}");
        // Detached: the payload is left out, and putting it back verifies
        // with the token's secret (what kubeadm's discovery does).
        let (header, signature) = jws.split_once("..").unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let head: Value = serde_json::from_slice(&b64.decode(header).unwrap()).unwrap();
        assert_eq!(head, json!({"alg": "HS256", "kid": "abcdef"}));
        let whole = format!("{header}.{}.{signature}", b64.encode(&kubeconfig));
        let key = jsonwebtoken::DecodingKey::from_secret(b"0123456789abcdef");
        let input = whole.rsplit_once('.').unwrap().0;
        assert!(
            jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key, jsonwebtoken::Algorithm::HS256).unwrap()
        );
        let wrong = jsonwebtoken::DecodingKey::from_secret(b"another-secret00");
        assert!(
            !jsonwebtoken::crypto::verify(signature, input.as_bytes(), &wrong, jsonwebtoken::Algorithm::HS256).unwrap()
        );
    }
}
