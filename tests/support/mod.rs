//! Test harness: a moto server on 127.0.0.1 (the one scripts/test started,
//! named by PINFLEET_TEST_MOTO_URL, or one started here and killed with
//! the test process), a fresh moto account per test for isolation, and a
//! runner for the real `pinfleet` binary with the environment pointed at it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// moto_server from the project's virtualenv (scripts/test installs it),
/// through scripts/moto-server (images shared across accounts seen there).
fn moto_binary() -> PathBuf {
    if let Ok(p) = std::env::var("PINFLEET_MOTO_SERVER") {
        return p.into();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = root.join("scripts/moto-server");
    assert!(
        root.join(".venv/bin/moto_server").exists(),
        "moto is needed: run scripts/test (it installs moto[server] into .venv), or set PINFLEET_TEST_MOTO_URL"
    );
    p
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts a moto server with extra environment; it dies with this process.
/// (PR_SET_PDEATHSIG fires when the spawning *thread* ends, so the spawn
/// happens on a thread that lives as long as the process.)
pub fn start_moto(extra_env: &[(&str, &str)]) -> (String, Child) {
    let env: Vec<(String, String)> = extra_env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        tx.send(spawn_moto(&pairs)).unwrap();
        loop {
            std::thread::park();
        }
    });
    rx.recv().unwrap()
}

fn spawn_moto(extra_env: &[(&str, &str)]) -> (String, Child) {
    let port = free_port();
    let mut cmd = Command::new(moto_binary());
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("MOTO_ENABLE_AMI_VALIDATION", "true")
        .env("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")
        .env("MOTO_ENABLE_KEYPAIR_VALIDATION", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    #[cfg(target_os = "linux")]
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            // Die with the test process, however it ends.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().expect("starting moto_server");
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..1200 {
        let ready = std::process::Command::new("curl")
            .args(["-sf", &format!("{url}/moto-api/data.json")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return (url, child);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("moto did not start on {url}");
}

/// The shared moto server for this test run.
pub fn moto_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("PINFLEET_TEST_MOTO_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            let (url, child) = start_moto(&[]);
            std::mem::forget(child);
            url
        }
    })
    .clone()
}

/// A 12-digit moto account no other test uses.
pub fn fresh_account() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    format!("{:06}{:06}", std::process::id() % 1_000_000, n + 100)
}

/// One test's world: a moto account, a clusters folder, a PINFLEET_HOME.
pub struct World {
    pub dir: tempfile::TempDir,
    pub endpoint: String,
    pub account: String,
    pub cluster: String,
    pub extra_env: Vec<(String, String)>,
}

impl World {
    /// A cluster like dev-local (1 control-plane machine, `general` with
    /// `nodes` machines), with its own state bucket.
    pub fn new(name: &str, nodes: u32) -> World {
        let dir = tempfile::tempdir().unwrap();
        let account = fresh_account();
        let w = World {
            dir,
            endpoint: moto_url(),
            account: account.clone(),
            cluster: name.to_string(),
            extra_env: Vec::new(),
        };
        std::fs::create_dir_all(w.clusters_dir().join("bases")).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::copy(root.join("clusters/bases/aws-standard.yaml"), w.clusters_dir().join("bases/aws-standard.yaml"))
            .unwrap();
        w.write_cluster(&w.cluster_yaml(nodes, "t3.large"));
        w
    }

    pub fn clusters_dir(&self) -> PathBuf {
        self.dir.path().join("clusters")
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.clusters_dir().join(format!("{}.yaml", self.cluster))
    }

    pub fn bucket(&self) -> String {
        format!("pf-test-{}-{}", self.account, self.cluster)
    }

    pub fn cluster_yaml(&self, nodes: u32, machine_type: &str) -> String {
        let src =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml")).unwrap();
        src.replace("name: dev-local", &format!("name: {}", self.cluster))
            .replace("s3://pinfleet-state-dev/clusters", &format!("s3://{}/clusters", self.bucket()))
            .replace("      desired: 3\n", &format!("      desired: {nodes}\n"))
            .replace("      minSize: 2\n      maxSize: 6\n", "      minSize: 0\n      maxSize: 40\n")
            .replace("machineType: t3.large", &format!("machineType: {machine_type}"))
    }

    pub fn write_cluster(&self, yaml: &str) {
        std::fs::write(self.cluster_file(), yaml).unwrap();
    }

