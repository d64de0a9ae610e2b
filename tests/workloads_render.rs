//! The pure translation CR → native objects: snapshots of every kind in
//! several variants, every object typed as the real Kubernetes kind, and the
//! injection rules checked one by one.

use std::collections::BTreeMap;

use pinfleet::workloads::render::{self, Context, RenderError, RuntimeProfile, INFRASTRUCTURE_LABEL};
use pinfleet::workloads::*;
use serde_json::{json, Value};

fn ctx() -> Context {
    Context {
        cluster: "prod-use1".into(),
        profile: RuntimeProfile::default_profile("2026.11.1"),
        namespace_labels: BTreeMap::new(),
    }
}

fn cr<T: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> T {
    let mut spec = spec;
    spec["owner"] = json!({"team": "feeds", "project": "home"});
    if spec.get("template").is_none() {
        spec["template"] = json!({"spec": {"containers": [{"name": "app", "image": "feeds/app:1.0", "ports": [{"containerPort": 8080}]}]}});
    }
    serde_json::from_value(json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": "feeds", "uid": "00000000-0000-0000-0000-000000000001"}, "spec": spec})).unwrap()
}

/// Each rendered object must be a valid instance of its Kubernetes type.
fn typed(objects: &[Value]) {
    use k8s_openapi::api::{
        apps::v1 as apps, batch::v1 as batch, core::v1 as core, networking::v1 as net, policy::v1 as policy,
    };
    for o in objects {
        let kind = o["kind"].as_str().unwrap();
        let r = match kind {
            "Deployment" => serde_json::from_value::<apps::Deployment>(o.clone()).map(|_| ()),
            "DaemonSet" => serde_json::from_value::<apps::DaemonSet>(o.clone()).map(|_| ()),
            "StatefulSet" => serde_json::from_value::<apps::StatefulSet>(o.clone()).map(|_| ()),
            "Job" => serde_json::from_value::<batch::Job>(o.clone()).map(|_| ()),
            "CronJob" => serde_json::from_value::<batch::CronJob>(o.clone()).map(|_| ()),
            "Service" => serde_json::from_value::<core::Service>(o.clone()).map(|_| ()),
            "ServiceAccount" => serde_json::from_value::<core::ServiceAccount>(o.clone()).map(|_| ()),
            "ConfigMap" => serde_json::from_value::<core::ConfigMap>(o.clone()).map(|_| ()),
            "PersistentVolumeClaim" => serde_json::from_value::<core::PersistentVolumeClaim>(o.clone()).map(|_| ()),
            "Ingress" => serde_json::from_value::<net::Ingress>(o.clone()).map(|_| ()),
            "PodDisruptionBudget" => serde_json::from_value::<policy::PodDisruptionBudget>(o.clone()).map(|_| ()),
            other => panic!("unexpected kind {other}"),
        };
        r.unwrap_or_else(|e| panic!("{kind} {} is not a valid {kind}: {e}", o["metadata"]["name"]));
        assert_eq!(o["metadata"]["ownerReferences"][0]["controller"], true, "{kind} is owned by the CR");
        assert_eq!(o["metadata"]["labels"]["pinfleet.dev/team"], "feeds");
    }
}

fn snapshot(name: &str, objects: &[Value]) {
    typed(objects);
    insta::assert_snapshot!(name, serde_saphyr::to_string(&objects).unwrap());
}

fn pod_template<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let o = objects.iter().find(|o| o["kind"] == kind).unwrap();
    o.pointer("/spec/template").or_else(|| o.pointer("/spec/jobTemplate/spec/template")).unwrap()
}

