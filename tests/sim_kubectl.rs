//! Real kubectl against the API: the sim by default, a real cluster when
//! PINFLEET_TEST_KUBECONFIG is set. Every test works in its own namespace.

#[path = "support/kube.rs"]
mod kube_support;

use kube_support::KubeEnv;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const CM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\n  labels: {app: demo}\ndata:\n  a: \"1\"\n  b: \"2\"\n";

#[test]
fn create_and_get_as_json_and_yaml() {
    let k = KubeEnv::start();
    k.ok_stdin(&["create", "-f", "-"], CM);
    let json: serde_json::Value = serde_json::from_str(&k.ok(&["get", "configmap", "cm1", "-o", "json"])).unwrap();
    assert_eq!(json["data"]["a"], "1");
    assert_eq!(json["metadata"]["namespace"], k.namespace.as_str());
    assert!(json["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert!(json["metadata"]["resourceVersion"].as_str().is_some());
    assert!(k.ok(&["get", "cm", "cm1", "-o", "yaml"]).contains("b: \"2\""));
    // Creating it again: AlreadyExists, as the real server says it.
    let again = k.kubectl_stdin(&["create", "-f", "-"], CM);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("AlreadyExists") || stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );
    let missing = k.kubectl(&["get", "cm", "nope"]);
    assert!(stderr(&missing).contains("configmaps \"nope\" not found"), "{}", stderr(&missing));
}

#[test]
fn server_side_apply_conflicts_and_force() {
    let k = KubeEnv::start();
    assert!(k.ok_stdin(&["apply", "--server-side", "-f", "-"], CM).contains("serverside-applied"));
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\ndata:\n  a: changed\n";
    let conflict = k.kubectl_stdin(&["apply", "--server-side", "--field-manager=other", "-f", "-"], other);
    assert!(!conflict.status.success());
    assert!(
        stderr(&conflict).contains("conflict with \"kubectl\"") && stderr(&conflict).contains(".data.a"),
        "{}",
        stderr(&conflict)
    );
    k.ok_stdin(&["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-"], other);
    let cm: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "cm", "cm1", "-o", "json", "--show-managed-fields"])).unwrap();
    assert_eq!(cm["data"]["a"], "changed");
    let managers: Vec<&str> =
        cm["metadata"]["managedFields"].as_array().unwrap().iter().map(|m| m["manager"].as_str().unwrap()).collect();
    assert!(managers.contains(&"other") && managers.contains(&"kubectl"), "{managers:?}");
    // The first manager drops `b` from its configuration: it is removed.
    let trimmed = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\n  labels: {app: demo}\ndata: {}\n";
    k.ok_stdin(&["apply", "--server-side", "-f", "-"], trimmed);
    let cm: serde_json::Value = serde_json::from_str(&k.ok(&["get", "cm", "cm1", "-o", "json"])).unwrap();
    assert_eq!(cm["data"], serde_json::json!({"a": "changed"}));
}

#[test]
fn label_annotate_and_three_kinds_of_patch() {
    let k = KubeEnv::start();
    k.ok_stdin(&["create", "-f", "-"], CM);
    k.ok(&["label", "cm", "cm1", "tier=web"]);
    k.ok(&["annotate", "cm", "cm1", "note=hello"]);
    assert!(k.ok(&["get", "cm", "-l", "tier=web", "-o", "name"]).contains("configmap/cm1"));
    // Not "empty": a real cluster publishes kube-root-ca.crt into every namespace.
    k.ok(&["create", "configmap", "cm2", "--from-literal=x=1"]);
    let others = k.ok(&["get", "cm", "-l", "tier!=web", "-o", "name"]);
    assert!(!others.contains("configmap/cm1") && others.contains("configmap/cm2"), "{others}");
    k.ok(&["patch", "cm", "cm1", "--type", "merge", "-p", r#"{"data":{"c":"3"}}"#]);
    k.ok(&["patch", "cm", "cm1", "--type", "json", "-p", r#"[{"op":"remove","path":"/data/a"}]"#]);
    k.ok(&["patch", "cm", "cm1", "-p", r#"{"data":{"d":"4"}}"#]);
    let cm: serde_json::Value = serde_json::from_str(&k.ok(&["get", "cm", "cm1", "-o", "json"])).unwrap();
    assert_eq!(cm["data"], serde_json::json!({"b": "2", "c": "3", "d": "4"}));
    assert_eq!(cm["metadata"]["annotations"]["note"], "hello");
    // Strategic merge on a Deployment merges containers by name, in the order the API server sets.
    k.ok_stdin(&["apply", "-f", "-"], DEPLOY);
    k.ok(&[
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"busybox:1.36"}]}}}}"#,
    ]);
    let d: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"])).unwrap();
    let names: Vec<&str> = d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The API server puts an item new to a merged list before the live ones
    // (apimachinery's normalizeElementOrder; a real v1.36 answers so).
    assert_eq!(names, ["side", "web"]);
}

