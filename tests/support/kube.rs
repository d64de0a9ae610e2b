//! The Kubernetes side of the harness: the project's sim on a free port by
//! default, or the real cluster named by PINFLEET_TEST_KUBECONFIG. Tests get
//! a kubeconfig path, a kube::Client and a namespace of their own; tests
//! that need the sim (simulated nodes, controllers, its internals) say so
//! and are skipped on a real cluster with the reason printed.
//!
//! Against a real cluster every test says what it did in the file
//! PINFLEET_TEST_REPORT names (`ran` or `skipped` and why), and
//! `scripts/test` ends with the count: a skip is never taken for a pass.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub struct KubeEnv {
    pub kubeconfig: PathBuf,
    pub real: bool,
    pub namespace: String,
    _dir: tempfile::TempDir,
    shutdown: Option<std::sync::mpsc::Sender<()>>,
    skipped: std::cell::Cell<bool>,
}

/// The test this thread runs (libtest names its threads after the tests),
/// with the test binary's name.
fn test_name() -> String {
    let binary = std::env::args()
        .next()
        .and_then(|a| std::path::Path::new(&a).file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.rsplit_once('-').map(|(b, _)| b.to_string()).unwrap_or(s))
        .unwrap_or_default();
    format!("{binary}::{}", std::thread::current().name().unwrap_or("?"))
}

/// One line in the real-cluster report (appended; lines are short, so
/// parallel tests do not interleave).
fn report(line: &str) {
    use std::io::Write;
    let Ok(path) = std::env::var("PINFLEET_TEST_REPORT") else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::SeqCst))
}

