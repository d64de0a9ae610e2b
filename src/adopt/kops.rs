//! kops → pinfleet (pure): what a kops cluster's state store says, as a
//! pinfleet cluster file, and every setting of it the file does not carry,
//! each named with its kops path and why.
//!
//! ```text
//! NAME/config, NAME/cluster-completed.spec, NAME/instancegroup/*   (read by `adopt::read_kops`)
//!     │ KopsObject::parse                       located trees (spec::yaml)
//!     ▼
//! map      the mapped fields, value by value   ─▶ a cluster file as JSON
//! walk     every field, by MAPPING             ─▶ warned / refused, located
//! keys     every object under NAME/            ─▶ warned (pki/, backups/…)
//!     │ refused? nothing is written
//!     ▼
//! YAML text ─▶ spec::load_source (pinfleet's own validation) ─▶ Imported
//! ```
//!
//! [`MAPPING`] is the one table of what becomes what: the walk reads it,
//! and `pinfleet import kops --mapping` prints it for the book (a test
//! holds docs/src/coming-from-kops.md to it). A field the table does not
//! name is warned, never dropped in silence. Refused are the settings
//! pinfleet cannot honour without changing what the cluster does for its
//! workloads or its users (another pod network, another cloud, IAM for
//! service accounts, what runs on the machines besides Kubernetes);
//! warned are kops's own machinery and the components' tuning, which
//! pinfleet does its own way.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::spec::yaml::{self, Loc, Node};
use crate::spec::{Cidr, IntOrPercent, Role};

/// The user's cluster spec, under the cluster's folder.
pub const CONFIG: &str = "config";
/// kops's completed spec (every default filled in), written at `kops update cluster`.
pub const COMPLETED: &str = "cluster-completed.spec";
/// The folder of the instance groups, one object each.
pub const GROUPS: &str = "instancegroup/";
/// The `object` of a finding about a state-store key or folder.
pub const STORE: &str = "state store";
/// The one version kops keeps its objects in, in the state store.
pub const KOPS_API_VERSION: &str = "kops.k8s.io/v1alpha2";
/// `spec.owner` when `--owner` names none (kops has no owning team).
pub const UNASSIGNED_OWNER: &str = "unassigned";

/// Which kops object a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `NAME/config`: the Cluster as its owner wrote it.
    Cluster,
    /// `NAME/instancegroup/GROUP`: one InstanceGroup.
    InstanceGroup,
    /// A key, or a folder of keys (`pki/`), under the cluster's folder.
    Store,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Cluster => "config",
            Kind::InstanceGroup => "instancegroup/*",
            Kind::Store => "",
        }
    }
}

/// What the import does with a kops setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Carried into the cluster file.
    Mapped,
    /// Not carried: named with why (stderr, `unmapped`), and the import goes on.
    Warned,
    /// pinfleet cannot honour it without changing what the cluster does:
    /// the import stops and nothing is written.
    Refused,
    /// kops's own bookkeeping, or what kops renders from the spec: nothing to carry.
    NotNeeded,
}

impl Fate {
    pub fn as_str(self) -> &'static str {
        match self {
            Fate::Mapped => "mapped",
            Fate::Warned => "warned",
            Fate::Refused => "refused",
            Fate::NotNeeded => "not needed",
        }
    }
}

/// One row of the mapping: a kops path, the pinfleet path(s) it becomes
/// (`, ` between several; empty for none), its fate and how.
///
/// A kops path is dotted keys; `[]` after a key is any item of its list,
/// `*` any key. Where a field matches a row that ends in `*` and also has
/// rows of its own further down, those rows decide; a store row ending in
/// `/` is a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub kind: Kind,
    pub kops: &'static str,
    pub pinfleet: &'static str,
    pub fate: Fate,
    pub how: &'static str,
}

const fn rule(kind: Kind, kops: &'static str, pinfleet: &'static str, fate: Fate, how: &'static str) -> Rule {
    Rule { kind, kops, pinfleet, fate, how }
}

// Short names for the table below.
const C: Kind = Kind::Cluster;
const IG: Kind = Kind::InstanceGroup;
const S: Kind = Kind::Store;
const M: Fate = Fate::Mapped;
const W: Fate = Fate::Warned;
const R: Fate = Fate::Refused;
const N: Fate = Fate::NotNeeded;

/// What a field no row names gets: warned.
const UNNAMED: Rule = rule(C, "", "", W, "pinfleet's cluster file has no counterpart for it");

