//! What kube-apiserver refuses, table by table: each valid object is
//! accepted, each broken one is refused with the API server's own message
//! of the minor it runs (rules and wording moved between minors; where a
//! case changed, the table gives the answer per minor). The table is sent
//! over HTTP (server-side dry run) to a sim of every minor in upstream
//! support by default, or once to the real cluster PINFLEET_TEST_KUBECONFIG
//! names, unchanged, expecting its own minor's answers.

#[path = "support/kube.rs"]
mod kube_support;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube_support::KubeEnv;
use serde_json::{json, Value};

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "app", "image": "nginx:1.27",
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "env": [{"name": "MODE", "value": "prod"}],
                        "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                    }],
                    "initContainers": [{"name": "setup", "image": "busybox:1.36"}],
                    "volumes": [{"name": "data", "emptyDir": {}}]
                }
            }
        }
    })
}

fn job() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox:1.36"}]}}}
    })
}

fn cronjob() -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": job()["spec"].clone()}}
    })
}

/// The most common StatefulSet: its container mounts the volume its own
/// claim template creates (issue 51: a real v1.36 server accepts it).
fn statefulset() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {
            "serviceName": "db", "replicas": 1,
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]
        }
    })
}

fn with(mut base: Value, pointer: &str, v: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let target = base.pointer_mut(parent).unwrap_or_else(|| panic!("{parent} in the base object"));
    match target {
        Value::Array(a) => {
            let i: usize = key.parse().unwrap();
            if i == a.len() {
                a.push(v)
            } else {
                a[i] = v
            }
        }
        Value::Object(o) => {
            if v.is_null() {
                o.remove(key);
            } else {
                o.insert(key.into(), v);
            }
        }
        _ => panic!("{parent} is not a container"),
    }
    base
}

/// The answer from 1.`from` on, and before it.
fn since(minor: u32, from: u32, then: Option<String>, before: Option<String>) -> Option<String> {
    if minor >= from {
        then
    } else {
        before
    }
}

