//! Demand against an oracle that knows only what it generated: each
//! number is written in a random one of the forms Kubernetes reads, and
//! the expected demand is worked out from the numbers by Kubernetes' rule.

use super::*;
use proptest::prelude::*;
use serde_json::json;

fn ctx() -> Context {
    Context {
        cluster: "c1".into(),
        profile: render::RuntimeProfile::default_profile("v1"),
        namespace_labels: Default::default(),
    }
}

fn demand_of(w: &Value) -> Result<Demand, Vec<Located>> {
    let kind = w["kind"].as_str().unwrap();
    let children = children(kind, w, &ctx())?;
    demand(w, &children, None)
}

fn service(containers: Value, replicas: Value) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": "web", "namespace": "red"},
        "spec": {"owner": {"team": "red", "project": "web"}, "replicas": replicas,
            "template": {"spec": {"containers": containers}}}})
}

/// The default profile's sidecar: 50m and 64Mi.
const SIDECAR: Requests = Requests { cpu: 50, memory: 64 << 20, accelerators: [0; 5] };

#[test]
fn requests_written_as_numbers_count_as_what_they_say() {
    // Issue: `cpu: 8` and memory in bytes as JSON numbers were counted as the defaults.
    let w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": 8, "memory": 8589934592u64}}}]),
        json!(3),
    );
    let d = demand_of(&w).unwrap();
    // platform-init runs alone first; then 4 sidecars (identity, traffic,
    // logging, metrics) beside the app.
    let per_pod =
        Requests { cpu: 8000 + 4 * SIDECAR.cpu, memory: (8 << 30) + 4 * SIDECAR.memory, ..Default::default() };
    assert_eq!(
        d.sets,
        vec![PodSet {
            child: "Deployment/web".into(),
            field: "spec.template".into(),
            pods: 3,
            per_pod,
            scheduling: Value::Null
        }]
    );
    assert_eq!((d.cpu, d.memory, d.pods), (3 * per_pod.cpu, 3 * per_pod.memory, 3));
}

#[test]
fn a_sidecar_and_an_init_container_count_as_kubernetes_counts_them() {
    // Issue: a 16-cpu sidecar was counted as 200m.
    let mut w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]),
        json!(1),
    );
    w["spec"]["runtime"] = json!({"identity": {"enabled": false}, "traffic": {"enabled": false}, "logging": {"enabled": false}, "metrics": {"enabled": false}});
    w["spec"]["template"]["spec"]["initContainers"] = json!([
        {"name": "warm", "image": "r/warm:1", "resources": {"requests": {"cpu": "20", "memory": "1Mi"}}},
        {"name": "proxy", "image": "r/proxy:1", "restartPolicy": "Always", "resources": {"requests": {"cpu": "16", "memory": "2Gi"}}},
    ]);
    let d = demand_of(&w).unwrap();
    // Containers plus the sidecar: 17 cpu; the one-shot init container runs
    // alone (20 cpu, before the sidecar starts): the pod needs 20.
    assert_eq!(d.sets[0].per_pod, Requests { cpu: 20_000, memory: (1 << 30) + (2 << 30), ..Default::default() });
}

#[test]
fn a_limit_alone_is_the_request_and_a_missing_one_the_default() {
    let w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"limits": {"cpu": "3", "memory": "1Gi"}}},
        {"name": "b", "image": "r/b:1", "resources": {"requests": {"memory": "1Gi"}}}]),
        json!(1),
    );
    let d = demand_of(&w).unwrap();
    // b: 100m by default (no cpu request or limit), 1Gi.
    assert_eq!(
        d.sets[0].per_pod,
        Requests { cpu: 3000 + 100 + 4 * 50, memory: (2 << 30) + 4 * SIDECAR.memory, ..Default::default() }
    );
}

