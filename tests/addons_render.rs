//! The addon set rendered for every example cluster (snapshots), and the
//! problems found before anything is applied: unknown values, version pins,
//! dependencies, broken manifests (with addon, file and line).

use std::path::{Path, PathBuf};

use pinfleet::addons::{self, package};
use pinfleet::spec::{load_cluster, LoadOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn cluster(name: &str) -> pinfleet::spec::Cluster {
    load_cluster(&root().join("clusters").join(format!("{name}.yaml")), &LoadOptions::default()).unwrap().cluster
}

fn packages() -> Vec<addons::Package> {
    // Relative paths, so snapshots and messages don't depend on the checkout.
    std::env::set_current_dir(root()).unwrap();
    addons::load_all(Path::new("addons")).unwrap()
}

#[test]
fn every_example_cluster_renders_its_addons() {
    let packages = packages();
    for name in ["dev-local", "staging-use1", "prod-use1", "prod-usw2"] {
        let set = addons::render_for(&cluster(name), &packages).unwrap();
        let mut text = String::new();
        for a in &set {
            for o in &a.objects {
                text.push_str(&format!("---\n# {} {}: {}\n", a.name, a.version, o.key));
                // The CRDs' bodies are generated and kept current by their own test.
                if o.key.kind != "CustomResourceDefinition" {
                    text.push_str(&serde_saphyr::to_string(&o.value).unwrap());
                }
            }
        }
        insta::assert_snapshot!(format!("addons-{name}"), text);
    }
}

#[test]
fn addons_come_after_what_they_depend_on_and_crds_first() {
    let set = addons::render_for(&cluster("dev-local"), &packages()).unwrap();
    let pos = |n: &str| set.iter().position(|a| a.name == n).unwrap();
    assert!(pos("platform-crds") < pos("workload-controller"));
    assert!(pos("runtime-support") < pos("workload-controller"));
    assert!(pos("node-exporter") < pos("monitoring"));
    for a in &set {
        let ranks: Vec<bool> = a.objects.iter().map(|o| o.key.kind == "CustomResourceDefinition").collect();
        assert!(ranks.windows(2).all(|w| w[0] >= w[1]), "{}: CRDs first", a.name);
        for o in &a.objects {
            let labels = &o.value["metadata"]["labels"];
            assert_eq!(labels["pinfleet.dev/addon"], a.name.as_str());
            assert_eq!(labels["pinfleet.dev/addon-version"], a.version.as_str());
        }
    }
    // The runtime-support profiles are what the controller reads.
    let rs = set.iter().find(|a| a.name == "runtime-support").unwrap();
    let cm = rs.objects.iter().find(|o| o.key.kind == "ConfigMap").unwrap();
    assert_eq!(cm.value["data"]["default"], "1.5.0");
    for v in ["1.4.0", "1.5.0"] {
        let p: pinfleet::workloads::render::RuntimeProfile =
            serde_json::from_str(cm.value["data"][format!("profile-{v}.json")].as_str().unwrap()).unwrap();
        assert_eq!(p.version, v);
    }
}

fn with_addons(yaml_tail: &str) -> pinfleet::spec::Cluster {
    let src = std::fs::read_to_string(root().join("clusters/dev-local.yaml")).unwrap();
    let path = root().join("clusters/dev-local-test.yaml");
    pinfleet::spec::load_source(&path, &format!("{src}  addons:\n{yaml_tail}"), &LoadOptions::default())
        .unwrap()
        .cluster
}

fn errors(c: &pinfleet::spec::Cluster, packages: &[addons::Package]) -> String {
    addons::render_for(c, packages).unwrap_err().root_cause().to_string()
}

#[test]
fn values_pins_and_dependencies_are_checked() {
    let p = packages();
    let c = with_addons("    - {name: monitoring, values: {retention: 30d, retension: 7d}}\n");
    assert_eq!(
        errors(&c, &p),
        "addon monitoring: unknown value `retension` (it takes: prometheusImage, kubeStateMetricsImage, retention, scrapeInterval, amiMaxAgeDays, controllerNamespace)"
    );
    let c = with_addons("    - {name: log-agent, version: 3.1.0}\n");
    assert!(errors(&c, &p)
        .starts_with("addon log-agent: the cluster pins version 3.1.0, but addons/log-agent is version 3.2.4"));
    let c = with_addons("    - {name: platform-crds, enabled: false}\n");
    let e = errors(&c, &p);
    assert!(e.contains("addon workload-controller: depends on `platform-crds`, which this cluster disables"), "{e}");
    // Values reach the manifests; a disabled addon renders nothing.
    let c =
        with_addons("    - {name: monitoring, values: {retention: 30d}}\n    - {name: log-agent, enabled: false}\n");
    let set = addons::render_for(&c, &p).unwrap();
    assert!(set.iter().all(|a| a.name != "log-agent"));
    let prom =
        set.iter().flat_map(|a| &a.objects).find(|o| o.key.name == "prometheus" && o.key.kind == "Deployment").unwrap();
    assert!(prom.value.to_string().contains("--storage.tsdb.retention.time=30d"));
}

/// A copy of one package with one manifest replaced.
fn broken(manifest: &str) -> Vec<addons::Package> {
    let mut p = packages();
    let ne = p.iter_mut().find(|x| x.meta.name == "node-exporter").unwrap();
    ne.manifests =
        vec![package::Manifest { path: "addons/node-exporter/manifests/broken.yaml".into(), text: manifest.into() }];
    p
}

#[test]
fn broken_manifests_are_located() {
    let c = cluster("dev-local");
    let e = errors(&c, &broken("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: [1, 2\n"));
    assert!(e.starts_with("addon node-exporter: addons/node-exporter/manifests/broken.yaml:"), "{e}");
    assert!(e.contains("invalid YAML"), "{e}");
    let e = errors(
        &c,
        &broken("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\nkind: Service\nmetadata: {name: b}\n"),
    );
    assert_eq!(e, "addon node-exporter: addons/node-exporter/manifests/broken.yaml:6:1: the object has no apiVersion");
    let e = errors(
        &c,
        &broken("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  replicas: two\n  selector: {}\n  template: {}\n"),
    );
    assert!(
        e.starts_with("addon node-exporter: addons/node-exporter/manifests/broken.yaml:6:3: Deployment d at spec.replicas: invalid type"),
        "{e}"
    );
    let e = errors(&c, &broken("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ values.nope }}\n"));
    assert!(e.starts_with("addon node-exporter: addons/node-exporter/manifests/broken.yaml: Failed to render"), "{e}");
    assert!(e.contains("values.nope"), "{e}");
    let e = errors(&c, &broken("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n  namespace: y\n"));
    assert_eq!(
        e,
        "addon node-exporter: addons/node-exporter/manifests/broken.yaml:5:3: Namespace is cluster-scoped but names namespace y"
    );
}

#[test]
fn addon_yaml_errors_name_file_and_line() {
    let e = package::parse_meta(
        "name: x\nversion: 1.0.0\ndescription: d\nnamespace: n\nreadines: []\n",
        Path::new("addons/x/addon.yaml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("addons/x/addon.yaml:5:1: unknown field `readines`"), "{e}");
}

#[test]
fn the_ami_rollout_job_is_opt_in_and_runs_one_cronjob_per_cluster() {
    let p = packages();
    let set = addons::render_for(&cluster("dev-local"), &p).unwrap();
    assert!(set.iter().all(|a| a.name != "ami-rollout"), "off by default");
    let c = with_addons("    - {name: ami-rollout, enabled: true, values: {clusters: [prod-use1, prod-usw2], window: \"Sun 03:00-05:00 UTC\"}}\n");
    let set = addons::render_for(&c, &p).unwrap();
    let a = set.iter().find(|a| a.name == "ami-rollout").unwrap();
    let jobs: Vec<_> = a.objects.iter().filter(|o| o.key.kind == "CronJob").collect();
    assert_eq!(jobs.len(), 2);
    let args = &jobs[0].value["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        args,
        &serde_json::json!([
            "ami",
            "rollout",
            "prod-use1",
            "--window",
            "Sun 03:00-05:00 UTC",
            "--soak",
            "30m",
            "--yes",
            "--log-json"
        ])
    );
    assert_eq!(jobs[0].value["spec"]["concurrencyPolicy"], "Forbid");
}

/// The etcd backup agent, on by default: a DaemonSet on the control-plane
/// machines (their network, their etcd certificates and encryption
/// configuration) running `pinfleet etcd agent` with the cluster's backup
/// settings, verifying with kubeadm's own etcd image mounted as an image
/// volume (1.35 and later; before, `--no-verify`).
#[test]
fn the_etcd_backup_agent_runs_on_the_control_plane_with_the_clusters_settings() {
    let p = packages();
    let off = with_addons("    - {name: etcd-backup, enabled: false}\n");
    assert!(addons::render_for(&off, &p).unwrap().iter().all(|a| a.name != "etcd-backup"), "turned off by name");
    let c = cluster("dev-local");
    let set = addons::render_for(&c, &p).unwrap();
    let a = set.iter().find(|a| a.name == "etcd-backup").unwrap();
    let mut text = String::new();
    for o in &a.objects {
        text.push_str(&format!("---\n# {}\n{}", o.key, serde_saphyr::to_string(&o.value).unwrap()));
    }
    insta::assert_snapshot!("addon-etcd-backup", text);
    let spec = &a.objects[0].value["spec"]["template"]["spec"];
    let args: Vec<&str> =
        spec["containers"][0]["args"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let after = |flag: &str| args[args.iter().position(|a| *a == flag).unwrap() + 1];
    assert_eq!(&args[..3], ["etcd", "agent", c.metadata.name.as_str()]);
    assert_eq!(after("--state"), c.spec.state_store);
    assert_eq!(after("--interval"), "15m");
    assert_eq!(after("--delta-interval"), "30s");
    assert!(!args.contains(&"--no-verify"), "1.36 mounts etcd's image: {args:?}");
    let reference = spec["volumes"].as_array().unwrap().iter().find_map(|v| v["image"]["reference"].as_str()).unwrap();
    assert!(reference.starts_with("registry.k8s.io/etcd:3.6."), "{reference}");
    assert_eq!(spec["hostNetwork"], true);
}

/// cluster-autoscaler is opt-in; enabled, it renders the provider beside
/// cluster-autoscaler (snapshot), points the externalgrpc cloud-config at
/// the provider's Service, and the control plane's IAM policy grows the
/// launch and terminate permissions the provider needs (and only then).
#[test]
fn the_cluster_autoscaler_is_opt_in_and_points_at_pinfleets_provider() {
    let p = packages();
    let plain = cluster("dev-local");
    assert!(addons::render_for(&plain, &p).unwrap().iter().all(|a| a.name != "cluster-autoscaler"), "off by default");
    let policy = |c: &pinfleet::spec::Cluster| {
        pinfleet::cloud::iam::desired(c, None)
            .into_iter()
            .find(|r| r.role == pinfleet::spec::Role::ControlPlane)
            .unwrap()
            .policy
    };
    assert!(!policy(&plain).contains("ec2:RunInstances"));

    let c = with_addons("    - {name: cluster-autoscaler, enabled: true}\n");
    let set = addons::render_for(&c, &p).unwrap();
    let a = set.iter().find(|a| a.name == "cluster-autoscaler").unwrap();
    let mut text = String::new();
    for o in &a.objects {
        text.push_str(&format!("---\n# {}\n{}", o.key, serde_saphyr::to_string(&o.value).unwrap()));
    }
    insta::assert_snapshot!("addon-cluster-autoscaler", text);
    let config = a.objects.iter().find(|o| o.key.kind == "ConfigMap").unwrap();
    assert!(config.value["data"]["cloud-config.yaml"]
        .as_str()
        .unwrap()
        .contains("address: \"pinfleet-autoscaler.kube-system.svc:8086\""));
    let provider =
        a.objects.iter().find(|o| o.key.name == "pinfleet-autoscaler" && o.key.kind == "Deployment").unwrap();
    assert_eq!(
        provider.value["spec"]["template"]["spec"]["containers"][0]["args"],
        serde_json::json!(["autoscaler", "serve", "dev-local", "--listen", "0.0.0.0:8086", "--log-json"])
    );
    let with = policy(&c);
    assert!(with.contains("ec2:RunInstances") && with.contains("ec2:TerminateInstances"), "{with}");
    assert!(with.contains("arn:aws:iam::*:role/pinfleet/pinfleet-dev-local-nodes"), "{with}");
}

/// The e2e addon carries the cluster's own definition for its job (no
/// clusters ConfigMap to provide by hand): it loads back as the same cluster.
#[test]
fn the_e2e_job_gets_the_clusters_definition() {
    let c = cluster("prod-use1");
    let set = addons::render_for(&c, &packages()).unwrap();
    let e2e = set.iter().find(|a| a.name == "e2e").expect("the e2e addon is on by default");
    let cm = e2e.objects.iter().find(|o| o.key.kind == "ConfigMap" && o.key.name == "pinfleet-e2e-cluster").unwrap();
    let text = cm.value["data"]["prod-use1.yaml"].as_str().unwrap();
    let loaded = pinfleet::spec::load_source(Path::new("prod-use1.yaml"), text, &LoadOptions::default()).unwrap();
    // The same cluster, its bases merged in (so no `extends`).
    let mut want = c.clone();
    want.extends = None;
    assert_eq!(loaded.cluster, want);
}

/// The monitoring addon's etcd backup alerts, as Prometheus evaluates them
/// (`promtool test rules`, Debian's promtool from scripts/test).
#[path = "support/prometheus.rs"]
#[allow(dead_code)]
mod prom;

#[test]
fn the_etcd_backup_alerts_fire_on_a_stale_or_failed_backup_and_not_on_a_fresh_one() {
    let set = addons::render_for(&cluster("prod-use1"), &packages()).unwrap();
    let rules = set
        .iter()
        .flat_map(|a| &a.objects)
        .find(|o| o.key.kind == "ConfigMap" && o.key.name == "prometheus-rules")
        .expect("the monitoring addon's rules");
    let text = rules.value["data"]["platform.yml"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yml"), &text).unwrap();
    let check = std::process::Command::new(prom::bin("promtool"))
        .args(["check", "rules", "rules.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // prod: a backup every 15 minutes, the last verified one 40 minutes before
    // the evaluation (too old); fresh: verified a minute before; broken: its
    // last verification failed.
    let test = r#"rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'pinfleet_etcd_backup_interval_seconds{cluster="prod"}'
        values: '900x60'
      - series: 'pinfleet_etcd_backup_last_verified_timestamp_seconds{cluster="prod"}'
        values: '0x60'
      - series: 'pinfleet_etcd_backup_interval_seconds{cluster="fresh"}'
        values: '900x60'
      - series: 'pinfleet_etcd_backup_last_verified_timestamp_seconds{cluster="fresh"}'
        values: '0+60x60'
      - series: 'pinfleet_etcd_backup_last_verification_ok{cluster="broken"}'
        values: '1x30 0x30'
    alert_rule_test:
      - eval_time: 40m
        alertname: EtcdBackupTooOld
        exp_alerts:
          - exp_labels: {severity: page, cluster: prod}
            exp_annotations:
              summary: "the newest verified etcd backup of prod is older than twice its interval: `pinfleet etcd backups prod` shows what was taken and why it failed"
      - eval_time: 20m
        alertname: EtcdBackupVerificationFailed
        exp_alerts: []
      - eval_time: 40m
        alertname: EtcdBackupVerificationFailed
        exp_alerts:
          - exp_labels: {severity: page, cluster: broken}
            exp_annotations:
              summary: "the newest etcd backup of broken failed its restore: `pinfleet etcd verify broken` says why"
"#;
    std::fs::write(dir.path().join("test.yml"), test).unwrap();
    let out = std::process::Command::new(prom::bin("promtool"))
        .args(["test", "rules", "test.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