/// (case, object, None when accepted or the exact message of the refusal),
/// as the API server of 1.`minor` answers.
fn table(minor: u32) -> Vec<(&'static str, Value, Option<String>)> {
    let d = deployment;
    let c0 = "/spec/template/spec/containers/0";
    let sixteen = "platform-metrics";
    let label_msg = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    vec![
        ("deployment: valid", d(), None),
        ("statefulset: a container mounts its own claim template", statefulset(), None),
        (
            "statefulset: a claim template and a volume of the pod, both mounted",
            with(
                with(statefulset(), "/spec/template/spec/volumes", json!([{"name": "scratch", "emptyDir": {}}])),
                "/spec/template/spec/containers/0/volumeMounts/1",
                json!({"name": "scratch", "mountPath": "/scratch"}),
            ),
            None,
        ),
        (
            "statefulset: a mount of neither a volume nor a claim template",
            with(statefulset(), "/spec/template/spec/containers/0/volumeMounts/0/name", json!("logs")),
            Some("StatefulSet.apps \"db\" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"logs\"".into()),
        ),
        (
            "deployment: a mount of a claim name a Deployment has no template for",
            with(d(), &format!("{c0}/volumeMounts/0/name"), json!("claim")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"claim\"".into()),
        ),
        (
            "deployment: a port name of 16 characters",
            with(d(), &format!("{c0}/ports/0/name"), json!(sixteen)),
            Some(format!("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].ports[0].name: Invalid value: \"{sixteen}\": must be no more than 15 characters")),
        ),
        (
            "deployment: a port name without a letter, and with a double hyphen",
            with(d(), &format!("{c0}/ports/0/name"), json!("80--80")),
            Some("Deployment.apps \"web\" is invalid: [spec.template.spec.containers[0].ports[0].name: Invalid value: \"80--80\": must contain at least one letter (a-z), spec.template.spec.containers[0].ports[0].name: Invalid value: \"80--80\": must not contain consecutive hyphens]".into()),
        ),
        (
            "deployment: a duplicate port name in one container",
            with(d(), &format!("{c0}/ports/1"), json!({"name": "http", "containerPort": 8081})),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].ports[1].name: Duplicate value: \"http\"".into()),
        ),
        (
            "deployment: a port number out of range",
            with(d(), &format!("{c0}/ports/0/containerPort"), json!(70000)),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into()),
        ),
        (
            "deployment: an unknown protocol",
            with(d(), &format!("{c0}/ports/0/protocol"), json!("HTTP")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"".into()),
        ),
        (
            "deployment: two containers with one name",
            with(d(), "/spec/template/spec/containers/1", json!({"name": "setup", "image": "busybox:1.36"})),
            // 1.36 takes the regular containers' names first and reports the init container.
            since(
                minor,
                36,
                Some("Deployment.apps \"web\" is invalid: spec.template.spec.initContainers[0].name: Duplicate value: \"setup\"".into()),
                Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[1].name: Duplicate value: \"setup\"".into()),
            ),
        ),
        (
            "deployment: a container name that is not a DNS label",
            with(d(), &format!("{c0}/name"), json!("App_1")),
            Some(format!("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].name: Invalid value: \"App_1\": {label_msg}")),
        ),
        (
            "deployment: a container without an image",
            with(d(), &format!("{c0}/image"), Value::Null),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].image: Required value".into()),
        ),
        (
            "deployment: an env var name with '='",
            with(d(), &format!("{c0}/env/0/name"), json!("A=B")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='".into()),
        ),
        (
            "deployment: a mount naming no volume",
            with(d(), &format!("{c0}/volumeMounts/0/name"), json!("cache")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"cache\"".into()),
        ),
        (
            "deployment: two volumes with one name",
            with(d(), "/spec/template/spec/volumes/1", json!({"name": "data", "emptyDir": {}})),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.volumes[1].name: Duplicate value: \"data\"".into()),
        ),
        (
            "deployment: requests above limits",
            with(d(), &format!("{c0}/resources/requests/cpu"), json!("2")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1".into()),
        ),
        (
            "deployment: a probe on an init container that is not a sidecar",
            with(d(), "/spec/template/spec/initContainers/0/readinessProbe", json!({"exec": {"command": ["true"]}})),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always".into()),
        ),
        (
            "deployment: a probe on a native sidecar (restartPolicy Always)",
            with(
                d(),
                "/spec/template/spec/initContainers/0",
                json!({"name": "setup", "image": "busybox:1.36", "restartPolicy": "Always", "readinessProbe": {"exec": {"command": ["true"]}}}),
            ),
            None,
        ),
        (
            "deployment: an init container restartPolicy other than Always",
            with(d(), "/spec/template/spec/initContainers/0/restartPolicy", json!("OnFailure")),
            // Container restart rules (ContainerRestartRules, on from 1.35).
            since(
                minor,
                35,
                None,
                Some("Deployment.apps \"web\" is invalid: spec.template.spec.initContainers[0].restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"".into()),
            ),
        ),
        (
            "deployment: restartPolicy Never",
            with(d(), "/spec/template/spec/restartPolicy", json!("Never")),
            Some("Deployment.apps \"web\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"".into()),
        ),
        (
            "deployment: no selector",
            with(d(), "/spec/selector", Value::Null),
            Some("Deployment.apps \"web\" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`]".into()),
        ),
        (
            "deployment: a selector the template does not match",
            with(d(), "/spec/selector/matchLabels/app", json!("api")),
            Some("Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`".into()),
        ),
        (
            "deployment: a label value of 64 characters",
            with(d(), "/metadata/labels", json!({"team": "x".repeat(64)})),
            Some(format!(
                "Deployment.apps \"web\" is invalid: metadata.labels: Invalid value: \"{}\": must be no more than 63 {}",
                "x".repeat(64),
                if minor >= 36 { "bytes" } else { "characters" }
            )),
        ),
        (
            "deployment: a name with capitals",
            with(d(), "/metadata/name", json!("Web")),
            Some("Deployment.apps \"Web\" is invalid: metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()),
        ),
        (
            "deployment: annotations over 256 KiB",
            with(d(), "/metadata/annotations", json!({"big": "x".repeat(262_145)})),
            Some("Deployment.apps \"web\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes".into()),
        ),
        ("job: valid", job(), None),
        (
            "job: restartPolicy left to its default (Always)",
            with(job(), "/spec/template/spec/restartPolicy", Value::Null),
            since(
                minor,
                36,
                Some("Job.batch \"batch\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"".into()),
                Some("Job.batch \"batch\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".into()),
            ),
        ),
        (
            "job: backoffLimitPerIndex without indexed completion",
            with(job(), "/spec/backoffLimitPerIndex", json!(1)),
            since(
                minor,
                36,
                Some("Job.batch \"batch\" is invalid: spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode".into()),
                Some("Job.batch \"batch\" is invalid: spec.backoffLimitPerIndex: Forbidden: requires indexed completion mode".into()),
            ),
        ),
        (
            "job: an unknown completion mode",
            with(job(), "/spec/completionMode", json!("Sharded")),
            Some("Job.batch \"batch\" is invalid: spec.completionMode: Unsupported value: \"Sharded\": supported values: \"NonIndexed\", \"Indexed\"".into()),
        ),
        (
            "job: negative parallelism",
            with(job(), "/spec/parallelism", json!(-1)),
            Some("Job.batch \"batch\" is invalid: spec.parallelism: Invalid value: -1: must be greater than or equal to 0".into()),
        ),
        ("cronjob: valid", cronjob(), None),
        ("cronjob: with a time zone", with(cronjob(), "/spec/timeZone", json!("America/Los_Angeles")), None),
        (
            "cronjob: a schedule of four fields",
            with(cronjob(), "/spec/schedule", json!("0 3 * *")),
            Some("CronJob.batch \"nightly\" is invalid: spec.schedule: Invalid value: \"0 3 * *\": expected exactly 5 fields, found 4: [0 3 * *]".into()),
        ),
        (
            "cronjob: an unknown time zone",
            with(cronjob(), "/spec/timeZone", json!("Mars/Olympus")),
            Some("CronJob.batch \"nightly\" is invalid: spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus".into()),
        ),
        (
            "cronjob: a name of 53 characters",
            with(cronjob(), "/metadata/name", json!("n".repeat(53))),
            Some(format!("CronJob.batch \"{n}\" is invalid: metadata.name: Invalid value: \"{n}\": must be no more than 52 characters", n = "n".repeat(53))),
        ),
        (
            "service: valid",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "grpc", "port": 9090}]}}),
            None,
        ),
        (
            "service: two ports, one without a name",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}, {"port": 9090}]}}),
            Some("Service \"web\" is invalid: spec.ports[1].name: Required value".into()),
        ),
        (
            "service: an unknown type",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"type": "Internal", "ports": [{"port": 80}]}}),
            Some("Service \"web\" is invalid: spec.type: Unsupported value: \"Internal\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"".into()),
        ),
        (
            "service: a name that starts with a digit",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}}),
            // RelaxedServiceNameValidation (on from 1.36): an RFC 1123 label.
            since(
                minor,
                36,
                None,
                Some("Service \"1web\" is invalid: metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into()),
            ),
        ),
        (
            "pdb: minAvailable and maxUnavailable both set",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
            // 1.36 prints the internal struct, which has no JSON tags.
            since(
                minor,
                36,
                Some("PodDisruptionBudget.policy \"web\" is invalid: spec: Invalid value: {\"MinAvailable\":1,\"Selector\":{\"matchLabels\":{\"app\":\"web\"}},\"MaxUnavailable\":1,\"UnhealthyPodEvictionPolicy\":null}: minAvailable and maxUnavailable cannot be both set".into()),
                Some("PodDisruptionBudget.policy \"web\" is invalid: spec: Invalid value: {\"minAvailable\":1,\"maxUnavailable\":1,\"selector\":{\"matchLabels\":{\"app\":\"web\"}}}: minAvailable and maxUnavailable cannot be both set".into()),
            ),
        ),
        (
            "configmap: a key with a slash",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a/b": "1"}}),
            Some("ConfigMap \"cfg\" is invalid: data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')".into()),
        ),
        (
            "secret: a key '..x'",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"..x": "MQ=="}}),
            Some("Secret \"s\" is invalid: data[..x]: Invalid value: \"..x\": must not start with '..'".into()),
        ),
        (
            "priorityclass: a name with the reserved system- prefix",
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "system-mine"}, "value": 10}),
            Some("PriorityClass.scheduling.k8s.io \"system-mine\" is invalid: metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-mine is not a known system priority class".into()),
        ),
        (
            "lease: a duration of 0",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"}, "spec": {"leaseDurationSeconds": 0}}),
            Some("Lease.coordination.k8s.io \"leader\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0".into()),
        ),
        (
            "role: a rule without verbs",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": []}]}),
            Some("Role.rbac.authorization.k8s.io \"reader\" is invalid: rules[0].verbs: Required value: verbs must contain at least one value".into()),
        ),
        (
            "daemonset: a selector the template does not match",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "other"}}, "spec": {"containers": [{"name": "a", "image": "busybox:1.36"}]}}}}),
            Some("DaemonSet.apps \"agent\" is invalid: spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`".into()),
        ),
        (
            "job: Indexed without completions",
            // Parallelism set, so defaulting leaves completions unset (with
            // neither, the server defaults both to 1 and accepts it).
            with(with(job(), "/spec/completionMode", json!("Indexed")), "/spec/parallelism", json!(2)),
            Some("Job.batch \"batch\" is invalid: spec.completions: Required value: when completion mode is Indexed".into()),
        ),
        (
            "cronjob: a time zone in the schedule",
            with(cronjob(), "/spec/schedule", json!("CRON_TZ=UTC 0 3 * * *")),
            Some("CronJob.batch \"nightly\" is invalid: spec.schedule: Invalid value: \"CRON_TZ=UTC 0 3 * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into()),
        ),
        (
            "service: a named target port of 16 characters",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80, "targetPort": "platform-metrics"}]}}),
            Some("Service \"web\" is invalid: spec.ports[0].targetPort: Invalid value: \"platform-metrics\": must be no more than 15 characters".into()),
        ),
        (
            "pdb: a percentage that is not one",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": {"maxUnavailable": "half", "selector": {"matchLabels": {"app": "web"}}}}),
            Some("PodDisruptionBudget.policy \"web\" is invalid: spec.maxUnavailable: Invalid value: \"half\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')".into()),
        ),
        (
            "configmap: one key in data and binaryData",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "1"}, "binaryData": {"k": "MQ=="}}),
            Some("ConfigMap \"cfg\" is invalid: data[k]: Invalid value: \"k\": duplicate of key present in binaryData".into()),
        ),
        (
            "priorityclass: a value above the user maximum",
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "too-high"}, "value": 2000000000}),
            Some("PriorityClass.scheduling.k8s.io \"too-high\" is invalid: value: Forbidden: maximum allowed value of a user defined priority is 1000000000".into()),
        ),
        (
            "role: a namespaced rule on non-resource URLs",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "urls"}, "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
            Some("Role.rbac.authorization.k8s.io \"urls\" is invalid: rules[0].nonResourceURLs: Invalid value: [\"/healthz\"]: namespaced rules cannot apply to non-resource URLs".into()),
        ),
        (
            "rolebinding: a roleRef of an unknown kind",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "read"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Team", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "default"}]}),
            Some("RoleBinding.rbac.authorization.k8s.io \"read\" is invalid: roleRef.kind: Unsupported value: \"Team\": supported values: \"Role\", \"ClusterRole\"".into()),
        ),
    ]
}

