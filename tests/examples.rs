//! The shipped examples: they validate, the checked-in schema is current,
//! every rendered template matches its snapshot, user-data passes
//! `cloud-init schema` and the embedded shell passes shellcheck.

use std::path::Path;
use std::process::Command;

use pinfleet::render::{BootstrapMode, BootstrapParams, Renderer};
use pinfleet::spec::{self, schema, LoadOptions, Loaded};

fn examples() -> Vec<Loaded> {
    spec::load_dir(Path::new("clusters"), &LoadOptions::default()).unwrap_or_else(|d| panic!("examples invalid:\n{d}"))
}

#[test]
fn examples_validate_and_cover_the_fleet() {
    let names: Vec<String> = examples().iter().map(|l| l.cluster.metadata.name.clone()).collect();
    assert_eq!(names, ["dev-local", "localstack-dev", "prod-use1", "prod-usw2", "staging-use1"]);
    let regions: std::collections::BTreeSet<String> = examples()
        .iter()
        .filter(|l| l.cluster.metadata.labels.get("env").map(String::as_str) == Some("production"))
        .map(|l| l.cluster.spec.cloud.region.clone())
        .collect();
    assert_eq!(regions.len(), 2, "production runs in two regions");
}

#[test]
fn examples_extend_the_shared_base() {
    for l in examples() {
        assert_eq!(l.cluster.extends.as_deref(), Some("bases/aws-standard.yaml"), "{}", l.path.display());
        // Inherited from the base, not repeated in the file.
        assert_eq!(l.cluster.spec.kubernetes_version, pinfleet::spec::versions::DEFAULT);
    }
}

fn check_generated(path: &str, want: &str) {
    let have = std::fs::read_to_string(path).unwrap_or_default();
    if have != want {
        let diff =
            similar::TextDiff::from_lines(have.as_str(), want).unified_diff().header(path, "generated").to_string();
        panic!(
            "{path} is stale; regenerate with `pinfleet schema{}> {path}`:\n{diff}",
            if path.contains("partial") { " --partial " } else { " " }
        );
    }
}

#[test]
fn checked_in_schemas_are_current() {
    check_generated("clusters/schema/cluster.schema.json", &schema::to_pretty(&schema::cluster_schema()));
    check_generated("clusters/schema/cluster.partial.schema.json", &schema::to_pretty(&schema::partial_schema()));
}

#[test]
fn example_files_point_editors_at_the_schema() {
    for l in examples() {
        let first = std::fs::read_to_string(&l.path).unwrap().lines().next().unwrap_or_default().to_string();
        assert_eq!(
            first,
            "# yaml-language-server: $schema=./schema/cluster.partial.schema.json",
            "{}",
            l.path.display()
        );
    }
}

#[test]
fn rendered_templates_match_snapshots() {
    let renderer = Renderer::new();
    for l in examples() {
        let c = &l.cluster;
        let files = renderer.render_all(c, &BootstrapParams::placeholder(c)).unwrap();
        // Every group gets user-data, a script and a kubeadm config per mode.
        for g in &c.spec.instance_groups {
            assert!(files.contains_key(&format!("{}/user-data.yaml", g.name)));
        }
        for (rel, content) in files {
            insta::assert_snapshot!(format!("{}__{}", c.metadata.name, rel.replace('/', "__")), content);
        }
    }
}