#[test]
fn service_variants() {
    let minimal: PinterestService = cr("PinterestService", "home", json!({"replicas": 1}));
    snapshot("service_minimal", &render::service(&minimal, &ctx()).unwrap());
    let full: PinterestService = cr(
        "PinterestService",
        "home",
        json!({
            "replicas": 6, "tier": "Reserved",
            "strategy": {"maxSurge": "50%", "maxUnavailable": 1},
            "ports": [{"name": "http", "port": 8080}, {"name": "grpc", "port": 9090, "targetPort": "grpc"}],
            "ingress": {"className": "internal", "hosts": ["home.feeds.example.com"], "paths": ["/api"], "tls": true},
            "disruption": {"maxUnavailable": "10%"},
            "configTemplates": [{"name": "app.yaml", "mountPath": "/etc/app", "template": "threads: {{ threads }}\n", "vars": {"threads": "8"}}],
            "runtime": {"logging": {"enabled": false}, "overrides": {"traffic": {"requests": {"cpu": "200m", "memory": "128Mi"}}}},
        }),
    );
    let objects = render::service(&full, &ctx()).unwrap();
    let kinds: Vec<&str> = objects.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ServiceAccount", "ConfigMap", "Deployment", "Service", "Ingress", "PodDisruptionBudget"]);
    snapshot("service_full", &objects);
}

