//! The workload controller against the API (sim by default, a real cluster
//! under PINFLEET_TEST_KUBECONFIG): a PinterestService becomes its children
//! and turns Ready; hand edits are reverted; a no-op resync writes nothing;
//! a profile bump rolls the pods; deleting the CR removes its children.

#[path = "support/kube.rs"]
mod kube_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_support::KubeEnv;
use pinfleet::workloads::PinterestService;
use serde_json::json;

async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..300 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The Events as `kubectl get … -o <output>` prints them, once `holds`
/// says they have what is waited for. A condition is patched first and
/// its Event published after, so a condition seen does not mean its Event is.
async fn events_until(k: &KubeEnv, output: &str, holds: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    for _ in 0..300 {
        last = k.ok(&["get", "events.v1.events.k8s.io", "-o", output]);
        if holds(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Events never held what was waited for:\n{last}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_becomes_its_children_and_follows_changes() {
    // RUST_LOG=pinfleet::controller=debug says why each write happened.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let k = KubeEnv::start();
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd/pinterestservices.pinfleet.dev", "--timeout=30s"]);
    if !k.real {
        for n in ["node-a", "node-b"] {
            k.ok_stdin(
                &["apply", "-f", "-"],
                &format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {}}}\n", k.unique(n)),
            );
        }
        let nodes = k.ok(&["get", "nodes", "-o", "name"]);
        for n in nodes.lines() {
            k.ok(&[
                "patch",
                n,
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
            ]);
        }
    }
    let client = k.client().await;
    // The runtime-support profile is read from this test's namespace: the
    // cluster's own (pinfleet-system) is shared with every other run.
    let ctx =
        pinfleet::controller::Ctx::new(client.clone(), "test-cluster").only_in(&k.namespace).profiles_in(&k.namespace);
    let running = tokio::spawn(pinfleet::controller::run(ctx.clone()));

    let svcs: Api<PinterestService> = Api::namespaced(client.clone(), &k.namespace);
    let cr: PinterestService = serde_json::from_value(json!({
        "apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": "home"},
        "spec": {"owner": {"team": "feeds", "project": "home"}, "replicas": 2, "ports": [{"name": "http", "port": 8080}],
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))
    .unwrap();
    svcs.create(&PostParams::default(), &cr).await.unwrap();

    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &k.namespace);
    let d = until("the Deployment", || {
        let deploys = deploys.clone();
        async move { deploys.get_opt("home").await.unwrap() }
    })
    .await;
    let pod = d.spec.unwrap().template.spec.unwrap();
    assert!(pod
        .init_containers
        .unwrap()
        .iter()
        .any(|c| c.name == "traffic" && c.restart_policy.as_deref() == Some("Always")));
    // Children are applied one after another: the Service follows the Deployment.
    let services: Api<Service> = Api::namespaced(client.clone(), &k.namespace);
    until("the Service", || {
        let services = services.clone();
        async move { services.get_opt("home").await.unwrap() }
    })
    .await;

    if !k.skip_part_without_running_pods("Ready=True once the pods run") {
        let status = until("Ready=True", || {
            let svcs = svcs.clone();
            async move {
                let s = svcs.get("home").await.unwrap().status?;
                s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(s)
            }
        })
        .await;
        assert_eq!(status.ready_replicas, Some(2));
    }
    until("Reconciled=True", || {
        let svcs = svcs.clone();
        async move {
            let s = svcs.get("home").await.unwrap().status?;
            s.conditions.iter().any(|c| c.type_ == "Reconciled" && c.status == "True").then_some(())
        }
    })
    .await;

    // A hand edit to a child is reverted.
    deploys.patch("home", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 7}}))).await.unwrap();
    until("the edit to be reverted", || {
        let deploys = deploys.clone();
        async move { (deploys.get("home").await.unwrap().spec?.replicas == Some(2)).then_some(()) }
    })
    .await;

    // A child no longer rendered goes (no ports, no Service); it comes
    // back with the ports.
    let ports = svcs.get("home").await.unwrap().spec.ports.clone();
    assert!(!ports.is_empty() && services.get_opt("home").await.unwrap().is_some());
    svcs.patch("home", &PatchParams::default(), &Patch::Merge(json!({"spec": {"ports": []}}))).await.unwrap();
    until("the Service no longer rendered to be pruned", || {
        let services = services.clone();
        async move { services.get_opt("home").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(deploys.get_opt("home").await.unwrap().is_some(), "only what is no longer rendered goes");
    svcs.patch("home", &PatchParams::default(), &Patch::Merge(json!({"spec": {"ports": ports}}))).await.unwrap();
    until("the Service to come back with the ports", || {
        let services = services.clone();
        async move { services.get_opt("home").await.unwrap().map(|_| ()) }
    })
    .await;

    // A resync with nothing to do writes nothing. First the controller is
    // let settle: on a real cluster the Deployment's status moves for a
    // while after the edit, and the workload's status follows it.
    // Counted in this test's namespace: on a real cluster the controller
    // also sees the workloads of tests running beside this one.
    let mut before = ctx.writes_in(&k.namespace);
    loop {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let now = ctx.writes_in(&k.namespace);
        if now == before {
            break;
        }
        before = now;
    }
    let reconciles = ctx.reconciles_in(&k.namespace);
    svcs.patch("home", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})))
        .await
        .unwrap();
    until("a reconcile", || {
        let ctx = ctx.clone();
        let ns = k.namespace.clone();
        async move { (ctx.reconciles_in(&ns) > reconciles).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ctx.writes_in(&k.namespace), before, "a no-op resync must not write");

    // A new runtime-support profile rolls the pods.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &k.namespace);
    let profile = pinfleet::workloads::render::RuntimeProfile::default_profile("2026.12.0");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": pinfleet::controller::PROFILE_CONFIGMAP},
        "data": {"default": "2026.12.0", "profile-2026.12.0.json": serde_json::to_string(&profile).unwrap()}}))
    .unwrap();
    cms.patch(pinfleet::controller::PROFILE_CONFIGMAP, &PatchParams::apply("test").force(), &Patch::Apply(&cm))
        .await
        .unwrap();
    svcs.patch("home", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touch": "2"}}})))
        .await
        .unwrap();
    until("the pod template to carry the new profile", || {
        let deploys = deploys.clone();
        async move {
            let d = deploys.get("home").await.unwrap();
            let a = d.spec?.template.metadata?.annotations?;
            (a.get("pinfleet.dev/runtime-profile").map(String::as_str) == Some("2026.12.0")).then_some(())
        }
    })
    .await;

    // A profile that does not parse fails the reconcile (retried with
    // backoff) instead of falling back to the built-in profile and rolling
    // the pods.
    let errors = ctx.errors.load(Ordering::Relaxed);
    let broken: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": pinfleet::controller::PROFILE_CONFIGMAP},
        "data": {"default": "2027.1.0", "profile-2027.1.0.json": "{not json"}}))
        .unwrap();
    cms.patch(pinfleet::controller::PROFILE_CONFIGMAP, &PatchParams::apply("test").force(), &Patch::Apply(&broken))
        .await
        .unwrap();
    svcs.patch("home", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"touch": "3"}}})))
        .await
        .unwrap();
    until("a failed reconcile", || {
        let ctx = ctx.clone();
        async move { (ctx.errors.load(Ordering::Relaxed) > errors).then_some(()) }
    })
    .await;
    let d = deploys.get("home").await.unwrap();
    let annotations = d.spec.unwrap().template.metadata.unwrap().annotations.unwrap();
    assert_eq!(annotations["pinfleet.dev/runtime-profile"], "2026.12.0", "a broken profile must not roll the pods");

    // Deleting the workload removes its children.
    svcs.delete("home", &Default::default()).await.unwrap();
    // The server's garbage collector removes them at its own pace: follow
    // it (gone, or marked for deletion) rather than a fixed deadline.
    kube_support::until_done("the children to go", Duration::from_secs(120), || {
        let deploys = deploys.clone();
        async move {
            match deploys.get_opt("home").await.unwrap() {
                None => (0, 2),
                Some(d) => (1, usize::from(d.metadata.deletion_timestamp.is_some())),
            }
        }
    })
    .await;
    running.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_elect_one_leader_and_fail_over() {
    use pinfleet::controller::leader::{run_elected, LeaseLock};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let k = KubeEnv::start();
    let client = k.client().await;
    let lock = |id: &str| LeaseLock {
        api: Api::namespaced(client.clone(), &k.namespace),
        name: "pinfleet-controller".into(),
        identity: id.into(),
        lease_duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(300),
    };
    let (a, b) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let started = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let work = |n: Arc<std::sync::atomic::AtomicU32>| {
        move || {
            let n = n.clone();
            async move {
                n.fetch_add(1, Ordering::SeqCst);
                futures::future::pending::<()>().await
            }
        }
    };
    let (_stop_a, never) = tokio::sync::watch::channel(false);
    let ta = tokio::spawn(run_elected(lock("replica-a"), a.clone(), work(started.clone()), never));
    until("replica-a to lead", || {
        let a = a.clone();
        async move { a.load(Ordering::SeqCst).then_some(()) }
    })
    .await;
    let (stop_b, stop) = tokio::sync::watch::channel(false);
    let tb = tokio::spawn(run_elected(lock("replica-b"), b.clone(), work(started.clone()), stop));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(a.load(Ordering::SeqCst) ^ b.load(Ordering::SeqCst), "exactly one leads");
    assert!(a.load(Ordering::SeqCst), "the first candidate won");
    assert_eq!(started.load(Ordering::SeqCst), 1, "only the leader runs the controllers");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), &k.namespace);
    assert_eq!(
        leases.get("pinfleet-controller").await.unwrap().spec.unwrap().holder_identity.as_deref(),
        Some("replica-a")
    );
    // The leader dies; after the lease expires the other takes over.
    ta.abort();
    until("replica-b to lead", || {
        let b = b.clone();
        async move { b.load(Ordering::SeqCst).then_some(()) }
    })
    .await;
    assert_eq!(
        leases.get("pinfleet-controller").await.unwrap().spec.unwrap().holder_identity.as_deref(),
        Some("replica-b")
    );
    // Told to stop, the leader stops leading and gives the lease up: no
    // holder, so the next candidate need not wait for it to run out.
    stop_b.send(true).unwrap();
    tb.await.unwrap();
    assert!(!b.load(Ordering::SeqCst));
    let spec = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref().unwrap_or_default(), "", "released: {spec:?}");
    let (_stop_c, never) = tokio::sync::watch::channel(false);
    let c = Arc::new(AtomicBool::new(false));
    let tc = tokio::spawn(run_elected(lock("replica-c"), c.clone(), work(started.clone()), never));
    until("replica-c to take the released lease", || {
        let c = c.clone();
        async move { c.load(Ordering::SeqCst).then_some(()) }
    })
    .await;
    let spec = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-c"));
    // a → b, then b → c (through the release): two changes of holder.
    assert_eq!(spec.lease_transitions, Some(2));
    tc.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_batch_and_stateful_kind_becomes_its_native_object() {
    let k = KubeEnv::start();
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"]);
    let ctx = pinfleet::controller::Ctx::new(k.client().await, "test-cluster")
        .only_in(&k.namespace)
        .profiles_in(&k.namespace);
    let running = tokio::spawn(pinfleet::controller::run(ctx.clone()));

    let common = "owner: {team: feeds, project: home}\n  template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}";
    let crs = [
        ("PinterestJobSet", "index", "shards: 2\n  parallelism: 2", "job/index"),
        ("PinterestCronJob", "rollup", "schedule: \"0 * * * *\"\n  job: {shards: 2}", "cronjob/rollup"),
        ("PinterestDaemon", "node-agent", "nodeSelector: {pinfleet.dev/pool: general}", "daemonset/node-agent"),
        (
            "PinterestTrainingJob",
            "ranker",
            "framework: PyTorch\n  roles: [{name: worker, replicas: 2}]",
            "job/ranker-worker",
        ),
        ("PinterestStatefulSet", "cache", "replicas: 2", "statefulset/cache"),
    ];
    let manifest: String = crs
        .iter()
        .map(|(kind, name, spec, _)| {
            format!("---\napiVersion: pinfleet.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec:\n  {common}\n  {spec}\n")
        })
        .collect();
    k.ok_stdin(&["apply", "-f", "-"], &manifest);

    for (kind, name, _, child) in crs {
        let resource = format!("{}/{name}", kind.to_lowercase());
        k.ok(&["wait", "--for=condition=Reconciled", &resource, "--timeout=60s"]);
        let owner = k.ok(&["get", child, "-o", "jsonpath={.metadata.ownerReferences[0].kind}"]);
        assert_eq!(owner.trim(), kind, "{child} is owned by its {kind}");
        let labels = k.ok(&["get", child, "-o", "jsonpath={.metadata.labels.pinfleet\\.dev/team}"]);
        assert_eq!(labels.trim(), "feeds", "{child} carries the owner labels");
        let children = k.ok(&["get", &resource, "-o", "jsonpath={.status.children[*].name}"]);
        assert!(children.contains(child.split('/').nth(1).unwrap()), "{resource} lists {child}: {children}");
    }
    // Condition changes are recorded as Events on the workload.
    let wanted: Vec<String> = crs.iter().map(|(kind, name, _, _)| format!("{kind}/{name}:Applied:Normal")).collect();
    events_until(
        &k,
        "jsonpath={range .items[*]}{.regarding.kind}/{.regarding.name}:{.reason}:{.type}{\"\\n\"}{end}",
        |events| wanted.iter().all(|w| events.contains(w)),
    )
    .await;
    // A new runtime-support profile: a running Job keeps its pod template
    // (the API server refuses a change to it), and the workload stays
    // Reconciled; the StatefulSet's template rolls to it.
    let profile = pinfleet::workloads::render::RuntimeProfile::default_profile("2026.12.0");
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": pinfleet::controller::PROFILE_CONFIGMAP},
        "data": {"default": "2026.12.0", "profile-2026.12.0.json": serde_json::to_string(&profile).unwrap()}});
    k.ok_stdin(&["apply", "-f", "-"], &cm.to_string());
    let annotation = |child: &str| {
        k.ok(&["get", child, "-o", "jsonpath={.spec.template.metadata.annotations.pinfleet\\.dev/runtime-profile}"])
            .trim()
            .to_string()
    };
    let before = annotation("job/index");
    let reconciles = ctx.reconciles_in(&k.namespace);
    k.ok(&["annotate", "pinterestjobset/index", "pintereststatefulset/cache", "touch=1"]);
    k.ok(&[
        "wait",
        "--for=jsonpath={.spec.template.metadata.annotations.pinfleet\\.dev/runtime-profile}=2026.12.0",
        "statefulset/cache",
        "--timeout=60s",
    ]);
    until("both workloads reconciled again", || {
        let ctx = ctx.clone();
        let ns = k.namespace.clone();
        async move { (ctx.reconciles_in(&ns) >= reconciles + 2).then_some(()) }
    })
    .await;
    k.ok(&["wait", "--for=condition=Reconciled", "pinterestjobset/index", "--timeout=30s"]);
    assert_eq!(annotation("job/index"), before, "a running Job keeps its template");
    running.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_shard_retries_then_the_jobset_reports_failure() {
    let k = KubeEnv::start();
    if k.skip_on_real("makes pods fail through the sim's failure annotation") {
        return;
    }
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"]);
    k.ok_stdin(&["apply", "-f", "-"], "apiVersion: v1\nkind: Node\nmetadata: {name: batch-node}\n");
    k.ok(&["patch", "node/batch-node", "--subresource=status", "--type", "merge", "-p", r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}}"#]);
    let ctx = pinfleet::controller::Ctx::new(k.client().await, "test-cluster").only_in(&k.namespace);
    let running = tokio::spawn(pinfleet::controller::run(ctx));
    // Every pod of this shard set fails; each shard may retry once.
    let manifest = "apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestJobSet\nmetadata: {name: flaky}\nspec:\n  owner: {team: search, project: index}\n  shards: 2\n  parallelism: 2\n  backoffLimitPerIndex: 1\n  template:\n    metadata: {annotations: {sim.pinfleet.dev/fail: \"true\"}}\n    spec:\n      containers: [{name: indexer, image: search/indexer:7.1}]\n";
    k.ok_stdin(&["apply", "-f", "-"], manifest);
    // Succeeded is False while shards run too: wait for the reason to say Failed.
    k.ok(&[
        "wait",
        r#"--for=jsonpath={.status.conditions[?(@.type=="Succeeded")].reason}=Failed"#,
        "pinterestjobset/flaky",
        "--timeout=90s",
    ]);
    let st: serde_json::Value = serde_json::from_str(&k.ok(&["get", "pinterestjobset/flaky", "-o", "json"])).unwrap();
    let status = &st["status"];
    let cond = |t: &str| status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == t).cloned().unwrap();
    assert_eq!(cond("Degraded")["status"], "True", "{status}");
    assert!(status["shards"]["failed"].as_i64().unwrap() >= 2, "pods were retried and failed: {status}");
    // The failure is an Event on the workload, a warning.
    events_until(&k, "json", |events| {
        let events: serde_json::Value = serde_json::from_str(events).unwrap_or_default();
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["regarding"]["name"] == "flaky" && e["type"] == "Warning")
    })
    .await;
    running.abort();
}

