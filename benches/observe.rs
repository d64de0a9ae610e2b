//! Observe + plan against moto holding 2,000 instances in one cluster:
//! prints the AWS calls by operation, the total against the target
//! ceil(instances / 1000) + 16 + 6, and the wall time. Measures; asserts nothing
//! about time. Needs moto: run through scripts/bench-observe, or set
//! PINFLEET_TEST_MOTO_URL.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Parser;
use pinfleet::apply::prepare::prepare;
use pinfleet::cloud::aws::{Aws, AwsOptions};
use pinfleet::spec::{self, LoadOptions};

/// Instances in the cluster: 2,000, or PINFLEET_BENCH_INSTANCES (the test
/// suite runs a small one to show the benchmark sets itself up and ends).
fn instances() -> u32 {
    std::env::var("PINFLEET_BENCH_INSTANCES").ok().and_then(|n| n.parse().ok()).unwrap_or(2000)
}
const RUNS: usize = 3;

fn moto() -> (String, Option<std::process::Child>) {
    if let Ok(url) = std::env::var("PINFLEET_TEST_MOTO_URL") {
        return (url, None);
    }
    let bin = std::env::var("PINFLEET_MOTO_SERVER").unwrap_or_else(|_| "scripts/moto-server".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("MOTO_ENABLE_AMI_VALIDATION", "true")
        .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin} ({e}): run scripts/bench-observe, which installs moto"));
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if Command::new("curl")
            .args(["-sf", &format!("{url}/moto-api/data.json")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return (url, Some(child));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("moto did not start");
}

fn main() {
    let count = instances();
    let (url, mut child) = moto();
    let tmp = tempfile::tempdir().unwrap();
    let clusters = tmp.path().join("clusters");
    std::fs::create_dir_all(clusters.join("bases")).unwrap();
    std::fs::copy("clusters/bases/aws-standard.yaml", clusters.join("bases/aws-standard.yaml")).unwrap();
    let account = format!("{:012}", 900_000_000_000u64 + u64::from(std::process::id()));
    let src = std::fs::read_to_string("clusters/dev-local.yaml").unwrap();
    let yaml = src
        .replace("name: dev-local", "name: bench")
        .replace("s3://pinfleet-state-dev/clusters", &format!("s3://pf-bench-{account}/clusters"))
        .replace(
            "      minSize: 2\n      maxSize: 6\n      desired: 3\n",
            &format!("      minSize: 0\n      maxSize: {count}\n      desired: {}\n", count - 1),
        );
    let file = clusters.join("bench.yaml");
    std::fs::write(&file, yaml).unwrap();
    for (k, v) in [
        ("AWS_ENDPOINT_URL", url.as_str()),
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_REGION", "us-east-1"),
        ("PINFLEET_MOTO_ACCOUNT_ID", account.as_str()),
        ("NO_COLOR", "1"),
    ] {
        std::env::set_var(k, v);
    }
    std::env::set_var("PINFLEET_HOME", tmp.path().join("home"));

    println!("observe + plan: creating a cluster of {count} instances on moto ...");
    let start = Instant::now();
    let cli = pinfleet::cli::Cli::parse_from([
        "pinfleet",
        "--clusters-dir",
        clusters.to_str().unwrap(),
        "bootstrap",
        "bench",
        "--yes",
        // Observation of machines is measured; moto runs no API server for
        // addons to wait on.
        "--skip-addons",
        "-o",
        "json",
    ]);
    let stdout_guard = gag_stdout();
    let result = pinfleet::cli::run(cli);
    drop(stdout_guard);
    result.expect("bootstrap");
    println!("  bootstrap took {:.1} s", start.elapsed().as_secs_f64());

    let loaded = spec::load_cluster(Path::new(&file), &LoadOptions::default()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut times = Vec::new();
    let mut calls = Default::default();
    let mut observed = 0;
    let mut diff_ms = Vec::new();
    for _ in 0..RUNS {
        let (t, c, n, d) = rt.block_on(async {
            let aws = Aws::connect(&AwsOptions::from_env(Default::default(), Some("us-east-1".into())).unwrap())
                .await
                .unwrap();
            let start = Instant::now();
            let prepared = prepare(&aws, &loaded.cluster).await.unwrap();
            let t = start.elapsed().as_secs_f64();
            assert!(
                prepared.plan.changes.iter().all(|c| !matches!(c.key, pinfleet::cloud::key::ResourceKey::Instances(_))),
                "the cluster should be complete"
            );
            // pinfleet's own share: the pure diff over the same observation.
            let d = Instant::now();
            let again = pinfleet::plan::diff(&prepared.desired, &prepared.observed);
            let d = d.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(again.changes.len(), prepared.plan.changes.len());
            (t, aws.calls.snapshot(), prepared.observed.instances.len(), d)
        });
        times.push(t);
        calls = c;
        observed = n;
        diff_ms.push(d);
    }
    diff_ms.sort_by(f64::total_cmp);
    times.sort_by(f64::total_cmp);
    let total: u64 = calls.values().sum();
    // 16 reads of EC2 and ELBv2 whatever the size (DescribeTags for the
    // autoscaler's sizes the 16th), one DescribeInstances page per 1000
    // machines, and IAM's role, policy and profile for each
    // of the two machine roles (IAM cannot list them with their policies).
    let target = u64::from(count).div_ceil(1000) + 16 + 6;
    println!("  instances observed: {observed}");
    println!("  AWS calls per observe+plan: {total} (target <= {target}: ceil({count}/1000) + 16 + 6 IAM)");
    for (op, n) in &calls {
        println!("    {op:<40} {n}");
    }
    println!(
        "  wall time: best {:.3} s, median {:.3} s over {RUNS} runs (almost all of it moto answering in Python)",
        times[0],
        times[RUNS / 2]
    );
    println!("  of which the plan itself (pure diff of {observed} instances): median {:.2} ms", diff_ms[RUNS / 2]);
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
    }
}

/// Silences stdout while the in-process bootstrap prints its plan.
fn gag_stdout() -> impl Drop {
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            unsafe {
                libc::dup2(self.0, 1);
                libc::close(self.0);
            }
        }
    }
    unsafe {
        let saved = libc::dup(1);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        libc::dup2(null, 1);
        libc::close(null);
        Restore(saved)
    }
}
