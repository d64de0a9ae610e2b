//! A running kops cluster for the demo (scripts/demo), on the emulator the
//! environment names (AWS_ENDPOINT_URL): what kops creates on AWS, built by
//! the tests' own fixture (tests/support/kops.rs: VPC, subnets, NAT
//! gateways, route tables, security groups with kops's rules, the API's
//! load balancer, launch templates and Auto Scaling groups running its
//! machines, all tagged as kops tags them), and kops's state store
//! (tests/fixtures/kops: the cluster's specs, instance groups and keysets)
//! copied into an S3 bucket as kops writes it.
//!
//! `kops_cluster BUCKET NODES` prints, one per line, `key=value` facts the
//! demo reads: the state store's URL and the id of kops's nodes' security
//! group, which a Terraform module manages too (adopt refuses it unless
//! named).

#[path = "../tests/support/kops.rs"]
mod kops_fixture;

use std::path::Path;

use anyhow::{Context as _, Result};
use pinfleet::cloud::aws::{Aws, AwsOptions, Target};

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let bucket = args.next().context("usage: kops_cluster BUCKET NODES")?;
    let nodes: i32 = args.next().context("usage: kops_cluster BUCKET NODES")?.parse().context("NODES")?;
    let aws = Aws::connect(&AwsOptions::from_env(Target::Aws, None)?).await?;
    aws.s3.create_bucket().bucket(&bucket).send().await.context("creating kops's state bucket")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kops");
    let mut stack = vec![root.join(kops_fixture::KOPS_NAME)];
    let mut objects = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let key = path.strip_prefix(&root)?.to_string_lossy().into_owned();
            let body = std::fs::read(&path)?;
            aws.s3.put_object().bucket(&bucket).key(&key).body(body.into()).send().await?;
            objects += 1;
        }
    }
    let kops = kops_fixture::kops_on_moto(&aws, nodes).await;
    eprintln!(
        "kops's cluster {}: VPC {}, {} machines in {} Auto Scaling groups, {objects} objects in s3://{bucket}/{}/",
        kops_fixture::KOPS_NAME,
        kops.vpc,
        kops.machines.len(),
        kops.groups.len(),
        kops_fixture::KOPS_NAME
    );
    println!("state=s3://{bucket}/{}", kops_fixture::KOPS_NAME);
    println!("terraform_sg={}", kops.managed_sg);
    Ok(())
}
