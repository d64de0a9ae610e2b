//! Semantic validation of a structurally valid cluster: what the schema
//! alone cannot say (CIDR containment and overlap, zones in the region,
//! sizes, quorum, references between fields). Pure; returns every problem
//! with its field path, which the loader turns into a file location.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use super::types::{CapacitySpec, ClusterSpec, InstanceGroup};
use super::{Cidr, Cluster, IntOrPercent, Role, Taint};

/// Kubernetes minor versions pinfleet can bootstrap (1.MINOR).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem { path: path.into(), message: message.into() });
    }
}

/// A DNS-1123 label: lowercase alphanumerics and '-', 1–63 characters.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn label_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// A Kubernetes label/taint key: optional DNS prefix + '/' + name.
pub fn is_label_key(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => prefix.len() <= 253 && prefix.split('.').all(is_dns_label) && label_name_ok(name),
        None => label_name_ok(key),
    }
}

fn is_label_value(v: &str) -> bool {
    v.is_empty() || label_name_ok(v)
}

fn check_labels(p: &mut Problems, path: &str, labels: &BTreeMap<String, String>) {
    for (k, v) in labels {
        // Shown escaped: a value is anything a file (or an import) held.
        let (ek, ev) = (crate::escape::escaped(k, false), crate::escape::escaped(v, false));
        if !is_label_key(k) {
            p.push(format!("{path}.{ek}"), format!("`{ek}` is not a valid label key"));
        } else if !is_label_value(v) {
            p.push(
                format!("{path}.{ek}"),
                format!("`{ev}` is not a valid label value (at most 63 characters: letters, digits, '-', '_', '.')"),
            );
        }
    }
}

fn check_taints(p: &mut Problems, path: &str, taints: &[Taint]) {
    let mut seen = BTreeSet::new();
    for (i, t) in taints.iter().enumerate() {
        if !is_label_key(&t.key) {
            p.push(format!("{path}[{i}].key"), format!("`{}` is not a valid taint key", t.key));
        }
        if !is_label_value(&t.value) {
            p.push(format!("{path}[{i}].value"), format!("`{}` is not a valid taint value", t.value));
        }
        if !seen.insert((t.key.as_str(), t.effect)) {
            p.push(
                format!("{path}[{i}]"),
                format!("taint `{}` with effect {} is listed twice", t.key, t.effect.as_str()),
            );
        }
    }
}

fn is_region(s: &str) -> bool {
    // e.g. us-east-1, ap-southeast-2, us-gov-west-1, eu-central-2, and the
    // European Sovereign Cloud's eusc-de-east-1
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && (parts[0].len() == 2 || parts[0] == "eusc")
        && parts.iter().take(parts.len() - 1).all(|x| !x.is_empty() && x.bytes().all(|b| b.is_ascii_lowercase()))
        && parts[parts.len() - 1].parse::<u32>().is_ok()
}

fn zone_in_region(zone: &str, region: &str) -> bool {
    // Regular zones are the region plus a letter (us-east-1a); Local Zones
    // add a location (us-west-2-lax-1a).
    match zone.strip_prefix(region) {
        Some(rest) if rest.len() == 1 => rest.bytes().all(|b| b.is_ascii_lowercase()),
        Some(rest) => rest.starts_with('-') && rest.len() > 2,
        None => false,
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// Parses `1.31.2` (or `v1.31.2`) into (major, minor, patch).
fn arch_name(a: crate::spec::types::Architecture) -> &'static str {
    match a {
        crate::spec::types::Architecture::X86_64 => "x86_64",
        crate::spec::types::Architecture::Arm64 => "arm64",
    }
}

fn arch_of(t: &str) -> crate::spec::types::Architecture {
    match crate::capacity::architecture_of(t) {
        crate::capacity::Arch::X86_64 => crate::spec::types::Architecture::X86_64,
        crate::capacity::Arch::Arm64 => crate::spec::types::Architecture::Arm64,
    }
}

pub use super::versions::parse_kubernetes_version;

/// The query an `s3://` state store URL may carry: the account that owns
/// its bucket, sent as S3's ExpectedBucketOwner on every call.
pub const EXPECTED_BUCKET_OWNER: &str = "expectedBucketOwner";

/// A state store URL without its query, and the bucket's owner it names
/// (`s3://bucket/prefix?expectedBucketOwner=111122223333`); anything else
/// in the query is refused.
pub fn split_state_store(url: &str) -> Result<(&str, Option<&str>), String> {
    let Some((base, query)) = url.split_once('?') else { return Ok((url, None)) };
    if !base.starts_with("s3://") {
        return Err(format!("`{url}`: only an s3:// state store takes `?{EXPECTED_BUCKET_OWNER}=ACCOUNT`"));
    }
    match query.split_once('=') {
        Some((EXPECTED_BUCKET_OWNER, id)) if id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit()) => {
            Ok((base, Some(id)))
        }
        Some((EXPECTED_BUCKET_OWNER, id)) => {
            Err(format!("`{url}`: {EXPECTED_BUCKET_OWNER} `{id}` is not a 12-digit AWS account id"))
        }
        _ => Err(format!("`{url}`: the only query a state store URL takes is `?{EXPECTED_BUCKET_OWNER}=ACCOUNT`")),
    }
}

