//! The kubelet serving-certificate approver, as kops-controller does it.
//! Kubelets start with `serverTLSBootstrap: true` and file a
//! `kubernetes.io/kubelet-serving` CSR for their addresses; without an
//! approver, `kubectl logs|exec|top` and every kubelet scrape fail with TLS
//! errors. Sits between the API server (CSRs and Nodes, watched) and the
//! machine's own addresses (EC2 on AWS, the Node in the sim): [`decide`] is
//! pure, [`run`] applies its answers through the CSR's approval subresource.
//!
//! A CSR is approved only when its requester is the node it names and every
//! name in it is that node's machine's; otherwise it is denied, the reason in
//! its condition.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use kube::Client;

pub const SIGNER: &str = "kubernetes.io/kubelet-serving";
const MANAGER: &str = "pinfleet-serving-approver";

/// What a CSR asks for, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    pub username: String,
    pub groups: Vec<String>,
    pub usages: Vec<String>,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// SANs of other kinds (emails, URIs): never in a kubelet's request.
    pub other_sans: usize,
}

/// The addresses of a node's machine, from a source the node cannot write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineAddresses {
    pub ips: BTreeSet<IpAddr>,
    pub dns_names: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny(String),
}

/// Parses a CSR's `spec` (its PEM request included).
pub fn parse(csr: &CertificateSigningRequest) -> Result<Request> {
    let spec = &csr.spec;
    let pem = std::str::from_utf8(&spec.request.0).context("the request is not PEM text")?;
    let params = rcgen::CertificateSigningRequestParams::from_pem(pem).context("the request does not parse")?;
    let p = &params.params;
    let mut r = Request {
        username: spec.username.clone().unwrap_or_default(),
        groups: spec.groups.clone().unwrap_or_default(),
        usages: spec.usages.clone().unwrap_or_default(),
        ..Default::default()
    };
    for (t, v) in p.distinguished_name.iter() {
        let text = match v {
            rcgen::DnValue::Utf8String(s) => s.clone(),
            rcgen::DnValue::PrintableString(s) => s.as_str().to_string(),
            other => format!("{other:?}"),
        };
        match t {
            rcgen::DnType::CommonName => r.common_name = text,
            rcgen::DnType::OrganizationName => r.organizations.push(text),
            _ => {}
        }
    }
    for san in &p.subject_alt_names {
        match san {
            rcgen::SanType::DnsName(d) => r.dns_names.push(d.to_string()),
            rcgen::SanType::IpAddress(ip) => r.ips.push(*ip),
            _ => r.other_sans += 1,
        }
    }
    Ok(r)
}

/// Approve or deny (pure). `node` is the Node the requester names, with its
/// machine's addresses; None when there is no such Node.
pub fn decide(r: &Request, node: Option<(&str, &MachineAddresses)>) -> Decision {
    let deny = |why: String| Decision::Deny(why);
    let Some(node_name) = r.username.strip_prefix("system:node:") else {
        return deny(format!("requester {} is not a node", r.username));
    };
    if !r.groups.iter().any(|g| g == "system:nodes") {
        return deny(format!("requester {} is not in group system:nodes", r.username));
    }
    if r.common_name != r.username {
        return deny(format!("subject CN {} is not the requester {}", r.common_name, r.username));
    }
    if r.organizations != ["system:nodes"] {
        return deny(format!("subject O must be exactly system:nodes, not [{}]", r.organizations.join(", ")));
    }
    let allowed = ["digital signature", "key encipherment", "server auth"];
    if let Some(u) = r.usages.iter().find(|u| !allowed.contains(&u.as_str())) {
        return deny(format!("usage {u:?} is not one of a serving certificate's"));
    }
    if !r.usages.iter().any(|u| u == "server auth") {
        return deny("usages do not include server auth".into());
    }
    if r.other_sans > 0 {
        return deny("only DNS names and IP addresses may be requested".into());
    }
    if r.dns_names.is_empty() && r.ips.is_empty() {
        return deny("no DNS name or IP address requested".into());
    }
    let Some((name, addrs)) = node.filter(|(n, _)| *n == node_name) else {
        return deny(format!("node {node_name} does not exist"));
    };
    if let Some(ip) = r.ips.iter().find(|ip| !addrs.ips.contains(ip)) {
        return deny(format!("IP address {ip} is not an address of node {name}'s machine"));
    }
    if let Some(d) = r.dns_names.iter().find(|d| !addrs.dns_names.contains(*d) && *d != name) {
        return deny(format!("DNS name {d} is not a name of node {name}'s machine"));
    }
    Decision::Approve
}