fn resource(obj: &Value) -> ApiResource {
    let av = obj["apiVersion"].as_str().unwrap();
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let kind = obj["kind"].as_str().unwrap();
    let plural = match kind {
        "PodDisruptionBudget" => "poddisruptionbudgets".to_string(),
        "PriorityClass" => "priorityclasses".to_string(),
        k => format!("{}s", k.to_lowercase()),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

async fn create(k: &KubeEnv, client: &kube::Client, obj: &Value, dry_run: bool) -> Result<(), String> {
    let ar = resource(obj);
    let api: Api<DynamicObject> = if obj["kind"] == "PriorityClass" {
        Api::all_with(client.clone(), &ar)
    } else {
        Api::namespaced_with(client.clone(), &k.namespace, &ar)
    };
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    let pp = PostParams { dry_run, ..Default::default() };
    match api.create(&pp, &o).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(ae)) => Err(format!("{} {}", ae.code, ae.message)),
        Err(e) => panic!("{e}"),
    }
}

/// Runs the table against `k` as the API server of 1.`minor`; the differences.
async fn differences(k: &KubeEnv, minor: u32) -> (usize, Vec<String>) {
    let client = k.client().await;
    let mut failures = Vec::new();
    let cases = table(minor);
    for (case, obj, want) in &cases {
        let got = create(k, &client, obj, true).await;
        let want = want.as_ref().map(|m| format!("422 {m}"));
        match (&got, &want) {
            (Ok(()), None) => {}
            (Err(g), Some(w)) if g == w => {}
            _ => failures.push(format!("1.{minor}: {case}:\n  want {want:?}\n  got  {got:?}")),
        }
    }
    (cases.len(), failures)
}