/// A state store URL without its query (as given when it has none, or a
/// query validation refuses).
pub fn state_store_base(url: &str) -> &str {
    split_state_store(url).map(|(base, _)| base).unwrap_or(url)
}

fn check_state_store(p: &mut Problems, url: &str) {
    let path = "spec.stateStore";
    let url = match split_state_store(url) {
        Ok((base, _)) => base,
        Err(e) => {
            p.push(path, e);
            return;
        }
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let bucket = rest.split('/').next().unwrap_or_default();
        let ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && bucket.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && bucket.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
        if !ok {
            p.push(
                path,
                format!("`{bucket}` is not a valid S3 bucket name (3–63 lowercase letters, digits, '-', '.')"),
            );
        }
    } else if let Some(rest) = url.strip_prefix("file://") {
        if rest.is_empty() {
            p.push(path, "`file://` needs a folder, e.g. file://.pinfleet/state");
        }
    } else {
        p.push(path, format!("`{url}` is not a state store URL (expected s3://bucket/prefix or file://dir)"));
    }
}

/// What validation needs to know beyond the file itself.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Addon packages that exist (names under addons/); `None` skips the check.
    pub known_addons: Option<BTreeSet<String>>,
    /// The image recipes that exist (under images/), each with the
    /// accelerator stack it bakes, if any: a group of accelerated machines
    /// following a recipe's channel needs that recipe accelerated. `None`
    /// skips the check.
    pub recipes: Option<BTreeMap<String, Option<crate::accelerated::Kind>>>,
}

/// What is valid but should be changed, as of `today`: a Kubernetes minor
/// out of upstream support (with the date it ended and the way out). The
/// date is a parameter: `validate` passes the wall clock and says which day
/// it judged by.
pub fn warnings(c: &Cluster, today: chrono::NaiveDate) -> Vec<(String, String)> {
    use super::versions::{support, Support};
    let mut out = Vec::new();
    if let Some((1, minor, _)) = parse_kubernetes_version(&c.spec.kubernetes_version) {
        if let Support::Ended { on, newest } = support(minor, today) {
            out.push((
                "spec.kubernetesVersion".to_string(),
                format!(
                    "Kubernetes 1.{minor} left upstream support on {on} (judged on {today}); the newest minor is 1.{newest}: `pinfleet upgrade` climbs one minor at a time"
                ),
            ));
        }
    }
    out
}

/// Every semantic problem in `c`. Empty means valid.
pub fn validate(c: &Cluster, opts: &LoadOptions) -> Vec<Problem> {
    let mut p = Problems::default();
    let spec = &c.spec;
    check_identity(&mut p, c);
    let zones = check_cloud(&mut p, spec);
    let subnet_names = check_network(&mut p, spec, &zones);
    check_api(&mut p, spec);
    check_groups(&mut p, spec, &subnet_names, opts);
    check_elastic_ip(&mut p, spec, &subnet_names);
    check_addons(&mut p, spec, opts);
    check_federation(&mut p, spec);
    p.0
}

/// The cluster's name, labels, owner, state store and Kubernetes version.
fn check_identity(p: &mut Problems, c: &Cluster) {
    let spec = &c.spec;
    if !is_dns_label(&c.metadata.name) {
        p.push(
            "metadata.name",
            format!("`{}` is not a DNS label (lowercase letters, digits and '-', at most 63)", c.metadata.name),
        );
    }
    check_labels(p, "metadata.labels", &c.metadata.labels);
    if spec.owner.trim().is_empty() || spec.owner.chars().any(char::is_whitespace) || spec.owner.len() > 128 {
        p.push(
            "spec.owner",
            format!("`{}` is not a team name (non-empty, no spaces, at most 128 characters)", spec.owner),
        );
    }
    check_state_store(p, &spec.state_store);

    match parse_kubernetes_version(&spec.kubernetes_version) {
        None => p.push("spec.kubernetesVersion", format!("`{}` is not a version like 1.31.2", spec.kubernetes_version)),
        Some((major, minor, _)) if major != 1 || super::versions::minor(minor).is_none() => {
            let (oldest, newest) = super::versions::range();
            p.push(
                "spec.kubernetesVersion",
                format!(
                    "Kubernetes {} is not a version pinfleet can run (it runs 1.{oldest} to 1.{newest}; new clusters get {})",
                    spec.kubernetes_version,
                    super::versions::DEFAULT
                ),
            )
        }
        Some(_) => {}
    }
}

/// The region and its zones; the zones, for the subnets.
fn check_cloud<'a>(p: &mut Problems, spec: &'a ClusterSpec) -> BTreeSet<&'a str> {
    let region = &spec.cloud.region;
    if !is_region(region) {
        p.push("spec.cloud.region", format!("`{region}` is not an AWS region (e.g. us-east-1)"));
    }
    if spec.cloud.zones.is_empty() {
        p.push("spec.cloud.zones", "at least one zone is needed");
    }
    let mut zones = BTreeSet::new();
    for (i, z) in spec.cloud.zones.iter().enumerate() {
        if is_region(region) && !zone_in_region(z, region) {
            p.push(format!("spec.cloud.zones[{i}]"), format!("zone `{z}` is not in region {region}"));
        }
        if !zones.insert(z.as_str()) {
            p.push(format!("spec.cloud.zones[{i}]"), format!("zone `{z}` is listed twice"));
        }
    }
    if let Some(a) = &spec.cloud.account {
        check_account(p, a, is_region(region).then_some(region.as_str()));
    }
    zones
}