/// Where a node's machine addresses come from.
pub trait AddressSource: Send + Sync {
    fn addresses(&self, node: &Node) -> impl std::future::Future<Output = Result<MachineAddresses>> + Send;
}

/// The Node's own `status.addresses` (the sim, where the sim's kubelet is
/// the machine; on AWS the cloud controller writes them from EC2).
pub struct FromNode;

impl AddressSource for FromNode {
    async fn addresses(&self, node: &Node) -> Result<MachineAddresses> {
        let mut out = MachineAddresses::default();
        for a in node.status.as_ref().and_then(|s| s.addresses.as_ref()).into_iter().flatten() {
            match a.type_.as_str() {
                "InternalIP" | "ExternalIP" => {
                    if let Ok(ip) = a.address.parse() {
                        out.ips.insert(ip);
                    }
                }
                "InternalDNS" | "ExternalDNS" | "Hostname" => {
                    out.dns_names.insert(a.address.clone());
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// The instance behind the Node's provider ID (`aws:///ZONE/INSTANCE-ID`), from EC2.
pub struct FromEc2(pub crate::cloud::aws::Aws);

impl AddressSource for FromEc2 {
    async fn addresses(&self, node: &Node) -> Result<MachineAddresses> {
        let provider = node.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default();
        let id = provider
            .strip_prefix("aws:///")
            .and_then(|r| r.rsplit('/').next())
            .filter(|i| i.starts_with("i-"))
            .with_context(|| format!("node has no AWS provider ID ({provider:?})"))?;
        let (ips, dns_names) = crate::cloud::aws::observe::instance_addresses(&self.0, id).await?;
        Ok(MachineAddresses { ips, dns_names })
    }
}

fn decided(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Approved" || c.type_ == "Denied"))
}

/// Decides one CSR and writes the answer; Ok(None) when it is not ours or decided.
pub async fn review(
    client: &Client,
    source: &impl AddressSource,
    csr: &CertificateSigningRequest,
) -> Result<Option<Decision>> {
    if csr.spec.signer_name != SIGNER || decided(csr) {
        return Ok(None);
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let decision = match parse(csr) {
        Err(e) => Decision::Deny(format!("{e:#}")),
        Ok(r) => {
            let node_name = r.username.strip_prefix("system:node:").unwrap_or_default().to_string();
            let node = match node_name.is_empty() {
                true => None,
                false => Api::<Node>::all(client.clone()).get_opt(&node_name).await?,
            };
            match node {
                Some(n) => {
                    let addrs = source.addresses(&n).await?;
                    decide(&r, Some((node_name.as_str(), &addrs)))
                }
                None => decide(&r, None),
            }
        }
    };
    let (type_, reason, message) = match &decision {
        Decision::Approve => {
            ("Approved", "PinfleetApproved", "the requester is the node and every name is its machine's".to_string())
        }
        Decision::Deny(why) => ("Denied", "PinfleetDenied", why.clone()),
    };
    let condition = CertificateSigningRequestCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message),
        ..Default::default()
    };
    let mut conditions = csr.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    conditions.push(condition);
    // The resourceVersion makes the write conditional: of two replicas
    // deciding at once, one wins and the other gets a conflict.
    let rv = csr.metadata.resource_version.clone();
    let patch = serde_json::json!({"metadata": {"resourceVersion": rv}, "status": {"conditions": conditions}});
    Api::<CertificateSigningRequest>::all(client.clone())
        .patch_approval(
            &name,
            &PatchParams { field_manager: Some(MANAGER.into()), ..Default::default() },
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("writing the decision on CSR {name}"))?;
    tracing::info!(csr = name, decision = ?decision, "kubelet serving certificate");
    Ok(Some(decision))
}

/// Watches CSRs and decides every undecided kubelet-serving one until cancelled.
pub async fn run(client: Client, source: impl AddressSource) {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let csrs = match event {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => vec![c],
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!("CSR watch: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        for csr in csrs {
            if let Err(e) = review(&client, &source, &csr).await {
                let name = csr.metadata.name.as_deref().unwrap_or_default();
                // Every replica reviews; a conflict means another decided first.
                let lost_race = e.chain().any(|c| {
                    c.downcast_ref::<kube::Error>().is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 409))
                });
                if lost_race {
                    tracing::debug!(csr = name, "decided by another replica");
                } else {
                    tracing::warn!(csr = name, "not decided: {e:#}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as a kubelet makes it (CN, O, SANs), parsed back.
    fn request(username: &str, cn: &str, dns: &[&str], ips: &[&str]) -> Request {
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for d in dns {
            params.subject_alt_names.push(rcgen::SanType::DnsName((*d).try_into().unwrap()));
        }
        for ip in ips {
            params.subject_alt_names.push(rcgen::SanType::IpAddress(ip.parse().unwrap()));
        }
        let pem = params.serialize_request(&rcgen::KeyPair::generate().unwrap()).unwrap().pem().unwrap();
        let csr = CertificateSigningRequest {
            metadata: Default::default(),
            spec: k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec {
                request: k8s_openapi::ByteString(pem.into_bytes()),
                signer_name: SIGNER.into(),
                usages: Some(vec!["digital signature".into(), "server auth".into()]),
                username: Some(username.into()),
                groups: Some(vec!["system:nodes".into(), "system:authenticated".into()]),
                ..Default::default()
            },
            status: None,
        };
        parse(&csr).unwrap()
    }

    fn machine() -> MachineAddresses {
        MachineAddresses {
            ips: ["10.0.1.5".parse().unwrap()].into(),
            dns_names: ["ip-10-0-1-5.ec2.internal".to_string()].into(),
        }
    }

    const NODE: &str = "i-0abc";

    #[test]
    fn the_nodes_own_names_are_approved() {
        let r = request("system:node:i-0abc", "system:node:i-0abc", &["ip-10-0-1-5.ec2.internal"], &["10.0.1.5"]);
        assert_eq!(r.organizations, ["system:nodes"]);
        assert_eq!(decide(&r, Some((NODE, &machine()))), Decision::Approve);
    }

    #[test]
    fn another_requester_is_denied() {
        // Node i-0other asks for i-0abc's address: checked against its own machine.
        let other = MachineAddresses { ips: ["10.0.2.7".parse().unwrap()].into(), dns_names: Default::default() };
        let r = request("system:node:i-0other", "system:node:i-0other", &[], &["10.0.1.5"]);
        assert_eq!(
            decide(&r, Some(("i-0other", &other))),
            Decision::Deny("IP address 10.0.1.5 is not an address of node i-0other's machine".into())
        );
        assert_eq!(decide(&r, None), Decision::Deny("node i-0other does not exist".into()));
        let r = request("system:serviceaccount:default:x", "system:node:i-0abc", &[], &["10.0.1.5"]);
        assert_eq!(
            decide(&r, Some((NODE, &machine()))),
            Decision::Deny("requester system:serviceaccount:default:x is not a node".into())
        );
        let r = request("system:node:i-0abc", "system:node:i-0other", &[], &["10.0.1.5"]);
        assert!(matches!(decide(&r, Some((NODE, &machine()))), Decision::Deny(w) if w.contains("subject CN")));
    }

    #[test]
    fn a_foreign_ip_is_denied() {
        let r = request("system:node:i-0abc", "system:node:i-0abc", &[], &["10.0.1.5", "10.0.9.9"]);
        assert_eq!(
            decide(&r, Some((NODE, &machine()))),
            Decision::Deny("IP address 10.0.9.9 is not an address of node i-0abc's machine".into())
        );
    }

    #[test]
    fn a_dns_name_not_the_nodes_is_denied() {
        let r = request("system:node:i-0abc", "system:node:i-0abc", &["api.example.com"], &["10.0.1.5"]);
        assert_eq!(
            decide(&r, Some((NODE, &machine()))),
            Decision::Deny("DNS name api.example.com is not a name of node i-0abc's machine".into())
        );
    }

    #[test]
    fn a_request_without_names_or_with_client_usages_is_denied() {
        let mut r = request("system:node:i-0abc", "system:node:i-0abc", &[], &["10.0.1.5"]);
        r.usages.push("client auth".into());
        assert!(matches!(decide(&r, Some((NODE, &machine()))), Decision::Deny(w) if w.contains("client auth")));
        let r = request("system:node:i-0abc", "system:node:i-0abc", &[], &[]);
        assert_eq!(decide(&r, Some((NODE, &machine()))), Decision::Deny("no DNS name or IP address requested".into()));
    }
}