#[test]
fn a_cronjob_counts_its_shards_and_the_runs_that_overlap() {
    let cron = |policy: &str, deadline: Option<i64>| {
        let mut job = json!({"shards": 500});
        if let Some(d) = deadline {
            job["activeDeadlineSeconds"] = json!(d);
        }
        json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestCronJob", "metadata": {"name": "nightly", "namespace": "red"},
            "spec": {"owner": {"team": "red", "project": "x"}, "schedule": "*/10 * * * *", "concurrencyPolicy": policy, "job": job,
                "template": {"spec": {"containers": [{"name": "c", "image": "r/c:1", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}})
    };
    assert_eq!(demand_of(&cron("Forbid", None)).unwrap().pods, 500);
    assert_eq!(demand_of(&cron("Replace", None)).unwrap().pods, 500);
    // A run may last 25 minutes: three start in any 25 minutes.
    assert_eq!(demand_of(&cron("Allow", Some(1500))).unwrap().pods, 1500);
    let e = demand_of(&cron("Allow", None)).unwrap_err();
    assert_eq!(e[0].field, "spec.concurrencyPolicy");
    assert!(e[0].message.contains("activeDeadlineSeconds"), "{}", e[0].message);
    // A deadline past what a duration holds panicked once (and leaked the
    // gateway's connection slot): now refused at its field.
    for d in [i64::MAX, 9_223_372_036_854_775, 366 * 86_400 + 1] {
        let e = demand_of(&cron("Allow", Some(d))).unwrap_err();
        assert_eq!(e[0].field, "spec.job.activeDeadlineSeconds", "{d}");
        assert!(e[0].message.starts_with(&format!("{d}: ")), "{}", e[0].message);
    }
}

#[test]
fn pod_level_resources_are_the_pods_request() {
    // PodLevelResources (on by default since 1.34): the pod asks for what
    // its own `resources` say, however little its containers ask.
    let mut w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]),
        json!(2),
    );
    w["spec"]["template"]["spec"]["resources"] = json!({"requests": {"cpu": "3"}, "limits": {"memory": "12Gi"}});
    let d = demand_of(&w).unwrap();
    let per_pod = d.sets[0].per_pod;
    // cpu from the pod's request, memory from its limit (its request's default).
    assert_eq!((per_pod.cpu, per_pod.memory), (3000, 12 << 30));
    assert_eq!((d.cpu, d.memory), (6000, 24 << 30));
    // Less than the containers ask: the containers' sum stands.
    w["spec"]["template"]["spec"]["resources"] = json!({"requests": {"cpu": "10m"}});
    assert_eq!(demand_of(&w).unwrap().sets[0].per_pod.cpu, 100 + 4 * SIDECAR.cpu);
    // What does not parse is refused at its field.
    w["spec"]["template"]["spec"]["resources"] = json!({"requests": {"cpu": "lots"}});
    let e = demand_of(&w).unwrap_err();
    assert!(e.iter().any(|l| l.field == "spec.template.spec.resources.requests.cpu"), "{e:?}");
}

#[test]
fn a_jobset_runs_its_parallelism_and_a_training_job_every_role() {
    let js = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestJobSet", "metadata": {"name": "b", "namespace": "red"},
        "spec": {"owner": {"team": "red", "project": "x"}, "shards": 40, "parallelism": 8,
            "template": {"spec": {"containers": [{"name": "c", "image": "r/c:1"}]}}}});
    assert_eq!(demand_of(&js).unwrap().pods, 8);
    let tj = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestTrainingJob", "metadata": {"name": "t", "namespace": "red"},
        "spec": {"owner": {"team": "red", "project": "x"}, "framework": "PyTorch",
            "template": {"spec": {"containers": [{"name": "c", "image": "r/c:1"}]}},
            "roles": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 6,
                "template": {"spec": {"containers": [{"name": "c", "image": "r/c:1", "resources": {"requests": {"cpu": "4"}}}]}}}]}});
    let d = demand_of(&tj).unwrap();
    assert_eq!(d.pods, 7);
    assert_eq!(
        d.sets.iter().map(|s| (s.field.as_str(), s.pods)).collect::<Vec<_>>(),
        [("spec.template", 1), ("spec.roles[1].template", 6)]
    );
}