#[tokio::test]
async fn every_rule_accepts_the_valid_object_and_refuses_the_broken_ones_with_the_servers_message() {
    let probe = KubeEnv::start();
    let mut failures = Vec::new();
    let mut ran = Vec::new();
    if probe.real {
        // A real cluster answers as its own minor.
        let minor = probe.minor();
        let (n, f) = differences(&probe, minor).await;
        ran.push(format!("1.{minor}: {n} cases"));
        failures.extend(f);
    } else {
        // A sim of every minor in upstream support on the day the table was
        // checked, and the one before (clusters climbing out of it).
        let window = pinfleet::spec::versions::supported_on(pinfleet::spec::versions::CHECKED);
        let minors = std::iter::once(window[0] - 1).chain(window);
        for minor in minors {
            let m = pinfleet::spec::versions::minor(minor).unwrap();
            let k = KubeEnv::start_as(Some(&format!("1.{}.{}", m.minor, m.newest_patch)));
            assert_eq!(k.minor(), minor, "the sim answers as its minor");
            let (n, f) = differences(&k, minor).await;
            ran.push(format!("1.{minor}: {n} cases"));
            failures.extend(f);
        }
    }
    eprintln!("ran {}", ran.join(", "));
    assert!(failures.is_empty(), "{} cases differ ({}):\n{}", failures.len(), ran.join(", "), failures.join("\n"));
}

