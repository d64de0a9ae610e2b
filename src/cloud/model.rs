//! The desired cloud model of a cluster: VPC, subnets, gateways, route
//! tables, security groups, the API load balancer, one launch template per
//! instance group and how many machines each group wants.
//!
//! Pure: built from a `Cluster`, the images its selectors resolved to and
//! the rendered user-data. Resources are named by stable keys
//! (`vpc`, `subnet/private-a`, `sg/nodes`, `lt/general`…) which the plan
//! uses for ordering and the tags use for finding them again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::tags;
use crate::spec::{Cluster, LoadBalancerScheme, Role, SubnetType};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    pub cluster: String,
    pub owner: String,
    pub vpc_cidr: String,
    pub subnets: Vec<DesiredSubnet>,
    /// An internet gateway exists when any subnet is public.
    pub internet_gateway: bool,
    pub nat_gateways: Vec<DesiredNat>,
    pub route_tables: Vec<DesiredRouteTable>,
    pub security_groups: Vec<DesiredSecurityGroup>,
    pub load_balancer: DesiredLoadBalancer,
    /// The API endpoint is an Elastic IP on the control-plane machine
    /// (`spec.api.loadBalancer.type: elastic-ip`) instead of the load balancer.
    #[serde(default)]
    pub api_address: bool,
    pub launch_templates: Vec<DesiredLaunchTemplate>,
    pub groups: Vec<DesiredGroup>,
    /// The IAM roles and instance profiles pinfleet manages.
    #[serde(default)]
    pub iam: Vec<crate::cloud::iam::DesiredRole>,
    /// The interruption queue and its rules (a group may run Spot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<crate::cloud::events::DesiredEvents>,
    /// Launch templates may move to another Kubernetes minor (a step of
    /// `pinfleet upgrade`); otherwise such a change is refused.
    #[serde(default)]
    pub version_step: bool,
    /// `spec.api.dnsName`: the API's name in the certificates of a cluster
    /// taken over (kubeadm's `controlPlaneEndpoint`, kops's `api.<name>`),
    /// which its joining machines reach it by ([`Desired::join_host`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_dns_name: Option<String>,
}

/// The key of the API endpoint's Elastic IP (`eip/<zone>` are the NAT
/// gateways'; `api` is no zone name).
pub const API_ADDRESS: &str = "api";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredSubnet {
    pub name: String,
    pub zone: String,
    pub cidr: String,
    pub public: bool,
}