#[test]
fn what_does_not_parse_or_overflows_is_a_located_problem() {
    for (q, needle) in
        [(json!("lots"), "quantities must match"), (json!("1e40"), "too large"), (json!(true), "a boolean")]
    {
        let w = service(json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": q}}}]), json!(1));
        let e = demand_of(&w).unwrap_err();
        assert!(e.iter().any(|p| p.message.contains(needle)), "{q}: {e:?}");
    }
    // u64::MAX millicores times 2^31 replicas: refused, not wrapped or panicking.
    let w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": "18446744073709551615m"}}}]),
        json!(3),
    );
    let e = demand_of(&w).unwrap_err();
    assert!(e[0].message.contains("more than can be counted"), "{e:?}");
    let w = service(
        json!([{"name": "app", "image": "r/app:1", "resources": {"requests": {"cpu": "10000000"}}}]),
        json!(2147483647),
    );
    // A count past the bound is refused before anything is rendered (a
    // render allocates per replica), at its field.
    let e = demand_of(&w).unwrap_err();
    assert_eq!(e[0].field, "spec.replicas", "{e:?}");
    assert!(e[0].message.contains("must be between 0 and 100000"), "{e:?}");
    // A training job's roles past i32 together: refused as a sum, not wrapped.
    let roles = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestTrainingJob", "metadata": {"name": "t"},
        "spec": {"owner": {"team": "a", "project": "t"}, "roles": [{"name": "a", "replicas": 60000}, {"name": "b", "replicas": 60000}]}});
    let e = super::counts(&roles);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].field, "spec.roles");
}

#[test]
fn the_api_servers_refusals_come_back_at_the_workloads_fields() {
    let mut w = service(json!([{"name": "Not_A_Label", "image": "r/app:1"}, {"name": "noimage"}]), json!(1));
    w["spec"]["template"]["spec"]["initContainers"] = json!([{"name": "Init!", "image": "r/i:1"}]);
    let children = children("PinterestService", &w, &ctx()).unwrap();
    let fields: Vec<String> = refusals(&w, &children, 36).into_iter().map(|l| l.field).collect();
    assert!(fields.contains(&"spec.template.spec.containers[0].name".to_string()), "{fields:?}");
    assert!(fields.contains(&"spec.template.spec.containers[1].image".to_string()), "{fields:?}");
    assert!(fields.contains(&"spec.template.spec.initContainers[0].name".to_string()), "{fields:?}");
}

// ---- the property -----------------------------------------------------------

/// A generated number in one of the forms the API server reads.
#[derive(Debug, Clone)]
struct Q {
    millis: u64,
    form: u8,
}

impl Q {
    /// As CPU: millicores.
    fn cpu(&self) -> Value {
        let m = self.millis;
        match self.form % 4 {
            0 => json!(format!("{m}m")),
            1 if m % 1000 == 0 => json!(m / 1000),
            2 => json!(format!("{m}e-3")),
            3 if m % 100 == 0 => json!(format!("{}.{}", m / 1000, (m % 1000) / 100)),
            _ => json!(format!("{m}m")),
        }
    }
    /// As memory: the number is Mi.
    fn memory(&self) -> Value {
        let mi = self.millis;
        match self.form % 4 {
            0 => json!(format!("{mi}Mi")),
            1 => json!(mi << 20),
            2 if mi % 1024 == 0 => json!(format!("{}Gi", mi / 1024)),
            3 => json!(format!("{}Ki", mi << 10)),
            _ => json!(format!("{}", mi << 20)),
        }
    }
}

#[derive(Debug, Clone)]
struct C {
    cpu: Option<Q>,
    memory: Option<Q>,
    /// Written as a limit only (the request defaults to it).
    as_limit: bool,
    sidecar: bool,
}

