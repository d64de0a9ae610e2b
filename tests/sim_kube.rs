//! kube-rs against the API (the sim by default, a real cluster under
//! PINFLEET_TEST_KUBECONFIG): reflectors, server-side apply conflicts,
//! eviction and PodDisruptionBudgets, garbage collection, optimistic
//! concurrency, pagination, and 410 Gone on an expired watch.

#[path = "support/kube.rs"]
mod kube_support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent,
    WatchParams,
};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::ResourceExt as _;
use kube_support::KubeEnv;
use serde_json::json;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    }))
    .unwrap()
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// How long the garbage collector may show no progress at all before a
/// wait on it fails (a shared real server can be that busy).
const GC_STALL: Duration = Duration::from_secs(120);

/// `owner`'s dependents left, and a score that moves as the collector works
/// (each one gone counts two, each marked for deletion one).
async fn dependents_left(cms: &Api<ConfigMap>, owner: &str) -> (usize, usize) {
    let mut left = 0;
    let mut score = 0;
    for d in ["d1", "d2"] {
        match cms.get_opt(&format!("{owner}-{d}")).await.unwrap() {
            None => score += 2,
            Some(o) => {
                left += 1;
                score += usize::from(o.metadata.deletion_timestamp.is_some());
            }
        }
    }
    (left, score)
}