/// The AWS partitions, a closed list (as the SDK's partition table has
/// them): an ARN in any other is refused by STS at run time.
pub const PARTITIONS: &[&str] =
    &["aws", "aws-cn", "aws-us-gov", "aws-iso", "aws-iso-b", "aws-iso-e", "aws-iso-f", "aws-eusc"];

/// The partition a region is in, by its name as the SDK's partition table
/// matches it (`cn-…`, `us-gov-…`, `us-iso-…`, `us-isob-…`, `eu-isoe-…`,
/// `us-isof-…`, `eusc-…`); any other region is in `aws`.
pub fn partition_of_region(region: &str) -> &'static str {
    const BY_PREFIX: &[(&str, &str)] = &[
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-iso-", "aws-iso"),
        ("us-isob-", "aws-iso-b"),
        ("eu-isoe-", "aws-iso-e"),
        ("us-isof-", "aws-iso-f"),
        ("eusc-", "aws-eusc"),
    ];
    BY_PREFIX.iter().find(|(prefix, _)| region.starts_with(prefix)).map_or("aws", |&(_, partition)| partition)
}

/// What is wrong with the partition of the role `arn` (its second field):
/// one AWS does not have, or, given the cluster's `region`, another than
/// the region's (a partition's accounts and credentials reach no other).
pub fn role_partition_problem(arn: &str, partition: &str, region: Option<&str>) -> Option<String> {
    if !PARTITIONS.contains(&partition) {
        return Some(format!(
            "the role `{arn}` is in partition `{partition}`, which AWS does not have (the partitions: {})",
            PARTITIONS.join(", ")
        ));
    }
    let region = region?;
    let theirs = partition_of_region(region);
    (theirs != partition).then(|| {
        format!(
            "the role `{arn}` is in partition {partition} but region {region} is in partition {theirs} (STS assumes a role only in its own partition)"
        )
    })
}

/// AssumeRole's ExternalId: 2–1224 characters of `[\w+=,.@:/-]` (STS's
/// own constraint on the parameter).
pub fn external_id_ok(s: &str) -> bool {
    (2..=1224).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@:/-".contains(c))
}

/// The account id (12 digits), the role's ARN (an IAM role in that very
/// account, in a partition AWS has and, given the cluster's region, in the
/// region's) and the external id, if any.
fn check_account(p: &mut Problems, a: &super::types::Account, region: Option<&str>) {
    let id_ok = a.id.len() == 12 && a.id.bytes().all(|b| b.is_ascii_digit());
    if !id_ok {
        p.push("spec.cloud.account.id", format!("`{}` is not an AWS account id (12 digits)", a.id));
    }
    match parse_role_arn(&a.role_arn) {
        None => p.push(
            "spec.cloud.account.roleArn",
            format!("`{}` is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", a.role_arn),
        ),
        Some((partition, account, _)) => {
            if let Some(why) = role_partition_problem(&a.role_arn, partition, region) {
                p.push("spec.cloud.account.roleArn", why);
            }
            if id_ok && account != a.id {
                p.push(
                    "spec.cloud.account.roleArn",
                    format!("the role `{}` is in account {account}, not in the cluster's account {}", a.role_arn, a.id),
                );
            }
        }
    }
    if let Some(x) = &a.external_id {
        if !external_id_ok(x) {
            p.push(
                "spec.cloud.account.externalId",
                "an external id is 2–1224 characters of letters, digits and _+=,.@:/-",
            );
        }
    }
}

/// An IAM role ARN's partition, account and role name (with its path):
/// `arn:<partition>:iam::<12 digits>:role/<path/name>`. Any partition-like
/// word parses; whether AWS has it is [`role_partition_problem`]'s to say.
pub fn parse_role_arn(arn: &str) -> Option<(&str, &str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (arn_, partition, service, region, account, resource) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let name = resource.strip_prefix("role/")?;
    let ok = arn_ == "arn"
        && !partition.is_empty()
        && partition.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && service == "iam"
        && region.is_empty()
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && name.len() <= 512
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@_-/".contains(c));
    ok.then_some((partition, account, name))
}