#[tokio::test]
async fn a_quantity_that_does_not_parse_is_refused_while_decoding() {
    let k = KubeEnv::start();
    let client = k.client().await;
    let obj = with(deployment(), "/spec/template/spec/containers/0/resources/limits/cpu", json!("one"));
    let got = create(&k, &client, &obj, true).await.unwrap_err();
    assert!(got.starts_with("400 "), "{got}");
    assert!(got.contains("quantities must match the regular expression"), "{got}");
}

#[tokio::test]
async fn immutable_fields_are_refused_on_update() {
    let k = KubeEnv::start();
    let client = k.client().await;
    create(&k, &client, &deployment(), false).await.unwrap();
    let ar = resource(&deployment());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &k.namespace, &ar);
    let patch = json!({"spec": {"selector": {"matchLabels": {"app": "web", "tier": "front"}},
        "template": {"metadata": {"labels": {"app": "web", "tier": "front"}}}}});
    let err = api
        .patch("web", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .expect_err("a new selector is refused");
    let kube::Error::Api(ae) = err else { panic!("{err}") };
    assert_eq!(ae.code, 422);
    assert_eq!(
        ae.message,
        "Deployment.apps \"web\" is invalid: spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"tier\":\"front\"}}: field is immutable"
    );
    // A StatefulSet may change only its replicas, template and a few more.
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "replicas": 1, "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "postgres:17"}]}}}});
    create(&k, &client, &sts, false).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &k.namespace, &resource(&sts));
    let scaled = api
        .patch("db", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&json!({"spec": {"replicas": 2}})))
        .await;
    assert!(scaled.is_ok(), "replicas may change: {scaled:?}");
    let err = api
        .patch(
            "db",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"serviceName": "other"}})),
        )
        .await
        .expect_err("serviceName is not one of them");
    let kube::Error::Api(ae) = err else { panic!("{err}") };
    assert_eq!(
        ae.message,
        "StatefulSet.apps \"db\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
    );
    // A Job's pod template is as it was created (a controller that rolls
    // a new profile into a running Job's template is refused).
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.37"}]}}}});
    create(&k, &client, &job, false).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &k.namespace, &resource(&job));
    let err = api
        .patch(
            "once",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"template": {"metadata": {"annotations": {"profile": "2"}}}}})),
        )
        .await
        .expect_err("a running Job's template is immutable");
    let kube::Error::Api(ae) = err else { panic!("{err}") };
    assert_eq!(ae.code, 422);
    assert!(
        ae.message.starts_with("Job.batch \"once\" is invalid: spec.template: Invalid value: ")
            && ae.message.ends_with(": field is immutable"),
        "{}",
        ae.message
    );
}