/// [`eventually`] for the garbage collector's work: it moves or not, and
/// a boolean cannot say which, so it gets the collector's stall time.
async fn eventually_long<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    kube_support::until_done(what, GC_STALL, || {
        let fut = f();
        async move { (usize::from(!fut.await), 0) }
    })
    .await
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reflector_converges_on_creates_updates_and_deletes() {
    let k = KubeEnv::start();
    let cms: Api<ConfigMap> = Api::namespaced(k.client().await, &k.namespace);
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    for n in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(n, &[("v", "1")])).await.unwrap();
    }
    cms.patch("b", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    cms.delete("c", &DeleteParams::default()).await.unwrap();
    eventually("the reflector to see a and b(v=2)", || {
        let reader = reader.clone();
        async move {
            let mut state: Vec<(String, String)> = reader
                .state()
                .iter()
                // What this test made: a distribution may publish ConfigMaps
                // of its own into every namespace (kube-root-ca.crt, openshift-service-ca.crt…).
                .filter(|o| matches!(o.metadata.name.as_deref(), Some("a" | "b" | "c")))
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap(),
                        o.data.as_ref().and_then(|d| d.get("v").cloned()).unwrap_or_default(),
                    )
                })
                .collect();
            state.sort();
            state == [("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())]
        }
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn server_side_apply_conflicts_between_managers() {
    let k = KubeEnv::start();
    let cms: Api<ConfigMap> = Api::namespaced(k.client().await, &k.namespace);
    let doc = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k": v}});
    cms.patch("ssa", &PatchParams::apply("alpha"), &Patch::Apply(doc("1"))).await.unwrap();
    // Applying the same value: shared ownership, no conflict.
    cms.patch("ssa", &PatchParams::apply("beta"), &Patch::Apply(doc("1"))).await.unwrap();
    let err = cms.patch("ssa", &PatchParams::apply("gamma"), &Patch::Apply(doc("2"))).await.unwrap_err();
    assert_eq!(api_code(&err), Some(409), "{err}");
    assert!(err.to_string().contains("conflict"), "{err}");
    let forced = cms.patch("ssa", &PatchParams::apply("gamma").force(), &Patch::Apply(doc("2"))).await.unwrap();
    assert_eq!(forced.data.unwrap()["k"], "2");
    // A no-op apply does not move the resourceVersion.
    let before = cms.get("ssa").await.unwrap().metadata.resource_version;
    let again = cms.patch("ssa", &PatchParams::apply("gamma").force(), &Patch::Apply(doc("2"))).await.unwrap();
    assert_eq!(again.metadata.resource_version, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn eviction_honours_pod_disruption_budgets() {
    let k = KubeEnv::start();
    if k.skip_without_running_pods() {
        return;
    }
    let client = k.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &k.namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &k.namespace);
    if !k.real {
        // A Ready node for the pod (a real cluster has its own).
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        let node =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": k.unique("n")}}))
                .unwrap();
        let n = nodes.create(&PostParams::default(), &node).await.unwrap();
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        nodes
            .patch_status(n.metadata.name.as_deref().unwrap(), &PatchParams::default(), &Patch::Merge(ready))
            .await
            .unwrap();
    }
    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    eventually("the pod to be scheduled and Ready", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("p").await.unwrap();
            p.status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        }
    })
    .await;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})).unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("the budget's status", || {
        let pdbs = pdbs.clone();
        async move {
            let s = pdbs.get("b").await.unwrap().status;
            s.is_some_and(|s| (s.current_healthy, s.desired_healthy, s.disruptions_allowed) == (1, 1, 0))
        }
    })
    .await;
    let err = pods.evict("p", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(429), "{err}");
    assert!(err.to_string().contains("disruption budget"), "{err}");
    pdbs.delete("b", &DeleteParams::default()).await.unwrap();
    pods.evict("p", &EvictParams::default()).await.unwrap();
    eventually("the evicted pod to go", || {
        let pods = pods.clone();
        async move { pods.get_opt("p").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_services_endpoint_slices_follow_its_pods() {
    let k = KubeEnv::start();
    if k.skip_without_running_pods() {
        return;
    }
    let client = k.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &k.namespace);
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &k.namespace);
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(client.clone(), &k.namespace);
    if !k.real {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        hand_node(&nodes, &k.unique("n"), true).await;
    }
    let pod = |name: &str, app: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
        .unwrap()
    };
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(name, "x")).await.unwrap();
    }
    let svc = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080}]}}))
    .unwrap();
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    // The pods a Service's slices list as ready, by name.
    let listed = || {
        let slices = slices.clone();
        async move {
            let mut names: Vec<String> = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
                .await
                .unwrap()
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .filter_map(|e| e.target_ref.as_ref()?.name.clone())
                .collect();
            names.sort();
            names
        }
    };
    let expect = |want: &'static [&'static str], what: &'static str| {
        let listed = listed.clone();
        async move {
            eventually(what, || {
                let listed = listed.clone();
                async move { listed().await == want }
            })
            .await
        }
    };
    expect(&["a", "b"], "both pods in the Service's slice").await;
    // A pod relabelled out of the selector leaves; a deleted one too; a new one joins.
    pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})))
        .await
        .unwrap();
    expect(&["b"], "the relabelled pod to leave the slice").await;
    pods.delete("b", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    expect(&[], "the deleted pod to leave the slice").await;
    pods.create(&PostParams::default(), &pod("c", "x")).await.unwrap();
    pods.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})))
        .await
        .unwrap();
    expect(&["a", "c"], "a new pod and the pod relabelled back to join").await;
    // A Service whose selector changes follows it.
    svcs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"selector": {"app": "y"}}})))
        .await
        .unwrap();
    expect(&[], "the slice to follow the Service's new selector").await;
}

/// A Node the test keeps Ready or not by hand (the sim runs pods on it).
async fn hand_node(nodes: &Api<k8s_openapi::api::core::v1::Node>, name: &str, ready: bool) {
    if nodes.get_opt(name).await.unwrap().is_none() {
        let node =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})).unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    nodes.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread")]