/// kops → pinfleet, row by row (the book prints this table). Field names
/// and defaults are kops's own (`pkg/apis/kops/v1alpha2`, `docs/state.md`).
pub const MAPPING: &[Rule] = &[
    // The state store: the objects under NAME/.
    rule(S, "config", "", M, "the cluster as its owner wrote it (`kops edit cluster`), read field by field as below"),
    rule(S, "cluster-completed.spec", "", M, "kops's completed spec: read only for what `config` leaves to kops (a subnet's CIDR, the pod and service ranges, the installed version)"),
    rule(S, "instancegroup/", "spec.instanceGroups", M, "one object per group, read field by field as below"),
    rule(S, "pki/", "", W, "kops's CAs, certificates and keys: the import reads none (a cluster file holds no keys)"),
    rule(S, "secrets/", "", W, "kops's secrets (such as `dockerconfig`): the import reads none; `pinfleet adopt` takes `encryptionconfig`'s keys (see spec.encryptionConfig)"),
    rule(S, "backups/etcd/", "", W, "etcd-manager's backups: the import reads none; `pinfleet etcd import-kops` copies one in as the cluster's own backup, to verify and restore"),
    rule(S, "addons/", "", N, "manifests kops renders from the spec at `kops update cluster`"),
    rule(S, "clusteraddons/", "", N, "manifests kops renders from the spec"),
    rule(S, "manifests/", "", N, "static pod manifests kops renders from the spec"),
    rule(S, "igconfig/", "", N, "the machines' configuration kops renders from the spec"),
    rule(S, "cluster.spec", "", N, "the completed spec of kops 1.21 and before"),
    rule(S, "kops-version.txt", "", N, "the kops release that last updated the cluster"),
    // The cluster.
    rule(C, "apiVersion", "", N, "checked: `kops.k8s.io/v1alpha2`, the version kops keeps in its state store"),
    rule(C, "kind", "", N, "checked: `Cluster`"),
    rule(C, "metadata.name", "metadata.name, metadata.annotations", M, "the first label (`prod.k8s.example.com` → `prod`, or `--name`); the full name is kept in the annotation `pinfleet.dev/kops-name`"),
    rule(C, "metadata.creationTimestamp", "", N, "kops's bookkeeping"),
    rule(C, "metadata.*", "", W, "object metadata: a pinfleet cluster's labels select it in the fleet, and are not carried from kops"),
    rule(C, "spec.configBase", "", N, "where kops keeps the cluster's files; pinfleet keeps its own state in `spec.stateStore` (`--state-store`)"),
    rule(C, "spec.cloudProvider", "spec.cloud.provider", M, "`aws`; any other cloud is refused"),
    rule(C, "spec.kubernetesVersion", "spec.kubernetesVersion", M, "without its `v`; a channel word (`stable`) takes the version kops installed, from cluster-completed.spec; a minor pinfleet does not run is refused"),
    rule(C, "spec.subnets[].name", "spec.network.subnets[].name", M, "as is: the groups name their subnets by it"),
    rule(C, "spec.subnets[].zone", "spec.network.subnets[].zone, spec.cloud.zones, spec.cloud.region", M, "the zones in the order first named; the region is the zone's without its letter (all zones in one region)"),
    rule(C, "spec.subnets[].cidr", "spec.network.subnets[].cidr", M, "as is (unset: cluster-completed.spec's)"),
    rule(C, "spec.subnets[].type", "spec.network.subnets[].type", M, "`Private` → private; `Utility` and `Public` → public; `DualStack` is refused (IPv6)"),
    rule(C, "spec.subnets[].id", "", R, "a subnet kops found rather than made (shared): pinfleet makes and owns the cluster's subnets"),
    rule(C, "spec.subnets[].egress", "", R, "egress through a NAT gateway, transit gateway or instance kops did not make: pinfleet routes a private subnet through a NAT gateway of its own, so outbound traffic would change its way"),
    rule(C, "spec.subnets[].publicIP", "", R, "the NAT gateway's Elastic IP: pinfleet allocates its own, so the cluster's outbound address would change"),
    rule(C, "spec.subnets[].ipv6CIDR", "", R, "IPv6: pinfleet's VPC is IPv4 only"),
    rule(C, "spec.subnets[].additionalRoutes", "", R, "routes to peerings and gateways: pinfleet's route tables carry none, so that traffic would lose its way"),
    rule(C, "spec.subnets[].*", "", W, "a pinfleet subnet has a name, a zone, a CIDR and a type only"),
    rule(C, "spec.networkCIDR", "spec.network.vpcCidr", M, "as is"),
    rule(C, "spec.networkID", "", R, "a VPC kops found rather than made (shared): pinfleet makes and owns the cluster's VPC"),
    rule(C, "spec.additionalNetworkCIDRs", "", R, "pinfleet's VPC has one CIDR: subnets in the others would have nowhere to go"),
    rule(C, "spec.podCIDR", "spec.network.podCidr", M, "as is; unset, cluster-completed.spec's (kops's default, 100.96.0.0/11, is pinfleet's too)"),
    rule(C, "spec.kubeControllerManager.clusterCIDR", "spec.network.podCidr", M, "when `spec.podCIDR` is unset"),
    rule(C, "spec.serviceClusterIPRange", "spec.network.serviceCidr", M, "as is; unset, cluster-completed.spec's (kops's default, 100.64.0.0/13, is pinfleet's too)"),
    rule(C, "spec.kubeAPIServer.serviceClusterIPRange", "spec.network.serviceCidr", M, "when `spec.serviceClusterIPRange` is unset"),
    rule(C, "spec.nonMasqueradeCIDR", "spec.network.podCidr, spec.network.serviceCidr", M, "checked: both ranges lie inside it, as kops requires"),
    rule(C, "spec.api.loadBalancer.type", "spec.api.loadBalancer.scheme", M, "`Public` → internet-facing, `Internal` → internal"),
    rule(C, "spec.api.loadBalancer.class", "spec.api.loadBalancer.type", M, "`Network` → network; `Classic` → network, warned (pinfleet's API endpoint is a network load balancer)"),
    rule(C, "spec.api.loadBalancer.sslCertificate", "", R, "an ACM certificate on the API's listener: pinfleet's load balancer passes TLS through to the API server, so clients that trust only that certificate would fail"),
    rule(C, "spec.api.loadBalancer.*", "", W, "pinfleet's API load balancer is its own (its subnets, security groups, timeouts, no access log)"),
    rule(C, "spec.api.dns", "", R, "the API reached through DNS records of each control-plane machine: pinfleet serves the API through a load balancer (or an Elastic IP on a single control-plane machine)"),
    rule(C, "spec.api.*", "", W, "pinfleet's API endpoint is a load balancer of its own"),
    rule(C, "spec.kubeAPIServer.securePort", "spec.api.port", M, "unset: 443, the port kops's API server and load balancer listen on (kubeconfigs keep their address)"),
    rule(C, "spec.kubernetesApiAccess", "spec.api.allowedCidrs", M, "IPv4 CIDRs as they are; IPv6 CIDRs and prefix lists (`pl-…`) are warned (pinfleet's rules are IPv4 CIDRs); unset: 0.0.0.0/0, as kops"),
    rule(C, "spec.masterPublicName", "spec.api.dnsName", M, "as is"),
    rule(C, "spec.additionalSans", "", R, "pinfleet's API certificate names the load balancer and `spec.api.dnsName` only: clients using these names would fail TLS"),
    rule(C, "spec.sshKeyName", "spec.sshKeyName", M, "as is (empty: none)"),
    rule(C, "spec.sshAccess", "", W, "pinfleet opens no SSH from outside the VPC: reach machines with SSM Session Manager, or from inside"),
    rule(C, "spec.nodePortAccess", "", R, "pinfleet opens node ports to the cluster's own machines only: clients in these CIDRs would lose their NodePort services"),
    rule(C, "spec.cloudLabels", "spec.instanceGroups[].cloudLabels", M, "onto every group, whose own win (pinfleet tags machines per group)"),
    rule(C, "spec.etcdClusters[].name", "spec.etcd", M, "`main` is the cluster's etcd; `events` is warned (a cluster pinfleet makes keeps events in main; a taken-over kops control plane keeps both, run by its etcd-manager); any other is refused"),
    rule(C, "spec.etcdClusters[].etcdMembers[].instanceGroup", "spec.instanceGroups[] (control-plane)", M, "checked: one member on each control-plane machine, as pinfleet runs etcd stacked (kubeadm); so the members per zone are the control-plane groups in their subnets"),
    rule(C, "spec.etcdClusters[].etcdMembers[].name", "", M, "members are named after their machines under pinfleet"),
    rule(C, "spec.etcdClusters[].etcdMembers[].*", "", W, "a taken-over control plane keeps each member on its own volume, taken over by etcd-manager on the machine that replaces its holder (`adopt` takes etcd-manager's manifests and CAs)"),
    rule(C, "spec.etcdClusters[].manager.backupRetentionDays", "spec.etcd.backups.keepDaily", M, "N days (`main`'s)"),
    rule(C, "spec.etcdClusters[].manager.backupInterval", "spec.etcd.backups.interval", M, "as is (`main`'s)"),
    rule(C, "spec.etcdClusters[].manager.*", "", W, "etcd-manager's settings: kept in the manifests kops wrote, which pinfleet's control-plane machines run as they are"),
    rule(C, "spec.etcdClusters[].*", "", W, "pinfleet runs the etcd kubeadm pins for the Kubernetes minor, with kubeadm's settings"),
    rule(C, "spec.networking.cilium", "spec.addons (pod-network)", M, "pinfleet's pod network is Cilium (the addon pod-network, on by default)"),
    rule(C, "spec.networking.cilium.ipam", "", M, "`kubernetes` (kops's default) or `cluster-pool`: pods keep addresses in `spec.network.podCidr`; `eni` and the others are refused"),
    rule(C, "spec.networking.cilium.tunnel", "", M, "`vxlan` (the default), as pinfleet's Cilium; `geneve` and `disabled` are refused"),
    rule(C, "spec.networking.cilium.enablePolicy", "", M, "`default`, as pinfleet's Cilium; `always` and `never` are refused (NetworkPolicy would be enforced differently)"),
    rule(C, "spec.networking.cilium.enableEncryption", "", M, "`false`; `true` is refused (pinfleet's Cilium does not encrypt pod traffic)"),
    rule(C, "spec.networking.cilium.enableNodePort", "", W, "Cilium in place of kube-proxy: pinfleet's Cilium keeps kube-proxy, and Services work the same through kube-proxy's rules"),
    rule(C, "spec.networking.cilium.*", "", W, "Cilium's settings: the addon pod-network has its own (version, resources, Hubble)"),
    rule(C, "spec.networking.*", "", R, "pinfleet's pod network is Cilium: moving a running cluster to another pod network changes how every pod is addressed and reached"),
    rule(C, "spec.kubeProxy", "", W, "pinfleet runs kubeadm's kube-proxy with its own settings (`enabled: false` under Cilium is not carried: Services work the same)"),
    rule(C, "spec.topology.masters", "spec.instanceGroups[].subnets", M, "said by each group's subnets (private or public)"),
    rule(C, "spec.topology.nodes", "spec.instanceGroups[].subnets", M, "said by each group's subnets (private or public)"),
    rule(C, "spec.topology.*", "", W, "Route 53 and bastion settings: pinfleet makes no DNS records and runs no bastion"),
    rule(C, "spec.dnsZone", "", W, "pinfleet makes no Route 53 records: point the record of `spec.api.dnsName` at the API load balancer yourself"),
    rule(C, "spec.externalDns", "", W, "kops's dns-controller: pinfleet makes no DNS records"),
    rule(C, "spec.channel", "", W, "pinfleet's component versions come from its own table for the Kubernetes minor and from its addon packages"),
    rule(C, "spec.clusterDNSDomain", "", M, "`cluster.local`, as kubeadm's; another domain is refused (names under it would stop resolving)"),
    rule(C, "spec.authorization.rbac", "", M, "pinfleet's API server authorizes with Node and RBAC, as kubeadm's"),
    rule(C, "spec.authorization.alwaysAllow", "", R, "every request allowed: pinfleet's API server enforces RBAC"),
    rule(C, "spec.authentication", "", R, "aws-iam-authenticator or kopeio sign-in: pinfleet's API server runs neither, so those users could no longer sign in"),
    rule(C, "spec.kubeAPIServer.oidcIssuerURL", "", R, "users who sign in through OIDC: pinfleet's API server trusts no OIDC issuer"),
    rule(C, "spec.kubeAPIServer.*", "", W, "API server flags: pinfleet runs kubeadm's with its own (audit, encryption at rest)"),
    rule(C, "spec.kubeControllerManager.*", "", W, "controller manager flags: kubeadm's"),
    rule(C, "spec.kubeScheduler", "", W, "scheduler flags: kubeadm's"),
    rule(C, "spec.kubelet.anonymousAuth", "", M, "`false`: kubeadm's kubelet refuses anonymous requests too; `true` is warned"),
    rule(C, "spec.kubelet.*", "", W, "kubelet settings: pinfleet's kubelet runs kubeadm's configuration"),
    rule(C, "spec.masterKubelet", "", W, "kubelet settings: pinfleet's kubelet runs kubeadm's configuration"),
    rule(C, "spec.containerd", "", W, "containerd as pinfleet's image configures it"),
    rule(C, "spec.docker", "", W, "removed from kops: the runtime is containerd"),
    rule(C, "spec.containerRuntime", "", W, "removed from kops: the runtime is containerd"),
    rule(C, "spec.kubeDNS", "", W, "CoreDNS as kubeadm installs it (no NodeLocal DNSCache)"),
    rule(C, "spec.cloudControllerManager", "", W, "the addon cloud-controller runs with its own settings"),
    rule(C, "spec.cloudConfig", "", W, "the addons cloud-controller and ebs-csi run with their own settings"),
    rule(C, "spec.iam.allowContainerRegistry", "", M, "pinfleet's machines may pull from ECR, whatever it says"),
    rule(C, "spec.iam.legacy", "", M, "`false`: pinfleet's roles are least-privilege per role too; `true` is refused (workloads relying on the broad legacy role would lose permissions)"),
    rule(C, "spec.iam.useServiceAccountExternalPermissions", "", M, "`false`; `true` is refused (IAM roles for service accounts)"),
    rule(C, "spec.iam.serviceAccountExternalPermissions", "", R, "IAM roles for service accounts: pinfleet makes none, so those pods would lose their AWS permissions"),
    rule(C, "spec.iam.*", "", W, "pinfleet's roles carry no permissions boundary"),
    rule(C, "spec.serviceAccountIssuerDiscovery", "", R, "a public service account issuer (IAM roles for service accounts): pinfleet's API server publishes none, so pods using web identity would lose their AWS access"),
    rule(C, "spec.podIdentityWebhook", "", R, "the pod identity webhook (IAM roles for service accounts): pinfleet runs none"),
    rule(C, "spec.externalPolicies", "", R, "policies added to kops's machine roles: pinfleet's roles carry only its own (give `spec.iam` instance profiles that carry them)"),
    rule(C, "spec.additionalPolicies", "", R, "policies added to kops's machine roles: pinfleet's roles carry only its own (give `spec.iam` instance profiles that carry them)"),
    rule(C, "spec.encryptionConfig", "", M, "pinfleet encrypts Secrets at rest always; `true`: `pinfleet adopt` takes kops's keys (`secrets/encryptionconfig`: aescbc, aesgcm, secretbox) ahead of pinfleet's own, so the new API servers read and write Secrets as kops's do (a KMS provider, or one that encrypts more than Secrets, is not carried: the control plane is not rolled)"),
    rule(C, "spec.metricsServer.enabled", "spec.addons (metrics-server)", M, "`true`: on by default; `false`: listed, disabled"),
    rule(C, "spec.metricsServer.*", "", W, "the addon metrics-server runs with its own settings"),
    rule(C, "spec.clusterAutoscaler.enabled", "spec.addons (cluster-autoscaler)", M, "`true`: listed (pinfleet's is off by default)"),
    rule(C, "spec.clusterAutoscaler.*", "", W, "the addon cluster-autoscaler runs with its own settings"),
    rule(C, "spec.karpenter.enabled", "", M, "`false`; `true` is refused (Karpenter would fight pinfleet's groups for the machines)"),
    rule(C, "spec.karpenter.*", "", W, "Karpenter's settings: pinfleet runs no Karpenter"),
    rule(C, "spec.nodeTerminationHandler", "", W, "pinfleet handles Spot interruptions and rebalance notices itself"),
    rule(C, "spec.nodeProblemDetector", "", W, "an addon kops installs and pinfleet does not: what runs stays until removed"),
    rule(C, "spec.certManager", "", W, "an addon kops installs and pinfleet does not: what runs stays until removed"),
    rule(C, "spec.awsLoadBalancerController", "", W, "an addon kops installs and pinfleet does not: what runs stays until removed"),
    rule(C, "spec.snapshotController", "", W, "an addon kops installs and pinfleet does not: what runs stays until removed"),
    rule(C, "spec.addons", "", W, "kops addon channels: make them pinfleet addon packages"),
    rule(C, "spec.hooks", "", R, "systemd units kops adds to the machines: pinfleet's machines run only what its image and user-data say"),
    rule(C, "spec.fileAssets", "", R, "files kops writes onto the machines: pinfleet's machines carry only what its image and user-data say"),
    rule(C, "spec.sysctlParameters", "", R, "kernel parameters kops sets on the machines: pinfleet's machines keep its image's"),
    rule(C, "spec.packages", "", R, "packages kops installs on the machines: pinfleet's machines carry only its image's"),
    rule(C, "spec.egressProxy", "", R, "the machines reach out through a proxy: pinfleet's do not"),
    rule(C, "spec.assets", "", R, "mirrors for images and files: pinfleet's machines pull from the upstream registries"),
    rule(C, "spec.updatePolicy", "", W, "pinfleet replaces machines with new images rather than patching them in place"),
    rule(C, "spec.ntp", "", W, "time as pinfleet's image configures it"),
    rule(C, "spec.rollingUpdate.maxSurge", "spec.instanceGroups[].rollout.maxSurge", M, "the default of every node group that sets none (control-plane groups never surge)"),
    rule(C, "spec.rollingUpdate.maxUnavailable", "spec.instanceGroups[].rollout.maxUnavailable", M, "the default of every node group that sets none"),
    rule(C, "spec.rollingUpdate.*", "", W, "pinfleet always drains (it evicts, so PodDisruptionBudgets hold)"),
    rule(C, "spec.warmPool", "", W, "pinfleet keeps no warm pools"),
    rule(C, "spec.target", "", W, "pinfleet applies its plans itself: no Terraform output"),
    // An instance group.
    rule(IG, "apiVersion", "", N, "checked: `kops.k8s.io/v1alpha2`"),
    rule(IG, "kind", "", N, "checked: `InstanceGroup`"),
    rule(IG, "metadata.name", "spec.instanceGroups[].name", M, "as is"),
    rule(IG, "metadata.creationTimestamp", "", N, "kops's bookkeeping"),
    rule(IG, "metadata.labels", "", N, "kops's record of the group's cluster (`kops.k8s.io/cluster`)"),
    rule(IG, "metadata.*", "", W, "object metadata: a pinfleet group has none"),
    rule(IG, "spec.role", "spec.instanceGroups[].role", M, "`Master` and `ControlPlane` → control-plane, `Node` → node; a `Bastion` group is warned and left out (pinfleet runs no bastions); any other role is refused"),
    rule(IG, "spec.manager", "", M, "`CloudGroup` (an Auto Scaling group), as every pinfleet group; `Karpenter` is refused"),
    rule(IG, "spec.machineType", "spec.instanceGroups[].machineType", M, "as is"),
    rule(IG, "spec.minSize", "spec.instanceGroups[].minSize", M, "unset: kops's default (1 for a control-plane group, 2 for nodes)"),
    rule(IG, "spec.maxSize", "spec.instanceGroups[].maxSize", M, "unset: kops's default (1 for a control-plane group, 2 for nodes)"),
    rule(IG, "spec.image", "spec.instanceGroups[].image", M, "`ami-…` → `id`; `OWNER/NAME` → `selector` (owner aliases such as `ubuntu` resolved as kops resolves them; the newest image of that name, as kops picks); a name alone → a selector owned by `self`; its architecture the machine type's; an `ssm:` parameter is refused"),
    rule(IG, "spec.subnets", "spec.instanceGroups[].subnets", M, "as is (the subnets keep their kops names)"),
    rule(IG, "spec.nodeLabels", "spec.instanceGroups[].labels", M, "as is"),
    rule(IG, "spec.taints", "spec.instanceGroups[].taints", M, "`key=value:Effect` and `key:Effect`"),
    rule(IG, "spec.cloudLabels", "spec.instanceGroups[].cloudLabels", M, "with the cluster's (the group's own win)"),
    rule(IG, "spec.rootVolumeSize", "spec.instanceGroups[].rootVolume.sizeGiB", M, "unset: kops's default (64 GiB for a control-plane group, 128 GiB for nodes)"),
    rule(IG, "spec.rootVolumeType", "spec.instanceGroups[].rootVolume.type", M, "gp3, gp2, io1 or io2; another type is warned (gp3)"),
    rule(IG, "spec.rootVolumeEncryption", "spec.instanceGroups[].rootVolume.encrypted", M, "as is (unset: encrypted)"),
    rule(IG, "spec.mixedInstancesPolicy.instances", "spec.instanceGroups[].capacity.types", M, "the types besides `machineType`, in order"),
    rule(IG, "spec.mixedInstancesPolicy.onDemandBase", "spec.instanceGroups[].capacity.onDemandBase", M, "as is, in a Mixed market"),
    rule(IG, "spec.mixedInstancesPolicy.onDemandAboveBase", "spec.instanceGroups[].capacity.market, spec.instanceGroups[].capacity.spotPercent", M, "100 (AWS's default) → On-Demand; 0 with no base → Spot; otherwise Mixed, with `spotPercent` 100 minus it"),
    rule(IG, "spec.mixedInstancesPolicy.*", "", W, "allocation strategies and pools: pinfleet's launcher tries offerings in its own order (market, zone, type)"),
    rule(IG, "spec.maxPrice", "spec.instanceGroups[].capacity.market", M, "Spot; the cap itself is warned (pinfleet's Spot machines pay the Spot price)"),
    rule(IG, "spec.iam.profile", "spec.instanceGroups[].instanceProfile", M, "the profile's name, from its ARN"),
    rule(IG, "spec.rollingUpdate.maxSurge", "spec.instanceGroups[].rollout.maxSurge", M, "as is; a control-plane group never surges (`0`, as kops)"),
    rule(IG, "spec.rollingUpdate.maxUnavailable", "spec.instanceGroups[].rollout.maxUnavailable", M, "as is; a control-plane group without one: `1` (kops rolls control planes one machine at a time)"),
    rule(IG, "spec.rollingUpdate.*", "", W, "pinfleet always drains (it evicts, so PodDisruptionBudgets hold)"),
    rule(IG, "spec.additionalSecurityGroups", "", R, "security groups beyond pinfleet's: what they let the machines reach (databases, peered services) would be cut off"),
    rule(IG, "spec.securityGroupOverride", "", R, "a security group in place of pinfleet's: what it lets the machines reach would be cut off"),
    rule(IG, "spec.additionalUserData", "", R, "scripts kops adds to the machines' user-data: pinfleet's machines run only what its image and user-data say"),
    rule(IG, "spec.hooks", "", R, "systemd units kops adds to the machines: pinfleet's machines run only what its image and user-data say"),
    rule(IG, "spec.fileAssets", "", R, "files kops writes onto the machines: pinfleet's machines carry only what its image and user-data say"),
    rule(IG, "spec.packages", "", R, "packages kops installs on the machines: pinfleet's machines carry only its image's"),
    rule(IG, "spec.sysctlParameters", "", R, "kernel parameters kops sets on the machines: pinfleet's machines keep its image's"),
    rule(IG, "spec.volumes", "", R, "data volumes on the machines: pinfleet's machines have a root volume only"),
    rule(IG, "spec.volumeMounts", "", R, "data volumes on the machines: pinfleet's machines have a root volume only"),
    rule(IG, "spec.externalLoadBalancers", "", R, "load balancers and target groups the machines join: pinfleet's groups join none, so that traffic would stop"),
    rule(IG, "spec.tenancy", "", R, "dedicated tenancy: pinfleet launches machines on shared tenancy"),
    rule(IG, "spec.kubelet", "", W, "kubelet settings: pinfleet's kubelet runs kubeadm's configuration"),
    rule(IG, "spec.containerd", "", W, "containerd as pinfleet's image configures it"),
    rule(IG, "spec.instanceMetadata", "", W, "pinfleet's launch templates require IMDSv2 tokens, with a hop limit of 2"),
    rule(IG, "spec.warmPool", "", W, "pinfleet keeps no warm pools"),
];