/// kubectl lists every cause of a 422 from `details.causes`, one a line.
#[test]
fn kubectl_shows_every_cause() {
    let k = KubeEnv::start();
    let broken = with(
        with(deployment(), "/spec/template/spec/containers/0/ports/0/name", json!("platform-metrics")),
        "/spec/template/spec/restartPolicy",
        json!("Never"),
    );
    let out = k.kubectl_stdin(&["create", "-f", "-"], &broken.to_string());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("The Deployment \"web\" is invalid:"), "{err}");
    assert!(
        err.contains("* spec.template.spec.containers[0].ports[0].name: Invalid value: \"platform-metrics\": must be no more than 15 characters"),
        "{err}"
    );
    assert!(
        err.contains("* spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""),
        "{err}"
    );
}

fn crd(name: &str, schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{name}s.schemas.pinfleet.dev")},
        "spec": {
            "group": "schemas.pinfleet.dev", "scope": "Namespaced",
            "names": {"plural": format!("{name}s"), "singular": name, "kind": name[..1].to_uppercase() + &name[1..]},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}}]
        }
    })
}

#[tokio::test]
async fn a_crd_whose_schema_is_not_structural_is_refused_with_every_reason() {
    let k = KubeEnv::start();
    let client = k.client().await;
    let spec =
        |props: Value| json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}});
    // One version's schema is named as the server holds it: spec.validation.
    let at = "spec.validation.openAPIV3Schema.properties[spec]";
    let cases: Vec<(&str, Value, Option<String>)> = vec![
        (
            "an int-or-string marked as such",
            crd("quota", spec(json!({"cpu": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}))),
            None,
        ),
        (
            "an untyped union of integer and string, as a schema generator derives it",
            crd("quota", spec(json!({"cpu": {"anyOf": [{"type": "integer", "format": "int64"}, {"type": "string"}]}}))),
            Some(format!("CustomResourceDefinition.apiextensions.k8s.io \"quotas.schemas.pinfleet.dev\" is invalid: [{at}.properties[cpu].anyOf[0].type: Forbidden: must be empty to be structural, {at}.properties[cpu].anyOf[1].type: Forbidden: must be empty to be structural, {at}.properties[cpu].type: Required value: must not be empty for specified object fields]")),
        ),
        (
            "a field without a type",
            crd("quota", spec(json!({"owner": {"description": "who"}}))),
            Some(format!("CustomResourceDefinition.apiextensions.k8s.io \"quotas.schemas.pinfleet.dev\" is invalid: {at}.properties[owner].type: Required value: must not be empty for specified object fields")),
        ),
        (
            "an array without items",
            crd("quota", spec(json!({"hosts": {"type": "array"}}))),
            Some(format!("CustomResourceDefinition.apiextensions.k8s.io \"quotas.schemas.pinfleet.dev\" is invalid: {at}.properties[hosts].items: Required value: must be specified")),
        ),
        (
            "a root that is not an object",
            crd("quota", json!({"type": "string"})),
            Some("CustomResourceDefinition.apiextensions.k8s.io \"quotas.schemas.pinfleet.dev\" is invalid: spec.validation.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root".into()),
        ),
        (
            "a second version whose schema differs and is broken",
            {
                let mut c = crd("quota", spec(json!({"cpu": {"type": "string"}})));
                let v2 = json!({"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": spec(json!({"cpu": {}}))}});
                c["spec"]["versions"].as_array_mut().unwrap().push(v2);
                c
            },
            Some("CustomResourceDefinition.apiextensions.k8s.io \"quotas.schemas.pinfleet.dev\" is invalid: spec.versions[1].schema.openAPIV3Schema.properties[spec].properties[cpu].type: Required value: must not be empty for specified object fields".into()),
        ),
    ];
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut failures = Vec::new();
    for (case, obj, want) in &cases {
        let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        let got = match api.create(&PostParams { dry_run: true, ..Default::default() }, &o).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(ae)) => Err(format!("{} {}", ae.code, ae.message)),
            Err(e) => panic!("{e}"),
        };
        let want = want.as_ref().map(|m| format!("422 {m}"));
        match (&got, &want) {
            (Ok(()), None) => {}
            (Err(g), Some(w)) if g == w => {}
            _ => failures.push(format!("{case}:\n  want {want:?}\n  got  {got:?}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Issue 48: the API server's Pod Security admission (the sim's, or a real
/// v1.36 server's when PINFLEET_TEST_KUBECONFIG names one) and the
/// gateway's check (`kube::podsecurity`) give the same verdict on the same
/// pods: admitted or refused, and refused for the same checks.
#[tokio::test]
async fn pod_security_admission_agrees_with_the_gateways_verdict() {
    use pinfleet::kube::podsecurity::{check, Level};
    let k = KubeEnv::start();
    let client = k.client().await;
    let pod = |spec: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec});
    let c = |sc: Value| json!({"name": "app", "image": "registry.k8s.io/pause:3.10", "securityContext": sc});
    let hardened = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let pods = vec![
        ("plain", pod(json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}))),
        ("privileged", pod(json!({"containers": [c(json!({"privileged": true}))]}))),
        ("host namespaces", pod(json!({"hostNetwork": true, "hostPID": true, "containers": [c(json!({}))]}))),
        (
            "hostPath /",
            pod(json!({"containers": [c(json!({}))], "volumes": [{"name": "root", "hostPath": {"path": "/"}}]})),
        ),
        ("SYS_ADMIN", pod(json!({"containers": [c(json!({"capabilities": {"add": ["SYS_ADMIN"]}}))]}))),
        (
            "hostPort",
            pod(
                json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
            ),
        ),
        ("root, no seccomp", pod(json!({"securityContext": {"runAsUser": 0}, "containers": [c(hardened.clone())]}))),
        (
            "restricted",
            pod(
                json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}, "containers": [c(hardened.clone())]}),
            ),
        ),
        (
            "a sidecar adding NET_RAW",
            pod(
                json!({"initContainers": [{"name": "side", "image": "registry.k8s.io/pause:3.10", "restartPolicy": "Always",
                "securityContext": {"capabilities": {"add": ["NET_RAW", "SYS_TIME"]}}}],
                "containers": [c(json!({}))]}),
            ),
        ),
    ];
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let all_checks: Vec<&str> = pinfleet::kube::podsecurity::BASELINE_CHECKS
        .iter()
        .chain(pinfleet::kube::podsecurity::RESTRICTED_CHECKS)
        .copied()
        .collect();
    let mut differ = Vec::new();
    for level in [Level::Baseline, Level::Restricted] {
        let ns = k.unique(&format!("psa-{}", level.as_str()));
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "labels": {"pod-security.kubernetes.io/enforce": level.as_str(), "pod-security.kubernetes.io/enforce-version": "latest"}}});
        nss.create(&PostParams::default(), &serde_json::from_value(obj).unwrap()).await.unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")));
        for (case, p) in &pods {
            let ours: Vec<&str> = check(&p["metadata"], &p["spec"], level).iter().map(|v| v.check).collect();
            let o: DynamicObject = serde_json::from_value(p.clone()).unwrap();
            let theirs = match api.create(&PostParams { dry_run: true, ..Default::default() }, &o).await {
                Ok(_) => None,
                Err(kube::Error::Api(ae)) if ae.code == 403 => Some(ae.message),
                Err(e) => panic!("{case}: {e}"),
            };
            match (&theirs, ours.is_empty()) {
                (None, true) => {}
                (Some(msg), false)
                    if msg.contains(&format!("violates PodSecurity \"{}:latest\"", level.as_str()))
                        // The same checks, no more and no fewer.
                        && all_checks.iter().all(|c| msg.contains(&format!("{c} (")) == ours.contains(c)) => {}
                _ => {
                    differ.push(format!("{}: {case}: the server says {theirs:?}, the gateway {ours:?}", level.as_str()))
                }
            }
        }
        let _ = nss.delete(&ns, &Default::default()).await;
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