fn q() -> impl Strategy<Value = Q> {
    (prop_oneof![1u64..5000, (1u64..64).prop_map(|n| n * 1000)], any::<u8>())
        .prop_map(|(millis, form)| Q { millis, form })
}

fn c() -> impl Strategy<Value = C> {
    (proptest::option::of(q()), proptest::option::of(q()), any::<bool>(), any::<bool>())
        .prop_map(|(cpu, memory, as_limit, sidecar)| C { cpu, memory, as_limit, sidecar })
}

fn container(name: String, c: &C) -> Value {
    let mut r = json!({});
    let key = if c.as_limit { "limits" } else { "requests" };
    if let Some(q) = &c.cpu {
        r[key]["cpu"] = q.cpu();
    }
    if let Some(q) = &c.memory {
        r[key]["memory"] = q.memory();
    }
    json!({"name": name, "image": "registry.example.com/x:1", "resources": r})
}

/// Kubernetes' rule, from the generated numbers (the profile's defaults
/// for what the generator left out: 100m, 128Mi; each injected sidecar
/// and platform-init 50m, 64Mi).
fn expected_per_pod(containers: &[C], inits: &[C], sidecars_on: u64) -> (u64, u64) {
    let r = |c: &C| (c.cpu.as_ref().map_or(100, |q| q.millis), c.memory.as_ref().map_or(128, |q| q.millis) << 20);
    let side = (50u64, 64u64 << 20);
    let mut sum = containers.iter().map(r).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    // platform-init runs first, alone; then the injected sidecars start.
    let mut peak = side;
    let mut running = (side.0 * sidecars_on, side.1 * sidecars_on);
    sum = (sum.0 + running.0, sum.1 + running.1);
    for c in inits {
        // A user's init container left without requests gets no default
        // (render defaults only `containers`): 0.
        let req = (c.cpu.as_ref().map_or(0, |q| q.millis), c.memory.as_ref().map_or(0, |q| q.millis) << 20);
        if c.sidecar {
            sum = (sum.0 + req.0, sum.1 + req.1);
            running = (running.0 + req.0, running.1 + req.1);
            peak = (peak.0.max(running.0), peak.1.max(running.1));
        } else {
            peak = (peak.0.max(running.0 + req.0), peak.1.max(running.1 + req.1));
        }
    }
    (sum.0.max(peak.0), sum.1.max(peak.1))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// For generated workloads of every kind the gateway takes, the demand
    /// equals the sum of requests over the pods the controller's objects
    /// would create.
    #[test]
    fn demand_is_the_sum_over_the_pods_that_will_run(
        kind in 0u8..4,
        containers in proptest::collection::vec(c(), 1..4),
        inits in proptest::collection::vec(c(), 0..3),
        count in 0i64..40,
        parallel in 1i64..40,
        toggles in proptest::collection::vec(any::<bool>(), 4),
    ) {
        let cs: Vec<Value> = containers.iter().enumerate().map(|(i, c)| container(format!("c{i}"), c)).collect();
        let is: Vec<Value> = inits.iter().enumerate().map(|(i, c)| {
            let mut v = container(format!("i{i}"), c);
            if c.sidecar { v["restartPolicy"] = json!("Always"); }
            v
        }).collect();
        let runtime = json!({"identity": {"enabled": toggles[0]}, "traffic": {"enabled": toggles[1]},
            "logging": {"enabled": toggles[2]}, "metrics": {"enabled": toggles[3]}});
        let template = json!({"spec": {"containers": cs, "initContainers": is}});
        let common = json!({"owner": {"team": "red", "project": "p"}, "template": template, "runtime": runtime});
        let (kind_name, extra, pods, serves) = match kind {
            0 => ("PinterestService", json!({"replicas": count}), count as u64, true),
            1 => ("PinterestStatefulSet", json!({"replicas": count}), count as u64, true),
            2 => {
                let shards = count.max(1);
                ("PinterestJobSet", json!({"shards": shards, "parallelism": parallel.min(shards)}), parallel.min(shards) as u64, false)
            }
            _ => ("PinterestCronJob", json!({"schedule": "0 * * * *", "concurrencyPolicy": "Forbid", "job": {"shards": parallel}}), parallel as u64, false),
        };
        let mut spec = common;
        for (k, v) in extra.as_object().unwrap() { spec[k] = v.clone(); }
        let w = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": kind_name, "metadata": {"name": "w", "namespace": "red"}, "spec": spec});
        let sidecars_on = u64::from(toggles[0]) + u64::from(toggles[1] && serves) + u64::from(toggles[2]) + u64::from(toggles[3]);
        let (cpu, memory) = expected_per_pod(&containers, &inits, sidecars_on);
        let d = demand_of(&w).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(d.pods, pods);
        prop_assert_eq!((d.cpu, d.memory), (cpu * pods, memory * pods));
    }
}

