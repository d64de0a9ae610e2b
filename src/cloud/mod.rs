//! The cloud side: what a cluster needs on AWS ([`model`], pure), what
//! exists ([`observed`]), the operations that change it ([`ops`], data the
//! plan decides), and the SDK edge that observes and performs them ([`aws`]).
//! Nothing here depends on `plan`: the plan depends on this.
//!
//! Data flow: `Cluster` → [`model::desired`] (+ images resolved by
//! [`aws::images`]) → `plan::diff` against [`aws::observe`] → `apply`.
//! Ownership is by tags: every resource carries [`tags::CLUSTER`],
//! [`tags::OWNER`], [`tags::MANAGED_BY`] and a [`tags::RESOURCE`] key that
//! names its place in the model; that is how pinfleet finds, governs and
//! safely recycles machines.

pub mod aws;

pub mod events;
pub mod iam;
pub mod key;
pub mod model;
pub mod observed;
pub mod ops;
pub mod orphans;

/// Tag keys pinfleet writes and reads.
pub mod tags {
    pub const CLUSTER: &str = "pinfleet.dev/cluster";
    pub const OWNER: &str = "pinfleet.dev/owner";
    pub const MANAGED_BY: &str = "pinfleet.dev/managed-by";
    pub const MANAGED_BY_VALUE: &str = "pinfleet";
    pub const INSTANCE_GROUP: &str = "pinfleet.dev/instance-group";
    /// On control-plane machines: what runs their etcd, when not kubeadm's
    /// stacked etcd ([`ETCD_MANAGER`]: kops's etcd-manager, taken over).
    pub const ETCD: &str = "pinfleet.dev/etcd";
    pub const ETCD_MANAGER: &str = "etcd-manager";
    /// The resource's key in the desired model, e.g. `subnet/private-a`.
    pub const RESOURCE: &str = "pinfleet.dev/resource";
    /// On instances: the launch-template version they were started from.
    pub const LT_VERSION: &str = "pinfleet.dev/launch-template-version";
    /// The Kubernetes version a launch template's machines install.
    pub const KUBERNETES_VERSION: &str = "pinfleet.dev/kubernetes-version";
    /// On a group's launch template: its size as the cluster autoscaler set it.
    pub const AUTOSCALER_SIZE: &str = "pinfleet.dev/autoscaler-size";
    /// On instances: the apply revision that started them (idempotency).
    pub const REVISION: &str = "pinfleet.dev/revision";
    pub const NAME: &str = "Name";
    /// On an adopted cluster's VPC: the tool it was taken over from
    /// (`kops:<kops's name>`), while that tool's rules are kept.
    pub const ADOPTED_FROM: &str = "pinfleet.dev/adopted-from";
    /// On an adopted cluster's VPC: the API load balancer and target group
    /// it came with (their names are the other tool's, not pinfleet's).
    pub const API_LOAD_BALANCER: &str = "pinfleet.dev/api-load-balancer";
    pub const API_TARGET_GROUP: &str = "pinfleet.dev/api-target-group";
    /// kops's cluster tag (every resource it makes carries it).
    pub const KOPS_CLUSTER: &str = "KubernetesCluster";
    /// kops's instance group tag on machines and their groups.
    pub const KOPS_INSTANCE_GROUP: &str = "kops.k8s.io/instancegroup";
}