    pub fn command(&self, args: &[&str]) -> Command {
        // PINFLEET_TEST_BIN: a copy of the binary, for build folders shared
        // by worktrees (another build may replace target/debug/pinfleet
        // while these tests run).
        let bin = std::env::var("PINFLEET_TEST_BIN")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_pinfleet").to_string());
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("PINFLEET_CLUSTERS_DIR", self.clusters_dir())
            .env("PINFLEET_HOME", self.dir.path().join("home"))
            .env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("PINFLEET_MOTO_ACCOUNT_ID", &self.account)
            .env("NO_COLOR", "1")
            .env("PINFLEET_SKIP_ADDONS", "true")
            // The sim runs no etcd: rolls of its control planes say why they
            // have no backup (tests of the gate remove this).
            .env("PINFLEET_SKIP_BACKUP", "rehearsal on the sim, which runs no etcd")
            .env_remove("PINFLEET_FAULTS")
            .env_remove("PINFLEET_TEST_STEP_DELAY_MS")
            .env_remove("AWS_PROFILE");
        for (k, v) in &self.extra_env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs and asserts success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "pinfleet {args:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `pinfleet <args> -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    /// Live instances of the cluster, as `get instances` reports them.
    pub fn instances(&self) -> Vec<serde_json::Value> {
        let v = self.json(&["get", "instances", &self.cluster]);
        v.as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] != "terminated" && i["state"] != "shutting-down")
            .cloned()
            .collect()
    }

    /// An SDK client in this world's moto account, with this process's AWS
    /// environment pointed at moto (every test sets the same values, so
    /// parallel tests agree).
    pub async fn aws(&self) -> pinfleet::cloud::aws::Aws {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_ENDPOINT_URL", &self.endpoint);
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        pinfleet::cloud::aws::Aws::connect(&pinfleet::cloud::aws::AwsOptions {
            region: Some("us-east-1".into()),
            moto_account: Some(self.account.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
    }

    /// The cluster's node simulator (Nodes for its machines, with a pod
    /// network already: no addons are installed) and the serving-certificate
    /// approver (control-plane rolls read etcd through a pod's log).
    pub fn node_sim(&self, cluster: &str, kubeconfig: &Path) -> Child {
        let kc = kubeconfig.to_str().unwrap();
        let child = self
            .command(&[
                "sim",
                "--cluster",
                cluster,
                "--kubeconfig",
                kc,
                "--boot-delay",
                "1s",
                "--network",
                "preinstalled",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        approver(kubeconfig);
        child
    }

    pub fn instances_in(&self, group: &str) -> Vec<serde_json::Value> {
        self.instances().into_iter().filter(|i| i["group"] == group).collect()
    }
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// pinfleet's kubelet serving-certificate approver against a sim, as the
/// workload-controller addon runs it in a cluster: a control-plane roll
/// reads etcd from a pod's log, which needs the kubelet's serving
/// certificate. Waits for the kubeconfig to appear; ends with the test process.
pub fn approver(kubeconfig: &Path) -> std::thread::JoinHandle<()> {
    let kubeconfig = kubeconfig.to_path_buf();
    std::thread::spawn(move || {
        for _ in 0..1200 {
            if kubeconfig.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let client = pinfleet::kube::client_from_kubeconfig(&kubeconfig, pinfleet::kube::Retry::Default)
                .await
                .unwrap_or_else(|e| panic!("the approver found no sim at {} within 60 s: {e:#}", kubeconfig.display()));
            pinfleet::controller::serving::run(client, pinfleet::controller::serving::FromNode).await;
        })
    })
}

/// One of moto's Canonical x86_64 images (every account sees them).
pub async fn canonical_image(aws: &pinfleet::cloud::aws::Aws) -> String {
    let images = aws.ec2.describe_images().owners("099720109477").send().await.unwrap();
    images
        .images()
        .iter()
        .find(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64"))
        .and_then(|i| i.image_id())
        .unwrap()
        .to_string()
}

/// One small machine of `image` in `aws`'s account (EC2's answer as is:
/// a test may expect a refusal).
pub async fn launch(
    aws: &pinfleet::cloud::aws::Aws,
    image: &str,
) -> Result<
    aws_sdk_ec2::operation::run_instances::RunInstancesOutput,
    aws_sdk_ec2::error::SdkError<aws_sdk_ec2::operation::run_instances::RunInstancesError>,
> {
    aws.ec2
        .run_instances()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .send()
        .await
}

/// An image of `aws`'s own account named `name`, as a bake makes one: an
/// instance of Canonical's image, imaged.
pub async fn made_image(aws: &pinfleet::cloud::aws::Aws, name: &str) -> String {
    let base = canonical_image(aws).await;
    let run = launch(aws, &base).await.unwrap();
    let instance = run.instances()[0].instance_id().unwrap().to_string();
    let image = aws.ec2.create_image().instance_id(&instance).name(name).send().await.unwrap();
    image.image_id().unwrap().to_string()
}

/// The file `import kops` writes of the fixture's state store, at
/// `clusters/prod.yaml`, with pinfleet's own state beside it in `bucket`;
/// its `nodes` group sized as the running one (`nodes` machines).
pub async fn import_kops_prod(
    w: &World,
    aws: &pinfleet::cloud::aws::Aws,
    bucket: &str,
    nodes: u32,
) -> std::path::PathBuf {
    let store = format!("file://{}/tests/fixtures/kops/prod.k8s.example.com", env!("CARGO_MANIFEST_DIR"));
    let file = w.clusters_dir().join("prod.yaml");
    let state = format!("s3://{bucket}/pinfleet");
    let file_arg = file.to_str().unwrap();
    w.ok(&["import", "kops", "--state", &store, "--owner", "platform", "--state-store", &state, "--out", file_arg]);
    // moto has no image of that name: the file names one of moto's own
    // Canonical images, as the operator would name today's.
    let canonical = aws.ec2.describe_images().image_ids(canonical_image(aws).await).send().await.unwrap();
    let canonical = canonical.images()[0].name().unwrap().to_string();
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replace("ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610", &canonical);
    let sized = format!("    minSize: {nodes}\n    maxSize: {}\n", nodes.max(12));
    let text = text.replace("    minSize: 3\n    maxSize: 12\n", &sized);
    std::fs::write(&file, text).unwrap();
    file
}
