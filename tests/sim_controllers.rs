//! The sim's controllers and node simulator: what the real ones would do,
//! checked through kube-rs. These need the sim (declared nodes, timing), so
//! they run against it even when PINFLEET_TEST_KUBECONFIG is set.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use pinfleet::sim::nodes::{self, NodeSpec};
use pinfleet::sim::{Controllers, Inner, Sim};
use serde_json::json;

struct World {
    sim: Sim,
    client: kube::Client,
    _dir: tempfile::TempDir,
}

async fn world(node_names: &[&str]) -> World {
    let mut inner = Inner::new();
    for n in node_names {
        let mut spec = NodeSpec::simple(n);
        spec.labels.insert("pool".into(), if n.starts_with("gpu") { "gpu".into() } else { "general".into() });
        if n.starts_with("gpu") {
            spec.taints.push(pinfleet::spec::Taint {
                key: "gpu".into(),
                value: "true".into(),
                effect: pinfleet::spec::TaintEffect::NoSchedule,
            });
        }
        nodes::declare(&mut inner, &spec);
    }
    let sim = Sim::start_with(0, inner, Controllers { job_run: Duration::from_millis(100), ..Default::default() })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc.yaml");
    sim.write_kubeconfig(&kc).unwrap();
    let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Never).await.unwrap();
    World { sim, client, _dir: dir }
}

async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..100 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemonset_runs_one_pod_per_eligible_node() {
    let w = world(&["n1", "n2", "gpu1"]).await;
    let ds: Api<DaemonSet> = Api::namespaced(w.client.clone(), "default");
    ds.create(&PostParams::default(), &from(json!({
        "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}
    }))).await.unwrap();
    // The gpu node is tainted and the daemon does not tolerate it.
    let status = until("2 ready daemon pods", || {
        let ds = ds.clone();
        async move { ds.get("agent").await.unwrap().status.filter(|s| s.number_ready == 2) }
    })
    .await;
    assert_eq!(status.desired_number_scheduled, 2);
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    let mut on: Vec<String> = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.spec.as_ref().unwrap().node_name.clone().unwrap())
        .collect();
    on.sort();
    assert_eq!(on, ["n1", "n2"]);
    w.sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_indexed_job_completes_each_index_once() {
    let w = world(&["n1", "n2"]).await;
    let jobs: Api<Job> = Api::namespaced(w.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &from(json!({
            "metadata": {"name": "shards"},
            "spec": {"completions": 4, "parallelism": 2, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "worker:1"}]}}}
        })),
    )
    .await
    .unwrap();
    let status = until("the job to complete", || {
        let jobs = jobs.clone();
        async move {
            let s = jobs.get("shards").await.unwrap().status?;
            s.conditions.as_ref()?.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(s)
        }
    })
    .await;
    assert_eq!(status.succeeded, Some(4));
    assert_eq!(status.completed_indexes.as_deref(), Some("0,1,2,3"));
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    let mut indexes: Vec<String> = pods
        .list(&ListParams::default().labels("job-name=shards"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            p.spec.as_ref().unwrap().containers[0]
                .env
                .as_ref()
                .unwrap()
                .iter()
                .find(|e| e.name == "JOB_COMPLETION_INDEX")
                .unwrap()
                .value
                .clone()
                .unwrap()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2", "3"]);
    w.sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statefulset_starts_ordinals_in_order() {
    let w = world(&["n1"]).await;
    let sts: Api<StatefulSet> = Api::namespaced(w.client.clone(), "default");
    sts.create(&PostParams::default(), &from(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "db:1"}]}}}
    }))).await.unwrap();
    until("3 ready replicas", || {
        let sts = sts.clone();
        async move { sts.get("db").await.unwrap().status.filter(|s| s.ready_replicas == Some(3)) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    let mut names: Vec<String> = pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["db-0", "db-1", "db-2"]);
    let created: Vec<_> = ["db-0", "db-1", "db-2"]
        .iter()
        .map(|n| {
            futures::executor::block_on(pods.get(n)).unwrap().metadata.resource_version.unwrap().parse::<u64>().unwrap()
        })
        .collect();
    assert!(created[0] < created[1] && created[1] < created[2]);
    w.sim.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_honours_selectors_taints_and_capacity() {
    let w = world(&["n1", "gpu1"]).await;
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "default");
    let pod = |name: &str, extra: serde_json::Value| -> Pod {
        let mut p = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}});
        if let (Some(spec), Some(e)) = (p["spec"].as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                spec.insert(k.clone(), v.clone());
            }
        }
        from(p)
    };
    pods.create(&PostParams::default(), &pod("plain", json!({}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("gpu-tolerant", json!({"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}))).await.unwrap();
    pods.create(&PostParams::default(), &pod("gpu-intolerant", json!({"nodeSelector": {"pool": "gpu"}})))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("huge", json!({"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "64"}}}]})),
    )
    .await
    .unwrap();
    let node_of = |name: &'static str| {
        let pods = pods.clone();
        async move { pods.get(name).await.unwrap().spec.unwrap().node_name }
    };
    assert_eq!(until("plain scheduled", || async { node_of("plain").await.map(Some) }).await.as_deref(), Some("n1"));
    assert_eq!(
        until("gpu scheduled", || async { node_of("gpu-tolerant").await.map(Some) }).await.as_deref(),
        Some("gpu1")
    );
    let why = until("an unschedulable reason", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("gpu-intolerant").await.unwrap();
            p.status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message)
        }
    })
    .await;
    assert!(why.contains("untolerated taint") && why.contains("node affinity/selector"), "{why}");
    let why = until("an insufficient-cpu reason", || {
        let pods = pods.clone();
        async move {
            pods.get("huge")
                .await
                .unwrap()
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.reason.as_deref() == Some("Unschedulable"))
                .and_then(|c| c.message)
        }
    })
    .await;
    assert!(why.contains("Insufficient cpu"), "{why}");
    let nodes: Api<Node> = Api::all(w.client.clone());
    assert_eq!(nodes.list(&ListParams::default()).await.unwrap().items.len(), 2);
    w.sim.stop().await;
}