/// The VPC, its subnets and the pod and service ranges; each subnet's
/// index by name, for the groups.
fn check_network<'a>(p: &mut Problems, spec: &'a ClusterSpec, zones: &BTreeSet<&str>) -> BTreeMap<&'a str, usize> {
    let net = &spec.network;
    let vpc = net.vpc_cidr.0;
    let np = "spec.network";
    match vpc {
        IpNet::V4(v4) if (16..=28).contains(&v4.prefix_len()) => {}
        IpNet::V4(_) => {
            p.push(format!("{np}.vpcCidr"), format!("VPC CIDR {vpc} must be between /16 and /28 (AWS limits)"))
        }
        IpNet::V6(_) => p.push(format!("{np}.vpcCidr"), "the VPC CIDR must be IPv4 (IPv6 is assigned by AWS)"),
    }
    if net.subnets.is_empty() {
        p.push(format!("{np}.subnets"), "at least one subnet is needed");
    }
    let mut subnet_names = BTreeMap::new();
    for (i, s) in net.subnets.iter().enumerate() {
        let sp = format!("{np}.subnets[{i}]");
        if !is_dns_label(&s.name) {
            p.push(format!("{sp}.name"), format!("`{}` is not a DNS label", s.name));
        }
        if subnet_names.insert(s.name.as_str(), i).is_some() {
            p.push(format!("{sp}.name"), format!("subnet name `{}` is used twice", s.name));
        }
        if !zones.contains(s.zone.as_str()) {
            p.push(format!("{sp}.zone"), format!("zone `{}` is not one of spec.cloud.zones", s.zone));
        }
        if !vpc.contains(&s.cidr.0) {
            p.push(format!("{sp}.cidr"), format!("{} is not inside the VPC {vpc}", s.cidr));
        } else if s.cidr.0.prefix_len() > 28 {
            p.push(format!("{sp}.cidr"), format!("{} is smaller than /28, the smallest AWS subnet", s.cidr));
        }
        for (j, other) in net.subnets.iter().enumerate().take(i) {
            if overlaps(&s.cidr.0, &other.cidr.0) {
                p.push(format!("{sp}.cidr"), format!("{} overlaps subnet `{}` ({})", s.cidr, other.name, other.cidr));
                let _ = j;
            }
        }
    }
    let ranges: [(&str, Cidr); 3] =
        [("vpcCidr", net.vpc_cidr), ("podCidr", net.pod_cidr), ("serviceCidr", net.service_cidr)];
    for (i, (name, cidr)) in ranges.iter().enumerate().skip(1) {
        for (other_name, other) in ranges.iter().take(i) {
            if overlaps(&cidr.0, &other.0) {
                p.push(format!("{np}.{name}"), format!("{cidr} overlaps {other_name} {other}"));
            }
        }
    }
    subnet_names
}

/// The API's port and who may reach it.
fn check_api(p: &mut Problems, spec: &ClusterSpec) {
    if spec.api.port == 0 {
        p.push("spec.api.port", "port 0 is not a port");
    }
    if spec.api.allowed_cidrs.is_empty() {
        p.push("spec.api.allowedCidrs", "at least one source CIDR is needed, or nobody can reach the API");
    }
}

/// Every instance group, then the groups together: names once, a control
/// plane with an odd number of machines, somewhere for workloads to run.
fn check_groups(p: &mut Problems, spec: &ClusterSpec, subnet_names: &BTreeMap<&str, usize>, opts: &LoadOptions) {
    let igp = "spec.instanceGroups";
    let mut ig_names = BTreeSet::new();
    let mut control_plane = 0u32;
    let mut has_cp_group = false;
    let mut has_node_group = false;
    for (i, g) in spec.instance_groups.iter().enumerate() {
        let gp = format!("{igp}[{i}]");
        if !is_dns_label(&g.name) {
            p.push(format!("{gp}.name"), format!("`{}` is not a DNS label", g.name));
        }
        if !ig_names.insert(g.name.as_str()) {
            p.push(format!("{gp}.name"), format!("instance group name `{}` is used twice", g.name));
        }
        match g.role {
            Role::ControlPlane => {
                has_cp_group = true;
                control_plane += g.desired_count();
            }
            Role::Node => has_node_group = true,
        }
        check_group(p, &gp, g, subnet_names);
        check_accelerated(p, &gp, g, opts);
    }
    if spec.instance_groups.is_empty() {
        p.push(igp, "at least one control-plane group and one node group are needed");
    } else {
        if !has_cp_group {
            p.push(igp, "no instance group has role control-plane");
        } else if control_plane.is_multiple_of(2) {
            p.push(
                igp,
                format!("{control_plane} control-plane instances: etcd needs an odd number (1, 3 or 5) to keep quorum"),
            );
        }
        if !has_node_group {
            p.push(igp, "no instance group has role node: workloads would have nowhere to run");
        }
    }
}