/// The mapping as a markdown table (the book's, between its markers).
pub fn mapping_markdown() -> String {
    let mut out = String::from("| kops | pinfleet | import | how |\n|---|---|---|---|\n");
    for r in MAPPING {
        let kops = match r.kind {
            Kind::Store => format!("`{}`", r.kops),
            k => format!("`{}` `{}`", k.label(), r.kops),
        };
        let pinfleet = if r.pinfleet.is_empty() {
            "—".to_string()
        } else {
            r.pinfleet.split(", ").map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
        };
        out.push_str(&format!("| {kops} | {pinfleet} | {} | {} |\n", r.fate.as_str(), r.how));
    }
    out
}

/// The `how` of the row for `kops`, so a message the mapper writes for a
/// row says what the table says.
fn how(kind: Kind, kops: &str) -> &'static str {
    MAPPING.iter().find(|r| r.kind == kind && r.kops == kops).map_or(UNNAMED.how, |r| r.how)
}

/// A kops object read from the state store, as a located tree (its
/// locations name the object's URL, so a message points into the store).
#[derive(Debug, Clone)]
pub struct KopsObject {
    /// Its key under the cluster's folder: `config`, `instancegroup/nodes`.
    pub key: String,
    pub tree: Node,
}

impl KopsObject {
    /// Parses `text`, stored at `at` (`s3://bucket/NAME/config`).
    pub fn parse(key: &str, at: &str, text: &str) -> Result<KopsObject, Refusal> {
        let tree = yaml::parse_single(text, Path::new(at))
            .map_err(|e| Refusal::Unreadable { at: e.loc.to_string(), message: e.message })?;
        if tree.as_map().is_none() {
            return Err(Refusal::Unreadable {
                at: tree.loc.to_string(),
                message: format!("expected a kops object (a mapping), found {}", tree.kind_name()),
            });
        }
        Ok(KopsObject { key: key.to_string(), tree })
    }

    fn at(&self, path: &str) -> Option<&Node> {
        node_at(&self.tree, path)
    }

    fn text(&self, path: &str) -> Option<&str> {
        self.at(path).and_then(scalar)
    }

    fn flag(&self, path: &str) -> Option<bool> {
        self.text(path).and_then(yaml::parse_bool)
    }
}

/// What the import read of one kops cluster's folder.
#[derive(Debug, Clone)]
pub struct StateStore {
    /// The cluster's folder (`s3://bucket/NAME`), for messages.
    pub url: String,
    /// The folder's name: the kops cluster's name.
    pub name: String,
    /// Every key under the folder.
    pub keys: Vec<String>,
    pub config: Option<KopsObject>,
    pub completed: Option<KopsObject>,
    /// In key order.
    pub instance_groups: Vec<KopsObject>,
}

/// The instance groups' keys among a folder's keys.
pub fn instance_group_keys(keys: &[String]) -> Vec<&str> {
    keys.iter()
        .map(String::as_str)
        .filter(|k| k.strip_prefix(GROUPS).is_some_and(|g| !g.is_empty() && !g.contains('/')))
        .collect()
}

/// A folder holds a kops cluster when kops's cluster spec is there, and
/// one that can be imported when its instance groups are too
/// (`kops delete cluster` removes the groups before the spec).
pub fn check_layout(url: &str, name: &str, keys: &[String]) -> Result<(), Refusal> {
    if !keys.iter().any(|k| k == CONFIG || k == COMPLETED) {
        return Err(Refusal::NotKops { url: url.to_string(), name: name.to_string() });
    }
    if instance_group_keys(keys).is_empty() {
        return Err(Refusal::HalfDeleted { url: url.to_string() });
    }
    Ok(())
}

/// One kops setting the cluster file does not carry (or cannot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The field's path in its object (`spec.kubeProxy`), or the state
    /// store's key or folder (`pki/`).
    pub path: String,
    pub why: String,
    /// `config`, `instancegroup/GROUP`, or `state store`.
    pub object: String,
    /// Where it is: `s3://bucket/NAME/config:12:3`.
    pub at: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let safe = |s: &str| crate::escape::escaped(s, false).into_owned();
        if self.object == STORE {
            write!(f, "{}: {}", safe(&self.at), safe(&self.why))
        } else {
            write!(f, "{}: {}: {}", safe(&self.at), safe(&self.path), safe(&self.why))
        }
    }
}

/// Why nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{url} is not a kops cluster: there is no `config` nor `cluster-completed.spec` under {name}/ (kops writes them for every cluster; is {name} the cluster's full name, such as prod.k8s.example.com?)"
    )]
    NotKops { url: String, name: String },
    #[error(
        "{url} holds a kops cluster spec but no instance groups (nothing under instancegroup/): a cluster half deleted (`kops delete cluster` removes the groups before the spec) or never finished; there is nothing to import"
    )]
    HalfDeleted { url: String },
    #[error("{at}: not a kops object pinfleet can read: {message}")]
    Unreadable { at: String, message: String },
    #[error("{}", listing(.url, .findings))]
    Fields { url: String, findings: Vec<Finding> },
    #[error("the cluster file the import made does not pass pinfleet's validation, so it was not written (the places below are in the file as it would have been written; the value came from kops's state):\n{0}")]
    Invalid(String),
}

fn listing(url: &str, findings: &[Finding]) -> String {
    let mut s = format!(
        "{url}: {} kops setting(s) pinfleet cannot honour without changing what the cluster does; nothing was written:",
        findings.len()
    );
    for f in findings {
        s.push_str("\n  ");
        s.push_str(&f.to_string());
    }
    s
}