fn gpu_service(resources: Value, selector: Option<&str>) -> Value {
    let mut w = service(json!([{"name": "app", "image": "r/app:1", "resources": resources}]), json!(2));
    if let Some(p) = selector {
        w["spec"]["template"]["spec"]["nodeSelector"] = json!({PRODUCT_LABEL: p});
    }
    w
}

fn training(accelerators: Value, workers: i64) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestTrainingJob", "metadata": {"name": "t", "namespace": "red"},
        "spec": {"owner": {"team": "red", "project": "x"}, "framework": "PyTorch", "accelerators": accelerators,
            "template": {"spec": {"containers": [{"name": "c", "image": "r/c:1"}]}},
            "roles": [{"name": "worker", "replicas": workers}]}})
}

#[test]
fn a_training_jobs_accelerators_are_counted_from_its_pods_by_product() {
    let d = demand_of(&training(json!({"type": GPU, "count": 8, "product": "A100"}), 4)).unwrap();
    assert_eq!(d.sets[0].per_pod.accelerator(Flavor::GpuA100), 8);
    assert_eq!((d.accelerator(Flavor::GpuA100), d.pods), (32, 4));
    assert_eq!(d.accelerator(Flavor::GpuH100), 0);
    // The pods are held to A100 nodes and tolerate the GPU nodes' taint.
    let children =
        children("PinterestTrainingJob", &training(json!({"type": GPU, "count": 8, "product": "a100"}), 4), &ctx())
            .unwrap();
    let pod = &children.iter().find(|c| c["kind"] == "Job").unwrap()["spec"]["template"]["spec"];
    assert_eq!(product_of(pod, "p").unwrap(), Some(Flavor::GpuA100));
    assert!(pod["tolerations"]
        .as_array()
        .unwrap()
        .contains(&json!({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})));
    // Neuron devices need no product.
    let d = demand_of(&training(json!({"type": NEURON, "count": 16}), 2)).unwrap();
    assert_eq!(d.accelerator(Flavor::Neuron), 32);
    // GPUs with no product cannot be counted by flavor: refused at the
    // template's container the render gave them to.
    let e = demand_of(&training(json!({"type": GPU, "count": 8}), 4)).unwrap_err();
    assert_eq!(e[0].field, "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]", "{e:?}");
    assert!(e[0].message.contains("names no GPU product"), "{}", e[0].message);
    // A product the quota does not know is refused.
    assert!(demand_of(&training(json!({"type": GPU, "count": 1, "product": "V100"}), 1)).is_err());
}