/// One instance group's own fields.
fn check_group(p: &mut Problems, gp: &str, g: &InstanceGroup, subnet_names: &BTreeMap<&str, usize>) {
    let mt = &g.machine_type;
    let mt_ok = mt.split_once('.').is_some_and(|(f, s)| {
        !f.is_empty()
            && !s.is_empty()
            && mt.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    });
    if !mt_ok {
        p.push(format!("{gp}.machineType"), format!("`{mt}` is not an EC2 instance type (e.g. m6i.large)"));
    }
    if let Some(c) = &g.capacity {
        check_capacity(p, gp, g, c);
    } else if let (true, Some(sel)) = (mt_ok && crate::capacity::known_type(mt).is_ok(), &g.image.selector) {
        let arch = sel.architecture;
        if arch_of(mt) != arch {
            p.push(
                format!("{gp}.machineType"),
                format!("`{mt}` is not a {} type, the group's image architecture", arch_name(arch)),
            );
        }
    }
    if g.min_size > g.max_size {
        p.push(format!("{gp}.minSize"), format!("{} is greater than maxSize {}", g.min_size, g.max_size));
    }
    if let Some(d) = g.desired {
        if d < g.min_size || d > g.max_size {
            p.push(
                format!("{gp}.desired"),
                format!("{d} is outside minSize..maxSize ({}..{})", g.min_size, g.max_size),
            );
        }
    }
    if g.max_size == 0 {
        p.push(format!("{gp}.maxSize"), "must be at least 1");
    }
    check_image(p, gp, g);
    if g.subnets.is_empty() {
        p.push(format!("{gp}.subnets"), "name at least one subnet");
    }
    for (j, s) in g.subnets.iter().enumerate() {
        if !subnet_names.contains_key(s.as_str()) {
            let known: Vec<&str> = subnet_names.keys().copied().collect();
            let hint = match super::check::did_you_mean(s, known.iter().copied()) {
                Some(h) => format!(" (did you mean `{h}`?)"),
                None => format!(" (subnets: {})", known.join(", ")),
            };
            p.push(format!("{gp}.subnets[{j}]"), format!("no subnet named `{s}` in spec.network.subnets{hint}"));
        }
    }
    if !(8..=16384).contains(&g.root_volume.size_gib) {
        p.push(format!("{gp}.rootVolume.sizeGiB"), format!("{} GiB is outside 8..16384", g.root_volume.size_gib));
    }
    check_labels(p, &format!("{gp}.labels"), &g.labels);
    check_taints(p, &format!("{gp}.taints"), &g.taints);
    for k in g.cloud_labels.keys() {
        if k.starts_with("pinfleet.dev/") || k.starts_with("aws:") {
            p.push(format!("{gp}.cloudLabels.{k}"), format!("tag `{k}` is reserved"));
        }
    }
    let r = &g.rollout;
    let zero = |v: IntOrPercent| v.resolve_up(g.desired_count().max(1)) == 0;
    if zero(r.max_surge) && zero(r.max_unavailable) {
        p.push(format!("{gp}.rollout"), "maxSurge and maxUnavailable are both 0: a roll could never make progress");
    }
}

