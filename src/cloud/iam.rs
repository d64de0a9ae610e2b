//! The cluster's IAM (pure): a role and an instance profile per machine
//! role (control plane, nodes), each with one inline policy holding the
//! least the machines need. Part of the desired model: the plan diffs it
//! against what IAM has (`cloud::aws::observe`), the executor creates,
//! updates and deletes it like every other resource.
//!
//! - Control plane: the AWS cloud controller manager's documented policy,
//!   the EBS CSI driver's (its controller runs on control-plane machines),
//!   reading the cluster's PKI and join material from the state store, and
//!   pulling from ECR.
//! - Nodes: `ec2:DescribeInstances` (the serving-certificate approver
//!   checks names against the instance), reading join material, and ECR.
//!
//! A cluster that names its own instance profiles (`spec.iam`) gets none.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::spec::{Cluster, Role};

/// IAM path of everything pinfleet creates (how `orphans` finds them).
pub const PATH: &str = "/pinfleet/";
/// The name of the inline policy on each role.
pub const POLICY_NAME: &str = "pinfleet";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRole {
    /// `control-plane` or `nodes`: the key's name.
    pub key: String,
    pub role: Role,
    /// Role and instance profile name.
    pub name: String,
    /// The trust policy (EC2 may assume it), as JSON text.
    pub trust: String,
    /// The inline policy, as JSON text.
    pub policy: String,
}

/// The key of a machine role's IAM (`control-plane`, `nodes`).
pub fn key(role: Role) -> &'static str {
    match role {
        Role::ControlPlane => "control-plane",
        Role::Node => "nodes",
    }
}

/// `pinfleet-<cluster>-<key>`, at most IAM's 64 characters (a hash keeps
/// long cluster names apart).
pub fn role_name(cluster: &str, role: Role) -> String {
    let full = format!("pinfleet-{cluster}-{}", key(role));
    if full.len() <= 64 {
        return full;
    }
    use sha2::Digest;
    let h = sha2::Sha256::digest(full.as_bytes());
    let hash: String = h.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hash}", &full[..55])
}

fn trust() -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    })
}