/// What the import is told beyond the state store.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The pinfleet cluster's name (default: the first label of kops's).
    pub name: Option<String>,
    /// `spec.owner` (kops has no owning team; default [`UNASSIGNED_OWNER`]).
    pub owner: Option<String>,
    /// `spec.stateStore`: where pinfleet keeps the cluster's own state.
    pub state_store: String,
    /// Where the file is to live (validation's messages name it).
    pub file: PathBuf,
    /// What validation knows beyond the file (the addon packages…).
    pub validation: crate::spec::LoadOptions,
}

/// A kops cluster as a pinfleet cluster file.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The pinfleet cluster's name.
    pub name: String,
    /// The file's text (it passed pinfleet's validation).
    pub text: String,
    /// Every kops setting the file does not carry, in the objects' order.
    pub unmapped: Vec<Finding>,
    /// What the file says that kops did not (the owner, the state store).
    pub notes: Vec<String>,
}

/// Maps the kops cluster in `state` to a pinfleet cluster file, or refuses.
pub fn import(state: &StateStore, opts: &Options) -> Result<Imported, Refusal> {
    check_layout(&state.url, &state.name, &state.keys)?;
    let cluster = state
        .config
        .as_ref()
        .or(state.completed.as_ref())
        .ok_or_else(|| Refusal::NotKops { url: state.url.clone(), name: state.name.clone() })?;
    let mut m = Mapper { state, refused: Vec::new(), unmapped: Vec::new(), covered: BTreeMap::new() };
    let file = m.cluster_file(cluster, opts);
    m.walk(cluster, Kind::Cluster);
    for ig in &state.instance_groups {
        m.walk(ig, Kind::InstanceGroup);
    }
    m.store_keys();
    let refused = in_order(std::mem::take(&mut m.refused));
    if !refused.is_empty() {
        return Err(Refusal::Fields { url: state.url.clone(), findings: refused });
    }
    let file = file.ok_or_else(|| Refusal::Invalid("the mapping made no file (and refused nothing)".into()))?;
    let unmapped = in_order(std::mem::take(&mut m.unmapped));
    let text = render(&file, state, &unmapped)?;
    crate::spec::load_source(&opts.file, &text, &opts.validation).map_err(|d| Refusal::Invalid(d.to_string()))?;
    Ok(Imported { name: file.name, text, unmapped, notes: file.notes })
}

/// A finding, with what orders it: its object, then its place there.
struct Found {
    rank: usize,
    line: usize,
    col: usize,
    finding: Finding,
}

fn in_order(mut found: Vec<Found>) -> Vec<Finding> {
    found.sort_by(|a, b| (a.rank, a.line, a.col, &a.finding.path).cmp(&(b.rank, b.line, b.col, &b.finding.path)));
    let mut out: Vec<Finding> = found.into_iter().map(|f| f.finding).collect();
    out.dedup();
    out
}

/// The mapped file before it is text.
struct MappedFile {
    name: String,
    kops_name: String,
    value: Value,
    notes: Vec<String>,
}

/// One mapped instance group.
struct Group {
    role: Role,
    name: String,
    min: u32,
    max: u32,
    value: Map<String, Value>,
}

/// A non-null scalar's text.
fn scalar(node: &Node) -> Option<&str> {
    if node.is_null() {
        return None;
    }
    match &node.value {
        yaml::Value::Scalar(s, _) => Some(s.as_str()),
        _ => None,
    }
}

/// A string value as Go reads one into a `map[string]string` (null is empty).
fn string_value(node: &Node) -> Option<String> {
    if node.is_null() {
        return Some(String::new());
    }
    scalar(node).map(str::to_string)
}

fn items(node: &Node) -> &[Node] {
    match &node.value {
        yaml::Value::Seq(items) => items.as_slice(),
        _ => &[],
    }
}

fn entries(node: &Node) -> &[yaml::Entry] {
    node.as_map().unwrap_or(&[])
}

/// The node at `spec.subnets[2].cidr`; null counts as absent.
fn node_at<'n>(node: &'n Node, path: &str) -> Option<&'n Node> {
    let mut n = node;
    for seg in yaml::parse_path(path) {
        n = match seg {
            yaml::PathSeg::Key(k) => n.get(&k)?,
            yaml::PathSeg::Index(i) => items(n).get(i)?,
        };
    }
    (!n.is_null()).then_some(n)
}

struct Mapper<'a> {
    state: &'a StateStore,
    refused: Vec<Found>,
    unmapped: Vec<Found>,
    /// Paths, by object key, the mapper reported whole: the walk skips them.
    covered: BTreeMap<String, BTreeSet<String>>,
}

impl<'a> Mapper<'a> {
    /// Objects in the order their findings are listed: the cluster spec,
    /// the completed spec, the groups, then the store's other keys.
    fn rank(&self, key: &str) -> usize {
        match key {
            CONFIG => 0,
            COMPLETED => 1,
            _ => 2 + self.state.instance_groups.iter().position(|g| g.key == key).unwrap_or(self.state.keys.len()),
        }
    }

    fn push(&mut self, fate: Fate, key: &str, path: &str, why: String, loc: &Loc) {
        let found = Found {
            rank: self.rank(key),
            line: loc.line,
            col: loc.col,
            finding: Finding { path: path.to_string(), why, object: key.to_string(), at: loc.to_string() },
        };
        match fate {
            Fate::Refused => self.refused.push(found),
            Fate::Warned => self.unmapped.push(found),
            Fate::Mapped | Fate::NotNeeded => {}
        }
    }

    fn cover(&mut self, o: &KopsObject, path: &str) {
        self.covered.entry(o.key.clone()).or_default().insert(path.to_string());
    }

    /// Refuses `path` of `o` (nothing will be written).
    fn refuse(&mut self, o: &KopsObject, path: &str, why: impl Into<String>) {
        let loc = o.tree.locate(path);
        self.push(Fate::Refused, &o.key, path, why.into(), &loc);
        self.cover(o, path);
    }

    /// Names `path` of `o` as not carried over.
    fn warn(&mut self, o: &KopsObject, path: &str, why: impl Into<String>) {
        let loc = o.tree.locate(path);
        self.push(Fate::Warned, &o.key, path, why.into(), &loc);
        self.cover(o, path);
    }

    /// The node at `path` in `c` (the cluster spec), else in
    /// cluster-completed.spec (what kops filled in), with its object.
    fn lookup(&self, c: &'a KopsObject, path: &str) -> Option<(&'a KopsObject, &'a Node)> {
        let state: &'a StateStore = self.state;
        if let Some(n) = c.at(path) {
            return Some((c, n));
        }
        let done = state.completed.as_ref()?;
        done.at(path).map(|n| (done, n))
    }

    fn check_kind(&mut self, o: &KopsObject, kind: &str) {
        if o.text("kind") != Some(kind) {
            self.refuse(o, "kind", format!("expected a kops {kind}, found `{}`", o.text("kind").unwrap_or("")));
        }
        if o.text("apiVersion") != Some(KOPS_API_VERSION) {
            self.refuse(
                o,
                "apiVersion",
                format!(
                    "`{}`: kops keeps its objects as {KOPS_API_VERSION} in its state store",
                    o.text("apiVersion").unwrap_or("")
                ),
            );
        }
    }

    /// The cluster file, or None when something was refused.
    fn cluster_file(&mut self, c: &'a KopsObject, opts: &Options) -> Option<MappedFile> {
        let state: &'a StateStore = self.state;
        self.check_kind(c, "Cluster");
        for ig in &state.instance_groups {
            self.check_kind(ig, "InstanceGroup");
        }
        let kops_name = c.text("metadata.name").unwrap_or(state.name.as_str()).to_string();
        let name = match &opts.name {
            Some(n) => n.clone(),
            None => kops_name.split('.').next().unwrap_or_default().to_string(),
        };
        if !crate::spec::validate::is_dns_label(&name) {
            let why = match &opts.name {
                Some(_) => format!("--name `{name}` is not a DNS label (lowercase letters, digits and '-')"),
                None => format!(
                    "`{name}`, the first label of `{kops_name}`, is not a DNS label pinfleet can name a cluster by: pass --name NAME"
                ),
            };
            self.refuse(c, "metadata.name", why);
        }
        self.cloud_provider(c);
        let version = self.version(c);
        let (region, zones, subnets) = self.subnets(c);
        let vpc = self.vpc(c);
        let pod =
            self.range(c, &["spec.podCIDR", "spec.kubeControllerManager.clusterCIDR"]).unwrap_or(default_cidr(POD));
        let service = self
            .range(c, &["spec.serviceClusterIPRange", "spec.kubeAPIServer.serviceClusterIPRange"])
            .unwrap_or(default_cidr(SERVICE));
        self.non_masquerade(c, pod, service);
        let api = self.api(c);
        self.checks(c);
        let addons = self.addons(c);
        let cloud_labels = self.string_map(c, "spec.cloudLabels");
        let rolling = self.rollout_of(c, "spec.rollingUpdate");
        let mut groups = Vec::new();
        for ig in &state.instance_groups {
            if let Some(g) = self.group(ig, &cloud_labels, &rolling) {
                groups.push(g);
            }
        }
        // The control plane first; each kind in key order (a stable sort).
        groups.sort_by_key(|g| g.role != Role::ControlPlane);
        if !groups.iter().any(|g| g.role == Role::Node) && self.refused.is_empty() {
            self.refuse(c, "spec", "no instance group of role Node: workloads would have nowhere to run");
        }
        let etcd = self.etcd(c, &groups);
        if !self.refused.is_empty() {
            return None;
        }
        let (Some(region), Some(version), Some(vpc)) = (region, version, vpc) else { return None };

        let mut notes = Vec::new();
        let owner = match &opts.owner {
            Some(o) => o.clone(),
            None => {
                notes.push(format!(
                    "spec.owner: kops names no owning team, so `{UNASSIGNED_OWNER}`: give --owner TEAM (every resource is tagged with it)"
                ));
                UNASSIGNED_OWNER.to_string()
            }
        };
        notes.push(format!(
            "spec.stateStore: pinfleet keeps its own state at {} (kops's state store is only read)",
            opts.state_store
        ));

        let mut annotations = Map::new();
        annotations.insert("pinfleet.dev/kops-name".into(), json!(kops_name));
        annotations.insert("pinfleet.dev/imported-from".into(), json!(state.url));
        let mut metadata = Map::new();
        metadata.insert("name".into(), json!(name));
        metadata.insert("annotations".into(), Value::Object(annotations));

        let mut network = Map::new();
        network.insert("vpcCidr".into(), json!(vpc));
        network.insert("subnets".into(), Value::Array(subnets));
        network.insert("podCidr".into(), json!(pod.to_string()));
        network.insert("serviceCidr".into(), json!(service.to_string()));

        let mut spec = Map::new();
        spec.insert("owner".into(), json!(owner));
        spec.insert("cloud".into(), json!({"region": region, "zones": zones}));
        spec.insert("stateStore".into(), json!(opts.state_store));
        spec.insert("kubernetesVersion".into(), json!(version));
        spec.insert("network".into(), Value::Object(network));
        spec.insert("api".into(), api);
        if let Some(key) = c.text("spec.sshKeyName").filter(|k| !k.is_empty()) {
            spec.insert("sshKeyName".into(), json!(key));
        }
        spec.insert(
            "instanceGroups".into(),
            Value::Array(groups.into_iter().map(|g| Value::Object(g.value)).collect()),
        );
        if !addons.is_empty() {
            spec.insert("addons".into(), Value::Array(addons));
        }
        if let Some(etcd) = etcd {
            spec.insert("etcd".into(), etcd);
        }

        let mut file = Map::new();
        file.insert("apiVersion".into(), json!(crate::spec::API_VERSION));
        file.insert("kind".into(), json!("Cluster"));
        file.insert("metadata".into(), Value::Object(metadata));
        file.insert("spec".into(), Value::Object(spec));
        Some(MappedFile { name, kops_name, value: Value::Object(file), notes })
    }