const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx:1.27}]}\n";

#[test]
fn scale_a_deployment() {
    let k = KubeEnv::start();
    k.ok_stdin(&["apply", "-f", "-"], DEPLOY);
    let before: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"])).unwrap();
    k.ok(&["scale", "deployment", "web", "--replicas=5"]);
    let after: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"])).unwrap();
    assert_eq!(after["spec"]["replicas"], 5);
    assert!(after["metadata"]["generation"].as_i64() > before["metadata"]["generation"].as_i64());
}

#[test]
fn a_crd_becomes_established_and_serves_its_resources() {
    let k = KubeEnv::start();
    let group = format!("{}.example.com", k.unique("g"));
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gadgets.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gdg], categories: [pftest]}}\n  versions:\n    - name: v1\n      served: true\n      storage: true\n      schema:\n        openAPIV3Schema:\n          type: object\n          properties:\n            spec:\n              type: object\n              properties:\n                replicas: {{type: integer, minimum: 0}}\n                size: {{type: string, enum: [small, large], default: small}}\n            status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n      subresources: {{status: {{}}, scale: {{specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}}}}\n"
    );
    k.ok_stdin(&["apply", "-f", "-"], &crd);
    k.ok(&["wait", "--for=condition=Established", &format!("crd/gadgets.{group}"), "--timeout=30s"]);
    k.ok_stdin(
        &["apply", "-f", "-"],
        &format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g1}}\nspec: {{replicas: 1}}\n"),
    );
    assert!(k.ok(&["get", "gdg", "-o", "name"]).contains("g1"));
    // The schema is enforced: defaults filled in, bad values refused with the server's message.
    assert_eq!(k.ok(&["get", "gdg", "g1", "-o", "jsonpath={.spec.size}"]), "small");
    let bad = k.kubectl_stdin(
        &["apply", "-f", "-"],
        &format!(
            "apiVersion: {group}/v1\nkind: Gadget\nmetadata: {{name: g2}}\nspec: {{replicas: many, size: huge}}\n"
        ),
    );
    assert!(!bad.status.success());
    let err = stderr(&bad);
    assert!(err.contains("spec.replicas: Invalid value") && err.contains("must be of type integer"), "{err}");
    assert!(err.contains("spec.size: Unsupported value: \"huge\""), "{err}");
    assert!(k.ok(&["get", "pftest", "-o", "name"]).contains("g1"));
    k.ok(&["scale", &format!("gadgets.{group}"), "g1", "--replicas=3"]);
    assert_eq!(k.ok(&["get", &format!("gadgets.{group}"), "g1", "-o", "jsonpath={.spec.replicas}"]), "3");
    let resources = stdout(&k.kubectl_cmd(&["api-resources", "--api-group", &group]).output().unwrap());
    assert!(resources.contains("gadgets") && resources.contains("gdg"), "{resources}");
    k.kubectl_cmd(&["delete", "crd", &format!("gadgets.{group}")]).output().unwrap();
}