/// A child the API server refuses shows in the workload's status with the
/// server's own message, and a warning Event; the next good reconcile
/// clears it. A name too long for a child is refused before it is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_child_shows_in_status_until_the_next_good_reconcile() {
    let k = KubeEnv::start();
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"]);
    // Someone else's Deployment holds the name, with another selector: the
    // controller's apply must change the selector, which is immutable.
    k.ok(&["create", "deployment", "squat", "--image=registry.k8s.io/pause:3.10"]);
    let ctx = pinfleet::controller::Ctx::new(k.client().await, "test-cluster").only_in(&k.namespace);
    let running = tokio::spawn(pinfleet::controller::run(ctx));
    let long = "n".repeat(60);
    let common = "owner: {team: feeds, project: home}\n  template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}";
    k.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestService\nmetadata: {{name: squat}}\nspec:\n  {common}\n  replicas: 1\n---\n\
             apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestCronJob\nmetadata: {{name: {long}}}\nspec:\n  {common}\n  schedule: \"0 * * * *\"\n"
        ),
    );
    let condition = |resource: &str| {
        k.ok(&[
            "get",
            resource,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Reconciled\")].status}/{.status.conditions[?(@.type==\"Reconciled\")].reason}/{.status.conditions[?(@.type==\"Reconciled\")].message}",
        ])
    };
    let refused = until("the refused apply in status", || {
        let c = condition("pinterestservice/squat");
        async move { c.starts_with("False/ApplyFailed/").then_some(c) }
    })
    .await;
    assert!(
        refused.contains("Deployment.apps \"squat\" is invalid: spec.selector: Invalid value:")
            && refused.contains("field is immutable"),
        "{refused}"
    );
    let too_long = until("the long name in status", || {
        let c = condition(&format!("pinterestcronjob/{long}"));
        async move { c.starts_with("False/ApplyFailed/").then_some(c) }
    })
    .await;
    assert!(too_long.contains("must be no more than 52 characters"), "{too_long}");
    assert!(
        k.kubectl(&["get", "cronjob", &long]).status.code() != Some(0),
        "a CronJob the server would refuse is never sent"
    );
    events_until(&k, "jsonpath={range .items[*]}{.regarding.name}:{.type}:{.note}{\"\\n\"}{end}", |events| {
        events.lines().any(|l| l.starts_with("squat:Warning:") && l.contains("field is immutable"))
    })
    .await;
    // The squatter goes; the next reconcile applies and clears the condition.
    k.ok(&["delete", "deployment", "squat"]);
    until("Reconciled=True after the conflict is gone", || {
        let c = condition("pinterestservice/squat");
        async move { c.starts_with("True/").then_some(()) }
    })
    .await;
    running.abort();
}