    fn cloud_provider(&mut self, c: &'a KopsObject) {
        let path = "spec.cloudProvider";
        match self.lookup(c, path) {
            Some((_, n)) if scalar(n) == Some("aws") || n.get("aws").is_some() => {}
            Some((o, n)) => {
                let named = scalar(n)
                    .map(str::to_string)
                    .or_else(|| entries(n).first().map(|e| e.key.clone()))
                    .unwrap_or_default();
                self.refuse(o, path, format!("the cluster runs on `{named}`: pinfleet runs clusters on AWS only"));
            }
            None => self.refuse(
                c,
                path,
                "kops names no cloud here (nor in cluster-completed.spec): pinfleet runs clusters on AWS only, and does not guess",
            ),
        }
    }

    fn version(&mut self, c: &'a KopsObject) -> Option<String> {
        use crate::spec::versions::{minor, parse_kubernetes_version, range};
        let state: &'a StateStore = self.state;
        let path = "spec.kubernetesVersion";
        let done = state.completed.as_ref();
        let installed = done.and_then(|d| d.text(path)).filter(|v| parse_kubernetes_version(v).is_some());
        let (o, written) = match (c.text(path), done, installed) {
            (Some(v), _, _) => (c, v),
            (None, Some(d), Some(v)) => (d, v),
            _ => {
                self.refuse(c, path, "kops names no Kubernetes version here (nor in cluster-completed.spec)");
                return None;
            }
        };
        let v = match (parse_kubernetes_version(written), installed) {
            (Some(_), _) => written,
            (None, Some(v)) => v,
            (None, None) => {
                self.refuse(
                    o,
                    path,
                    format!(
                        "`{written}` is not a Kubernetes version (a channel word, a URL?), and cluster-completed.spec does not say which version kops installed"
                    ),
                );
                return None;
            }
        };
        let (major, minor_version, patch) = parse_kubernetes_version(v)?;
        if major != 1 || minor(minor_version).is_none() {
            let (oldest, newest) = range();
            self.refuse(
                o,
                path,
                format!("Kubernetes {v}: pinfleet runs 1.{oldest} to 1.{newest}; move the cluster into that range with kops first"),
            );
            return None;
        }
        Some(format!("{major}.{minor_version}.{patch}"))
    }

    /// The region, the zones and the subnets, from kops's subnets.
    fn subnets(&mut self, c: &'a KopsObject) -> (Option<String>, Vec<String>, Vec<Value>) {
        let state: &'a StateStore = self.state;
        let Some((o, list)) = self.lookup(c, "spec.subnets").filter(|(_, l)| !items(l).is_empty()) else {
            self.refuse(c, "spec.subnets", "kops names no subnets here (nor in cluster-completed.spec)");
            return (None, Vec::new(), Vec::new());
        };
        let completed: &[Node] = state.completed.as_ref().and_then(|d| d.at("spec.subnets")).map_or(&[][..], items);
        let mut region: Option<String> = None;
        let mut zones: Vec<String> = Vec::new();
        let mut out = Vec::new();
        for (i, s) in items(list).iter().enumerate() {
            let p = format!("spec.subnets[{i}]");
            let (Some(name), Some(zone)) = (s.get("name").and_then(scalar), s.get("zone").and_then(scalar)) else {
                self.refuse(o, &p, "a subnet without a name or a zone");
                continue;
            };
            let cidr = s.get("cidr").and_then(scalar).or_else(|| {
                completed
                    .iter()
                    .find(|d| d.get("name").and_then(scalar) == Some(name))
                    .and_then(|d| d.get("cidr"))
                    .and_then(scalar)
            });
            let cidr = match cidr.map(|text| text.parse::<Cidr>()) {
                Some(Ok(cidr)) => cidr,
                Some(Err(why)) => {
                    self.refuse(o, &format!("{p}.cidr"), why);
                    continue;
                }
                None => {
                    self.refuse(o, &p, format!("subnet `{name}` has no CIDR here nor in cluster-completed.spec"));
                    continue;
                }
            };
            let kind = match s.get("type").and_then(scalar) {
                Some("Private") => "private",
                Some("Utility" | "Public") => "public",
                Some("DualStack") => {
                    self.refuse(o, &format!("{p}.type"), "a dual-stack subnet: pinfleet's VPC is IPv4 only");
                    continue;
                }
                other => {
                    self.refuse(
                        o,
                        &format!("{p}.type"),
                        format!(
                            "subnet type `{}`: kops's types are Private, Utility, Public and DualStack",
                            other.unwrap_or("")
                        ),
                    );
                    continue;
                }
            };
            let Some(r) = region_of(zone) else {
                self.refuse(o, &format!("{p}.zone"), format!("`{zone}` is not an AWS availability zone"));
                continue;
            };
            if let Some(have) = region.as_ref().filter(|have| **have != r) {
                let why = format!(
                    "zone `{zone}` is in {r}, and the cluster's other zones in {have}: a pinfleet cluster lives in one region"
                );
                self.refuse(o, &format!("{p}.zone"), why);
                continue;
            }
            region = Some(r);
            if !zones.iter().any(|z| z == zone) {
                zones.push(zone.to_string());
            }
            out.push(json!({"name": name, "zone": zone, "cidr": cidr.to_string(), "type": kind}));
        }
        (region, zones, out)
    }

    fn vpc(&mut self, c: &'a KopsObject) -> Option<String> {
        let path = "spec.networkCIDR";
        let Some((o, n)) = self.lookup(c, path) else {
            self.refuse(c, path, "kops names no VPC CIDR here (nor in cluster-completed.spec)");
            return None;
        };
        match scalar(n).map(|text| text.parse::<Cidr>()) {
            Some(Ok(cidr)) => Some(cidr.to_string()),
            Some(Err(why)) => {
                self.refuse(o, path, why);
                None
            }
            None => {
                self.refuse(o, path, "not a CIDR");
                None
            }
        }
    }

    /// The first of `paths` set in the cluster spec, else in the completed
    /// spec, as a CIDR (None when none is set: pinfleet's default, kops's).
    fn range(&mut self, c: &'a KopsObject, paths: &[&str]) -> Option<Cidr> {
        let state: &'a StateStore = self.state;
        let found = paths.iter().find_map(|p| c.at(p).map(|n| (c, *p, n))).or_else(|| {
            let done = state.completed.as_ref()?;
            paths.iter().find_map(|p| done.at(p).map(|n| (done, *p, n)))
        });
        let (o, path, n) = found?;
        match scalar(n).map(|text| text.parse::<Cidr>()) {
            Some(Ok(cidr)) => Some(cidr),
            Some(Err(why)) => {
                self.refuse(o, path, why);
                None
            }
            None => {
                self.refuse(o, path, "not a CIDR");
                None
            }
        }
    }

    /// kops derives the pod and service ranges from the non-masquerade
    /// range and requires them inside it: the ranges the file gives must be.
    fn non_masquerade(&mut self, c: &'a KopsObject, pod: Cidr, service: Cidr) {
        let path = "spec.nonMasqueradeCIDR";
        let Some(text) = c.text(path) else { return };
        let outer = match text.parse::<Cidr>() {
            Ok(cidr) => cidr,
            Err(why) => {
                self.refuse(c, path, why);
                return;
            }
        };
        for (what, range) in [("pods", pod), ("services", service)] {
            if !outer.0.contains(&range.0) {
                self.refuse(
                    c,
                    path,
                    format!(
                        "pinfleet would give {what} {range}, outside {outer}: write the range kops uses (spec.podCIDR, spec.serviceClusterIPRange)"
                    ),
                );
            }
        }
    }

    fn api(&mut self, c: &'a KopsObject) -> Value {
        let mut lb = Map::new();
        lb.insert("type".into(), json!("network"));
        let class = "spec.api.loadBalancer.class";
        match c.text(class) {
            None | Some("Network") => {}
            Some("Classic") => self.warn(
                c,
                class,
                "a Classic load balancer: pinfleet's API endpoint is a network load balancer (the file says `network`)",
            ),
            Some(other) => {
                self.refuse(c, class, format!("load balancer class `{other}`: kops's classes are Network and Classic"))
            }
        }
        let kind = "spec.api.loadBalancer.type";
        let scheme = match c.text(kind) {
            None | Some("Public") => "internet-facing",
            Some("Internal") => "internal",
            Some(other) => {
                self.refuse(c, kind, format!("load balancer type `{other}`: kops's types are Public and Internal"));
                "internet-facing"
            }
        };
        lb.insert("scheme".into(), json!(scheme));

        let mut api = Map::new();
        let port_path = "spec.kubeAPIServer.securePort";
        let port = match self.lookup(c, port_path) {
            None => 443,
            Some((o, n)) => match scalar(n).and_then(|p| p.parse::<u16>().ok()).filter(|p| *p > 0) {
                Some(p) => p,
                None => {
                    self.refuse(o, port_path, "not a port");
                    443
                }
            },
        };
        api.insert("port".into(), json!(port));
        api.insert("loadBalancer".into(), Value::Object(lb));
        let access = "spec.kubernetesApiAccess";
        if let Some(list) = c.at(access) {
            let mut allowed = Vec::new();
            for (i, n) in items(list).iter().enumerate() {
                let p = format!("{access}[{i}]");
                let Some(source) = scalar(n) else {
                    self.warn(c, &p, "not a CIDR");
                    continue;
                };
                if source.starts_with("pl-") {
                    self.warn(c, &p, format!("`{source}` is a prefix list: pinfleet allows the API to CIDRs only"));
                    continue;
                }
                match source.parse::<Cidr>() {
                    Ok(cidr) if matches!(cidr.0, IpNet::V4(_)) => allowed.push(json!(cidr.to_string())),
                    Ok(_) => self.warn(c, &p, format!("`{source}` is IPv6: pinfleet's VPC and its rules are IPv4")),
                    Err(why) => self.warn(c, &p, why),
                }
            }
            if allowed.is_empty() {
                self.refuse(
                    c,
                    access,
                    "none of these sources is an IPv4 CIDR pinfleet can allow: nobody could reach the API",
                );
            } else {
                api.insert("allowedCidrs".into(), Value::Array(allowed));
            }
        }
        if let Some(name) = c.text("spec.masterPublicName").filter(|n| !n.is_empty()) {
            if name.trim_end_matches('.').ends_with(".k8s.local") {
                self.warn(
                    c,
                    "spec.masterPublicName",
                    "a gossip name (`.k8s.local`): only kops's own machines resolve it, and the machines a roll launches join by spec.api.dnsName; before a roll set it to a name that resolves to the API load balancer and that the API servers' certificate carries",
                );
            }
            api.insert("dnsName".into(), json!(name));
        }
        Value::Object(api)
    }

