//! A local dry-run cluster runs its own platform, with no AWS account:
//! `bootstrap --target sim` gives a cluster whose workload controller (the
//! addon's Deployment of pinfleet's image) runs as processes of the sim, so
//! `e2e --target sim` passes; with the controller scaled to 0 it fails
//! naming it; a pod of pinfleet's image that exits 1 crash-loops with its
//! log; `destroy --target sim` leaves no process.

#[path = "support/local.rs"]
mod local;

use local::{pinfleet, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kc)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Processes whose environment names `needle` (the pods' files live under
/// the home) and whose command line has `command` in it.
fn processes_with(needle: &str, command: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !zombie && String::from_utf8_lossy(&env).contains(needle) && cmdline.contains(command) {
            out.push(pid);
        }
    }
    out
}

fn until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return v;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("timed out waiting for {what}");
}

/// Ends the cluster's sim whatever the test's outcome.
struct Cluster {
    home: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = pinfleet(&self.home, &["destroy", "dev-local", "--target", "sim", "--yes"]);
    }
}

#[test]
fn a_sim_cluster_runs_its_own_platform_and_leaves_nothing_behind() {
    if std::env::var("PINFLEET_TEST_KUBECONFIG").is_ok_and(|v| !v.is_empty()) {
        eprintln!("skipped on a real cluster: tests the sim's own kubelet");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let c = Cluster { home: home.clone() };
    let out = pinfleet(&home, &["bootstrap", "dev-local", "--target", "sim", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let kc = home.join("sim/dev-local/kubeconfig.yaml");
    let pods_dir = home.join("sim/dev-local/pods");
    // The controller's pods are processes of pinfleet, under the pods' folder.
    let dir_text = pods_dir.display().to_string();
    let running = until("the controller's processes", 120, || {
        let p = processes_with(&dir_text, " controller ");
        (p.len() >= 2).then_some(p)
    });
    assert_eq!(running.len(), 2, "one process per replica: {running:?}");

    let out = pinfleet(&home, &["e2e", "dev-local", "--target", "sim", "--smoke-timeout", "60s"]);
    assert!(out.status.success(), "e2e on the healthy cluster: {}", text(&out));

    // The e2e addon's scheduled job runs too (now, not at its hour) and records its results.
    let job = kubectl(&kc, &["-n", "pinfleet-system", "create", "job", "e2e-now", "--from=cronjob/pinfleet-e2e"], None);
    assert!(job.status.success(), "{}", text(&job));
    until("the e2e job to complete", 180, || {
        let o = kubectl(
            &kc,
            &["-n", "pinfleet-system", "get", "job", "e2e-now", "-o", "jsonpath={.status.succeeded}"],
            None,
        );
        (String::from_utf8_lossy(&o.stdout) == "1").then_some(())
    });
    let results = kubectl(
        &kc,
        &["-n", "pinfleet-system", "get", "configmap", "pinfleet-e2e-results", "-o", "jsonpath={.data.metrics\\.prom}"],
        None,
    );
    assert!(text(&results).contains("pinfleet_e2e_checks_failed{cluster=\"dev-local\"} 0"), "{}", text(&results));

    // A pod of pinfleet's image that exits 1: CrashLoopBackOff, with its log.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: broken, namespace: default}\nspec:\n  containers:\n    - {name: main, image: ghcr.io/pinfleet/pinfleet:0.1.0, args: [validate, /no/such/clusters]}\n";
    let applied = kubectl(&kc, &["apply", "-f", "-"], Some(pod));
    assert!(applied.status.success(), "{}", text(&applied));
    until("CrashLoopBackOff", 120, || {
        let o = kubectl(
            &kc,
            &["get", "pod", "broken", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason}"],
            None,
        );
        (String::from_utf8_lossy(&o.stdout) == "CrashLoopBackOff").then_some(())
    });
    let exit = kubectl(
        &kc,
        &["get", "pod", "broken", "-o", "jsonpath={.status.containerStatuses[0].lastState.terminated.exitCode}"],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&exit.stdout), "1");
    let logs = kubectl(&kc, &["logs", "broken"], None);
    assert!(text(&logs).contains("/no/such/clusters"), "the container's own output: {}", text(&logs));
    let table = kubectl(&kc, &["get", "pod", "broken"], None);
    assert!(text(&table).contains("CrashLoopBackOff"), "{}", text(&table));

    // Without the controller, e2e fails and names it.
    let scaled =
        kubectl(&kc, &["-n", "pinfleet-system", "scale", "deployment/pinfleet-controller", "--replicas=0"], None);
    assert!(scaled.status.success(), "{}", text(&scaled));
    until("the controller's processes to stop", 60, || {
        processes_with(&dir_text, " controller ").is_empty().then_some(())
    });
    let out = pinfleet(&home, &["e2e", "dev-local", "--target", "sim", "--phase", "smoke", "--smoke-timeout", "10s"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("is the workload controller running?"), "{}", text(&out));

    drop(c);
    let left = processes_with(&dir_text, "");
    assert!(left.is_empty(), "processes left after destroy: {left:?}");
}
