//! The desired model of the minimal fixture cluster with a public subnet
//! added, images and user-data filled in: what the planner and executor
//! tests start from.

use std::path::Path;

use pinfleet::cloud::model::{self, Desired, Inputs};
use pinfleet::spec::{self, Cluster, InstanceGroup, LoadOptions};

/// `tests/fixtures/valid/minimal.yaml` plus `public-a`, changed by `edit`,
/// with every group's user-data from `user_data`.
pub fn desired(edit: impl Fn(&mut Cluster), user_data: impl Fn(&InstanceGroup) -> String) -> Desired {
    let mut c =
        spec::load_cluster(Path::new("tests/fixtures/valid/minimal.yaml"), &LoadOptions::default()).unwrap().cluster;
    c.spec.network.subnets.push(spec::Subnet {
        name: "public-a".into(),
        zone: "us-east-1a".into(),
        cidr: "10.0.128.0/20".parse().unwrap(),
        kind: spec::SubnetType::Public,
    });
    edit(&mut c);
    let mut inputs = Inputs::default();
    for g in &c.spec.instance_groups {
        inputs.images.insert(g.name.clone(), ("ami-0123456789abcdef0".into(), "/dev/sda1".into()));
        inputs.user_data.insert(g.name.clone(), user_data(g));
    }
    model::desired(&c, &inputs).unwrap()
}