/// `pinfleet controller` with no AWS anywhere in its environment (no keys,
/// no region, no profile, a home without ~/.aws).
fn controller_without_aws(k: &KubeEnv, home: &std::path::Path, extra: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_pinfleet"));
    cmd.args(["controller", "--kubeconfig", k.kubeconfig.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .args(extra)
        .env("HOME", home)
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (key, _) in std::env::vars() {
        if key.starts_with("AWS_") && key != "AWS_CONFIG_FILE" && key != "AWS_SHARED_CREDENTIALS_FILE" {
            cmd.env_remove(key);
        }
    }
    cmd
}

#[test]
fn outside_aws_the_approver_says_once_that_it_is_off_and_refuses_ec2_asked_for() {
    use std::io::BufRead as _;
    let k = KubeEnv::start();
    let home = tempfile::tempdir().unwrap();
    // Unset: the controllers run; approval is off, said in one line.
    let mut child = controller_without_aws(&k, home.path(), &[]).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline && !lines.iter().any(|l: &String| l.contains("not approved")) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            lines.push(l);
        }
    }
    // Whatever else it would say early comes within a second more.
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(1)) {
        lines.push(l);
    }
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "the controller keeps running without AWS: {lines:#?}");
    let about: Vec<&String> = lines.iter().filter(|l| l.contains("serving certificates")).collect();
    assert_eq!(about.len(), 1, "{lines:#?}");
    assert!(about[0].contains("--serving-addresses node"), "says how to turn it on: {lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("ERROR") || l.to_lowercase().contains("imds") || l.contains("aws_config")),
        "no SDK dump, no error: {lines:#?}"
    );
    // Asked for explicitly: the controller does not start.
    let out = controller_without_aws(&k, home.path(), &["--serving-addresses", "ec2"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--serving-addresses ec2 needs AWS access") && err.contains("--serving-addresses node"),
        "{err}"
    );
}
