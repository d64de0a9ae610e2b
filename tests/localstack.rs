//! `--target localstack` against the real LocalStack Community (started by
//! scripts/test, which installs it): a cluster whose API endpoint is an
//! Elastic IP goes through plan → bootstrap → empty re-plan → get →
//! destroy → orphans without one ELBv2 call; a cluster that needs a load
//! balancer is refused before anything is written, with the ways out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    url: String,
    dir: tempfile::TempDir,
    suffix: String,
}

fn env() -> Env {
    let url = std::env::var("PINFLEET_TEST_LOCALSTACK_URL").unwrap_or_else(|_| {
        panic!(
            "PINFLEET_TEST_LOCALSTACK_URL is not set: run scripts/test, which installs LocalStack Community \
             (Python 3.12) and starts it on 127.0.0.1"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(dir.path().join("clusters/bases")).unwrap();
    std::fs::copy(root.join("clusters/bases/aws-standard.yaml"), dir.path().join("clusters/bases/aws-standard.yaml"))
        .unwrap();
    // LocalStack's state is shared by every run against it: names of our own.
    let suffix = format!("{}{}", std::process::id() % 100_000, rand_suffix());
    Env { url, dir, suffix }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() % 1000
}

impl Env {
    /// A copy of an example cluster under a name and bucket of this run.
    fn cluster(&self, example: &str) -> String {
        let name = format!("{example}-{}", self.suffix);
        let src =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("clusters/{example}.yaml")))
                .unwrap();
        let yaml = src
            .replace(&format!("name: {example}"), &format!("name: {name}"))
            .replace("s3://pinfleet-state-localstack/clusters", &format!("s3://pf-ls-{name}/clusters"))
            .replace("s3://pinfleet-state-dev/clusters", &format!("s3://pf-ls-{name}/clusters"));
        std::fs::write(self.dir.path().join(format!("clusters/{name}.yaml")), yaml).unwrap();
        name
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_pinfleet"))
            .args(args)
            .args(["--target", "localstack"])
            .env("PINFLEET_CLUSTERS_DIR", self.dir.path().join("clusters"))
            .env("PINFLEET_HOME", self.home())
            .env("AWS_ENDPOINT_URL", &self.url)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("NO_COLOR", "1")
            .env_remove("AWS_PROFILE")
            .env_remove("PINFLEET_SKIP_ADDONS")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "pinfleet {args:?} --target localstack failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.ok(&a);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
    }

    fn bucket_exists(&self, bucket: &str) -> bool {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let conf = aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .endpoint_url(&self.url)
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .credentials_provider(aws_sdk_s3::config::Credentials::new("test", "test", None, None, "test"))
                .force_path_style(true)
                .build();
            aws_sdk_s3::Client::from_conf(conf).head_bucket().bucket(bucket).send().await.is_ok()
        })
    }
}

fn no_elbv2_calls(plan: &serde_json::Value) {
    let calls = plan["aws_calls"].as_object().expect("the plan counts its AWS calls");
    assert!(calls.keys().all(|k| !k.contains("LoadBalancer") && !k.contains("Target")), "ELBv2 was called: {calls:?}");
    assert!(calls.keys().any(|k| k.contains("DescribeInstances")), "{calls:?}");
}

#[test]
fn an_elastic_ip_cluster_goes_through_its_whole_life_on_localstack() {
    let e = env();
    let name = e.cluster("localstack-dev");
    let plan = e.json(&["plan", &name]);
    no_elbv2_calls(&plan);
    let keys: Vec<&str> = plan["changes"].as_array().unwrap().iter().filter_map(|c| c["key"].as_str()).collect();
    assert!(keys.contains(&"eip/api") && !keys.contains(&"lb"), "{keys:?}");

    e.ok(&["bootstrap", &name, "--yes", "--skip-addons"]);
    let replan = e.json(&["plan", &name]);
    assert!(replan["changes"].as_array().unwrap().is_empty(), "a second plan has no changes: {replan:#}");
    no_elbv2_calls(&replan);

    let instances = e.json(&["get", "instances", &name]);
    let live: Vec<&serde_json::Value> =
        instances.as_array().unwrap().iter().filter(|i| i["state"] == "running" || i["state"] == "pending").collect();
    assert_eq!(live.len(), 3, "{instances:#}");
    // The kubeconfig names the Elastic IP.
    let kc = std::fs::read_to_string(e.home().join(format!("kubeconfig/{name}.yaml"))).unwrap();
    let server = kc.lines().find(|l| l.trim_start().starts_with("server:")).unwrap_or_default();
    assert!(server.contains(":6443") && !server.contains("elb.amazonaws.com"), "{server}");
    e.ok(&["ami", "resolve", &name]);
    e.ok(&["history", &name]);

    e.ok(&["destroy", &name, "--yes"]);
    let after = e.json(&["get", "instances", &name]);
    assert!(after.as_array().unwrap().iter().all(|i| i["state"] != "running" && i["state"] != "pending"), "{after:#}");
    let orphans = e.ok(&["orphans"]);
    assert!(!orphans.contains(&name), "{orphans}");
}

#[test]
fn a_cluster_that_needs_a_load_balancer_is_refused_before_its_first_write() {
    let e = env();
    let name = e.cluster("dev-local");
    let bucket = format!("pf-ls-{name}");
    let out = e.run(&["bootstrap", &name, "--yes", "--skip-addons"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("this AWS endpoint has no Elastic Load Balancing v2"), "{err}");
    assert!(err.contains(&format!("{name} needs it: its API endpoint is a network load balancer")), "{err}");
    assert!(err.contains("Nothing was changed"), "{err}");
    assert!(err.contains("spec.api.loadBalancer.type: elastic-ip") && err.contains("LocalStack Pro"), "{err}");
    assert!(!e.bucket_exists(&bucket), "a run that could not proceed left its state bucket");
    assert!(!e.home().join("kubeconfig").exists());
    // The plan says the same; what needs no load balancer still works.
    let plan = e.run(&["plan", &name]);
    assert!(!plan.status.success() && String::from_utf8_lossy(&plan.stderr).contains("no Elastic Load Balancing v2"));
    e.ok(&["ami", "resolve", &name]);
    e.ok(&["destroy", &name, "--yes"]);
}