    /// What the table maps to nothing but a check of its value.
    fn checks(&mut self, c: &'a KopsObject) {
        if let Some(domain) = c.text("spec.clusterDNSDomain").filter(|d| *d != "cluster.local") {
            self.refuse(
                c,
                "spec.clusterDNSDomain",
                format!(
                    "`{domain}`: pinfleet's cluster domain is cluster.local (kubeadm's), so names under `{domain}` would stop resolving"
                ),
            );
        }
        if c.flag("spec.kubelet.anonymousAuth") == Some(true) {
            self.warn(
                c,
                "spec.kubelet.anonymousAuth",
                "anonymous requests to the kubelet: pinfleet's kubelet refuses them (kubeadm's configuration)",
            );
        }
        if c.flag("spec.iam.legacy") == Some(true) {
            self.refuse(
                c,
                "spec.iam.legacy",
                "the legacy IAM policy (broad permissions on every machine): pinfleet's roles are least-privilege per role, so workloads relying on the broad role would lose permissions",
            );
        }
        if c.flag("spec.iam.useServiceAccountExternalPermissions") == Some(true) {
            self.refuse(
                c,
                "spec.iam.useServiceAccountExternalPermissions",
                how(Kind::Cluster, "spec.iam.serviceAccountExternalPermissions"),
            );
        }
        if c.flag("spec.karpenter.enabled") == Some(true) {
            self.refuse(
                c,
                "spec.karpenter.enabled",
                "Karpenter provisions machines itself: it would fight pinfleet's groups for them",
            );
        }
        self.networking(c);
    }

    /// The pod network: Cilium as pinfleet runs it, or a refusal.
    fn networking(&mut self, c: &'a KopsObject) {
        let Some((o, net)) = self.lookup(c, "spec.networking") else {
            self.refuse(
                c,
                "spec.networking",
                "kops names no pod network here (nor in cluster-completed.spec; kops's old default was kubenet): pinfleet's is Cilium",
            );
            return;
        };
        if entries(net).is_empty() {
            self.refuse(o, "spec.networking", "kops names no pod network: pinfleet's is Cilium");
        }
        for e in entries(net) {
            let p = format!("spec.networking.{}", e.key);
            if e.key != "cilium" {
                self.refuse(o, &p, format!("the `{}` pod network: {}", e.key, how(Kind::Cluster, "spec.networking.*")));
                continue;
            }
            let setting = |k: &str| e.value.get(k).and_then(scalar);
            match setting("ipam") {
                None | Some("kubernetes" | "cluster-pool") => {}
                Some(other) => self.refuse(
                    o,
                    &format!("{p}.ipam"),
                    format!(
                        "Cilium IPAM `{other}`: pinfleet's Cilium gives pods addresses from spec.network.podCidr (cluster-pool), so pods would be addressed differently"
                    ),
                ),
            }
            match setting("tunnel") {
                None | Some("vxlan") => {}
                Some(other) => self.refuse(
                    o,
                    &format!("{p}.tunnel"),
                    format!("Cilium tunnel `{other}`: pinfleet's Cilium tunnels VXLAN between machines"),
                ),
            }
            match setting("enablePolicy") {
                None | Some("default") => {}
                Some(other) => self.refuse(
                    o,
                    &format!("{p}.enablePolicy"),
                    format!("policy enforcement `{other}`: pinfleet's Cilium enforces NetworkPolicy in `default` mode"),
                ),
            }
            if setting("enableEncryption").and_then(yaml::parse_bool) == Some(true) {
                self.refuse(
                    o,
                    &format!("{p}.enableEncryption"),
                    "encrypted pod traffic (IPsec or WireGuard): pinfleet's Cilium does not encrypt it",
                );
            }
        }
    }

    fn addons(&mut self, c: &'a KopsObject) -> Vec<Value> {
        let mut out = Vec::new();
        if c.flag("spec.metricsServer.enabled") == Some(false) {
            out.push(json!({"name": "metrics-server", "enabled": false}));
        }
        if c.flag("spec.clusterAutoscaler.enabled") == Some(true) {
            out.push(json!({"name": "cluster-autoscaler"}));
        }
        out
    }

    /// A `map[string]string` of kops's (labels, tags).
    fn string_map(&mut self, o: &'a KopsObject, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if let Some(n) = o.at(path) {
            for e in entries(n) {
                match string_value(&e.value) {
                    Some(v) => {
                        out.insert(e.key.clone(), v);
                    }
                    None => self.refuse(o, &format!("{path}.{}", e.key), "not a string"),
                }
            }
        }
        out
    }

    /// `maxSurge` and `maxUnavailable` under `path` (a rollingUpdate).
    fn rollout_of(&mut self, o: &'a KopsObject, path: &str) -> Map<String, Value> {
        let mut out = Map::new();
        for key in ["maxSurge", "maxUnavailable"] {
            let p = format!("{path}.{key}");
            let Some(text) = o.text(&p) else { continue };
            match text.parse::<IntOrPercent>() {
                Ok(IntOrPercent::Int(n)) => {
                    out.insert(key.into(), json!(n));
                }
                Ok(v @ IntOrPercent::Percent(_)) => {
                    out.insert(key.into(), json!(v.to_string()));
                }
                Err(why) => self.refuse(o, &p, why),
            }
        }
        out
    }

    /// A whole number at `path`, or `default` when unset.
    fn count(&mut self, o: &'a KopsObject, path: &str, default: u32) -> u32 {
        match o.text(path) {
            None => default,
            Some(text) => text.parse().unwrap_or_else(|_| {
                self.refuse(o, path, format!("`{text}` is not a whole number"));
                default
            }),
        }
    }

    /// One instance group, or None when it is left out (a bastion) or refused.
    fn group(
        &mut self,
        ig: &'a KopsObject,
        cloud_labels: &BTreeMap<String, String>,
        rolling: &Map<String, Value>,
    ) -> Option<Group> {
        let name =
            ig.text("metadata.name").map_or_else(|| ig.key.trim_start_matches(GROUPS).to_string(), str::to_string);
        let role = match ig.text("spec.role") {
            Some("Master" | "ControlPlane") => Role::ControlPlane,
            Some("Node") => Role::Node,
            Some("Bastion") => {
                self.warn(
                    ig,
                    "spec.role",
                    "a bastion: pinfleet runs no bastions (reach machines with SSM Session Manager), so the group is left out of the file",
                );
                self.cover(ig, "");
                return None;
            }
            Some(other) => {
                self.refuse(
                    ig,
                    "spec.role",
                    format!("role `{other}`: pinfleet's groups are control-plane or node machines"),
                );
                return None;
            }
            None => {
                self.refuse(ig, "spec.role", "the group names no role");
                return None;
            }
        };
        match ig.text("spec.manager") {
            None | Some("CloudGroup") => {}
            Some(other) => self.refuse(
                ig,
                "spec.manager",
                format!("`{other}` manages this group's machines: pinfleet manages every group's machines itself (an Auto Scaling group each)"),
            ),
        }
        let Some(machine_type) = ig.text("spec.machineType").map(str::to_string) else {
            self.refuse(
                ig,
                "spec.machineType",
                "the group names no machine type (kops chose it when the group was made)",
            );
            return None;
        };
        // kops's defaults (upup/pkg/fi/cloudup/populate_instancegroup_spec.go, pkg/model/defaults/volumes.go).
        let (size_default, volume_default) = match role {
            Role::ControlPlane => (1, 64),
            Role::Node => (2, 128),
        };
        let min = self.count(ig, "spec.minSize", size_default);
        let max = self.count(ig, "spec.maxSize", size_default);
        let image = match ig.text("spec.image") {
            Some(spec) => match image_of(spec, &machine_type) {
                Ok(v) => Some(v),
                Err(why) => {
                    self.refuse(ig, "spec.image", why);
                    None
                }
            },
            None => {
                self.refuse(
                    ig,
                    "spec.image",
                    "the group names no image (kops chose it from its channel when the group was made)",
                );
                None
            }
        };
        let subnets: Vec<String> = ig
            .at("spec.subnets")
            .map(|n| items(n).iter().filter_map(scalar).map(str::to_string).collect())
            .unwrap_or_default();
        if subnets.is_empty() {
            self.refuse(
                ig,
                "spec.subnets",
                "the group names no subnets (a pinfleet group names the subnets it spreads over)",
            );
        }
        let labels = self.string_map(ig, "spec.nodeLabels");
        let taints = self.taints(ig);
        let mut tags = cloud_labels.clone();
        tags.extend(self.string_map(ig, "spec.cloudLabels"));
        let root = self.root_volume(ig, volume_default);
        let capacity = self.capacity(ig, &machine_type);
        let profile = ig.text("spec.iam.profile").map(|p| p.rsplit('/').next().unwrap_or(p).to_string());
        let rollout = self.group_rollout(ig, role, rolling);

        let mut g = Map::new();
        g.insert("name".into(), json!(name));
        g.insert("role".into(), json!(role.as_str()));
        g.insert("machineType".into(), json!(machine_type));
        g.insert("minSize".into(), json!(min));
        g.insert("maxSize".into(), json!(max));
        g.insert("image".into(), image?);
        g.insert("subnets".into(), json!(subnets));
        g.insert("rootVolume".into(), Value::Object(root));
        if !labels.is_empty() {
            g.insert("labels".into(), json!(labels));
        }
        if !taints.is_empty() {
            g.insert("taints".into(), Value::Array(taints));
        }
        if !tags.is_empty() {
            g.insert("cloudLabels".into(), json!(tags));
        }
        if let Some(profile) = profile {
            g.insert("instanceProfile".into(), json!(profile));
        }
        if !rollout.is_empty() {
            g.insert("rollout".into(), Value::Object(rollout));
        }
        if let Some(capacity) = capacity {
            g.insert("capacity".into(), capacity);
        }
        Some(Group { role, name, min, max, value: g })
    }

    /// kops's taints (`key=value:Effect`).
    fn taints(&mut self, ig: &'a KopsObject) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some(list) = ig.at("spec.taints") {
            for (i, n) in items(list).iter().enumerate() {
                match scalar(n).ok_or_else(|| "not a string".to_string()).and_then(taint) {
                    Ok(t) => out.push(t),
                    Err(why) => self.refuse(ig, &format!("spec.taints[{i}]"), why),
                }
            }
        }
        out
    }

    /// The group's root volume (its size always: kops's default is not pinfleet's).
    fn root_volume(&mut self, ig: &'a KopsObject, size_default: u32) -> Map<String, Value> {
        let size = self.count(ig, "spec.rootVolumeSize", size_default);
        let mut root = Map::new();
        root.insert("sizeGiB".into(), json!(size));
        match ig.text("spec.rootVolumeType") {
            None => {}
            Some(t @ ("gp3" | "gp2" | "io1" | "io2")) => {
                root.insert("type".into(), json!(t));
            }
            Some(t) => self.warn(
                ig,
                "spec.rootVolumeType",
                format!("`{t}`: pinfleet's root volumes are gp3, gp2, io1 or io2 (gp3 in the file)"),
            ),
        }
        if let Some(encrypted) = ig.flag("spec.rootVolumeEncryption") {
            root.insert("encrypted".into(), json!(encrypted));
        }
        root
    }

    /// The group's rollout: its own, else the cluster's; a control plane
    /// rolls as kops rolls one (a machine at a time, never a surge).
    fn group_rollout(&mut self, ig: &'a KopsObject, role: Role, rolling: &Map<String, Value>) -> Map<String, Value> {
        let own = self.rollout_of(ig, "spec.rollingUpdate");
        match role {
            Role::ControlPlane => {
                if own.contains_key("maxSurge") {
                    self.warn(
                        ig,
                        "spec.rollingUpdate.maxSurge",
                        "a control-plane group never surges (kops refuses it too)",
                    );
                }
                let mut r = Map::new();
                r.insert("maxSurge".into(), json!(0));
                r.insert("maxUnavailable".into(), own.get("maxUnavailable").cloned().unwrap_or(json!(1)));
                r
            }
            Role::Node => {
                let mut r = rolling.clone();
                r.extend(own);
                r
            }
        }
    }

    /// The group's capacity: its mixed instances policy, or Spot by its price cap.
    fn capacity(&mut self, ig: &'a KopsObject, machine_type: &str) -> Option<Value> {
        let capped = ig.text("spec.maxPrice").is_some();
        if capped {
            self.warn(ig, "spec.maxPrice", "the Spot price cap: pinfleet's Spot machines pay the Spot price");
        }
        let Some(policy) = ig.at("spec.mixedInstancesPolicy") else {
            return capped.then(|| json!({"market": "Spot"}));
        };
        let mut types: Vec<String> = Vec::new();
        for t in policy.get("instances").map_or(&[][..], items).iter().filter_map(scalar) {
            if t != machine_type && !types.iter().any(|x| x == t) {
                types.push(t.to_string());
            }
        }
        let base = self.count(ig, "spec.mixedInstancesPolicy.onDemandBase", 0);
        // AWS's default: everything above the base On-Demand.
        let above = self.count(ig, "spec.mixedInstancesPolicy.onDemandAboveBase", 100);
        if above > 100 {
            self.refuse(ig, "spec.mixedInstancesPolicy.onDemandAboveBase", format!("{above} is not a percentage"));
            return None;
        }
        let mut capacity = Map::new();
        capacity.insert("types".into(), json!(types));
        match (above, base) {
            (100, _) => {}
            (0, 0) => {
                capacity.insert("market".into(), json!("Spot"));
            }
            (above, base) => {
                capacity.insert("market".into(), json!("Mixed"));
                if base > 0 {
                    capacity.insert("onDemandBase".into(), json!(base));
                }
                capacity.insert("spotPercent".into(), json!(100 - above));
            }
        }
        if types.is_empty() && !capacity.contains_key("market") {
            return None;
        }
        Some(Value::Object(capacity))
    }

    /// etcd: `main` must run a member on each control-plane machine (the
    /// control-plane groups, one machine per member), as pinfleet runs etcd
    /// stacked; its backup settings carry over.
    fn etcd(&mut self, c: &'a KopsObject, groups: &[Group]) -> Option<Value> {
        let Some((o, list)) = self.lookup(c, "spec.etcdClusters") else {
            self.refuse(c, "spec.etcdClusters", "kops names no etcd clusters (`main` holds the cluster's data)");
            return None;
        };
        let mut main = None;
        for (i, e) in items(list).iter().enumerate() {
            let p = format!("spec.etcdClusters[{i}]");
            match e.get("name").and_then(scalar) {
                Some("main") => main = Some((i, e)),
                Some("events") => self.warn(
                    o,
                    &p,
                    "kops's etcd for events: pinfleet runs one etcd (kubeadm's, stacked), which keeps events with everything else",
                ),
                other => self.refuse(
                    o,
                    &p,
                    format!(
                        "etcd cluster `{}`: pinfleet runs one etcd, the cluster's own (kops's `main`)",
                        other.unwrap_or("")
                    ),
                ),
            }
        }
        let Some((i, main)) = main else {
            self.refuse(o, "spec.etcdClusters", "no etcd cluster `main`, which holds the cluster's data");
            return None;
        };
        let p = format!("spec.etcdClusters[{i}]");
        let control_plane: Vec<&Group> = groups.iter().filter(|g| g.role == Role::ControlPlane).collect();
        let mut per_group: BTreeMap<&str, u32> = BTreeMap::new();
        let members = main.get("etcdMembers").map_or(&[][..], items);
        for (j, member) in members.iter().enumerate() {
            let mp = format!("{p}.etcdMembers[{j}]");
            let Some(g) = member.get("instanceGroup").and_then(scalar) else {
                self.refuse(o, &mp, "a member on no instance group");
                continue;
            };
            if !control_plane.iter().any(|cp| cp.name == g) {
                self.refuse(
                    o,
                    &format!("{mp}.instanceGroup"),
                    format!("`{g}` is not a control-plane group: pinfleet runs etcd on the control-plane machines, a member on each"),
                );
                continue;
            }
            *per_group.entry(g).or_default() += 1;
        }
        for g in &control_plane {
            let n = per_group.get(g.name.as_str()).copied().unwrap_or(0);
            if n != g.max || g.min != g.max {
                self.refuse(
                    o,
                    &format!("{p}.etcdMembers"),
                    format!(
                        "{n} member(s) on `{}`, which runs {} to {} machine(s): under pinfleet every control-plane machine is an etcd member (kubeadm's stacked etcd), so a control-plane group runs exactly its members",
                        g.name, g.min, g.max
                    ),
                );
            }
        }
        let mut backups = Map::new();
        if let Some(days) = main.get("manager").and_then(|m| m.get("backupRetentionDays")).and_then(scalar) {
            match days.parse::<u32>() {
                Ok(d) if d > 0 => {
                    backups.insert("keepDaily".into(), json!(format!("{d}d")));
                }
                _ => self.warn(
                    o,
                    &format!("{p}.manager.backupRetentionDays"),
                    format!("`{days}` is not a number of days"),
                ),
            }
        }
        if let Some(every) = main.get("manager").and_then(|m| m.get("backupInterval")).and_then(scalar) {
            match compact_duration(every) {
                Some(d) => {
                    backups.insert("interval".into(), json!(d));
                }
                None => self.warn(
                    o,
                    &format!("{p}.manager.backupInterval"),
                    format!("`{every}` is not a whole number of seconds pinfleet can take"),
                ),
            }
        }
        (!backups.is_empty()).then(|| json!({ "backups": backups }))
    }

    /// Every field of `o` by [`MAPPING`]: what is warned or refused is
    /// found here, unless the mapper said it already.
    fn walk(&mut self, o: &KopsObject, kind: Kind) {
        let rules: Vec<(Vec<Pat<'static>>, &'static Rule)> =
            MAPPING.iter().filter(|r| r.kind == kind).map(|r| (pattern(r.kops), r)).collect();
        let covered = self.covered.get(&o.key).cloned().unwrap_or_default();
        let mut found = Vec::new();
        visit(&o.tree, &o.tree.loc, &mut Vec::new(), &rules, &covered, &mut found);
        for (fate, path, why, loc) in found {
            self.push(fate, &o.key, &path, why, &loc);
        }
    }

    /// Every key under the cluster's folder: what the import does not read is named.
    fn store_keys(&mut self) {
        let state = self.state;
        let mut seen = BTreeSet::new();
        for key in &state.keys {
            let rule = MAPPING.iter().filter(|r| r.kind == Kind::Store).find(|r| {
                if r.kops.ends_with('/') {
                    key.starts_with(r.kops)
                } else {
                    key == r.kops
                }
            });
            let (what, fate, why) = match rule {
                Some(r) if r.kops == "backups/etcd/" => {
                    let folder: Vec<&str> = key.splitn(4, '/').take(3).collect();
                    (format!("{}/", folder.join("/")), r.fate, r.how)
                }
                Some(r) => (r.kops.to_string(), r.fate, r.how),
                None => {
                    let what = key.split_once('/').map_or_else(|| key.clone(), |(first, _)| format!("{first}/"));
                    (what, Fate::Warned, "not an object kops writes that the import knows: the import reads none of it")
                }
            };
            if matches!(fate, Fate::Warned | Fate::Refused) && seen.insert(what.clone()) {
                let at = format!("{}/{what}", state.url);
                let found = Found {
                    rank: usize::MAX,
                    line: 0,
                    col: 0,
                    finding: Finding { path: what, why: why.to_string(), object: STORE.to_string(), at },
                };
                match fate {
                    Fate::Refused => self.refused.push(found),
                    _ => self.unmapped.push(found),
                }
            }
        }
    }
}