/// Asserts that kubectl succeeded (its output in the message) and returns stdout.
fn succeeded(args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl KubeEnv {
    /// A cluster to talk to, with a fresh namespace.
    pub fn start() -> KubeEnv {
        Self::start_as(None)
    }

    /// As [`KubeEnv::start`], with the sim answering as Kubernetes
    /// `version` (a real cluster is what it is: ask it with [`KubeEnv::minor`]).
    pub fn start_as(version: Option<&str>) -> KubeEnv {
        let dir = tempfile::tempdir().unwrap();
        let (kubeconfig, real, shutdown) = match std::env::var("PINFLEET_TEST_KUBECONFIG") {
            Ok(p) if !p.is_empty() => (PathBuf::from(p), true, None),
            _ => {
                let path = dir.path().join("kubeconfig.yaml");
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let p = path.clone();
                let version = version.map(|v| pinfleet::rollout::versions::Version::parse(v).expect("a version"));
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Runtime::new().unwrap();
                    rt.block_on(async move {
                        let mut inner = pinfleet::sim::Inner::new();
                        if let Some(v) = version {
                            inner.kubernetes = v;
                        }
                        let sim = pinfleet::sim::Sim::start_with(0, inner, Default::default()).await.unwrap();
                        sim.write_kubeconfig(&p).unwrap();
                        ready_tx.send(()).unwrap();
                        let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
                        sim.stop().await;
                    });
                });
                ready_rx.recv().unwrap();
                (path, false, Some(tx))
            }
        };
        let env = KubeEnv {
            kubeconfig,
            real,
            namespace: unique("t"),
            _dir: dir,
            shutdown,
            skipped: std::cell::Cell::new(false),
        };
        env.ok_cmd(&["create", "namespace", &env.namespace.clone()]);
        env
    }

    /// The minor the API server answers as (its `/version`).
    pub fn minor(&self) -> u32 {
        let out = self.ok_cmd(&["version", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("kubectl version prints JSON");
        let minor = v["serverVersion"]["minor"].as_str().unwrap_or_default();
        minor.trim_end_matches('+').parse().unwrap_or_else(|_| panic!("the server's minor: {v}"))
    }

    /// True (and prints why) when the test needs the sim and runs on a real cluster.
    pub fn skip_on_real(&self, why: &str) -> bool {
        if self.real {
            eprintln!("skipped on a real cluster: {why}");
            report(&format!("skipped\t{}\t{why}", test_name()));
            self.skipped.set(true);
        }
        self.real
    }

    /// True (and prints why) when the test needs pods to run and the real
    /// cluster has no Ready, schedulable node to run them (an API server
    /// with no kubelets: pods stay Pending there). Counted as a skip.
    pub fn skip_without_running_pods(&self) -> bool {
        let skip = self.no_running_pods("");
        if skip {
            self.skipped.set(true);
        }
        skip
    }

    /// As `skip_without_running_pods`, for one part of a test: the part is
    /// reported as skipped (with why), the rest of the test as run.
    pub fn skip_part_without_running_pods(&self, part: &str) -> bool {
        self.no_running_pods(part)
    }

    /// Reports one part of a test as skipped on a real cluster, with why
    /// (the rest of the test as run).
    pub fn skip_part(&self, part: &str, why: &str) {
        let what = format!("{} (part: {part})", test_name());
        eprintln!("skipped on a real cluster: {what}: {why}");
        report(&format!("skipped\t{what}\t{why}"));
    }

    fn no_running_pods(&self, part: &str) -> bool {
        if !self.real {
            return false;
        }
        let out = self.ok_cmd(&["get", "nodes", "-o", "json"]);
        let nodes: serde_json::Value = serde_json::from_str(&out).expect("kubectl prints JSON");
        let can_run = nodes["items"].as_array().is_some_and(|items| {
            items.iter().any(|n| {
                n["spec"]["unschedulable"] != true
                    && n["status"]["conditions"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            })
        });
        if can_run {
            return false;
        }
        let why = "needs pods to run, and the cluster has no Ready, schedulable node (no kubelet runs them)";
        let what = if part.is_empty() { test_name() } else { format!("{} (part: {part})", test_name()) };
        eprintln!("skipped on a real cluster: {what}: {why}");
        report(&format!("skipped\t{what}\t{why}"));
        true
    }

    /// kubectl outside the test's namespace; asserts success.
    pub fn ok_cmd(&self, args: &[&str]) -> String {
        succeeded(args, self.kubectl_cmd(args).output().expect("kubectl is installed (apt-get install kubectl)"))
    }

    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.args(args).env("KUBECONFIG", &self.kubeconfig).env("KUBECACHEDIR", self._dir.path().join("kubecache"));
        cmd
    }

    /// kubectl in the test's namespace.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let mut a = vec!["-n", self.namespace.as_str()];
        a.extend_from_slice(args);
        self.kubectl_cmd(&a).output().expect("kubectl is installed (apt-get install kubectl)")
    }

    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut a = vec!["-n", self.namespace.as_str()];
        a.extend_from_slice(args);
        let mut child = self
            .kubectl_cmd(&a)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl is installed");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs kubectl and asserts success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        succeeded(args, self.kubectl(args))
    }

    pub fn ok_stdin(&self, args: &[&str], input: &str) -> String {
        succeeded(args, self.kubectl_stdin(args, input))
    }

    pub async fn client(&self) -> kube::Client {
        pinfleet::kube::client_from_kubeconfig(&self.kubeconfig, pinfleet::kube::Retry::Never).await.unwrap()
    }

    pub fn unique(&self, prefix: &str) -> String {
        unique(prefix)
    }
}

impl Drop for KubeEnv {
    fn drop(&mut self) {
        if self.real && !self.skipped.get() {
            let outcome = if std::thread::panicking() { "failed" } else { "ran" };
            report(&format!("{outcome}\t{}", test_name()));
        }
        if self.real {
            let _ = self.kubectl_cmd(&["delete", "namespace", &self.namespace, "--wait=false"]).output();
        }
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Waits on what a server's controllers do (garbage collection, say) by
/// following their progress, not a fixed deadline: `progress` says what
/// is left (0 ends the wait) and a score that moves whenever anything
/// happens (objects marked for deletion, objects gone). The wait fails
/// only when the score stayed put for `stall`, saying what was left — a
/// busy shared server is slow, not stuck.
pub async fn until_done<F, Fut>(what: &str, stall: std::time::Duration, mut progress: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (usize, usize)>,
{
    let mut last: Option<usize> = None;
    let mut since = std::time::Instant::now();
    loop {
        let (left, score) = progress().await;
        if left == 0 {
            return;
        }
        if last != Some(score) {
            last = Some(score);
            since = std::time::Instant::now();
        }
        if since.elapsed() > stall {
            panic!("waiting for {what}: {left} left, no progress for {}s", stall.as_secs());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
