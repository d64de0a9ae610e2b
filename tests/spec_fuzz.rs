//! No input, however malformed, may panic the loader: arbitrary text,
//! arbitrary YAML trees built from the format's own field names, and random
//! mutations of the shipped examples. Every failure must be located in a
//! real file at a real line.

use std::path::Path;

use pinfleet::spec::{self, LoadOptions};
use proptest::prelude::*;

const FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "spec",
    "owner",
    "cloud",
    "region",
    "zones",
    "stateStore",
    "kubernetesVersion",
    "network",
    "vpcCidr",
    "subnets",
    "cidr",
    "zone",
    "type",
    "instanceGroups",
    "role",
    "machineType",
    "minSize",
    "maxSize",
    "desired",
    "image",
    "id",
    "selector",
    "rollout",
    "maxSurge",
    "extends",
    "$patch",
    "labels",
    "taints",
    "effect",
    "addons",
    "values",
    "federation",
    "api",
    "port",
];

fn yaml_tree() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        Just("~".to_string()),
        Just("true".to_string()),
        Just("-1".to_string()),
        Just("25%".to_string()),
        Just("10.0.0.0/16".to_string()),
        Just("'quoted'".to_string()),
        Just("delete".to_string()),
        "[a-z0-9./%-]{0,12}",
        any::<i64>().prop_map(|n| n.to_string()),
    ];
    scalar.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..6).prop_map(|entries| {
                let body: Vec<String> = entries.iter().map(|(k, v)| format!("{k:?}: {v}")).collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

fn check_located(path: &Path, result: Result<spec::Loaded, spec::Diagnostics>) {
    if let Err(d) = result {
        assert!(!d.0.is_empty());
        for diag in d.0 {
            assert!(diag.loc.line >= 1 && diag.loc.col >= 1, "{diag}");
            assert!(diag.loc.file.as_path() == path || diag.loc.file.exists(), "{diag}");
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    DeleteLine(usize),
    DuplicateLine(usize),
    Indent(usize, bool),
    Insert(usize, String),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteLine),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<bool>()).prop_map(|(i, b)| Mutation::Indent(i, b)),
        (
            any::<usize>(),
            prop_oneof![
                Just(": ".to_string()),
                Just("- ".to_string()),
                Just("{".to_string()),
                Just("&a *a".to_string()),
                Just("$patch: delete".to_string()),
                Just("\t".to_string()),
                "[ -~]{1,8}"
            ]
        )
            .prop_map(|(i, s)| Mutation::Insert(i, s)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(src: &str, m: &Mutation) -> String {
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return String::new();
    }
    let n = lines.len();
    match m {
        Mutation::DeleteLine(i) => {
            lines.remove(i % n);
        }
        Mutation::DuplicateLine(i) => {
            let l = lines[i % n].clone();
            lines.insert(i % n, l);
        }
        Mutation::Indent(i, more) => {
            let l = &mut lines[i % n];
            if *more {
                l.insert(0, ' ');
            } else if l.starts_with(' ') {
                l.remove(0);
            }
        }
        Mutation::Insert(i, s) => {
            let l = &mut lines[i % n];
            let mut at = i % (l.len() + 1);
            while !l.is_char_boundary(at) {
                at -= 1;
            }
            l.insert_str(at, s);
        }
        Mutation::Truncate(i) => lines.truncate(i % n),
    }
    lines.join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,300}") {
        let path = Path::new("clusters/fuzz.yaml");
        check_located(path, spec::load_source(path, &src, &LoadOptions::default()));
    }

    #[test]
    fn arbitrary_yaml_trees_never_panic(src in yaml_tree()) {
        let path = Path::new("clusters/fuzz.yaml");
        check_located(path, spec::load_source(path, &src, &LoadOptions::default()));
    }

    #[test]
    fn mutated_examples_never_panic(
        which in 0usize..5,
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let files = ["clusters/dev-local.yaml", "clusters/staging-use1.yaml", "clusters/prod-use1.yaml", "clusters/bases/aws-standard.yaml", "tests/fixtures/valid/minimal.yaml"];
        let path = Path::new(files[which]);
        let mut src = std::fs::read_to_string(path).unwrap();
        for m in &mutations {
            src = apply(&src, m);
        }
        check_located(path, spec::load_source(path, &src, &LoadOptions::default()));
    }
}