async fn eviction_of_a_pod_that_is_not_ready_follows_the_unhealthy_pod_policy() {
    let k = KubeEnv::start();
    if k.skip_on_real("turns a Node NotReady by hand, which needs Nodes with no kubelet behind them") {
        return;
    }
    let client = k.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &k.namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &k.namespace);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    let (n1, n2) = (k.unique("n"), k.unique("n"));
    for (pod, node) in [("p1", &n1), ("p2", &n2)] {
        hand_node(&nodes, node, true).await;
        let p: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "labels": {"app": "u"}}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})).unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    eventually("both pods Ready", || {
        let pods = pods.clone();
        async move { pod_ready(&pods.get("p1").await.unwrap()) && pod_ready(&pods.get("p2").await.unwrap()) }
    })
    .await;
    // p2's node goes NotReady: p2 is Running, not Ready.
    hand_node(&nodes, &n2, false).await;
    eventually("p2 to be Running and not Ready", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("p2").await.unwrap();
            !pod_ready(&p) && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
        }
    })
    .await;
    let budget = |min: i32| -> PodDisruptionBudget {
        serde_json::from_value(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "u"}, "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": "u"}}}})).unwrap()
    };
    // The budget is not met (1 healthy of 2 wanted): under the default
    // IfHealthyBudget policy even the unhealthy pod may not go.
    pdbs.create(&PostParams::default(), &budget(2)).await.unwrap();
    let err = pods.evict("p2", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(429), "{err}");
    // Met (1 healthy of 1 wanted): no disruption is allowed for a healthy
    // pod, but the unhealthy one may go.
    pdbs.patch("u", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 1}}))).await.unwrap();
    let err = pods.evict("p1", &EvictParams::default()).await.unwrap_err();
    assert_eq!(api_code(&err), Some(429), "the healthy pod is the budget's last: {err}");
    pods.evict("p2", &EvictParams::default()).await.unwrap();
    for n in [&n1, &n2] {
        nodes.delete(n, &DeleteParams::default()).await.unwrap();
    }
}