/// Reading objects under `<prefix>/<cluster>/<folder>/` of an S3 state store.
fn state_read(cluster: &Cluster, folders: &[&str]) -> Option<Value> {
    let rest = crate::spec::validate::state_store_base(&cluster.spec.state_store).strip_prefix("s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let base = [prefix.trim_matches('/'), cluster.metadata.name.as_str()]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/");
    // What machines fetch sits under `machine/` (`state::join`).
    let resources: Vec<String> =
        folders.iter().map(|f| format!("arn:aws:s3:::{bucket}/{base}/machine/{f}/*")).collect();
    Some(json!({"Sid": "StateStoreRead", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": resources}))
}

/// The etcd backup agent on the control-plane machines: it may write
/// backups, deltas and its word on the live revision under
/// `<cluster>/etcd/`, and read them (to verify), but never delete a backup
/// (an explicit Deny: no other statement can grant it). Collecting old
/// backups is the operator's `pinfleet etcd gc`, with other credentials.
fn etcd_backups(cluster: &Cluster) -> Vec<Value> {
    let Some(rest) = crate::spec::validate::state_store_base(&cluster.spec.state_store).strip_prefix("s3://") else {
        return Vec::new();
    };
    if !cluster.spec.etcd.backups.enabled {
        return Vec::new();
    }
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let base = [prefix.trim_matches('/'), cluster.metadata.name.as_str()]
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/");
    vec![
        json!({"Sid": "EtcdBackupsWrite", "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:PutObjectRetention"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{base}/etcd/*")]}),
        json!({"Sid": "EtcdDeltasCollect", "Effect": "Allow", "Action": ["s3:DeleteObject"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{base}/etcd/deltas/*")]}),
        json!({"Sid": "EtcdBackupsList", "Effect": "Allow", "Action": ["s3:ListBucket", "s3:ListBucketVersions"],
            "Resource": [format!("arn:aws:s3:::{bucket}")],
            "Condition": {"StringLike": {"s3:prefix": [format!("{base}/etcd/*")]}}}),
        json!({"Sid": "EtcdBackupsNeverDeleted", "Effect": "Deny",
            "Action": ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:BypassGovernanceRetention", "s3:PutLifecycleConfiguration"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{base}/etcd/backups/*"), format!("arn:aws:s3:::{bucket}")]}),
    ]
}

fn ecr_pull() -> Value {
    json!({
        "Sid": "EcrPull", "Effect": "Allow", "Resource": "*",
        "Action": ["ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
    })
}

/// The cloud controller manager's policy (cloud-provider-aws's documented minimum).
fn cloud_controller() -> Value {
    json!({
        "Sid": "CloudControllerManager", "Effect": "Allow", "Resource": "*",
        "Action": [
            "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeTags",
            "ec2:DescribeInstances", "ec2:DescribeInstanceTopology", "ec2:DescribeRegions", "ec2:DescribeRouteTables",
            "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVolumes", "ec2:DescribeAvailabilityZones",
            "ec2:CreateSecurityGroup", "ec2:CreateTags", "ec2:CreateVolume", "ec2:ModifyInstanceAttribute",
            "ec2:ModifyVolume", "ec2:AttachVolume", "ec2:AuthorizeSecurityGroupIngress", "ec2:CreateRoute",
            "ec2:DeleteRoute", "ec2:DeleteSecurityGroup", "ec2:DeleteVolume", "ec2:DetachVolume",
            "ec2:RevokeSecurityGroupIngress", "ec2:DescribeVpcs",
            "elasticloadbalancing:AddTags", "elasticloadbalancing:AttachLoadBalancerToSubnets",
            "elasticloadbalancing:ApplySecurityGroupsToLoadBalancer", "elasticloadbalancing:CreateLoadBalancer",
            "elasticloadbalancing:CreateLoadBalancerPolicy", "elasticloadbalancing:CreateLoadBalancerListeners",
            "elasticloadbalancing:ConfigureHealthCheck", "elasticloadbalancing:DeleteLoadBalancer",
            "elasticloadbalancing:DeleteLoadBalancerListeners", "elasticloadbalancing:DescribeLoadBalancers",
            "elasticloadbalancing:DescribeLoadBalancerAttributes", "elasticloadbalancing:DetachLoadBalancerFromSubnets",
            "elasticloadbalancing:DeregisterInstancesFromLoadBalancer", "elasticloadbalancing:ModifyLoadBalancerAttributes",
            "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
            "elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer", "elasticloadbalancing:CreateListener",
            "elasticloadbalancing:CreateTargetGroup", "elasticloadbalancing:DeleteListener",
            "elasticloadbalancing:DeleteTargetGroup", "elasticloadbalancing:DescribeListeners",
            "elasticloadbalancing:DescribeLoadBalancerPolicies", "elasticloadbalancing:DescribeTargetGroups",
            "elasticloadbalancing:DescribeTargetHealth", "elasticloadbalancing:ModifyListener",
            "elasticloadbalancing:ModifyTargetGroup", "elasticloadbalancing:RegisterTargets",
            "elasticloadbalancing:DeregisterTargets", "elasticloadbalancing:SetLoadBalancerPoliciesOfListener",
            "iam:CreateServiceLinkedRole", "kms:DescribeKey"
        ]
    })
}

/// The EBS CSI driver's policy (AmazonEBSCSIDriverPolicy): volumes and
/// snapshots it creates are tagged, and it deletes only those.
fn ebs_csi() -> Vec<Value> {
    vec![
        json!({
            "Sid": "EbsCsiDescribe", "Effect": "Allow", "Resource": "*",
            "Action": ["ec2:CreateSnapshot", "ec2:AttachVolume", "ec2:DetachVolume", "ec2:ModifyVolume",
                       "ec2:DescribeAvailabilityZones", "ec2:DescribeInstances", "ec2:DescribeSnapshots",
                       "ec2:DescribeTags", "ec2:DescribeVolumes", "ec2:DescribeVolumesModifications"]
        }),
        json!({
            "Sid": "EbsCsiTagOnCreate", "Effect": "Allow", "Action": ["ec2:CreateTags"],
            "Resource": ["arn:aws:ec2:*:*:volume/*", "arn:aws:ec2:*:*:snapshot/*"],
            "Condition": {"StringEquals": {"ec2:CreateAction": ["CreateVolume", "CreateSnapshot"]}}
        }),
        json!({
            "Sid": "EbsCsiCreate", "Effect": "Allow", "Action": ["ec2:CreateVolume"], "Resource": "*",
            "Condition": {"StringLike": {"aws:RequestTag/ebs.csi.aws.com/cluster": "true"}}
        }),
        json!({
            "Sid": "EbsCsiDelete", "Effect": "Allow", "Action": ["ec2:DeleteVolume", "ec2:DeleteSnapshot"], "Resource": "*",
            "Condition": {"StringLike": {"ec2:ResourceTag/ebs.csi.aws.com/cluster": "true"}}
        }),
    ]
}

/// What `pinfleet autoscaler serve` does from a control-plane machine (the
/// `cluster-autoscaler` addon): observe and plan the cluster, launch and
/// terminate its machines, record sizes and history in the state store.
fn autoscaler_provider(cluster: &Cluster) -> Vec<Value> {
    let name = &cluster.metadata.name;
    let mut out = vec![
        json!({"Sid": "AutoscalerObserve", "Effect": "Allow", "Resource": "*",
            "Action": ["ec2:Describe*", "elasticloadbalancing:Describe*", "iam:GetRole", "iam:GetRolePolicy", "iam:GetInstanceProfile", "sts:GetCallerIdentity"]}),
        json!({"Sid": "AutoscalerLaunch", "Effect": "Allow", "Resource": "*",
            "Action": ["ec2:RunInstances", "ec2:CreateTags"]}),
        json!({"Sid": "AutoscalerPassNodeRole", "Effect": "Allow", "Action": ["iam:PassRole"],
            "Resource": format!("arn:aws:iam::*:role/pinfleet/{}", role_name(name, Role::Node))}),
        json!({"Sid": "AutoscalerTerminate", "Effect": "Allow", "Action": ["ec2:TerminateInstances"], "Resource": "*",
            "Condition": {"StringEquals": {format!("ec2:ResourceTag/{}", crate::cloud::tags::CLUSTER): name}}}),
    ];
    if let Some(rest) = crate::spec::validate::state_store_base(&cluster.spec.state_store).strip_prefix("s3://") {
        let (bucket, _) = rest.split_once('/').unwrap_or((rest, ""));
        out.push(json!({"Sid": "AutoscalerStateStore", "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")]}));
    }
    out
}

/// What kops's etcd-manager does from pinfleet's control-plane machines
/// (a cluster taken over from kops, its state at `kops_state`): its
/// backups and control files under `backups/etcd/` in kops's state store
/// (its volumes it finds and attaches with the cloud controller's EC2
/// permissions). None on a local state store.
fn etcd_manager(kops_state: &str) -> Vec<Value> {
    let Some(rest) = kops_state.strip_prefix("s3://") else { return Vec::new() };
    let rest = rest.trim_end_matches('/');
    let (bucket, folder) = rest.split_once('/').unwrap_or((rest, ""));
    let folder = folder.trim_matches('/');
    let base = if folder.is_empty() { "backups/etcd".to_string() } else { format!("{folder}/backups/etcd") };
    vec![
        json!({"Sid": "EtcdManagerBackups", "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Resource": [format!("arn:aws:s3:::{bucket}/{base}/*")]}),
        json!({"Sid": "EtcdManagerBackupsList", "Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
            "Resource": [format!("arn:aws:s3:::{bucket}")]}),
    ]
}

fn policy(cluster: &Cluster, role: Role, kops_state: Option<&str>) -> Value {
    let mut statements = Vec::new();
    match role {
        Role::ControlPlane => {
            statements.push(cloud_controller());
            statements.extend(ebs_csi());
            match kops_state {
                Some(kops) => {
                    statements.extend(state_read(cluster, &["pki", "join", "etcd-manager"]));
                    statements.extend(etcd_manager(kops));
                }
                None => statements.extend(state_read(cluster, &["pki", "join"])),
            }
            statements.extend(etcd_backups(cluster));
            if cluster.spec.addons.iter().any(|a| a.name == "cluster-autoscaler" && a.enabled) {
                statements.extend(autoscaler_provider(cluster));
            }
        }
        Role::Node => {
            statements.push(json!({"Sid": "DescribeInstances", "Effect": "Allow", "Action": ["ec2:DescribeInstances"], "Resource": "*"}));
            statements.extend(state_read(cluster, &["join"]));
        }
    }
    statements.push(ecr_pull());
    json!({"Version": "2012-10-17", "Statement": statements})
}

/// The roles pinfleet manages for `cluster`: one per machine role the
/// cluster runs and does not name an instance profile for. `kops_state`:
/// kops's cluster folder, for a cluster taken over from kops whose
/// control-plane machines run its etcd-manager.
pub fn desired(cluster: &Cluster, kops_state: Option<&str>) -> Vec<DesiredRole> {
    let named = |role: Role| match role {
        Role::ControlPlane => cluster.spec.iam.control_plane_instance_profile.is_some(),
        Role::Node => cluster.spec.iam.node_instance_profile.is_some(),
    };
    [Role::ControlPlane, Role::Node]
        .into_iter()
        .filter(|r| !named(*r))
        .filter(|r| cluster.spec.instance_groups.iter().any(|g| g.role == *r && g.instance_profile.is_none()))
        .map(|role| DesiredRole {
            key: key(role).into(),
            role,
            name: role_name(&cluster.metadata.name, role),
            trust: trust().to_string(),
            policy: policy(cluster, role, kops_state).to_string(),
        })
        .collect()
}

/// Whether two policy documents say the same (IAM returns them URL-encoded
/// and reformatted; compare as JSON).
pub fn same_policy(a: &str, b: &str) -> bool {
    // IAM answers policy documents percent-encoded (RFC 3986).
    let parse = |s: &str| {
        let decoded = percent_encoding::percent_decode_str(s).decode_utf8_lossy();
        serde_json::from_str::<Value>(&decoded).ok()
    };
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_iam_and_stay_apart() {
        assert_eq!(role_name("prod-use1", Role::ControlPlane), "pinfleet-prod-use1-control-plane");
        let long = "a".repeat(60);
        let a = role_name(&long, Role::ControlPlane);
        let b = role_name(&long, Role::Node);
        assert!(a.len() <= 64 && b.len() <= 64);
        assert_ne!(a, b);
    }

    #[test]
    fn policies_compare_through_iams_encoding() {
        let p = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"*"}]}"#;
        let encoded = p.replace('{', "%7B").replace('}', "%7D").replace('"', "%22").replace(':', "%3A");
        assert!(same_policy(p, &encoded));
        assert!(!same_policy(p, &p.replace("GetObject", "PutObject")));
    }

    #[test]
    fn the_control_plane_may_write_etcd_backups_and_never_delete_them() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/clusters/prod-use1.yaml"));
        let cluster = crate::spec::load::load_cluster(path, &Default::default()).expect("the example loads").cluster;
        let cp = policy(&cluster, Role::ControlPlane, None);
        let statements = cp["Statement"].as_array().unwrap();
        let sid = |s: &str| statements.iter().find(|x| x["Sid"] == s).cloned();
        let write = sid("EtcdBackupsWrite").expect("the agent writes backups");
        assert!(write["Resource"][0].as_str().unwrap().ends_with("/prod-use1/etcd/*"), "{write}");
        assert!(!write["Action"].as_array().unwrap().iter().any(|a| a.as_str().unwrap().starts_with("s3:Delete")));
        let deny = sid("EtcdBackupsNeverDeleted").expect("an explicit deny");
        assert_eq!(deny["Effect"], "Deny");
        assert!(deny["Action"].as_array().unwrap().iter().any(|a| a == "s3:DeleteObjectVersion"));
        let node = policy(&cluster, Role::Node, None);
        assert!(!node.to_string().contains("Etcd"), "nodes get nothing of etcd's backups");
        // What the machines fetch is where the state store keeps it.
        let read = sid("StateStoreRead").expect("the control plane reads its join material");
        let objects =
            |p: &str| crate::state::join::TOKEN_KEY.starts_with(p) || crate::state::join::PKI_PREFIX.starts_with(p);
        for r in read["Resource"].as_array().unwrap() {
            let r = r.as_str().unwrap();
            let key = r.split("/prod-use1/").nth(1).unwrap().trim_end_matches('*');
            assert!(objects(key), "{r} covers none of what machines fetch");
        }
    }

    #[test]
    fn a_control_plane_taken_over_from_kops_reads_etcd_manager_s_files_and_writes_its_backups() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/clusters/prod-use1.yaml"));
        let cluster = crate::spec::load::load_cluster(path, &Default::default()).expect("the example loads").cluster;
        let cp = policy(&cluster, Role::ControlPlane, Some("s3://kops-state/prod.k8s.example.com"));
        let statements = cp["Statement"].as_array().unwrap();
        let sid = |s: &str| statements.iter().find(|x| x["Sid"] == s).cloned().unwrap();
        let read = sid("StateStoreRead").to_string();
        assert!(read.contains("/prod-use1/machine/etcd-manager/*"), "{read}");
        let backups = sid("EtcdManagerBackups");
        assert_eq!(backups["Resource"][0], "arn:aws:s3:::kops-state/prod.k8s.example.com/backups/etcd/*");
        let local = policy(&cluster, Role::ControlPlane, Some("file:///kops/prod.k8s.example.com")).to_string();
        assert!(!local.contains("EtcdManagerBackups"), "a local store has no bucket to grant");
    }
}