#[test]
fn gpus_a_container_asks_for_are_counted_as_kubernetes_reads_them() {
    let per_pod = |limits: Value| {
        demand_of(&gpu_service(json!({"limits": limits}), Some("NVIDIA-A10G")))
            .map(|d| d.sets[0].per_pod.accelerator(Flavor::GpuA10g))
    };
    // Exponents and strings are quantities; a limit alone is the request.
    assert_eq!(per_pod(json!({GPU: "8e0"})).unwrap(), 8);
    assert_eq!(per_pod(json!({GPU: "1e3"})).unwrap(), 1000);
    assert_eq!(per_pod(json!({GPU: 2})).unwrap(), 2);
    assert_eq!(per_pod(json!({GPU: "2"})).unwrap(), 2);
    // Fractions, negatives and words are refused at the limit.
    for bad in [json!("0.5"), json!(1.5), json!("1500m"), json!(-1), json!("-1"), json!("eight"), json!(true)] {
        let e = per_pod(json!({GPU: bad})).unwrap_err();
        let field = &e[0].field;
        assert!(
            field == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
                || field == "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu",
            "{bad}: {e:?}"
        );
    }
    // A request alone is refused as the API server refuses it.
    let e = demand_of(&gpu_service(json!({"requests": {GPU: 1}}), Some("NVIDIA-A10G"))).unwrap_err();
    assert_eq!(e[0].field, "spec.template.spec.containers[0].resources.limits");
    assert!(e[0].message.ends_with("Limit must be set for non overcommitable resources"), "{}", e[0].message);
    // Two GPU products, or one the quota does not know: refused at the selector.
    let e = demand_of(&gpu_service(json!({"limits": {GPU: 1}}), Some("NVIDIA-L40S"))).unwrap_err();
    assert_eq!(e[0].field, format!("spec.template.spec.nodeSelector[{PRODUCT_LABEL}]"));
}

#[test]
fn every_other_resource_a_rendered_pod_asks_for_is_refused_at_its_field() {
    for name in ["example.com/fpga", "hugepages-2Mi", "ephemeral-storage", "amd.com/gpu", "vpc.amazonaws.com/efa"] {
        let e = demand_of(&gpu_service(json!({"limits": {name: "1"}}), None)).unwrap_err();
        assert_eq!(e[0].field, format!("spec.template.spec.containers[0].resources[{name}]"), "{name}");
        assert!(e[0].message.contains("is not counted by the team's quota"), "{}", e[0].message);
    }
    // The same through a platform sidecar's override: the rendered pod is
    // what is counted, and the refusal names the injected container.
    let mut w = gpu_service(json!({}), None);
    w["spec"]["runtime"] = json!({"overrides": {"logging": {"limits": {"hugepages-2Mi": "1Gi", "memory": "1Gi"}}}});
    let e = demand_of(&w).unwrap_err();
    assert!(e[0].field.starts_with("spec.runtime (logging"), "{e:?}");
    // GPUs given to the logging sidecar are counted (a probe ran 4 so, uncounted).
    let mut w = gpu_service(json!({}), Some("NVIDIA-H100-80GB-HBM3"));
    w["spec"]["runtime"] = json!({"overrides": {"logging": {"limits": {GPU: 4}}}});
    let d = demand_of(&w).unwrap();
    assert_eq!((d.sets[0].per_pod.accelerator(Flavor::GpuH100), d.accelerator(Flavor::GpuH100)), (4, 8));
    // And to platform-init (a one-shot init container): the largest of
    // the init containers and the running ones, as Kubernetes counts.
    let mut w = gpu_service(json!({"limits": {GPU: 2}}), Some("NVIDIA-H100-80GB-HBM3"));
    w["spec"]["runtime"] = json!({"overrides": {"platform-init": {"limits": {GPU: 8}}}});
    assert_eq!(demand_of(&w).unwrap().sets[0].per_pod.accelerator(Flavor::GpuH100), 8);
    let mut w = gpu_service(json!({"limits": {GPU: 2}}), Some("NVIDIA-H100-80GB-HBM3"));
    w["spec"]["runtime"] = json!({"overrides": {"platform-init": {"limits": {GPU: 1}}}});
    assert_eq!(demand_of(&w).unwrap().sets[0].per_pod.accelerator(Flavor::GpuH100), 2);
}