async fn owner_with_dependents(cms: &Api<ConfigMap>, owner: &str) {
    let o = cms.create(&PostParams::default(), &cm(owner, &[])).await.unwrap();
    for d in ["d1", "d2"] {
        let mut dep = cm(&format!("{owner}-{d}"), &[]);
        dep.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: owner.into(),
            uid: o.metadata.uid.clone().unwrap(),
            // d1 holds its owner's foreground deletion back; d2 does not.
            block_owner_deletion: Some(d == "d1"),
            ..Default::default()
        }]);
        cms.create(&PostParams::default(), &dep).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_collection_follows_the_propagation_policy() {
    let k = KubeEnv::start();
    let cms: Api<ConfigMap> = Api::namespaced(k.client().await, &k.namespace);
    // Background: dependents follow the owner.
    owner_with_dependents(&cms, "bg").await;
    cms.delete("bg", &DeleteParams::background()).await.unwrap();
    // A real server's garbage collector works at its own pace: the wait
    // follows it (what is left, what is marked) rather than a deadline.
    kube_support::until_done("background dependents to go", GC_STALL, || {
        let cms = cms.clone();
        async move { dependents_left(&cms, "bg").await }
    })
    .await;
    // Orphan: dependents stay, without the owner reference.
    owner_with_dependents(&cms, "or").await;
    cms.delete("or", &DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() })
        .await
        .unwrap();
    eventually("the orphaned owner to go", || {
        let cms = cms.clone();
        async move { cms.get_opt("or").await.unwrap().is_none() }
    })
    .await;
    eventually_long("owner references to be removed", || {
        let cms = cms.clone();
        async move { cms.get("or-d1").await.unwrap().metadata.owner_references.unwrap_or_default().is_empty() }
    })
    .await;
    // Foreground: the owner stays (deletionTimestamp, the foregroundDeletion
    // finalizer) until the dependents that block its deletion are gone; one
    // that does not block it (d2, here held by a finalizer of its own) may
    // outlive it, as the real garbage collector allows.
    owner_with_dependents(&cms, "fg").await;
    cms.patch(
        "fg-d2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();
    let rv = cms.list_metadata(&kube::api::ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut events = cms.watch(&kube::api::WatchParams::default().timeout(30), &rv).await.unwrap().boxed();
    let answer = cms.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let owner = answer.left().expect("the owner is still there while its dependents go");
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert!(owner.finalizers().iter().any(|f| f == "foregroundDeletion"), "{:?}", owner.metadata.finalizers);
    let mut deleted = Vec::new();
    while !deleted.iter().any(|d| d == "fg") {
        match tokio::time::timeout(std::time::Duration::from_secs(30), events.next()).await {
            Ok(Some(Ok(kube::api::WatchEvent::Deleted(o)))) if o.name_any().starts_with("fg") => {
                deleted.push(o.name_any())
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("watching the foreground deletion: {other:?} after {deleted:?}"),
        }
    }
    assert_eq!(deleted, ["fg-d1", "fg"], "the blocking dependent first, then the owner, d2 held by its finalizer");
    eventually("the non-blocking dependent to be deleted too (held by its finalizer)", || {
        let cms = cms.clone();
        async move { cms.get("fg-d2").await.unwrap().metadata.deletion_timestamp.is_some() }
    })
    .await;
    cms.patch("fg-d2", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    eventually_long("the non-blocking dependent to go once released", || {
        let cms = cms.clone();
        async move { cms.get_opt("fg-d2").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stale_writes_conflict_and_lists_paginate() {
    let k = KubeEnv::start();
    let cms: Api<ConfigMap> = Api::namespaced(k.client().await, &k.namespace);
    let first = cms.create(&PostParams::default(), &cm("occ", &[("v", "1")])).await.unwrap();
    let mut newer = first.clone();
    newer.data = Some(BTreeMap::from([("v".to_string(), "2".to_string())]));
    cms.replace("occ", &PostParams::default(), &newer).await.unwrap();
    let mut stale = first.clone();
    stale.data = Some(BTreeMap::from([("v".to_string(), "3".to_string())]));
    let err = cms.replace("occ", &PostParams::default(), &stale).await.unwrap_err();
    assert_eq!(api_code(&err), Some(409), "{err}");

    for i in 0..25 {
        cms.create(&PostParams::default(), &cm(&format!("page-{i:02}"), &[])).await.unwrap();
    }
    let lp = ListParams::default().labels("").limit(10);
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut p = lp.clone();
        if let Some(t) = &token {
            p = p.continue_token(t);
        }
        let page = cms.list(&p).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 10);
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()).filter(|n| n.starts_with("page-")));
        token = page.metadata.continue_.filter(|c| !c.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(names.len(), 25);
    assert!(pages >= 3);
}

#[test]
fn a_watch_from_an_expired_version_gets_410() {
    // Needs a sim that keeps only a short event history.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let sim = pinfleet::sim::Sim::start_with(
            0,
            pinfleet::sim::Inner::with_event_log(5),
            pinfleet::sim::Controllers::none(),
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kc.yaml");
        sim.write_kubeconfig(&path).unwrap();
        let client = pinfleet::kube::client_from_kubeconfig(&path, pinfleet::kube::Retry::Never).await.unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let first = cms.create(&PostParams::default(), &cm("w0", &[])).await.unwrap();
        for i in 1..20 {
            cms.create(&PostParams::default(), &cm(&format!("w{i}"), &[])).await.unwrap();
        }
        let rv = first.metadata.resource_version.unwrap();
        let mut stream = cms.watch(&WatchParams::default().timeout(5), &rv).await.unwrap().boxed();
        match stream.try_next().await {
            Ok(Some(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
            Err(e) => assert_eq!(api_code(&e), Some(410), "{e}"),
            other => panic!("expected 410 Gone, got {other:?}"),
        }
        // From a recent version the watch works.
        let current = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
        let mut stream = cms.watch(&WatchParams::default().timeout(5), &current).await.unwrap().boxed();
        cms.create(&PostParams::default(), &cm("late", &[])).await.unwrap();
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(c)) => assert_eq!(c.metadata.name.as_deref(), Some("late")),
            other => panic!("expected ADDED, got {other:?}"),
        }
        sim.stop().await;
    });
}