/// A concrete path's segments.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `spec.subnets[2].cidr`.
fn shown(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A rule's path, segment by segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pat<'r> {
    Key(&'r str),
    AnyKey,
    AnyIndex,
}

fn pattern(p: &str) -> Vec<Pat<'_>> {
    let mut out = Vec::new();
    for part in p.split('.') {
        let (name, indexed) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        out.push(if name == "*" { Pat::AnyKey } else { Pat::Key(name) });
        if indexed {
            out.push(Pat::AnyIndex);
        }
    }
    out
}

fn matches(pat: &[Pat<'_>], path: &[Seg]) -> bool {
    pat.len() == path.len()
        && pat.iter().zip(path).all(|(p, s)| match (p, s) {
            (Pat::Key(k), Seg::Key(s)) => k == s,
            (Pat::AnyKey, Seg::Key(_)) | (Pat::AnyIndex, Seg::Index(_)) => true,
            _ => false,
        })
}

type Rules = [(Vec<Pat<'static>>, &'static Rule)];

/// Finds the fate of `node` at `path`: a row naming it exactly decides
/// (a mapped one with rows below lets them decide for its fields); else
/// rows below it decide for its fields; else a row ending in `*`; else it
/// is warned as unnamed.
fn visit(
    node: &Node,
    loc: &Loc,
    path: &mut Vec<Seg>,
    rules: &Rules,
    covered: &BTreeSet<String>,
    found: &mut Vec<(Fate, String, String, Loc)>,
) {
    let here = shown(path);
    if covered.contains(&here) {
        return;
    }
    let named = |wild: bool| {
        rules.iter().find(|(p, _)| matches(p, path) && (p.last() == Some(&Pat::AnyKey)) == wild).map(|(_, r)| *r)
    };
    let deeper = rules.iter().any(|(p, _)| p.len() > path.len() && matches(&p[..path.len()], path));
    let decided = match named(false) {
        Some(r) if r.fate == Fate::Mapped && deeper => None,
        Some(r) => Some(r),
        None if deeper => None,
        None => Some(named(true).unwrap_or(&UNNAMED)),
    };
    if let Some(r) = decided {
        if matches!(r.fate, Fate::Warned | Fate::Refused) {
            found.push((r.fate, here, r.how.to_string(), loc.clone()));
        }
        return;
    }
    match &node.value {
        yaml::Value::Map(entries) => {
            for e in entries {
                path.push(Seg::Key(e.key.clone()));
                visit(&e.value, &e.key_loc, path, rules, covered, found);
                path.pop();
            }
        }
        yaml::Value::Seq(items) => {
            for (i, n) in items.iter().enumerate() {
                path.push(Seg::Index(i));
                visit(n, &n.loc, path, rules, covered, found);
                path.pop();
            }
        }
        yaml::Value::Scalar(..) => {}
    }
}

const POD: &str = "100.96.0.0/11";
const SERVICE: &str = "100.64.0.0/13";

/// kops's default ranges (pinfleet's too).
fn default_cidr(text: &str) -> Cidr {
    text.parse().expect("a valid literal")
}

/// The region of an availability zone: `us-east-1a` → `us-east-1`,
/// `us-west-2-lax-1a` (a Local Zone) → `us-west-2`.
fn region_of(zone: &str) -> Option<String> {
    let parts: Vec<&str> = zone.split('-').collect();
    let i = parts.iter().position(|p| p.starts_with(|c: char| c.is_ascii_digit()))?;
    if i < 2 {
        return None;
    }
    let digits: String = parts[i].chars().take_while(char::is_ascii_digit).collect();
    if digits.len() == parts[i].len() && i + 1 == parts.len() {
        // `us-east-1`: a region, not a zone.
        return None;
    }
    Some(format!("{}-{digits}", parts[..i].join("-")))
}

/// kops's owner aliases, as kops resolves them
/// (`upup/pkg/fi/cloudup/awsup/aws_cloud.go`, `ResolveImageOwnerAlias`).
fn owner_alias(owner: &str) -> &str {
    match owner {
        "amazon" | "amazon.com" => "137112412989",
        "debian" | "debian11" => "136693071363",
        "flatcar" => "075585003325",
        "redhat" | "redhat.com" => "309956199498",
        "ubuntu" => "099720109477",
        "rocky" | "rockylinux" => "792107900819",
        other => other,
    }
}

/// A kops image (`ami-…`, `OWNER/NAME`, `NAME`, `ssm:…`) as a pinfleet
/// image. kops resolves `OWNER/NAME` to the newest image of that name
/// (DescribeImages with a name filter), as a pinfleet selector does.
fn image_of(spec: &str, machine_type: &str) -> Result<Value, String> {
    let spec = spec.trim();
    if spec.starts_with("ami-") {
        return Ok(json!({"id": spec}));
    }
    if spec.starts_with("ssm:") {
        return Err(format!(
            "`{spec}` is an SSM parameter: pinfleet does not resolve images through SSM; name the AMI (`ami-…`) or `OWNER/NAME`"
        ));
    }
    let (owner, name) = match spec.split_once('/') {
        Some((owner, name)) => (owner_alias(owner), name),
        None => ("self", spec),
    };
    if owner.is_empty() || name.is_empty() {
        return Err(format!("`{spec}` names no image"));
    }
    let architecture = crate::capacity::architecture_of(machine_type).as_str();
    Ok(json!({"selector": {"owners": [owner], "name": name, "architecture": architecture}}))
}

/// A kops taint: `key=value:Effect` or `key:Effect`.
fn taint(text: &str) -> Result<Value, String> {
    let bad = || format!("`{text}` is not a taint (`key=value:Effect` or `key:Effect`)");
    let (kv, effect) = text.rsplit_once(':').ok_or_else(bad)?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!("`{text}`: the effect is NoSchedule, PreferNoSchedule or NoExecute"));
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(bad());
    }
    Ok(json!({"key": key, "value": value, "effect": effect}))
}