#[test]
fn requests_unequal_to_limits_are_refused_with_the_api_servers_words() {
    let w = gpu_service(json!({"requests": {GPU: 4}, "limits": {GPU: 8}}), Some("NVIDIA-A100-SXM4-80GB"));
    let rendered = children("PinterestService", &w, &ctx()).unwrap();
    let r = refusals(&w, &rendered, crate::spec::versions::DEFAULT_MINOR);
    let at = r.iter().find(|l| l.field == "spec.template.spec.containers[0].resources.requests").expect("refused");
    assert!(
        at.message.ends_with(r#"Invalid value: "4": must be equal to nvidia.com/gpu limit of 8"#),
        "{}",
        at.message
    );
    let w = gpu_service(json!({"requests": {GPU: "1500m"}, "limits": {GPU: "1500m"}}), Some("NVIDIA-L4"));
    let rendered = children("PinterestService", &w, &ctx()).unwrap();
    let r = refusals(&w, &rendered, crate::spec::versions::DEFAULT_MINOR);
    assert!(
        r.iter().any(|l| l.field == "spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]"
            && l.message.ends_with(r#"Invalid value: "1500m": must be an integer"#)),
        "{r:?}"
    );
}

/// Issue: a training job's `count` was given to every container of its
/// pods: one role `worker` × 2, one A100 each, two containers, was counted
/// (and ran) as 4.
#[test]
fn a_training_jobs_count_is_per_worker_pod_on_its_first_container() {
    let mut w = training(json!({"type": GPU, "count": 1, "product": "A100"}), 2);
    w["spec"]["template"]["spec"]["containers"] =
        json!([{"name": "main", "image": "r/c:1"}, {"name": "side", "image": "r/s:1"}]);
    let d = demand_of(&w).unwrap();
    assert_eq!((d.sets[0].per_pod.accelerator(Flavor::GpuA100), d.accelerator(Flavor::GpuA100)), (1, 2));
    let children = children("PinterestTrainingJob", &w, &ctx()).unwrap();
    let pod = &children.iter().find(|c| c["kind"] == "Job").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["resources"]["limits"][GPU], 1);
    assert!(pod["containers"][1].pointer("/resources/limits/nvidia.com~1gpu").is_none(), "{:#}", pod["containers"][1]);
}

fn terms(t: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}}}})
}

fn product_in(values: Value) -> Value {
    json!({"key": PRODUCT_LABEL, "operator": "In", "values": values})
}

/// Issue: `[product In A100]` OR `[kubernetes.io/hostname Exists]` was
/// counted as A100 and ran on the H100 node. A pod's product is the one
/// every term holds it to; terms that together reach more are refused at
/// the term that reaches further.
#[test]
fn a_pods_product_is_where_every_scheduling_term_can_land_it() {
    let a100 = json!(["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]);
    let at = "p.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    let hostname = json!({"key": "kubernetes.io/hostname", "operator": "Exists"});
    // ORed with a term that names no product: every product's nodes.
    let spans = terms(json!([{"matchExpressions": [product_in(a100.clone())]}, {"matchExpressions": [hostname]}]));
    let e = product_of(&spans, "p").unwrap_err();
    assert_eq!(e.field, format!("{at}[1]"));
    assert!(
        e.message.contains("reaches nodes of every GPU product") && e.message.contains("selects A100"),
        "{}",
        e.message
    );
    // The same product in every term: that product.
    let both = terms(json!([
        {"matchExpressions": [product_in(a100.clone())]},
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}, product_in(json!(["NVIDIA-A100-SXM4-40GB"]))]}
    ]));
    assert_eq!(product_of(&both, "p").unwrap(), Some(Flavor::GpuA100));
    // Two products across terms: refused at the second.
    let two = terms(
        json!([{"matchExpressions": [product_in(a100.clone())]}, {"matchExpressions": [product_in(json!(["NVIDIA-H100-80GB-HBM3"]))]}]),
    );
    assert_eq!(product_of(&two, "p").unwrap_err().field, format!("{at}[1]"));
    // The node selector holds every term to its product; a term naming another lands nowhere.
    let mut held = spans.clone();
    held["nodeSelector"] = json!({PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"});
    assert_eq!(product_of(&held, "p").unwrap_err().field, format!("{at}[0].matchExpressions[0]"));
    held["affinity"] = Value::Null;
    assert_eq!(product_of(&held, "p").unwrap(), Some(Flavor::GpuH100));
    // An empty term matches no node: it reaches nothing.
    let empty = terms(json!([{"matchExpressions": [product_in(a100)]}, {}]));
    assert_eq!(product_of(&empty, "p").unwrap(), Some(Flavor::GpuA100));
    // No term names one: any node (the gateway holds it to a product).
    assert_eq!(
        product_of(
            &terms(json!([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}])),
            "p"
        )
        .unwrap(),
        None
    );
    // Through the demand: refused at the workload's field.
    let mut w = gpu_service(json!({"limits": {GPU: 1}}), None);
    w["spec"]["template"]["spec"]["affinity"] = spans["affinity"].clone();
    let e = demand_of(&w).unwrap_err();
    assert_eq!(
        e[0].field,
        "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1]"
    );
}

