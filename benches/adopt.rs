//! bench-adopt: a kops cluster (moto, tests/support/kops.rs) with N node
//! machines adopted in place, then its node group rolled onto pinfleet's
//! machines on the sim; against the floor, a roll of a pinfleet-made
//! cluster's node group of the same size and settings (surge 25%, the same
//! boot delay). Prints the adoption's AWS calls by operation and both
//! rolls' wall times with their ratio. Measures; asserts only that each
//! step succeeds. Needs moto and the sim: run through scripts/test (or set
//! PINFLEET_TEST_MOTO_URL). N: PINFLEET_BENCH_NODES (12).

#[path = "../tests/support/kops.rs"]
mod kops_fixture;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::World;

fn nodes() -> u32 {
    std::env::var("PINFLEET_BENCH_NODES").ok().and_then(|n| n.parse().ok()).unwrap_or(12)
}

/// Waits until the sim's API answers with `n` Ready nodes.
async fn ready_nodes(kubeconfig: &std::path::Path, n: usize) {
    for _ in 0..1200 {
        if kubeconfig.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client =
        pinfleet::kube::client_from_kubeconfig(kubeconfig, pinfleet::kube::Retry::Default).await.expect("the sim");
    let api = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client);
    for _ in 0..600 {
        let list = api.list(&Default::default()).await.map(|l| l.items).unwrap_or_default();
        let ready = list
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{n} nodes never became Ready");
}

/// Runs `pinfleet args`, timed; panics on failure with what it said.
fn timed(w: &World, args: &[&str]) -> (Duration, String) {
    let t = Instant::now();
    let o = w.run(args);
    let took = t.elapsed();
    let err = support::stderr(&o);
    assert!(o.status.success(), "pinfleet {args:?}:\n{err}");
    (took, err)
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let n = nodes();
    println!("bench-adopt: a kops cluster of 3 control-plane machines and {n} nodes, adopted, then its nodes and its control plane rolled");

    // Adoption.
    let w = World::new("bench-adopt", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let kops = kops_fixture::kops_on_moto(&aws, n as i32).await;
    support::import_kops_prod(&w, &aws, &bucket, n).await;
    let (adopt_took, said) = timed(&w, &["adopt", "prod", "--yes", "--take", &kops.managed_sg, "-v"]);
    let calls = said.lines().find(|l| l.starts_with("AWS calls:")).unwrap_or("AWS calls: (not reported)");
    println!("  adopt --yes: {:.2}s; {calls}", adopt_took.as_secs_f64());
    let (plan_took, said) = timed(&w, &["plan", "prod", "-v"]);
    let calls = said.lines().find(|l| l.starts_with("AWS calls:")).unwrap_or("AWS calls: (not reported)");
    println!("  plan after it: {:.2}s; {calls}", plan_took.as_secs_f64());
    let kubeconfig = w.dir.path().join("prod-kubeconfig.yaml");
    let _sim = Killed(w.node_sim("prod", &kubeconfig));
    ready_nodes(&kubeconfig, 3 + n as usize).await;
    let kc = kubeconfig.to_str().unwrap();
    let roll = ["--yes", "--kubeconfig", kc, "--validate-interval", "200ms", "--skip-e2e"];
    let mut args = vec!["upgrade", "prod"];
    args.extend(roll);
    args.extend(["--instance-group", "nodes"]);
    let (adopted, _) = timed(&w, &args);
    // Then kops's control plane: one machine at a time, etcd-manager on
    // each replacement taking over its member's volumes.
    let mut args = vec!["upgrade", "prod"];
    args.extend(roll);
    let (kops_cp, _) = timed(&w, &args);

    // The floor: a pinfleet-made cluster's node group of the same size and settings.
    let f = World::new("bench-floor", n);
    let yaml = f
        .cluster_yaml(n, "t3.large")
        .replace("      rollout:\n        maxSurge: 1\n", "      rollout:\n        maxSurge: 25%\n")
        .replace("      minSize: 1\n      maxSize: 1\n", "      minSize: 3\n      maxSize: 3\n");
    f.write_cluster(&yaml);
    timed(&f, &["bootstrap", "bench-floor", "--yes"]);
    let floor_kc = f.dir.path().join("floor-kubeconfig.yaml");
    let _floor_sim = Killed(f.node_sim("bench-floor", &floor_kc));
    ready_nodes(&floor_kc, 3 + n as usize).await;
    let text =
        std::fs::read_to_string(f.cluster_file()).unwrap().replace("machineType: t3.large", "machineType: t3.xlarge");
    f.write_cluster(&text);
    let fkc = floor_kc.to_str().unwrap();
    let (floor, _) = timed(
        &f,
        &[
            "upgrade",
            "bench-floor",
            "--yes",
            "--kubeconfig",
            fkc,
            "--validate-interval",
            "200ms",
            "--skip-e2e",
            "--instance-group",
            "general",
        ],
    );
    // The floor of the control plane: a pinfleet-made one of 3 (kubeadm's
    // stacked etcd: a member joins, the old one is removed).
    let text =
        std::fs::read_to_string(f.cluster_file()).unwrap().replace("machineType: t3.medium", "machineType: t3.large");
    f.write_cluster(&text);
    let mut args = vec!["upgrade", "bench-floor", "--yes", "--kubeconfig", fkc, "--validate-interval", "200ms"];
    args.extend(["--skip-e2e", "--instance-group", "control-plane"]);
    let (floor_cp, _) = timed(&f, &args);
    println!(
        "  roll of kops's 3 control-plane machines onto pinfleet's: {:.1}s (etcd-manager's volumes handed over, one machine at a time)",
        kops_cp.as_secs_f64()
    );
    println!("  floor, a pinfleet-made control plane of 3 rolled: {:.1}s", floor_cp.as_secs_f64());
    println!("  control plane, adopted / floor: {:.2}x", kops_cp.as_secs_f64() / floor_cp.as_secs_f64());
    println!(
        "  roll of kops's {n} nodes onto pinfleet's: {:.1}s (each leaves its Auto Scaling group; the emptied group and its launch template deleted)",
        adopted.as_secs_f64()
    );
    println!("  floor, a pinfleet-made cluster's {n} nodes rolled: {:.1}s", floor.as_secs_f64());
    println!("  adopted / floor: {:.2}x", adopted.as_secs_f64() / floor.as_secs_f64());
}
