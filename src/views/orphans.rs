//! `pinfleet orphans` as text: one row per orphan, led by the account and
//! region it is in (a fleet spans accounts, and an orphan is cleaned up
//! with that account's credentials). Pure: the command finds them
//! ([`crate::cloud::orphans`]), this draws them; JSON and YAML are the rows
//! themselves.

use crate::cloud::orphans::Orphan;

use super::text::table;

/// The orphans as a table, or a line saying there are none.
pub fn text(found: &[Orphan]) -> String {
    if found.is_empty() {
        return "No orphans.\n".into();
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|o| {
            vec![
                o.account.clone(),
                o.region.clone(),
                o.kind.clone(),
                o.id.clone(),
                o.cluster.clone(),
                o.owner.clone(),
                o.why.clone(),
            ]
        })
        .collect();
    table(&["ACCOUNT", "REGION", "KIND", "ID", "CLUSTER", "OWNER", "WHY"], &rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cloud::observed::ObservedInstance;
    use crate::cloud::orphans::{judge, Fleet, Known, Tagged};

    fn tagged(kind: &str, id: &str, cluster: &str, owner: Option<&str>) -> Tagged {
        Tagged { kind: kind.into(), id: id.into(), cluster: Some(cluster.into()), owner: owner.map(str::to_string) }
    }

    /// Two accounts' orphans: a destroyed cluster's VPC in a member account,
    /// an undefined cluster's role and a machine started by hand in the
    /// caller's own; a live cluster's resources are no orphans.
    fn found() -> Vec<Orphan> {
        let known: BTreeMap<String, Known> =
            [("gone".to_string(), Known::NotInStateStore), ("alive".to_string(), Known::Alive)].into();
        let member = Fleet {
            tagged: vec![tagged("vpc", "vpc-0aaa", "gone", Some("team-a")), tagged("vpc", "vpc-0bbb", "alive", None)],
            in_vpcs: vec![],
        };
        let stray = ObservedInstance {
            id: "i-0ccc".into(),
            cluster: None,
            group: None,
            owner: None,
            state: "running".into(),
            image_id: "ami-0123456789abcdef0".into(),
            instance_type: "t3.micro".into(),
            subnet_id: Some("subnet-0ddd".into()),
            zone: Some("us-east-1a".into()),
            vpc_id: Some("vpc-0eee".into()),
            private_ip: Some("10.0.0.9".into()),
            launch_template_version: None,
            revision: None,
            launch_time: None,
            kubernetes_version: None,
            spot: false,
            etcd_manager: false,
        };
        let home = Fleet { tagged: vec![tagged("iam-role", "old-node", "old", None)], in_vpcs: vec![stray] };
        let homes = Default::default();
        let mut out = judge("222222222222", "eu-west-1", &member, &known, &homes, "clusters");
        out.extend(judge("111111111111", "us-east-1", &home, &known, &homes, "clusters"));
        out
    }

    #[test]
    fn orphans_as_text() {
        insta::assert_snapshot!(text(&found()));
    }

    #[test]
    fn each_orphan_names_its_account() {
        let rows = found();
        let accounts: Vec<(&str, &str)> = rows.iter().map(|o| (o.id.as_str(), o.account.as_str())).collect();
        assert_eq!(accounts, [("vpc-0aaa", "222222222222"), ("old-node", "111111111111"), ("i-0ccc", "111111111111")]);
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["account"], "222222222222");
        assert_eq!(text(&[]), "No orphans.\n");
    }
}