/// A group's capacity: known types, requirements some type meets, the
/// image's architecture, enough types for Spot, a Mixed market's shares.
fn check_capacity(p: &mut Problems, gp: &str, g: &InstanceGroup, c: &CapacitySpec) {
    let cp = format!("{gp}.capacity");
    for (j, t) in c.types.iter().enumerate() {
        if let Err(why) = crate::capacity::known_type(t) {
            p.push(format!("{cp}.types[{j}]"), why);
        }
    }
    if let Some(r) = &c.requirements {
        let rp = format!("{cp}.requirements");
        let errors = crate::capacity::requirement_errors(r);
        let none = errors.is_empty() && crate::capacity::matching(r, g.arch()).is_empty();
        for (field, why) in errors {
            p.push(format!("{rp}.{field}"), why);
        }
        if let (true, Some(a)) = (none, &r.accelerators) {
            p.push(
                format!("{rp}.accelerators"),
                format!(
                    "no instance type meets it: {a}{}{} (pinfleet knows g5, g6, p4d, p4de, p5, trn1, trn1n and inf2{})",
                    if r.vcpu == Default::default() { String::new() } else { format!(", {} vCPU", r.vcpu) },
                    r.memory_gib.map(|m| format!(", {m} GiB")).unwrap_or_default(),
                    if g.arch() == crate::capacity::Arch::Arm64 {
                        ", all x86_64, and the group's image is arm64"
                    } else {
                        ""
                    }
                ),
            );
        } else if none {
            p.push(
                rp,
                format!(
                    "no instance type meets it: {} vCPU{} in families {} of generations {}",
                    r.vcpu,
                    r.memory_gib.map(|m| format!(" and {m} GiB")).unwrap_or_default(),
                    r.families.join(", "),
                    r.generations.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                ),
            );
        }
    }
    // An image given by id has no architecture here: checked at plan time.
    let arch = g.image.selector.as_ref().map(|s| s.architecture);
    for (j, t) in g.instance_types().iter().enumerate() {
        let Some(arch) = arch else { break };
        if crate::capacity::known_type(t).is_ok() && arch_of(t) != arch {
            let at = if j == 0 { format!("{gp}.machineType") } else { format!("{cp}.types[{}]", j - 1) };
            p.push(at, format!("`{t}` is {} but the group's image is {}", arch_name(arch_of(t)), arch_name(arch)));
        }
    }
    let n = g.instance_types().len();
    if g.allows_spot() && n < crate::capacity::MIN_SPOT_TYPES {
        p.push(
                format!("{cp}.types"),
                format!(
                    "a group that may run Spot needs at least {} instance types (it has {n}): Spot capacity is reclaimed per type and zone, and one type runs out together",
                    crate::capacity::MIN_SPOT_TYPES
                ),
            );
    }
    match (c.market, c.spot_percent) {
        (crate::spec::types::MarketSpec::Mixed, None) => {
            p.push(format!("{cp}.spotPercent"), "a Mixed market needs spotPercent (the Spot share above onDemandBase)")
        }
        (crate::spec::types::MarketSpec::Mixed, Some(pc)) if pc > 100 => {
            p.push(format!("{cp}.spotPercent"), format!("{pc} is not a percentage (0–100)"))
        }
        (crate::spec::types::MarketSpec::OnDemand, Some(_)) => p.push(
            format!("{cp}.spotPercent"),
            "a Spot share without Spot: set market to Mixed (or Spot) to run Spot machines",
        ),
        _ => {}
    }
    if c.on_demand_base > 0 && c.market != crate::spec::types::MarketSpec::Mixed {
        p.push(format!("{cp}.onDemandBase"), "an On-Demand base is part of a Mixed market");
    }
    if c.launches_per_minute == 0 {
        p.push(format!("{cp}.launchesPerMinute"), "must be at least 1, or the group never launches");
    }
    if let Some(r) = &c.reservation {
        let rp = format!("{cp}.reservation");
        let given = [r.id.is_some(), r.resource_group_arn.is_some(), r.preference.is_some()];
        if given.iter().filter(|x| **x).count() != 1 {
            p.push(rp.clone(), "give one of id, resourceGroupArn and preference");
        }
        if let Some(id) = r.id.as_deref().filter(|id| !crate::capacity::reservation_id_ok(id)) {
            p.push(format!("{rp}.id"), format!("`{id}` is not a Capacity Reservation id (cr- and 17 hex digits)"));
        }
        if let Some(arn) = r.resource_group_arn.as_deref().filter(|a| !crate::capacity::resource_group_arn_ok(a)) {
            p.push(
                format!("{rp}.resourceGroupArn"),
                format!(
                    "`{arn}` is not a resource group ARN (arn:aws:resource-groups:<region>:<account>:group/<name>)"
                ),
            );
        }
        let targets = r.id.is_some() || r.resource_group_arn.is_some();
        if c.market != crate::spec::types::MarketSpec::OnDemand
            && (targets || r.preference != Some(crate::capacity::ReservationPreference::None))
        {
            p.push(
                rp,
                format!(
                    "a Capacity Reservation serves On-Demand machines only: the group's market is {:?} (set market OnDemand, or preference none)",
                    c.market
                ),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for (j, f) in c.fallback.iter().enumerate() {
        if !seen.insert(format!("{f:?}")) {
            p.push(format!("{cp}.fallback[{j}]"), format!("{f:?} is named twice"));
        }
    }
}

/// A group of accelerated machines: one driver stack for all its types,
/// and an image that carries it (as EKS runs GPU nodes only on its
/// accelerated AMIs): a recipe with that `accelerator`, or an id or
/// selector that says so (`image.accelerator`, or a selector whose name
/// names the stack, as AWS's Deep Learning and EKS accelerated AMIs do).
fn check_accelerated(p: &mut Problems, gp: &str, g: &InstanceGroup, opts: &LoadOptions) {
    use crate::accelerated::{of_instance_type, Kind};
    let types = g.instance_types();
    let Some(kind) = types.iter().find_map(|t| of_instance_type(t)).map(|a| a.kind()) else { return };
    let first = types.iter().find(|t| of_instance_type(t).is_some()).cloned().unwrap_or_default();
    let listed: &[String] = g.capacity.as_ref().map(|c| c.types.as_slice()).unwrap_or_default();
    let mut by_requirements = false;
    for t in &types {
        let why = match of_instance_type(t).map(|a| a.kind()) {
            Some(k) if k != kind => format!(
                "`{t}` needs the {} driver stack and `{first}` the {} one: a group's machines run one image",
                k.as_str(),
                kind.as_str()
            ),
            None => format!(
                "`{t}` has no accelerator but `{first}` has: a group's machines offer the same devices (its taint and labels say so)"
            ),
            _ => continue,
        };
        // Where the type comes from: machineType, capacity.types, or (said once) the requirements.
        let at = if *t == g.machine_type {
            format!("{gp}.machineType")
        } else if let Some(i) = listed.iter().position(|x| x == t) {
            format!("{gp}.capacity.types[{i}]")
        } else if by_requirements {
            continue;
        } else {
            by_requirements = true;
            format!("{gp}.capacity.requirements")
        };
        p.push(at, why);
    }
    let stack = |k: Kind| match k {
        Kind::Nvidia => "the NVIDIA driver and nvidia-container-toolkit",
        Kind::Neuron => "the Neuron driver and runtime",
    };
    let needs = format!("`{first}` machines need an image with {} ({})", stack(kind), kind.as_str());
    if let (Some(a), true) = (g.image.accelerator, g.image.recipe.is_some()) {
        p.push(format!("{gp}.image.accelerator"), format!("`{}`: a recipe says its own accelerator", a.as_str()));
        return;
    }
    if let Some(recipe) = &g.image.recipe {
        let Some(recipes) = &opts.recipes else { return };
        match recipes.get(recipe) {
            None => p.push(format!("{gp}.image.recipe"), format!("no recipe `{recipe}` under images/: {needs}")),
            Some(None) => p.push(
                format!("{gp}.image.recipe"),
                format!("recipe `{recipe}` is not accelerated: {needs}; give the recipe `accelerator: {{kind: {}, driverVersion: …, runtimeVersion: …}}`", kind.as_str()),
            ),
            Some(Some(k)) if *k != kind => p.push(
                format!("{gp}.image.recipe"),
                format!("recipe `{recipe}` bakes the {} stack: {needs}", k.as_str()),
            ),
            Some(Some(_)) => {}
        }
        return;
    }
    match g.image.accelerator {
        Some(k) if k == kind => {}
        Some(k) => p.push(format!("{gp}.image.accelerator"), format!("`{}`: {needs}", k.as_str())),
        None => {
            let named = g.image.selector.as_ref().is_some_and(|s| {
                let name = s.name.to_ascii_lowercase();
                match kind {
                    Kind::Nvidia => name.contains("nvidia") || name.contains("gpu"),
                    Kind::Neuron => name.contains("neuron"),
                }
            });
            if !named && (g.image.id.is_some() || g.image.selector.is_some()) {
                p.push(
                    format!("{gp}.image"),
                    format!("{needs}: follow an accelerated recipe's channel, or say `accelerator: {}` of an image that carries it", kind.as_str()),
                );
            }
        }
    }
}

/// A group's image: one of id, selector and channel (with its recipe).
fn check_image(p: &mut Problems, gp: &str, g: &InstanceGroup) {
    for (field, v) in [("channel", &g.image.channel), ("recipe", &g.image.recipe)] {
        if let Some(v) = v.as_deref().filter(|v| !image_name_ok(v)) {
            p.push(
                format!("{gp}.image.{field}"),
                format!("`{v}`: use lowercase letters, digits and `-` (at most 40, not at either end)"),
            );
        }
    }
    match (&g.image.channel, &g.image.recipe) {
        (Some(_), None) => p.push(format!("{gp}.image.recipe"), "a channel belongs to a recipe: name it"),
        (None, Some(_)) => p.push(format!("{gp}.image.channel"), "name the recipe's channel to follow"),
        _ => {}
    }
    let ways = [g.image.id.is_some(), g.image.selector.is_some(), g.image.channel.is_some()];
    match (&g.image.id, &g.image.selector) {
    _ if ways.iter().filter(|w| **w).count() > 1 => p.push(
        format!("{gp}.image"),
        "give one of id, selector and channel (a file extending a base that chose another way says `$patch: replace`)",
    ),
    (None, None) if g.image.channel.is_some() => {}
    (Some(_), Some(_)) => {}
    (None, None) => p.push(format!("{gp}.image"), "give an AMI id, a selector or a channel"),
    (Some(id), None) => {
        let ok = id.strip_prefix("ami-").is_some_and(|h| {
            (8..=17).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        });
        if !ok {
            p.push(format!("{gp}.image.id"), format!("`{id}` is not an AMI id (ami- and 8 or 17 hex digits)"));
        }
    }
    (None, Some(sel)) => {
        if sel.owners.is_empty() {
            p.push(
                format!("{gp}.image.selector.owners"),
                "name at least one owner (an account id, `amazon` or `self`)",
            );
        }
        if sel.name.trim().is_empty() {
            p.push(format!("{gp}.image.selector.name"), "the name pattern is empty");
        }
    }
}
}

/// An elastic-ip API endpoint: one public address on one machine.
fn check_elastic_ip(p: &mut Problems, spec: &ClusterSpec, subnet_names: &BTreeMap<&str, usize>) {
    let (igp, net) = ("spec.instanceGroups", &spec.network);
    if !spec.api.load_balancer.uses_elbv2() {
        let lbp = "spec.api.loadBalancer";
        if spec.api.load_balancer.scheme == crate::spec::LoadBalancerScheme::Internal {
            p.push(
                format!("{lbp}.scheme"),
                "an elastic-ip endpoint is public: use scheme internet-facing, or type network",
            );
        }
        let cps: Vec<(usize, &crate::spec::InstanceGroup)> =
            spec.instance_groups.iter().enumerate().filter(|(_, g)| g.role == Role::ControlPlane).collect();
        if cps.len() > 1 || cps.iter().any(|(_, g)| g.max_size != 1) {
            p.push(
                format!("{lbp}.type"),
                "elastic-ip serves one control-plane machine: give the control plane one group with maxSize 1, or use type network",
            );
        }
        for (i, g) in cps {
            for (j, sn) in g.subnets.iter().enumerate() {
                let private = subnet_names
                    .get(sn.as_str())
                    .is_some_and(|&k| net.subnets[k].kind != crate::spec::SubnetType::Public);
                if private {
                    p.push(
                        format!("{igp}[{i}].subnets[{j}]"),
                        format!(
                            "`{sn}` is private: an elastic-ip API endpoint needs the control plane in a public subnet"
                        ),
                    );
                }
            }
        }
    }
}

/// Addons named once, each a package under addons/.
fn check_addons(p: &mut Problems, spec: &ClusterSpec, opts: &LoadOptions) {
    let mut addon_names = BTreeSet::new();
    for (i, a) in spec.addons.iter().enumerate() {
        if !addon_names.insert(a.name.as_str()) {
            p.push(format!("spec.addons[{i}].name"), format!("addon `{}` is listed twice", a.name));
        }
        if let Some(known) = opts.known_addons.as_ref().filter(|k| !k.is_empty()) {
            if !known.contains(&a.name) {
                let hint = match super::check::did_you_mean(&a.name, known.iter().map(String::as_str)) {
                    Some(h) => format!(" (did you mean `{h}`?)"),
                    None => format!(" (available: {})", known.iter().cloned().collect::<Vec<_>>().join(", ")),
                };
                p.push(format!("spec.addons[{i}].name"), format!("no addon package `{}` under addons/{hint}", a.name));
            }
        }
    }
}

/// The cluster's place in a federation.
fn check_federation(p: &mut Problems, spec: &ClusterSpec) {
    if let Some(f) = &spec.federation {
        if !is_dns_label(&f.name) {
            p.push("spec.federation.name", format!("`{}` is not a DNS label", f.name));
        }
        if f.weight == 0 {
            p.push("spec.federation.weight", "weight 0 would never receive replicas; leave the federation instead");
        }
        check_labels(p, "spec.federation.labels", &f.labels);
        check_taints(p, "spec.federation.taints", &f.taints);
        if let Some(IntOrPercent::Int(_)) = f.max_share {
            p.push("spec.federation.maxShare", "give the largest share as a percentage, e.g. 60%");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_store_url_names_its_buckets_owner_or_nothing() {
        let owner = "s3://pinfleet-state/clusters?expectedBucketOwner=111122223333";
        assert_eq!(split_state_store(owner), Ok(("s3://pinfleet-state/clusters", Some("111122223333"))));
        assert_eq!(split_state_store("s3://b/p"), Ok(("s3://b/p", None)));
        for (bad, says) in [
            ("s3://b?expectedBucketOwner=1111", "not a 12-digit"),
            ("s3://b?expectedBucketOwner=11112222333a", "not a 12-digit"),
            ("s3://b?owner=111122223333", "the only query"),
            ("s3://b?expectedBucketOwner=111122223333&x=1", "not a 12-digit"),
            ("file://d?expectedBucketOwner=111122223333", "only an s3://"),
        ] {
            let e = split_state_store(bad).unwrap_err();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn dns_labels() {
        for ok in ["a", "dev-local", "prod-use1", "x1"] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "Dev", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn a_roles_partition_is_one_aws_has_and_its_regions() {
        let all = "aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, aws-iso-e, aws-iso-f, aws-eusc";
        let elsewhere = |p: &str, r: &str, theirs: &str| {
            Some(format!(
                "the role `arn:{p}:iam::222222222222:role/x` is in partition {p} but region {r} is in partition {theirs} (STS assumes a role only in its own partition)"
            ))
        };
        let cases: Vec<(&str, Option<&str>, Option<String>)> = vec![
            ("aws", Some("us-east-1"), None),
            ("aws", None, None),
            ("aws-cn", Some("cn-north-1"), None),
            ("aws-us-gov", Some("us-gov-west-1"), None),
            ("aws-iso", Some("us-iso-east-1"), None),
            ("aws-iso-b", Some("us-isob-east-1"), None),
            ("aws-iso-e", Some("eu-isoe-west-1"), None),
            ("aws-iso-f", Some("us-isof-south-1"), None),
            ("aws-eusc", Some("eusc-de-east-1"), None),
            (
                "aws-mars",
                Some("us-east-1"),
                Some(format!("the role `arn:aws-mars:iam::222222222222:role/x` is in partition `aws-mars`, which AWS does not have (the partitions: {all})")),
            ),
            (
                "aws-mars",
                None,
                Some(format!("the role `arn:aws-mars:iam::222222222222:role/x` is in partition `aws-mars`, which AWS does not have (the partitions: {all})")),
            ),
            (
                "mars",
                None,
                Some(format!("the role `arn:mars:iam::222222222222:role/x` is in partition `mars`, which AWS does not have (the partitions: {all})")),
            ),
            ("aws-cn", Some("us-east-1"), elsewhere("aws-cn", "us-east-1", "aws")),
            ("aws", Some("cn-northwest-1"), elsewhere("aws", "cn-northwest-1", "aws-cn")),
            ("aws-iso", Some("us-isob-east-1"), elsewhere("aws-iso", "us-isob-east-1", "aws-iso-b")),
            ("aws-us-gov", Some("us-east-2"), elsewhere("aws-us-gov", "us-east-2", "aws")),
        ];
        for (partition, region, want) in cases {
            let arn = format!("arn:{partition}:iam::222222222222:role/x");
            let (parsed, account, name) = parse_role_arn(&arn).expect("parses");
            assert_eq!((parsed, account, name), (partition, "222222222222", "x"));
            assert_eq!(role_partition_problem(&arn, partition, region), want, "{arn} in {region:?}");
        }
        for bad in ["arn::iam::222222222222:role/x", "arn:AWS:iam::222222222222:role/x", "arn:aws:s3:::bucket"] {
            assert_eq!(parse_role_arn(bad), None, "{bad}");
        }
    }

    #[test]
    fn zones_and_regions() {
        assert!(is_region("us-east-1") && is_region("us-gov-west-1") && !is_region("useast1"));
        assert!(is_region("eusc-de-east-1") && zone_in_region("eusc-de-east-1a", "eusc-de-east-1"));
        assert!(zone_in_region("us-east-1a", "us-east-1"));
        assert!(zone_in_region("us-west-2-lax-1a", "us-west-2"));
        assert!(!zone_in_region("us-east-11a", "us-east-1"));
        assert!(!zone_in_region("eu-west-1a", "us-east-1"));
    }

    #[test]
    fn label_keys() {
        assert!(is_label_key("node-role.kubernetes.io/worker"));
        assert!(is_label_key("tier"));
        assert!(!is_label_key("bad key"));
        assert!(!is_label_key("/x"));
    }

    #[test]
    fn versions() {
        assert_eq!(parse_kubernetes_version("v1.31.2"), Some((1, 31, 2)));
        assert_eq!(parse_kubernetes_version("1.31"), None);
    }
}

/// A recipe's or a channel's name (they are path segments of SSM
/// parameters and tags): lowercase letters, digits and `-`, at most 40,
/// not starting or ending with `-`. The one rule for files, recipes and
/// the command line.
pub fn image_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