/// Issue: a product label no node carries (`A100`, a lowercased label)
/// was counted, placed, and Pending for ever.
#[test]
fn a_product_no_node_carries_is_refused_naming_the_products_known() {
    for bad in ["A100", "nvidia-a100-sxm4-40gb", "NVIDIA-A100"] {
        let e = demand_of(&gpu_service(json!({"limits": {GPU: 1}}), Some(bad))).unwrap_err();
        assert_eq!(e[0].field, format!("spec.template.spec.nodeSelector[{PRODUCT_LABEL}]"), "{bad}");
        assert!(e[0].message.contains("no node carries"), "{}", e[0].message);
        assert!(e[0].message.contains("NVIDIA-A100-SXM4-40GB (A100)"), "{}", e[0].message);
        let spec = terms(json!([{"matchExpressions": [product_in(json!([bad]))]}]));
        assert!(product_of(&spec, "p").unwrap_err().field.ends_with("nodeSelectorTerms[0].matchExpressions[0]"));
    }
}

/// Issue: a pod-level `nvidia.com/gpu` was counted and placed; a real
/// API server takes cpu and memory (and hugepages) there only.
#[test]
fn devices_in_pod_level_resources_are_refused_at_their_field() {
    let mut w = gpu_service(json!({}), Some("NVIDIA-A10G"));
    w["spec"]["template"]["spec"]["resources"] = json!({"limits": {GPU: 1, "cpu": "2"}});
    let e = demand_of(&w).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].field, "spec.template.spec.resources.limits[nvidia.com/gpu]");
    assert!(e[0].message.starts_with("Unsupported value: \"nvidia.com/gpu\""), "{}", e[0].message);
}

/// Drift counts what a pod runs around the gateway takes by where it
/// runs: its GPUs as the product of its node, whatever it selects, and
/// its cpu and memory even when its devices cannot be counted.
#[test]
fn a_running_pod_is_counted_by_the_node_it_runs_on() {
    let pod = json!({"spec": {"nodeName": "h100-0", "containers": [{"name": "c",
        "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {GPU: 6}}}]}});
    let (r, problems) = pod_takes(&pod, "pod", None, Some(Flavor::GpuH100));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!((r.cpu, r.memory, r.accelerator(Flavor::GpuH100)), (2000, 1 << 30, 6));
    // Not bound yet, naming no product: its GPUs cannot be counted, the rest is.
    let (r, problems) = pod_takes(&pod, "pod", None, None);
    assert_eq!((r.cpu, r.accelerators), (2000, [0; 5]));
    assert!(problems[0].message.contains("names no GPU product"), "{problems:?}");
}