/// A Go duration (`1h0m0s`) in whole units (`1h`), or None when it has
/// parts of a second or is not a duration.
fn compact_duration(go: &str) -> Option<String> {
    let d = go.parse::<crate::spec::DurationSpec>().ok()?.0;
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        return None;
    }
    Some(if secs % 86_400 == 0 {
        format!("{}d", secs / 86_400)
    } else if secs % 3_600 == 0 {
        format!("{}h", secs / 3_600)
    } else if secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    })
}

/// The file's text: a header that says where it came from and what it
/// does not carry, then the cluster.
fn render(file: &MappedFile, state: &StateStore, unmapped: &[Finding]) -> Result<String, Refusal> {
    let body = serde_saphyr::to_string(&file.value).map_err(|e| Refusal::Invalid(e.to_string()))?;
    let mut out = String::new();
    let mut line = |text: &str| {
        out.push_str("# ");
        out.push_str(&crate::escape::escaped(text, false));
        out.push('\n');
    };
    line(&format!(
        "{}: the kops cluster {}, from {}, as `pinfleet import kops` maps it.",
        file.name, file.kops_name, state.url
    ));
    if unmapped.is_empty() {
        line("Everything kops set is carried over.");
    } else {
        line("Not carried over from kops (the book's chapter Coming from kops says more):");
        for f in unmapped {
            line(&format!("  {} {}: {}", f.object, f.path, f.why));
        }
    }
    for n in &file.notes {
        line(n);
    }
    out.push_str(&body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG_YAML: &str = include_str!("../../tests/fixtures/kops/prod.k8s.example.com/config");
    const NODES_YAML: &str = include_str!("../../tests/fixtures/kops/prod.k8s.example.com/instancegroup/nodes");

    fn control_plane(zone: &str, role: &str) -> String {
        format!(
            "apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: control-plane-{zone}\nspec:\n  image: 099720109477/ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610\n  machineType: m6i.large\n  maxSize: 1\n  minSize: 1\n  role: {role}\n  subnets:\n  - {zone}\n"
        )
    }

    fn store(config: &str, groups: &[(&str, String)]) -> StateStore {
        let url = "file:///state/prod.k8s.example.com";
        let object = |key: &str, text: &str| KopsObject::parse(key, &format!("{url}/{key}"), text).unwrap();
        let mut keys: Vec<String> = vec![CONFIG.into(), "pki/private/kubernetes-ca/keyset.yaml".into()];
        keys.extend(groups.iter().map(|(name, _)| format!("{GROUPS}{name}")));
        keys.sort();
        StateStore {
            url: url.into(),
            name: "prod.k8s.example.com".into(),
            keys,
            config: Some(object(CONFIG, config)),
            completed: None,
            instance_groups: groups.iter().map(|(name, text)| object(&format!("{GROUPS}{name}"), text)).collect(),
        }
    }

    fn groups() -> Vec<(&'static str, String)> {
        vec![
            ("control-plane-us-east-1a", control_plane("us-east-1a", "Master")),
            ("control-plane-us-east-1b", control_plane("us-east-1b", "ControlPlane")),
            ("control-plane-us-east-1c", control_plane("us-east-1c", "Master")),
            ("nodes", NODES_YAML.to_string()),
        ]
    }

    fn opts() -> Options {
        Options {
            owner: Some("cloud-platform".into()),
            state_store: "s3://example-kops-state/pinfleet".into(),
            file: "prod.yaml".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_table_prints_as_one_markdown_table() {
        let md = mapping_markdown();
        assert_eq!(md.lines().count(), MAPPING.len() + 2);
        for r in MAPPING {
            assert!(!r.kops.is_empty() && !r.how.is_empty(), "{r:?}");
            for cell in [r.kops, r.pinfleet, r.how] {
                assert!(!cell.contains('|') && !cell.contains('\n'), "{r:?}");
            }
        }
        let mut seen = BTreeSet::new();
        for r in MAPPING {
            assert!(seen.insert((r.kind.label(), r.kops)), "{} is in the table twice", r.kops);
        }
    }

    #[test]
    fn both_spellings_of_the_control_plane_map_and_a_bastion_is_left_out_by_name() {
        let mut gs = groups();
        let bastion = "apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: bastions\nspec:\n  image: ubuntu/x\n  machineType: t3.micro\n  role: Bastion\n  subnets:\n  - utility-us-east-1a\n";
        gs.push(("bastions", bastion.to_string()));
        let got = import(&store(CONFIG_YAML, &gs), &opts()).unwrap();
        let loaded = crate::spec::load_source(Path::new("prod.yaml"), &got.text, &Default::default()).unwrap();
        let roles: Vec<(&str, Role)> =
            loaded.cluster.spec.instance_groups.iter().map(|g| (g.name.as_str(), g.role)).collect();
        assert_eq!(
            roles,
            [
                ("control-plane-us-east-1a", Role::ControlPlane),
                ("control-plane-us-east-1b", Role::ControlPlane),
                ("control-plane-us-east-1c", Role::ControlPlane),
                ("nodes", Role::Node),
            ]
        );
        let bastion = got.unmapped.iter().find(|f| f.object == "instancegroup/bastions").expect("the bastion is named");
        assert_eq!(bastion.path, "spec.role");
        assert!(bastion.at.ends_with("/instancegroup/bastions:8:3"), "{}", bastion.at);
        assert_eq!(got.unmapped.iter().filter(|f| f.object == "instancegroup/bastions").count(), 1);
        assert!(got.unmapped.iter().any(|f| f.object == STORE && f.path == "pki/"));
    }

    #[test]
    fn a_setting_that_changes_what_the_cluster_does_is_refused_at_its_path() {
        let cases: [(&str, &str, &str); 4] = [
            ("cloudProvider: aws", "cloudProvider: gce", "spec.cloudProvider"),
            ("    cilium:\n      enableNodePort: true\n", "    calico: {}\n", "spec.networking.calico"),
            (
                "  networkCIDR: 172.20.0.0/16\n",
                "  networkCIDR: 172.20.0.0/16\n  networkID: vpc-0123456789abcdef0\n",
                "spec.networkID",
            ),
            ("  sshAccess:\n", "  additionalSans:\n  - kubernetes.example.com\n  sshAccess:\n", "spec.additionalSans"),
        ];
        for (from, to, path) in cases {
            assert!(CONFIG_YAML.contains(from), "the fixture has `{from}`");
            let config = CONFIG_YAML.replace(from, to);
            match import(&store(&config, &groups()), &opts()) {
                Err(Refusal::Fields { findings, .. }) => {
                    assert!(findings.iter().any(|f| f.path == path), "{path}: {findings:#?}")
                }
                other => panic!("{path}: not refused: {other:?}"),
            }
        }
    }

    #[test]
    fn a_gossip_api_name_is_carried_and_said_to_resolve_only_on_kops_s_machines() {
        let from = "masterPublicName: api.prod.k8s.example.com";
        assert!(CONFIG_YAML.contains(from), "the fixture names its API");
        let config = CONFIG_YAML.replace(from, "masterPublicName: api.prod.k8s.local");
        let got = import(&store(&config, &groups()), &opts()).unwrap();
        assert!(got.text.contains("dnsName: api.prod.k8s.local"), "{}", got.text);
        let said = got.unmapped.iter().find(|f| f.path == "spec.masterPublicName").expect("the gossip name is named");
        assert!(said.why.contains("only kops's own machines resolve it"), "{said:?}");
    }

    #[test]
    fn kops_values_become_pinfleet_values() {
        assert_eq!(region_of("us-east-1a").as_deref(), Some("us-east-1"));
        assert_eq!(region_of("us-west-2-lax-1a").as_deref(), Some("us-west-2"));
        assert_eq!(region_of("eusc-de-east-1b").as_deref(), Some("eusc-de-east-1"));
        assert_eq!(region_of("us-east-1"), None);
        assert_eq!(taint("a.io/b=c:NoSchedule"), Ok(json!({"key": "a.io/b", "value": "c", "effect": "NoSchedule"})));
        assert_eq!(taint("dedicated:NoExecute"), Ok(json!({"key": "dedicated", "value": "", "effect": "NoExecute"})));
        assert!(taint("dedicated=gpu").is_err() && taint("x:Sometimes").is_err());
        assert_eq!(
            image_of("ubuntu/images/x", "m7g.large"),
            Ok(json!({"selector": {"owners": ["099720109477"], "name": "images/x", "architecture": "arm64"}}))
        );
        assert_eq!(image_of("ami-0123456789abcdef0", "m6i.large"), Ok(json!({"id": "ami-0123456789abcdef0"})));
        assert_eq!(image_of("my-image", "m6i.large").unwrap()["selector"]["owners"], json!(["self"]));
        assert!(image_of("ssm:/aws/service/canonical/ubuntu", "m6i.large").is_err());
        assert_eq!(compact_duration("1h0m0s").as_deref(), Some("1h"));
        assert_eq!(compact_duration("1h30m0s").as_deref(), Some("90m"));
        assert_eq!(compact_duration("1.5s"), None);
    }

    #[test]
    fn rows_ending_in_a_wildcard_give_way_to_rows_below() {
        let rules: Vec<(Vec<Pat<'static>>, &'static Rule)> =
            MAPPING.iter().filter(|r| r.kind == Kind::Cluster).map(|r| (pattern(r.kops), r)).collect();
        let tree = yaml::parse_single(
            "spec:\n  etcdClusters:\n  - name: main\n    cpuRequest: 200m\n    etcdMembers:\n    - name: a\n      instanceGroup: cp\n      volumeSize: 20\n  unknownThing:\n    a: 1\n",
            Path::new("config"),
        )
        .unwrap();
        let mut found = Vec::new();
        visit(&tree, &tree.loc, &mut Vec::new(), &rules, &BTreeSet::new(), &mut found);
        let paths: Vec<&str> = found.iter().map(|(_, p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["spec.etcdClusters[0].cpuRequest", "spec.etcdClusters[0].etcdMembers[0].volumeSize", "spec.unknownThing"]
        );
    }
}