#[test]
fn rendered_yaml_parses_and_kubeadm_documents_have_the_right_kinds() {
    let renderer = Renderer::new();
    for l in examples() {
        let c = &l.cluster;
        let params = BootstrapParams::placeholder(c);
        for g in &c.spec.instance_groups {
            for (mode, kinds) in [
                (BootstrapMode::Init, &["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"][..]),
                (BootstrapMode::JoinControlPlane, &["JoinConfiguration"][..]),
                (BootstrapMode::Join, &["JoinConfiguration"][..]),
            ] {
                let text = renderer.kubeadm_config(c, g, mode, &params).unwrap();
                let docs = spec::yaml::parse_documents(&text, Path::new("kubeadm.yaml")).unwrap();
                let got: Vec<String> =
                    docs.iter().map(|d| d.get("kind").and_then(|k| k.as_str()).unwrap_or("?").to_string()).collect();
                assert_eq!(got, kinds, "{}/{} {mode:?}", c.metadata.name, g.name);
                let join = &docs[0];
                if mode == BootstrapMode::JoinControlPlane {
                    assert!(join.get("controlPlane").is_some());
                }
                if mode == BootstrapMode::Join {
                    assert!(join.get("controlPlane").is_none());
                }
            }
            let ud = renderer.user_data(c, g, BootstrapMode::for_role(g.role), &params).unwrap();
            assert!(ud.starts_with("#cloud-config\n"));
            spec::yaml::parse_single(&ud, Path::new("user-data.yaml")).unwrap();
        }
        let kind = renderer.kind_config(c).unwrap();
        let node = spec::yaml::parse_single(&kind, Path::new("kind.yaml")).unwrap().to_json();
        let nodes = node["nodes"].as_array().unwrap();
        assert_eq!(nodes.iter().filter(|n| n["role"] == "control-plane").count(), 1);
        let workers = nodes.iter().filter(|n| n["role"] == "worker").count() as u32;
        assert!((1..=pinfleet::render::KIND_MAX_WORKERS).contains(&workers));
    }
}

fn require(cmd: &str, install: &str) {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "`{cmd}` is needed for this test: {install} (scripts/test installs it)");
}

/// Every (cluster, group, mode) combination rendered to files in a temp dir.
fn rendered_to_disk(name: &str, ext: &str) -> (tempfile::TempDir, Vec<std::path::PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let renderer = Renderer::new();
    let mut paths = Vec::new();
    for l in examples() {
        let c = &l.cluster;
        let files = renderer.render_all(c, &BootstrapParams::placeholder(c)).unwrap();
        for (rel, content) in files.iter().filter(|(k, _)| k.contains(name) && k.ends_with(ext)) {
            let path = dir.path().join(format!("{}__{}", c.metadata.name, rel.replace('/', "__")));
            std::fs::write(&path, content).unwrap();
            paths.push(path);
        }
    }
    (dir, paths)
}

#[test]
fn user_data_passes_cloud_init_schema() {
    require("cloud-init", "apt-get install cloud-init");
    let (_dir, paths) = rendered_to_disk("user-data", ".yaml");
    assert!(paths.len() >= 8);
    for p in paths {
        let out = Command::new("cloud-init").args(["schema", "--config-file"]).arg(&p).output().unwrap();
        assert!(
            out.status.success(),
            "cloud-init schema rejected {}:\n{}{}",
            p.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn bootstrap_scripts_pass_shellcheck() {
    require("shellcheck", "apt-get install shellcheck");
    let (_dir, paths) = rendered_to_disk("bootstrap", ".sh");
    assert!(paths.len() >= 8);
    let out = Command::new("shellcheck").args(["--shell=bash", "--severity=style"]).args(&paths).output().unwrap();
    assert!(out.status.success(), "shellcheck:\n{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn scripts_pass_shellcheck() {
    require("shellcheck", "apt-get install shellcheck");
    let scripts: Vec<_> = std::fs::read_dir("scripts")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && std::fs::read_to_string(p).is_ok_and(|s| s.starts_with("#!/usr/bin/env bash")))
        .collect();
    assert!(!scripts.is_empty());
    let out = Command::new("shellcheck")
        .args(["--shell=bash", "-x", "--source-path=scripts"])
        .args(&scripts)
        .arg(".ci/run")
        .output()
        .unwrap();
    assert!(out.status.success(), "shellcheck:\n{}", String::from_utf8_lossy(&out.stdout));
}

/// Every image recipe in the repository loads (the README and the demo bake them).
#[test]
fn every_image_recipe_loads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let names = pinfleet::ami::recipe::list(&dir).unwrap();
    assert!(names.contains(&"node".to_string()), "{names:?}");
    for n in names {
        let l = pinfleet::ami::recipe::load(&dir, &n).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.recipe.kubernetes_version, pinfleet::spec::versions::DEFAULT, "{n} bakes the default version");
    }
}
