//! Validates 500 generated cluster files that all extend a shared base (as a
//! large fleet's clusters/ folder does) and prints the time. Target: under
//! 0.5 s in a release build. Measures and prints; asserts nothing about time.

use std::path::Path;
use std::time::Instant;

use pinfleet::spec::{self, LoadOptions};

const CLUSTERS: usize = 500;
const RUNS: usize = 5;

fn generate(dir: &Path) {
    std::fs::create_dir_all(dir.join("bases")).unwrap();
    std::fs::copy("clusters/bases/aws-standard.yaml", dir.join("bases/aws-standard.yaml")).unwrap();
    // A regional base in between, so each file has a two-level extends chain.
    std::fs::write(
        dir.join("bases/regional.yaml"),
        "extends: aws-standard.yaml\nspec:\n  api:\n    loadBalancer: {scheme: internal}\n    allowedCidrs: [10.0.0.0/8]\n",
    )
    .unwrap();
    let regions = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-2"];
    for i in 0..CLUSTERS {
        let region = regions[i % regions.len()];
        // Clusters are validated one by one: VPCs may repeat across files.
        let net = i % 250;
        let text = format!(
            "extends: bases/regional.yaml
metadata:
  name: cluster-{i:04}
  labels: {{env: production, shard: \"{i}\"}}
spec:
  cloud:
    region: {region}
    zones: [{region}a, {region}b, {region}c]
  stateStore: s3://fleet-state/clusters
  network:
    vpcCidr: 10.{net}.0.0/16
    subnets:
      - {{name: private-a, zone: {region}a, cidr: 10.{net}.0.0/18, type: private}}
      - {{name: private-b, zone: {region}b, cidr: 10.{net}.64.0/18, type: private}}
      - {{name: private-c, zone: {region}c, cidr: 10.{net}.128.0/18, type: private}}
  instanceGroups:
    - name: general
      minSize: {min}
      maxSize: 100
    - name: batch
      role: node
      machineType: c6i.2xlarge
      minSize: 0
      maxSize: 50
      image: {{id: ami-0123456789abcdef0}}
      subnets: [private-a, private-b, private-c]
      taints: [{{key: pool, value: batch, effect: NoSchedule}}]
",
            min = 3 + i % 10,
        );
        std::fs::write(dir.join(format!("cluster-{i:04}.yaml")), text).unwrap();
    }
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("clusters");
    generate(&dir);
    let opts = LoadOptions::default();
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let (loaded, problems) = spec::load_paths(&[dir.clone()], &opts);
        let elapsed = start.elapsed();
        assert!(problems.0.is_empty(), "generated clusters should be valid:\n{problems}");
        assert_eq!(loaded.len(), CLUSTERS);
        times.push(elapsed.as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let best = times[0];
    let median = times[RUNS / 2];
    println!("validate: {CLUSTERS} clusters (each extends a 2-file chain), {RUNS} runs");
    println!("  best   {:.3} s  ({:.0} clusters/s)", best, CLUSTERS as f64 / best);
    println!("  median {:.3} s", median);
    println!("  target 0.500 s  -> median is {:.1}x under target", 0.5 / median);
}