#[test]
fn sidecars_are_native_and_batch_pods_get_no_traffic_sidecar() {
    let svc: PinterestService = cr("PinterestService", "home", json!({"replicas": 2}));
    let objects = render::service(&svc, &ctx()).unwrap();
    let pod = pod_template(&objects, "Deployment");
    let init: Vec<(&str, Option<&str>)> = pod["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["restartPolicy"].as_str()))
        .collect();
    assert_eq!(
        init,
        [
            ("platform-init", None),
            ("identity", Some("Always")),
            ("traffic", Some("Always")),
            ("logging", Some("Always")),
            ("metrics", Some("Always"))
        ]
    );
    let traffic = &pod["spec"]["initContainers"][2];
    assert_eq!(traffic["lifecycle"]["preStop"]["exec"]["command"][1], "deregister");
    for c in pod["spec"]["initContainers"].as_array().unwrap() {
        assert_eq!(c["securityContext"]["runAsNonRoot"], true, "{}", c["name"]);
    }
    let env: BTreeMap<String, Value> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect();
    for k in ["PLATFORM_TEAM", "PLATFORM_PROJECT", "WORKLOAD_KIND", "WORKLOAD_NAME", "CLUSTER", "POD_IP", "NODE_NAME"] {
        assert!(env.contains_key(k), "{k}");
    }
    assert_eq!(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m", "default requests");
    assert_eq!(pod["spec"]["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");

    let job: PinterestJobSet = cr("PinterestJobSet", "index", json!({"shards": 8, "parallelism": 4}));
    let objects = render::jobset(&job, &ctx()).unwrap();
    let pod = pod_template(&objects, "Job");
    let names: Vec<&str> =
        pod["spec"]["initContainers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"traffic"), "{names:?}");
    let env: Vec<&str> =
        pod["spec"]["containers"][0]["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(env.contains(&"SHARD_INDEX") && env.contains(&"SHARD_COUNT"));
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
}

#[test]
fn a_profile_bump_changes_only_the_pod_template_annotation() {
    let svc: PinterestService = cr("PinterestService", "home", json!({"replicas": 2}));
    let a = render::service(&svc, &ctx()).unwrap();
    let mut next = ctx();
    next.profile.version = "2026.12.0".into();
    let b = render::service(&svc, &next).unwrap();
    assert_eq!(pod_template(&b, "Deployment")["metadata"]["annotations"]["pinfleet.dev/runtime-profile"], "2026.12.0");
    assert_ne!(pod_template(&a, "Deployment"), pod_template(&b, "Deployment"), "a new template means a rollout");
    // A CR that pins a version keeps it.
    let pinned: PinterestService =
        cr("PinterestService", "home", json!({"replicas": 2, "runtime": {"version": "2026.11.1"}}));
    let c = render::service(&pinned, &next).unwrap();
    assert_eq!(pod_template(&c, "Deployment")["metadata"]["annotations"]["pinfleet.dev/runtime-profile"], "2026.11.1");
}

#[test]
fn jobset_variants() {
    let shared: PinterestJobSet = cr(
        "PinterestJobSet",
        "index",
        json!({"shards": 16, "parallelism": 8, "backoffLimitPerIndex": 2, "ttlSecondsAfterFinished": 3600,
        "volumeClaimTemplates": [{"name": "scratch", "scope": "PerShard", "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}},
                                 {"name": "corpus", "scope": "Shared", "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Ti"}}}}]}),
    );
    let objects = render::jobset(&shared, &ctx()).unwrap();
    assert!(objects.iter().any(|o| o["kind"] == "PersistentVolumeClaim" && o["metadata"]["name"] == "index-corpus"));
    snapshot("jobset_claims", &objects);
    let too_wide: PinterestJobSet = cr("PinterestJobSet", "index", json!({"shards": 2, "parallelism": 3}));
    assert!(matches!(render::jobset(&too_wide, &ctx()), Err(RenderError::Invalid(_))));
}

#[test]
fn cronjob_daemon_statefulset_variants() {
    let cj: PinterestCronJob = cr(
        "PinterestCronJob",
        "rollup",
        json!({"schedule": "0 * * * *", "timeZone": "America/Los_Angeles", "concurrencyPolicy": "Forbid", "job": {"shards": 4, "backoffLimit": 1}}),
    );
    snapshot("cronjob_sharded", &render::cronjob(&cj, &ctx()).unwrap());
    let ds: PinterestDaemon = cr(
        "PinterestDaemon",
        "node-agent",
        json!({"privileged": true, "nodeSelector": {"pinfleet.dev/pool": "general"}}),
    );
    let denied = render::daemon(&ds, &ctx()).unwrap_err();
    assert!(denied.to_string().contains(INFRASTRUCTURE_LABEL), "{denied}");
    let mut infra = ctx();
    infra.namespace_labels.insert(INFRASTRUCTURE_LABEL.into(), "true".into());
    snapshot("daemon_privileged", &render::daemon(&ds, &infra).unwrap());
    let sts: PinterestStatefulSet = cr(
        "PinterestStatefulSet",
        "cache",
        json!({"replicas": 3, "podManagementPolicy": "Parallel",
        "volumeClaimTemplates": [{"name": "data", "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}]}),
    );
    snapshot("statefulset", &render::statefulset(&sts, &ctx()).unwrap());
}

#[test]
fn training_rendezvous() {
    let pt: PinterestTrainingJob = cr(
        "PinterestTrainingJob",
        "ranker",
        json!({"framework": "PyTorch", "roles": [{"name": "worker", "replicas": 4}], "accelerators": {"type": "nvidia.com/gpu", "count": 8}}),
    );
    let objects = render::training(&pt, &ctx()).unwrap();
    let pod = pod_template(&objects, "Job");
    let env: BTreeMap<String, String> = pod["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["name"].as_str()?.to_string(), e["value"].as_str()?.to_string())))
        .collect();
    assert_eq!(env["MASTER_ADDR"], "ranker-worker-0.ranker");
    assert_eq!(env["WORLD_SIZE"], "4");
    assert_eq!(env["RANK"], "$(SHARD_INDEX)");
    assert_eq!(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], 8);
    snapshot("training_pytorch", &objects);
    let tf: PinterestTrainingJob = cr(
        "PinterestTrainingJob",
        "ranker",
        json!({"framework": "TensorFlow", "roles": [{"name": "chief", "replicas": 1}, {"name": "worker", "replicas": 2}, {"name": "ps", "replicas": 1}]}),
    );
    let objects = render::training(&tf, &ctx()).unwrap();
    assert_eq!(objects.iter().filter(|o| o["kind"] == "Job").count(), 3);
    let worker = objects.iter().find(|o| o["metadata"]["name"] == "ranker-worker").unwrap();
    let tf_config = worker["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TF_CONFIG")
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_string();
    let parsed: Value = serde_json::from_str(&tf_config.replace("$(SHARD_INDEX)", "1")).unwrap();
    assert_eq!(parsed["task"], json!({"type": "worker", "index": 1}));
    assert_eq!(parsed["cluster"]["worker"], json!(["ranker-worker-0.ranker:23456", "ranker-worker-1.ranker:23456"]));
    snapshot("training_tensorflow", &objects);
}
