//! `pinfleet diff`: drift by layer on a cluster of the sim (addons changed
//! and deleted by hand, a platform workload's child edited), the fleet's
//! table with a cluster that cannot be reached, and clusters compared by
//! what they run (the AWS layers are tested on moto in tests/ami.rs).

#[path = "support/kube.rs"]
mod kube_env;
#[path = "support/local.rs"]
mod local;

use std::path::Path;
use std::process::Output;

use kube_env::KubeEnv;
use local::{pinfleet, text};

fn kubectl(kc: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kc)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(kc: &Path, args: &[&str], stdin: Option<&str>) {
    let o = kubectl(kc, args, stdin);
    assert!(o.status.success(), "kubectl {args:?}: {}", text(&o));
}

/// The local sim cluster, destroyed with the test.
struct SimCluster {
    home: std::path::PathBuf,
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        let _ = pinfleet(&self.home, &["destroy", "dev-local", "--target", "sim", "--yes"]);
    }
}

fn layers(o: &Output) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("diff -o json prints JSON ({e}): {}", text(o)));
    v
}

#[test]
fn a_sim_cluster_in_sync_then_each_hand_edit_is_named_with_its_layer_and_fix() {
    if std::env::var("PINFLEET_TEST_KUBECONFIG").is_ok_and(|v| !v.is_empty()) {
        eprintln!("skipped on a real cluster: bootstraps a cluster of the sim with its own kubelet");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let _c = SimCluster { home: home.clone() };
    let out = pinfleet(&home, &["bootstrap", "dev-local", "--target", "sim", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let kc = home.join("sim/dev-local/kubeconfig.yaml");

    // Just bootstrapped: nothing drifted (the AWS layers do not apply here).
    let out = pinfleet(&home, &["diff", "dev-local", "--target", "sim"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("aws         not checked: --target sim has no AWS side"), "{t}");
    for l in ["kubernetes", "addons", "workloads"] {
        assert!(t.contains(&format!("  {l:<11} in sync")), "{l}: {t}");
    }

    // By hand: an addon's value, an addon's DaemonSet deleted, and a
    // platform workload's Deployment patched.
    ok(&kc, &["-n", "pinfleet-monitoring", "scale", "deployment/kube-state-metrics", "--replicas=3"], None);
    ok(&kc, &["-n", "pinfleet-monitoring", "delete", "daemonset", "node-exporter"], None);
    ok(&kc, &["create", "namespace", "team-a"], None);
    let service = "apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestService\nmetadata: {name: web, namespace: team-a}\nspec:\n  owner: {team: team-a, project: web}\n  replicas: 1\n  template:\n    spec:\n      containers: [{name: app, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: 100m, memory: 64Mi}}}]\n";
    ok(&kc, &["apply", "-f", "-"], Some(service));
    let mut made = false;
    for _ in 0..300 {
        if kubectl(&kc, &["-n", "team-a", "get", "deployment", "web"], None).status.success() {
            made = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(made, "the controller made the service's Deployment");
    // A workload nobody edited is no drift.
    let out = pinfleet(&home, &["diff", "dev-local", "--target", "sim", "--layer", "workloads"]);
    assert_eq!(out.status.code(), Some(0), "the controller's own writes are not drift: {}", text(&out));
    ok(
        &kc,
        &["-n", "team-a", "patch", "deployment", "web", "--type", "merge", "-p", r#"{"spec":{"minReadySeconds":5}}"#],
        None,
    );

    let out = pinfleet(&home, &["diff", "dev-local", "--target", "sim", "-o", "json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v = layers(&out);
    let l = &v[0]["layers"];
    assert_eq!(l["kubernetes"]["state"], "inSync", "{l:#}");
    let addons = l["addons"]["findings"].as_array().unwrap();
    let find = |s: &str| {
        addons.iter().find(|f| f["subject"].as_str().unwrap().contains(s)).unwrap_or_else(|| panic!("{s}: {addons:#?}"))
    };
    let ds = find("DaemonSet/pinfleet-monitoring/node-exporter");
    assert_eq!(ds["what"], "missing from the cluster (deleted, or never installed)");
    assert_eq!(ds["fix"], "pinfleet addons apply dev-local");
    let ksm = find("Deployment/pinfleet-monitoring/kube-state-metrics");
    assert_eq!(ksm["what"], "changed in the cluster: spec.replicas");
    assert!(ksm["detail"].as_str().unwrap().contains("-  replicas: 3\n+  replicas: 1"), "{ksm:#}");
    let w = &l["workloads"]["findings"][0];
    assert_eq!(w["subject"], "Deployment team-a/web", "{l:#}");
    let what = w["what"].as_str().unwrap();
    assert!(
        what.starts_with("edited by hand (kubectl-patch at ")
            && what.ends_with("under PinterestService team-a/web: spec.minReadySeconds"),
        "{what}"
    );

    // The scheduled e2e run records the drift (metrics the monitoring
    // addon alerts on when it lasts a day), without failing on the edit.
    let out = pinfleet(&home, &["e2e", "dev-local", "--target", "sim", "--phase", "cluster", "--record"]);
    assert!(text(&out).contains("children-unedited"), "{}", text(&out));
    let metrics = kubectl(
        &kc,
        &["-n", "pinfleet-system", "get", "configmap", "pinfleet-e2e-results", "-o", "jsonpath={.data.metrics\\.prom}"],
        None,
    );
    let m = text(&metrics);
    assert!(m.contains("pinfleet_drift_objects{cluster=\"dev-local\",layer=\"addons\"} 2"), "{m}");
    assert!(m.contains("pinfleet_drift_objects{cluster=\"dev-local\",layer=\"workloads\"} 1"), "{m}");
    assert!(!m.contains("pinfleet_drift_since_timestamp_seconds{cluster=\"dev-local\"} 0"), "{m}");
    assert!(m.contains("check=\"children-unedited\"} 0"), "a hand edit warns, it does not fail the run: {m}");

    // The fleet's view: dev-local drifted, localstack-dev (the other dev
    // cluster) has no cluster here and is reported, not fatal.
    let out = pinfleet(&home, &["diff", "-l", "env=dev", "--target", "sim", "--layer", "kubernetes,addons"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    let table: Vec<&str> = t.lines().take(3).collect();
    assert_eq!(
        table,
        [
            "CLUSTER         KUBERNETES   ADDONS",
            "dev-local       in sync      drifted",
            "localstack-dev  unreachable  unreachable",
        ],
        "{t}"
    );
    assert!(t.contains("no kubeconfig at"), "{t}");

    // Put right by the fixes it names.
    let out = pinfleet(&home, &["addons", "apply", "dev-local", "--target", "sim"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = pinfleet(&home, &["diff", "dev-local", "--target", "sim", "--layer", "addons"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// Three clusters meant to match: files differing only in names, CIDRs,
/// zones and the stage label; their sims' nodes report the same facts,
/// then one cluster's nodes another kernel.
#[test]
fn clusters_that_should_match_compare_equal_and_the_odd_kernel_is_named() {
    let envs: Vec<KubeEnv> = (0..3).map(|_| KubeEnv::start()).collect();
    if envs[0].skip_on_real("compares three API servers, and a real cluster is one") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let clusters = dir.path().join("clusters");
    std::fs::create_dir_all(clusters.join("bases")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(root.join("clusters/bases/aws-standard.yaml"), clusters.join("bases/aws-standard.yaml")).unwrap();
    std::fs::write(
        clusters.join("fleet.yaml"),
        "stages:\n  - {name: one, selector: stage=one}\n  - {name: two, selector: stage=two}\n",
    )
    .unwrap();
    let names = ["zone-a", "zone-b", "zone-c"];
    for (i, n) in names.iter().enumerate() {
        let zone = ["us-east-1a", "us-east-1b", "us-east-1c"][i];
        let yaml = format!(
            "extends: bases/aws-standard.yaml\nmetadata:\n  name: {n}\n  labels: {{region-set: use1, stage: {}}}\nspec:\n  owner: search\n  cloud: {{region: us-east-1, zones: [{zone}]}}\n  stateStore: s3://state-{n}/clusters\n  network:\n    vpcCidr: 10.{i}.0.0/16\n    subnets:\n      - {{name: private, zone: {zone}, cidr: 10.{i}.0.0/18, type: private}}\n      - {{name: public, zone: {zone}, cidr: 10.{i}.64.0/18, type: public}}\n  instanceGroups:\n    - {{name: control-plane, machineType: t3.medium, minSize: 1, maxSize: 1, subnets: [private]}}\n    - {{name: general, machineType: t3.large, minSize: 2, maxSize: 4, subnets: [private]}}\n",
            if i == 0 { "one" } else { "two" }
        );
        std::fs::write(clusters.join(format!("{n}.yaml")), yaml).unwrap();
    }
    // Each cluster's nodes: two of `general`, as their kubelets report themselves.
    let node = |env: &KubeEnv, name: &str, kernel: &str| {
        let yaml = format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{pinfleet.dev/instance-group: general}}\n");
        env.ok_stdin(&["apply", "-f", "-"], &yaml);
        let status = format!(
            r#"{{"status":{{"nodeInfo":{{"kernelVersion":"{kernel}","osImage":"Ubuntu 24.04.3 LTS","containerRuntimeVersion":"containerd://2.1.4","kubeletVersion":"v1.36.2","architecture":"amd64","machineID":"","systemUUID":"","bootID":"","kubeProxyVersion":"","operatingSystem":"linux"}},"allocatable":{{"cpu":"2","memory":"8Gi","pods":"110"}}}}}}"#
        );
        env.ok_cmd(&["patch", "node", name, "--subresource=status", "--type=merge", "-p", &status]);
    };
    for (env, n) in envs.iter().zip(names) {
        for i in 0..2 {
            node(env, &format!("{n}-general-{i}"), "6.8.0-1016-aws");
        }
    }
    let kubeconfigs: Vec<String> =
        envs.iter().zip(names).map(|(e, n)| format!("{n}={}", e.kubeconfig.display())).collect();
    let run = |args: &[&str]| {
        let mut a: Vec<&str> = vec!["--clusters-dir", clusters.to_str().unwrap()];
        a.extend_from_slice(args);
        a.extend(["--target", "sim"]);
        for k in &kubeconfigs {
            a.extend(["--kubeconfig", k.as_str()]);
        }
        pinfleet(dir.path(), &a)
    };
    let out = run(&["diff", "zone-a", "zone-b"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("zone-a, zone-b run the same"), "{}", text(&out));

    // zone-c's nodes boot another kernel.
    for i in 0..2 {
        node(&envs[2], &format!("zone-c-general-{i}"), "6.14.0-1011-aws");
    }
    let out = run(&["diff", "--all-of", "region-set=use1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(t.starts_with("odd one out: zone-c (1 fact differs from the rest)\n"), "{t}");
    assert!(t.contains("  nodes of general kernelVersion\n"), "{t}");
    assert!(t.contains("    zone-c  6.14.0-1011-aws on every node  <- odd one out"), "{t}");
    assert!(t.contains("    zone-a  6.8.0-1016-aws on every node\n"), "{t}");
    let out = run(&["diff", "--all-of", "region-set=use1", "-o", "json"]);
    let v = layers(&out);
    assert_eq!(v.as_array().unwrap().len(), 1, "only the kernel differs: {v:#}");
    assert_eq!(v[0]["odd"], serde_json::json!(["zone-c"]));
}