#[test]
fn delete_waits_for_finalizers() {
    let k = KubeEnv::start();
    k.ok_stdin(&["create", "-f", "-"], CM);
    k.ok(&["patch", "cm", "cm1", "--type", "merge", "-p", r#"{"metadata":{"finalizers":["pinfleet.dev/hold"]}}"#]);
    k.ok(&["delete", "cm", "cm1", "--wait=false"]);
    let ts = k.ok(&["get", "cm", "cm1", "-o", "jsonpath={.metadata.deletionTimestamp}"]);
    assert!(!ts.is_empty(), "still there, marked for deletion");
    k.ok(&["patch", "cm", "cm1", "--type", "json", "-p", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#]);
    let gone = k.kubectl(&["get", "cm", "cm1"]);
    assert!(stderr(&gone).contains("not found"), "{}", stderr(&gone));
}

#[test]
fn watch_with_a_timeout_sees_changes() {
    let k = KubeEnv::start();
    k.ok_stdin(&["create", "-f", "-"], CM);
    let mut watch = k
        .kubectl_cmd(&[
            "-n",
            &k.namespace,
            "get",
            "cm",
            "cm1",
            "--watch",
            "-o",
            "jsonpath={.metadata.labels.step}{\"\\n\"}",
            "--request-timeout=30s",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first line is the object as it is (the watch is open), then the
    // changes; the watch is ended once both are seen.
    use std::io::BufRead as _;
    let mut lines = std::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next();
    assert!(matches!(first, Some(Ok(_))), "the watch printed nothing: {first:?}");
    k.ok(&["label", "cm", "cm1", "step=one"]);
    k.ok(&["label", "cm", "cm1", "step=two", "--overwrite"]);
    let mut seen = Vec::new();
    for line in lines.map_while(Result::ok) {
        seen.push(line);
        if seen.iter().any(|l| l.contains("two")) {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(seen.iter().any(|l| l.contains("one")) && seen.iter().any(|l| l.contains("two")), "{seen:?}");
}

#[test]
fn api_resources_and_explain() {
    let k = KubeEnv::start();
    let r = stdout(&k.kubectl_cmd(&["api-resources"]).output().unwrap());
    for want in ["configmaps", "deployments", "poddisruptionbudgets", "customresourcedefinitions", "leases"] {
        assert!(r.contains(want), "{want} missing from:\n{r}");
    }
    // explain needs schemas the sim does not serve: it must fail or answer, never hang.
    let out = k.kubectl_cmd(&["explain", "configmap", "--request-timeout=10s"]).output().unwrap();
    assert!(out.status.success() || !stderr(&out).is_empty());
}

#[test]
fn rollout_status_follows_a_deployment_update() {
    let k = KubeEnv::start();
    if k.skip_without_running_pods() {
        return;
    }
    if !k.real {
        let node = k.unique("node");
        k.ok_stdin(&["apply", "-f", "-"], &format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n"));
        k.ok(&[
            "patch",
            "node",
            &node,
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ]);
    }
    k.ok_stdin(&["apply", "-f", "-"], DEPLOY);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    k.ok(&["set", "image", "deployment/web", "web=nginx:1.28"]);
    let out = k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let d: serde_json::Value = serde_json::from_str(&k.ok(&["get", "deploy", "web", "-o", "json"])).unwrap();
    assert_eq!(d["status"]["updatedReplicas"], 2);
    assert_eq!(d["status"]["availableReplicas"], 2);
    assert_eq!(d["status"]["observedGeneration"], d["metadata"]["generation"]);
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"]);
    assert!(pods.split_whitespace().all(|i| i == "nginx:1.28"), "{pods}");
    // Server-side printing: the columns kubectl users expect.
    let table = k.ok(&["get", "deploy", "web"]);
    assert!(table.contains("READY") && table.contains("2/2"), "{table}");
    let table = k.ok(&["get", "pods", "-l", "app=web"]);
    assert!(
        table.contains("STATUS") && table.lines().skip(1).all(|l| l.contains("1/1") && l.contains("Running")),
        "{table}"
    );
}

#[test]
fn drain_a_node_with_a_pod_disruption_budget() {
    let k = KubeEnv::start();
    if k.skip_on_real("creates Node objects with no kubelet behind them") {
        return;
    }
    let ready_node = |n: &str| {
        k.ok_stdin(&["apply", "-f", "-"], &format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {n}}}\n"));
        k.ok(&[
            "patch",
            "node",
            n,
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ]);
    };
    let node = k.unique("node");
    ready_node(&node);
    for p in ["p1", "p2"] {
        k.ok_stdin(&["apply", "-f", "-"], &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {p}, labels: {{app: db}}}}\nspec: {{nodeName: {node}, containers: [{{name: c, image: busybox}}]}}\n"));
    }
    k.ok(&["wait", "--for=condition=Ready", "pod/p1", "pod/p2", "--timeout=20s"]);
    k.ok_stdin(&["apply", "-f", "-"], "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: db}\nspec: {minAvailable: 2, selector: {matchLabels: {app: db}}}\n");
    let pdb: serde_json::Value = serde_json::from_str(&k.ok(&["get", "pdb", "db", "-o", "json"])).unwrap();
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
    assert_eq!(pdb["status"]["currentHealthy"], 2);
    let blocked = k.kubectl(&["drain", &node, "--force", "--timeout=3s"]);
    assert!(!blocked.status.success());
    assert!(stderr(&blocked).contains("error when evicting"), "{}", stderr(&blocked));
    assert_eq!(k.ok(&["get", "pods", "-o", "name"]).lines().count(), 2, "the budget kept both pods");
    let unschedulable = k
        .kubectl_cmd(&["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"])
        .output()
        .map(|o| stdout(&o))
        .unwrap();
    assert_eq!(unschedulable, "true");
    // With one disruption allowed, the first eviction goes through and the
    // second waits until a replacement is Ready elsewhere (what a
    // ReplicaSet would create); then the drain finishes.
    k.ok(&["patch", "pdb", "db", "--type", "merge", "-p", r#"{"spec":{"minAvailable":1}}"#]);
    let drain = k
        .kubectl_cmd(&["-n", &k.namespace, "drain", &node, "--force", "--timeout=40s"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..300 {
        if k.ok(&["get", "pods", "-o", "name"]).lines().count() == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(k.ok(&["get", "pods", "-o", "name"]).lines().count(), 1, "one pod evicted, one held by the budget");
    let elsewhere = k.unique("node");
    ready_node(&elsewhere);
    k.ok_stdin(&["apply", "-f", "-"], &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p3, labels: {{app: db}}}}\nspec: {{nodeName: {elsewhere}, containers: [{{name: c, image: busybox}}]}}\n"));
    let drained = drain.wait_with_output().unwrap();
    assert!(drained.status.success(), "{}", stderr(&drained));
    assert_eq!(k.ok(&["get", "pods", "-o", "name"]).trim(), "pod/p3");
}

/// The generator commands send protobuf; each must work as on a real server,
/// and what arrives must be what was asked for.
#[test]
fn typed_kubectl_create_commands_work() {
    let k = KubeEnv::start();
    let ns = k.namespace.clone();
    let extra_ns = k.unique("created");
    let pc = k.unique("pc");
    k.ok_cmd(&["create", "namespace", &extra_ns]);
    let commands: Vec<Vec<String>> = [
        "create configmap cfg --from-literal=a=1 --from-literal=b=two",
        "create secret generic creds --from-literal=token=s3cret",
        "create serviceaccount runner",
        "create deployment web --image=nginx:1.27 --replicas=2 --port=8080",
        "create job once --image=busybox:1.36 -- echo hi",
        "create cronjob nightly --image=busybox:1.36 --schedule=0_3_*_*_* -- echo hi",
        "create service clusterip web --tcp=80:8080",
        "create role reader --verb=get,list --resource=pods",
        &format!("create rolebinding read --role=reader --serviceaccount={ns}:runner"),
        &format!("create priorityclass {pc} --value=1000 --description=batch"),
        "create poddisruptionbudget web --selector=app=web --min-available=1",
        "create quota small --hard=cpu=2,pods=4",
    ]
    .iter()
    .map(|c| c.split(' ').map(|a| a.replace("0_3_*_*_*", "0 3 * * *")).collect())
    .collect();
    for c in &commands {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        k.ok(&args);
    }
    let get = |what: &[&str]| -> serde_json::Value {
        let mut a = vec!["get"];
        a.extend_from_slice(what);
        a.extend(["-o", "json"]);
        serde_json::from_str(&k.ok(&a)).unwrap()
    };
    assert_eq!(get(&["namespace", &extra_ns])["status"]["phase"], "Active");
    assert_eq!(get(&["cm", "cfg"])["data"], serde_json::json!({"a": "1", "b": "two"}));
    assert_eq!(get(&["secret", "creds"])["data"]["token"], "czNjcmV0");
    let d = get(&["deployment", "web"]);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "web");
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"], 8080);
    assert_eq!(
        get(&["job", "once"])["spec"]["template"]["spec"]["containers"][0]["command"],
        serde_json::json!(["echo", "hi"])
    );
    assert_eq!(get(&["cronjob", "nightly"])["spec"]["schedule"], "0 3 * * *");
    let svc = get(&["service", "web"]);
    assert_eq!(svc["spec"]["ports"][0]["port"], 80);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(get(&["role", "reader"])["rules"][0]["verbs"], serde_json::json!(["get", "list"]));
    assert_eq!(get(&["rolebinding", "read"])["subjects"][0]["name"], "runner");
    assert_eq!(get(&["priorityclass", &pc])["value"], 1000);
    assert_eq!(get(&["pdb", "web"])["spec"]["minAvailable"], 1);
    assert_eq!(get(&["quota", "small"])["spec"]["hard"], serde_json::json!({"cpu": "2", "pods": "4"}));
    k.ok_cmd(&["delete", "priorityclass", &pc]);
    k.ok_cmd(&["delete", "namespace", &extra_ns, "--wait=false"]);
}

#[test]
fn a_csr_is_listed_pending_then_approved_with_kubectl_certificate_approve() {
    let k = KubeEnv::start();
    // A signer no controller serves, so a real cluster leaves it approved, unissued.
    let name = k.unique("csr");
    let pem = pinfleet::sim::nodes::serving_csr_pem("node-x", &[("InternalIP", "10.0.0.9")]).unwrap();
    use base64::Engine as _;
    let request = base64::engine::general_purpose::STANDARD.encode(pem);
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n  request: {request}\n  signerName: example.com/pinfleet-test\n  usages: [digital signature, server auth]\n"
    );
    k.ok_stdin(&["create", "-f", "-"], &csr);
    let listed = k.ok(&["get", "csr", &name]);
    assert!(listed.contains("SIGNERNAME") && listed.contains("CONDITION"), "{listed}");
    assert!(listed.contains("example.com/pinfleet-test") && listed.contains("Pending"), "{listed}");
    // kubectl writes the condition through the approval subresource.
    k.ok(&["certificate", "approve", &name]);
    let listed = k.ok(&["get", "csr", &name]);
    assert!(listed.contains("Approved") && !listed.contains("Pending"), "{listed}");
    k.ok(&["delete", "csr", &name]);
}

/// `kubectl create job --from=cronjob/…` sends protobuf: embedded structs
/// (a volume's source, a ConfigMap reference) decode inline, as in JSON.
#[test]
fn a_job_made_from_a_cronjob_keeps_its_volumes() {
    let k = KubeEnv::start();
    let cj = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: \"0 3 * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: c, image: busybox:1.36, volumeMounts: [{name: cfg, mountPath: /etc/cfg}]}]\n          volumes: [{name: cfg, configMap: {name: settings}}]\n";
    k.ok_stdin(&["apply", "-f", "-"], cj);
    k.ok(&["create", "job", "now", "--from=cronjob/nightly"]);
    let job: serde_json::Value = serde_json::from_str(&k.ok(&["get", "job", "now", "-o", "json"])).unwrap();
    // (A real server adds its defaults, such as defaultMode: compare what was sent.)
    let volume = &job["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(
        (&volume["name"], &volume["configMap"]["name"]),
        (&serde_json::json!("cfg"), &serde_json::json!("settings")),
        "{job}"
    );
}

/// `kubectl apply -f` of a `kind: List` (what `kubectl get -o yaml` and
/// many generators print): kubectl validates the items through OpenAPI v2
/// before applying each; what `get -o yaml` printed applies again, and a
/// list with an item kubectl cannot place is refused whole.
#[test]
fn apply_a_list_as_kubectl_get_prints_it() {
    let k = KubeEnv::start();
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: one}\n  data: {a: \"1\"}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: two}\n  data: {b: \"2\"}\n";
    let out = k.ok_stdin(&["apply", "-f", "-"], list);
    assert!(out.contains("configmap/one created") && out.contains("configmap/two created"), "{out}");
    // Round trip: the list `get -o yaml` prints applies unchanged.
    let printed = k.ok(&["get", "configmap", "one", "two", "-o", "yaml"]);
    assert!(printed.contains("kind: List"), "{printed}");
    let again = k.ok_stdin(&["apply", "-f", "-"], &printed);
    assert!(again.contains("configmap/one") && again.contains("configmap/two"), "{again}");
    // An item without a kind: kubectl's own validation of the list says so, nothing is applied.
    let bad = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: three}\n- apiVersion: v1\n  metadata: {name: four}\n";
    let refused = k.kubectl_stdin(&["apply", "-f", "-"], bad);
    assert!(!refused.status.success(), "{}", stdout(&refused));
    assert!(stderr(&refused).contains("kind not set"), "{}", stderr(&refused));
    assert!(!k.kubectl(&["get", "configmap", "three"]).status.success(), "nothing of a refused list is applied");
}
