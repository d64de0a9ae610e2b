//! Resource keys: the name of each resource in the desired model, in the
//! plan (what a change is about, what it waits for), in the executor (the
//! ids it learns) and in the `pinfleet.dev/resource` tag that finds the
//! resource again. One enum, so a key that does not exist cannot be
//! written; its text form (`subnet/private-a`, `sg/nodes/rules`) is what
//! tags, plans and messages carry.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ResourceKey {
    Vpc,
    /// The internet gateway.
    Igw,
    Subnet(String),
    /// An Elastic IP: a NAT gateway's (by zone) or the API endpoint's (`api`).
    Eip(String),
    /// A NAT gateway, by zone.
    Nat(String),
    /// A route table, by name (`public`, `private-<zone>`).
    RouteTable(String),
    /// A route table's default route and subnet associations.
    Routes(String),
    /// A security group, by name (`control-plane`, `nodes`).
    SecurityGroup(String),
    /// A security group's rules.
    Rules(String),
    /// The API load balancer, its target group and listener.
    LoadBalancer,
    TargetGroup,
    Listener,
    /// Where the API endpoint points: the load balancer's targets, or the
    /// Elastic IP's machine.
    Targets,
    /// A launch template, by group.
    LaunchTemplate(String),
    /// A group's machines (launches, terminations), by group.
    Instances(String),
    /// The tag a group's machines (and their volumes) carry.
    Instance(String),
    /// A machine role's IAM role (`control-plane`, `nodes`).
    IamRole(String),
    /// Its inline policy.
    RolePolicy(String),
    /// Its instance profile.
    InstanceProfile(String),
    /// The interruption events' SQS queue.
    EventQueue,
    /// An EventBridge rule feeding it, by kind (`spot-interruption`, …).
    EventRule(String),
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ResourceKey::*;
        let text = match self {
            Vpc => "vpc".to_string(),
            Igw => "igw".to_string(),
            LoadBalancer => "lb".to_string(),
            TargetGroup => "tg".to_string(),
            Listener => "listener".to_string(),
            Targets => "targets".to_string(),
            Subnet(n) => format!("subnet/{n}"),
            Eip(z) => format!("eip/{z}"),
            Nat(z) => format!("nat/{z}"),
            RouteTable(n) => format!("rt/{n}"),
            Routes(n) => format!("rt/{n}/routes"),
            SecurityGroup(n) => format!("sg/{n}"),
            Rules(n) => format!("sg/{n}/rules"),
            LaunchTemplate(g) => format!("lt/{g}"),
            Instances(g) => format!("instances/{g}"),
            Instance(g) => format!("instance/{g}"),
            IamRole(r) => format!("iam-role/{r}"),
            RolePolicy(r) => format!("iam-role/{r}/policy"),
            InstanceProfile(r) => format!("instance-profile/{r}"),
            EventQueue => "events/queue".to_string(),
            EventRule(k) => format!("events/rule/{k}"),
        };
        // Honours width and alignment, so plans line keys up.
        f.pad(&text)
    }
}

impl FromStr for ResourceKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        use ResourceKey::*;
        let parts: Vec<&str> = s.split('/').collect();
        let own = |x: &str| x.to_string();
        Ok(match parts.as_slice() {
            ["vpc"] => Vpc,
            ["igw"] => Igw,
            ["lb"] => LoadBalancer,
            ["tg"] => TargetGroup,
            ["listener"] => Listener,
            ["targets"] => Targets,
            ["subnet", n] => Subnet(own(n)),
            ["eip", z] => Eip(own(z)),
            ["nat", z] => Nat(own(z)),
            ["rt", n] => RouteTable(own(n)),
            ["rt", n, "routes"] => Routes(own(n)),
            ["sg", n] => SecurityGroup(own(n)),
            ["sg", n, "rules"] => Rules(own(n)),
            ["lt", g] => LaunchTemplate(own(g)),
            ["instances", g] => Instances(own(g)),
            ["instance", g] => Instance(own(g)),
            ["iam-role", r] => IamRole(own(r)),
            ["iam-role", r, "policy"] => RolePolicy(own(r)),
            ["instance-profile", r] => InstanceProfile(own(r)),
            ["events", "queue"] => EventQueue,
            ["events", "rule", k] => EventRule(own(k)),
            _ => return Err(format!("not a resource key: {s:?}")),
        })
    }
}

/// Compares with a key's text (`key == "sg/nodes/rules"`), as plans and
/// messages show it.
impl PartialEq<str> for ResourceKey {
    fn eq(&self, other: &str) -> bool {
        self.to_string() == other
    }
}

impl PartialEq<&str> for ResourceKey {
    fn eq(&self, other: &&str) -> bool {
        self.to_string() == *other
    }
}

impl TryFrom<String> for ResourceKey {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ResourceKey> for String {
    fn from(k: ResourceKey) -> String {
        k.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_from_its_text() {
        use ResourceKey::*;
        let keys = [
            Vpc,
            Igw,
            LoadBalancer,
            TargetGroup,
            Listener,
            Targets,
            Subnet("private-a".into()),
            Eip("api".into()),
            Nat("us-east-1a".into()),
            RouteTable("public".into()),
            Routes("private-us-east-1a".into()),
            SecurityGroup("nodes".into()),
            Rules("control-plane".into()),
            LaunchTemplate("general".into()),
            Instances("general".into()),
            Instance("general".into()),
            IamRole("nodes".into()),
            RolePolicy("control-plane".into()),
            InstanceProfile("nodes".into()),
        ];
        for k in keys {
            assert_eq!(k.to_string().parse::<ResourceKey>(), Ok(k.clone()), "{k}");
        }
        assert!("subnet".parse::<ResourceKey>().is_err());
        assert_eq!(serde_json::to_string(&Rules("nodes".into())).unwrap(), "\"sg/nodes/rules\"");
    }
}
