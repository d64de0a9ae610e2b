//! The kubelet's pod pass (the node pass is in `sim::nodes`): a bound pod
//! started after its start delay and made Ready, a Job's pod run to its
//! end (etcdctl against the sim's etcd), a terminating pod ended when its
//! grace is over, and pods on a node that is gone collected.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{all, name, ns, s, set_status, t, terminating, uid, Controllers, FAIL_ANNOTATION};
use crate::sim::nodes::node_ready;
use crate::sim::store::{finalizers, ignores_sigterm, is_ready, now, Inner, Propagation};

impl Controllers {
    pub(super) fn kubelet(&self, inner: &mut Inner) {
        let pods_t = t(inner, "", "pods");
        let now_ts = chrono::Utc::now();
        // One listing of the pods for the node pass and the pod pass (the
        // node pass writes Nodes and CSRs only).
        let pods = all(inner, &pods_t);
        crate::sim::nodes::kubelets(inner, &pods);
        // The nodes once per pass, shared (a handful beside thousands of pods).
        let nodes: HashMap<String, Arc<Value>> =
            all(inner, &t(inner, "", "nodes")).into_iter().map(|n| (name(&n), n)).collect();
        for pod in pods {
            let node = s(&pod, "/spec/nodeName").to_string();
            if node.is_empty() {
                continue;
            }
            let Some(n) = nodes.get(&node) else {
                // Pod garbage collection: pods bound to a node that is gone.
                if !terminating(&pod) {
                    let _ = inner.delete(&pods_t, &ns(&pod), &name(&pod), Propagation::Background, None, false);
                }
                continue;
            };
            // pinfleet's own containers run as processes: their runner reports them.
            if !terminating(&pod) && crate::sim::procs::is_own(&pod, &inner.own_images) {
                continue;
            }
            if terminating(&pod) {
                // The kubelet stops the containers (one that ignores SIGTERM
                // at the end of its grace); with no finalizers left the pod goes.
                let until = pod
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&chrono::Utc));
                if ignores_sigterm(&pod) && until.is_some_and(|u| u > now_ts) {
                    continue;
                }
                if finalizers(&pod).is_empty() {
                    let _ = inner.delete(&pods_t, &ns(&pod), &name(&pod), Propagation::Background, None, false);
                }
                continue;
            }
            // A started kubelet without a pod network still runs
            // hostNetwork pods: that is how the network agent arrives.
            let host_network = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
            let network_only = crate::sim::nodes::booted(n) && !crate::sim::nodes::has_network(n);
            if !node_ready(n) && !(network_only && host_network) {
                if is_ready(&pod) {
                    let mut st = pod["status"].clone();
                    st["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]);
                    set_status(inner, &pods_t, &pod, st, "kubelet");
                }
                continue;
            }
            let phase = s(&pod, "/status/phase").to_string();
            let restart = s(&pod, "/spec/restartPolicy");
            let batch = restart == "Never" || restart == "OnFailure";
            // A running service pod or a finished one has nothing to do:
            // settled pods cost a pass no parsing and no copies.
            if matches!(phase.as_str(), "Succeeded" | "Failed") || (phase == "Running" && !batch) {
                continue;
            }
            let scheduled_at = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|d| d.with_timezone(&chrono::Utc))
                .unwrap_or(now_ts);
            let elapsed = (now_ts - scheduled_at).to_std().unwrap_or_default();
            let fails = s(&pod, &format!("/metadata/annotations/{}", FAIL_ANNOTATION.replace('/', "~1"))) == "true";
            let containers: Vec<String> = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(name_of).collect())
                .unwrap_or_default();
            let ip = format!("10.244.{}.{}", (uid(&pod).len() * 7) % 250, rand::random_range(2..250u8));
            match phase.as_str() {
                "" | "Pending" if elapsed >= self.pod_start => {
                    let statuses: Vec<Value> = containers.iter().map(|c| json!({"name": c, "ready": true, "started": true, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {"startedAt": now()}}})).collect();
                    let st = json!({
                        "phase": "Running", "podIP": ip, "hostIP": "10.0.0.1", "startTime": now(),
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at.format("%Y-%m-%dT%H:%M:%SZ").to_string()},
                            {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now()},
                            {"type": "Ready", "status": "True", "lastTransitionTime": now()},
                        ],
                        "containerStatuses": statuses,
                    });
                    set_status(inner, &pods_t, &pod, st, "kubelet");
                }
                "Running" if batch => {
                    let started = pod
                        .pointer("/status/startTime")
                        .and_then(Value::as_str)
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|d| d.with_timezone(&chrono::Utc))
                        .unwrap_or(now_ts);
                    if (now_ts - started).to_std().unwrap_or_default() >= self.job_run {
                        // Containers that run etcdctl run it against the sim's etcd.
                        let codes: Vec<i32> = pod
                            .pointer("/spec/containers")
                            .and_then(Value::as_array)
                            .map(|cs| {
                                cs.iter()
                                    .map(|c| match crate::sim::etcd::etcdctl_args(c) {
                                        Some(args) => {
                                            let result = inner.etcd.run(&node, &args);
                                            let code = result.0;
                                            inner.etcd.record(&ns(&pod), &name(&pod), &name_of(c), result);
                                            code
                                        }
                                        None => i32::from(fails),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        let failed = codes.iter().any(|c| *c != 0);
                        let phase = if failed { "Failed" } else { "Succeeded" };
                        let statuses: Vec<Value> = containers.iter().zip(codes.iter().chain(std::iter::repeat(&0))).map(|(c, code)| {
                            let reason = if *code == 0 { "Completed" } else { "Error" };
                            json!({"name": c, "ready": false, "restartCount": 0, "image": "", "imageID": "", "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": now()}}})
                        }).collect();
                        let mut st = pod["status"].clone();
                        st["phase"] = json!(phase);
                        st["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "PodCompleted"}]);
                        st["containerStatuses"] = json!(statuses);
                        set_status(inner, &pods_t, &pod, st, "kubelet");
                    }
                }
                _ => {}
            }
        }
    }
}

fn name_of(c: &Value) -> String {
    s(c, "/name").to_string()
}
