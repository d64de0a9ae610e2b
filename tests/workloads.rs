//! The six workload CRDs: the checked-in YAML is what the Rust types
//! generate, and on the API (the sim, or a real cluster) they install,
//! validate custom resources, list under `kubectl get platform` and scale.

#[path = "support/kube.rs"]
mod kube_support;

use kube_support::KubeEnv;

const CRDS: &str = "addons/platform-crds/manifests/crds.yaml";

#[test]
fn checked_in_crds_are_current() {
    let want = pinfleet::workloads::crds_yaml().unwrap();
    let have = std::fs::read_to_string(CRDS).unwrap_or_default();
    if have != want {
        let diff = similar::TextDiff::from_lines(have.as_str(), want.as_str())
            .unified_diff()
            .header(CRDS, "generated")
            .to_string();
        panic!("{CRDS} is stale; regenerate with `pinfleet crds > {CRDS}`:\n{diff}");
    }
}

#[test]
fn every_kind_has_the_platform_conventions() {
    for crd in pinfleet::workloads::crds() {
        let v = serde_json::to_value(&crd).unwrap();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        assert_eq!(v["spec"]["group"], "pinfleet.dev", "{name}");
        assert_eq!(v["spec"]["names"]["categories"], serde_json::json!(["platform"]), "{name}");
        assert!(v["spec"]["names"]["shortNames"].as_array().is_some_and(|s| !s.is_empty()), "{name}");
        let version = &v["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert!(version["subresources"]["status"].is_object(), "{name} has a status subresource");
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns.last(), Some(&"Age"), "{name}: {columns:?}");
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let required: Vec<&str> = spec["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
        assert!(required.contains(&"owner") && required.contains(&"template"), "{name}: {required:?}");
        assert_eq!(
            spec["properties"]["owner"]["x-kubernetes-validations"][0]["rule"], "self == oldSelf",
            "{name}: owner is immutable"
        );
    }
}

#[test]
fn the_crds_install_and_validate_on_the_api() {
    let k = KubeEnv::start();
    let crds = std::fs::read_to_string(CRDS).unwrap();
    k.ok_stdin(&["apply", "--server-side", "-f", "-"], &crds);
    for plural in [
        "pinterestservices",
        "pinterestjobsets",
        "pinterestcronjobs",
        "pinterestdaemons",
        "pinteresttrainingjobs",
        "pintereststatefulsets",
    ] {
        k.ok(&["wait", "--for=condition=Established", &format!("crd/{plural}.pinfleet.dev"), "--timeout=30s"]);
    }
    let svc = "apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestService\nmetadata: {name: web}\nspec:\n  owner: {team: feeds, project: home}\n  replicas: 2\n  ports: [{name: http, port: 8080}]\n  template:\n    spec:\n      containers: [{name: app, image: feeds/web:1.2.3}]\n";
    k.ok_stdin(&["apply", "-f", "-"], svc);
    let got: serde_json::Value = serde_json::from_str(&k.ok(&["get", "psvc", "web", "-o", "json"])).unwrap();
    assert_eq!(got["spec"]["tier"], "OnDemand", "defaulted by the schema");
    assert_eq!(got["spec"]["ports"][0]["protocol"], "TCP");
    assert!(k.ok(&["get", "platform", "-o", "name"]).contains("pinterestservice.pinfleet.dev/web"));
    k.ok(&["scale", "psvc", "web", "--replicas=4"]);
    assert_eq!(k.ok(&["get", "psvc", "web", "-o", "jsonpath={.spec.replicas}"]), "4");

    let bad = "apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestService\nmetadata: {name: bad}\nspec:\n  replicas: -1\n  tier: Gold\n  template: {}\n";
    let out = k.kubectl_stdin(&["apply", "-f", "-"], bad);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.owner: Required value"), "{err}");
    assert!(err.contains("spec.replicas: Invalid value") && err.contains("greater than or equal to 0"), "{err}");
    assert!(err.contains("spec.tier: Unsupported value: \"Gold\""), "{err}");

    // CEL rules: the owner is immutable (a transition rule), and a JobSet's
    // parallelism may not exceed its shards.
    let moved = svc.replace("team: feeds", "team: ads");
    let out = k.kubectl_stdin(&["apply", "-f", "-"], &moved);
    assert!(!out.status.success(), "changing the owner must be refused");
    let err = String::from_utf8_lossy(&out.stderr);
    // 1.36's wording: an object's value is not shown (up to 1.34 its type was).
    assert!(err.contains("spec.owner: Invalid value: owner is immutable"), "{err}");
    assert_eq!(k.ok(&["get", "psvc", "web", "-o", "jsonpath={.spec.owner.team}"]), "feeds");
    let jobset = |parallelism: u32| {
        format!("apiVersion: pinfleet.dev/v1alpha1\nkind: PinterestJobSet\nmetadata: {{name: index}}\nspec:\n  owner: {{team: search, project: index}}\n  shards: 4\n  parallelism: {parallelism}\n  template:\n    spec:\n      containers: [{{name: indexer, image: search/indexer:7.1}}]\n")
    };
    let out = k.kubectl_stdin(&["apply", "-f", "-"], &jobset(8));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("parallelism cannot exceed shards"), "{err}");
    k.ok_stdin(&["apply", "-f", "-"], &jobset(2));
}