/// One NAT gateway per zone with private subnets, in that zone's public
/// subnet (or the first public subnet), so private machines reach package
/// mirrors and registries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredNat {
    pub zone: String,
    pub subnet: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RouteTarget {
    InternetGateway,
    Nat { zone: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRouteTable {
    /// `public` or `private-<zone>`.
    pub name: String,
    /// Default route (0.0.0.0/0) target, if any.
    pub default_route: Option<RouteTarget>,
    pub subnets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Source {
    Cidr(String),
    /// Another of the cluster's security groups, by name.
    Group(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub source: Source,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ports = if self.from_port == self.to_port {
            self.from_port.to_string()
        } else {
            format!("{}-{}", self.from_port, self.to_port)
        };
        let src = match &self.source {
            Source::Cidr(c) => c.clone(),
            Source::Group(g) => format!("sg/{g}"),
        };
        write!(f, "{}/{} from {}", self.protocol, ports, src)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredSecurityGroup {
    /// `control-plane` or `nodes`.
    pub name: String,
    pub description: String,
    pub ingress: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredLoadBalancer {
    /// ELBv2 names are at most 32 characters.
    pub name: String,
    pub internal: bool,
    pub subnets: Vec<String>,
    pub port: u16,
}

/// Everything a launch-template version carries. Security groups are named
/// logically; ids are filled in at apply time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchTemplateData {
    pub image_id: String,
    pub instance_type: String,
    pub root_device: String,
    pub root_volume_gib: i32,
    pub root_volume_type: String,
    pub encrypted: bool,
    pub instance_profile: Option<String>,
    pub key_name: Option<String>,
    pub security_group: String,
    /// IMDSv2 required (tokens), hop limit 2 so containers reach it.
    pub imds_tokens_required: bool,
    pub user_data: String,
    pub tags: BTreeMap<String, String>,
    /// The On-Demand Capacity Reservation the machines launch into
    /// (`capacity.reservation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<crate::capacity::Reservation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredLaunchTemplate {
    pub group: String,
    /// `<cluster>-<group>`.
    pub name: String,
    pub data: LaunchTemplateData,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredGroup {
    pub name: String,
    pub role: Role,
    pub desired: u32,
    /// maxSize: the most machines the autoscaler may ask for (0: unknown).
    #[serde(default)]
    pub max: u32,
    pub subnets: Vec<String>,
    /// Where the group's machines may come from when it names more than
    /// its launch template's type (`capacity` in its file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<GroupCapacity>,
}

pub use crate::capacity::GroupCapacity;

impl Desired {
    /// The host joining machines reach the API by, when it is not the
    /// endpoint pinfleet made: a cluster taken over (`adopted`) keeps its
    /// API servers, whose certificates name `spec.api.dnsName`, not the
    /// load balancer pinfleet put in front of them. None: the endpoint's
    /// own address (the load balancer's DNS name or the Elastic IP), which
    /// pinfleet's certificates carry.
    pub fn join_host(&self, adopted: bool) -> Option<&str> {
        self.api_dns_name.as_deref().filter(|_| adopted)
    }

    /// A model with nothing in it but the cluster's identity (for destroy,
    /// whose plan comes from observation alone).
    pub fn skeleton(cluster: &Cluster) -> Desired {
        Desired {
            cluster: cluster.metadata.name.clone(),
            owner: cluster.spec.owner.clone(),
            vpc_cidr: cluster.spec.network.vpc_cidr.to_string(),
            subnets: vec![],
            internet_gateway: false,
            nat_gateways: vec![],
            route_tables: vec![],
            security_groups: vec![],
            load_balancer: DesiredLoadBalancer {
                name: load_balancer_name(&cluster.metadata.name),
                internal: false,
                subnets: vec![],
                port: cluster.spec.api.port,
            },
            api_address: !cluster.spec.api.load_balancer.uses_elbv2(),
            launch_templates: vec![],
            groups: vec![],
            api_dns_name: cluster.spec.api.dns_name.clone(),
            iam: vec![],
            events: None,
            version_step: false,
        }
    }
}

/// What `desired` needs from outside the spec, resolved at the edges.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// AMI per group: (image id, root device name).
    pub images: BTreeMap<String, (String, String)>,
    /// Rendered user-data per group (for the launch template).
    pub user_data: BTreeMap<String, String>,
    /// kops's cluster folder when the control plane's etcd is its
    /// etcd-manager (a cluster taken over from kops): the control-plane
    /// machines run it, and say so in their tags.
    pub etcd_manager: Option<String>,
}

/// Tags a group's launch template gives its machines.
fn machine_tags(cluster: &Cluster, g: &crate::spec::InstanceGroup, inputs: &Inputs) -> BTreeMap<String, String> {
    let mut tags = base_tags(cluster);
    tags.insert(tags::INSTANCE_GROUP.into(), g.name.clone());
    tags.insert(tags::KUBERNETES_VERSION.into(), g.kubernetes_version(&cluster.spec).to_string());
    tags.extend(g.cloud_labels.clone());
    if g.role == Role::ControlPlane && inputs.etcd_manager.is_some() {
        tags.insert(tags::ETCD.into(), tags::ETCD_MANAGER.into());
    }
    tags
}

/// Tags every resource of the cluster carries.
pub fn base_tags(cluster: &Cluster) -> BTreeMap<String, String> {
    BTreeMap::from([
        (tags::CLUSTER.to_string(), cluster.metadata.name.clone()),
        (tags::OWNER.to_string(), cluster.spec.owner.clone()),
        (tags::MANAGED_BY.to_string(), tags::MANAGED_BY_VALUE.to_string()),
    ])
}

/// ELBv2 name: `<cluster>-api`, shortened with a hash suffix when too long.
pub fn load_balancer_name(cluster: &str) -> String {
    let name = format!("{cluster}-api");
    if name.len() <= 32 {
        return name;
    }
    use sha2::Digest;
    let hash = hex::encode(sha2::Sha256::digest(cluster.as_bytes()));
    format!("{}-{}-api", &cluster[..20].trim_end_matches('-'), &hash[..6])
}

fn security_groups(cluster: &Cluster) -> Vec<DesiredSecurityGroup> {
    let api_port = i32::from(cluster.spec.api.port);
    let rule = |protocol: &str, from: i32, to: i32, source: Source| Rule {
        protocol: protocol.to_string(),
        from_port: from,
        to_port: to,
        source,
    };
    let cp = || Source::Group("control-plane".into());
    let nodes = || Source::Group("nodes".into());
    let mut cp_rules = vec![
        // The API, from callers allowed by the spec, the VPC (load balancer
        // health checks and client IPs it preserves) and cluster members.
        rule("tcp", api_port, api_port, Source::Cidr(cluster.spec.network.vpc_cidr.to_string())),
        rule("tcp", api_port, api_port, nodes()),
        rule("tcp", api_port, api_port, cp()),
        // etcd peers and clients: control plane only.
        rule("tcp", 2379, 2380, cp()),
        // kubelet: the API server talks to every kubelet.
        rule("tcp", 10250, 10250, cp()),
        // Pod network overlay (VXLAN) between all members.
        rule("udp", 8472, 8472, cp()),
        rule("udp", 8472, 8472, nodes()),
    ];
    for c in &cluster.spec.api.allowed_cidrs {
        cp_rules.push(rule("tcp", api_port, api_port, Source::Cidr(c.to_string())));
    }
    let node_rules = vec![
        rule("tcp", 10250, 10250, cp()),
        rule("tcp", 30000, 32767, cp()),
        rule("tcp", 30000, 32767, nodes()),
        rule("udp", 8472, 8472, cp()),
        rule("udp", 8472, 8472, nodes()),
    ];
    let mut out = vec![
        DesiredSecurityGroup {
            name: "control-plane".into(),
            description: format!("pinfleet {} control plane", cluster.metadata.name),
            ingress: cp_rules,
        },
        DesiredSecurityGroup {
            name: "nodes".into(),
            description: format!("pinfleet {} nodes", cluster.metadata.name),
            ingress: node_rules,
        },
    ];
    for sg in &mut out {
        sg.ingress.sort();
        sg.ingress.dedup();
    }
    out
}

/// The desired model. `inputs` must hold an image and user-data for every
/// group (the edges resolve them first).
pub fn desired(cluster: &Cluster, inputs: &Inputs) -> anyhow::Result<Desired> {
    let spec = &cluster.spec;
    let name = &cluster.metadata.name;
    let subnets: Vec<DesiredSubnet> = spec
        .network
        .subnets
        .iter()
        .map(|s| DesiredSubnet {
            name: s.name.clone(),
            zone: s.zone.clone(),
            cidr: s.cidr.to_string(),
            public: s.kind == SubnetType::Public,
        })
        .collect();
    let public: Vec<&DesiredSubnet> = subnets.iter().filter(|s| s.public).collect();
    let private_zones: Vec<String> = {
        let mut z: Vec<String> = subnets.iter().filter(|s| !s.public).map(|s| s.zone.clone()).collect();
        z.sort();
        z.dedup();
        z
    };
    let nat_gateways: Vec<DesiredNat> = if public.is_empty() {
        Vec::new()
    } else {
        private_zones
            .iter()
            .map(|zone| DesiredNat {
                zone: zone.clone(),
                subnet: public.iter().find(|s| &s.zone == zone).unwrap_or(&public[0]).name.clone(),
            })
            .collect()
    };
    let mut route_tables = Vec::new();
    if !public.is_empty() {
        route_tables.push(DesiredRouteTable {
            name: "public".into(),
            default_route: Some(RouteTarget::InternetGateway),
            subnets: public.iter().map(|s| s.name.clone()).collect(),
        });
    }
    for zone in &private_zones {
        route_tables.push(DesiredRouteTable {
            name: format!("private-{zone}"),
            default_route: (!nat_gateways.is_empty()).then(|| RouteTarget::Nat { zone: zone.clone() }),
            subnets: subnets.iter().filter(|s| !s.public && &s.zone == zone).map(|s| s.name.clone()).collect(),
        });
    }

    let internal = spec.api.load_balancer.scheme == LoadBalancerScheme::Internal;
    // One subnet per zone for the load balancer: public ones when it faces
    // the internet, private ones otherwise.
    let mut lb_subnets: Vec<String> = Vec::new();
    let mut lb_zones = Vec::new();
    for s in subnets.iter().filter(|s| s.public != internal) {
        if !lb_zones.contains(&s.zone) {
            lb_zones.push(s.zone.clone());
            lb_subnets.push(s.name.clone());
        }
    }
    let api_address = !spec.api.load_balancer.uses_elbv2();
    if lb_subnets.is_empty() && !api_address {
        anyhow::bail!(
            "the API load balancer is {} but there is no {} subnet",
            if internal { "internal" } else { "internet-facing" },
            if internal { "private" } else { "public" }
        );
    }

    let mut launch_templates = Vec::new();
    let mut groups = Vec::new();
    for g in &spec.instance_groups {
        let (image_id, root_device) =
            inputs.images.get(&g.name).ok_or_else(|| anyhow::anyhow!("no image resolved for group {}", g.name))?;
        let user_data =
            inputs.user_data.get(&g.name).ok_or_else(|| anyhow::anyhow!("no user-data for group {}", g.name))?;
        let tags = machine_tags(cluster, g, inputs);
        let profile = g
            .instance_profile
            .clone()
            .or_else(|| match g.role {
                Role::ControlPlane => spec.iam.control_plane_instance_profile.clone(),
                Role::Node => spec.iam.node_instance_profile.clone(),
            })
            .or_else(|| Some(crate::cloud::iam::role_name(name, g.role)));
        launch_templates.push(DesiredLaunchTemplate {
            group: g.name.clone(),
            name: format!("{name}-{}", g.name),
            data: LaunchTemplateData {
                image_id: image_id.clone(),
                instance_type: g.machine_type.clone(),
                root_device: root_device.clone(),
                root_volume_gib: g.root_volume.size_gib as i32,
                root_volume_type: g.root_volume.kind.as_str().to_string(),
                encrypted: g.root_volume.encrypted,
                instance_profile: profile,
                key_name: spec.ssh_key_name.clone(),
                security_group: match g.role {
                    Role::ControlPlane => "control-plane".into(),
                    Role::Node => "nodes".into(),
                },
                imds_tokens_required: true,
                user_data: user_data.clone(),
                tags,
                capacity_reservation: g.capacity.as_ref().and_then(|c| c.reservation.as_ref()).and_then(|r| r.target()),
            },
        });
        groups.push(DesiredGroup {
            name: g.name.clone(),
            role: g.role,
            desired: g.desired_count(),
            max: g.max_size,
            subnets: g.subnets.clone(),
            capacity: g.capacity.as_ref().map(|c| GroupCapacity {
                types: g.instance_types(),
                markets: g.markets(),
                fallback: c.fallback.clone(),
                launches_per_minute: c.launches_per_minute,
                mixed: (c.market == crate::spec::types::MarketSpec::Mixed)
                    .then(|| (c.on_demand_base, c.spot_percent.unwrap_or(0))),
            }),
        });
    }

    Ok(Desired {
        cluster: name.clone(),
        owner: spec.owner.clone(),
        vpc_cidr: spec.network.vpc_cidr.to_string(),
        internet_gateway: !public.is_empty(),
        subnets,
        nat_gateways,
        route_tables,
        security_groups: security_groups(cluster),
        load_balancer: DesiredLoadBalancer {
            name: load_balancer_name(name),
            internal,
            subnets: lb_subnets,
            port: spec.api.port,
        },
        api_address,
        launch_templates,
        groups,
        iam: crate::cloud::iam::desired(cluster, inputs.etcd_manager.as_deref()),
        events: crate::cloud::events::desired(cluster),
        version_step: false,
        api_dns_name: spec.api.dns_name.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_load_balancer_names_are_shortened_stably() {
        assert_eq!(load_balancer_name("dev-local"), "dev-local-api");
        let long = load_balancer_name("a-very-long-cluster-name-for-production");
        assert!(long.len() <= 32, "{long}");
        assert_eq!(long, load_balancer_name("a-very-long-cluster-name-for-production"));
    }
}
