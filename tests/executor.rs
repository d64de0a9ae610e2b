//! The executor against an in-memory cloud (no AWS, no emulator): a whole
//! new cluster's plan runs every operation once, none before what it
//! depends on; a change that fails retriably is tried again; a fatal
//! failure stops new work and names the change; a plan with a refusal runs
//! nothing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use pinfleet::apply::{execute, Options};
use pinfleet::cloud::key::ResourceKey;
use pinfleet::cloud::observed::Observed;
use pinfleet::cloud::ops::{Op, OpError, Operations};
use pinfleet::plan::{self, Plan, Step};

/// A cloud that records what it is asked, and fails where it is told to.
#[derive(Default)]
struct MemoryCloud {
    /// (key, "start" | "end") in the order they happened.
    log: Mutex<Vec<(String, &'static str)>>,
    /// Keys that fail retriably this many more times.
    flaky: Mutex<BTreeMap<String, u32>>,
    /// Keys that fail for good.
    broken: Vec<String>,
}

impl Operations for MemoryCloud {
    fn run<'a>(&'a self, key: &'a ResourceKey, _op: &'a Op) -> BoxFuture<'a, Result<String, OpError>> {
        Box::pin(async move {
            let k = key.to_string();
            self.log.lock().unwrap().push((k.clone(), "start"));
            tokio::task::yield_now().await;
            if let Some(n) = self.flaky.lock().unwrap().get_mut(&k).filter(|n| **n > 0) {
                *n -= 1;
                return Err(OpError::retriable(anyhow::anyhow!("DependencyViolation: not yet")));
            }
            if self.broken.contains(&k) {
                return Err(OpError::fatal(anyhow::anyhow!("InvalidParameterValue: no")));
            }
            self.log.lock().unwrap().push((k.clone(), "end"));
            Ok(format!("id-of-{k}"))
        })
    }
}

#[path = "support/model.rs"]
mod fixture;

fn new_cluster_plan() -> Plan {
    let d = fixture::desired(|_| {}, |g| format!("#cloud-config\n# {}\n", g.name));
    plan::diff(&d, &Observed::default())
}

fn quiet() -> Options {
    Options { progress: false, step_delay: None, ..Default::default() }
}

#[tokio::test]
async fn every_operation_runs_once_after_its_dependencies() {
    let plan = new_cluster_plan();
    let cloud = Arc::new(MemoryCloud::default());
    let report = execute(&plan, cloud.clone(), &quiet()).await.unwrap();
    assert_eq!(report.done.len(), plan.changes.len());
    let log = cloud.log.lock().unwrap().clone();
    assert!(plan.changes.iter().any(|c| !c.depends_on.is_empty()), "the plan has dependencies to check");
    let at = |k: &str, what: &str| log.iter().position(|(key, w)| key == k && *w == what);
    for c in &plan.changes {
        let key = c.key.to_string();
        assert_eq!(log.iter().filter(|(k, w)| *k == key && *w == "start").count(), 1, "{key} ran once");
        for dep in &c.depends_on {
            // Both must have happened: `None < Some(_)` would pass unnoticed.
            let dep_end = at(&dep.to_string(), "end").unwrap_or_else(|| panic!("{dep} never ended: {log:?}"));
            let start = at(&key, "start").unwrap_or_else(|| panic!("{key} never started: {log:?}"));
            assert!(dep_end < start, "{key} started before {dep} ended: {log:?}");
        }
    }
}

#[tokio::test]
async fn a_retriable_failure_is_tried_again() {
    let plan = new_cluster_plan();
    let cloud = Arc::new(MemoryCloud::default());
    cloud.flaky.lock().unwrap().insert("vpc".into(), 2);
    let report = execute(&plan, cloud.clone(), &quiet()).await.unwrap();
    assert_eq!(report.done.len(), plan.changes.len());
    let starts = cloud.log.lock().unwrap().iter().filter(|(k, w)| k == "vpc" && *w == "start").count();
    assert_eq!(starts, 3, "two failures, then success");
}

#[tokio::test]
async fn a_fatal_failure_stops_new_work_and_names_the_change() {
    let plan = new_cluster_plan();
    let cloud = Arc::new(MemoryCloud { broken: vec!["vpc".into()], ..Default::default() });
    let err = execute(&plan, cloud.clone(), &quiet()).await.unwrap_err();
    assert!(format!("{err:#}").contains("applying vpc"), "{err:#}");
    let log = cloud.log.lock().unwrap().clone();
    // Nothing that needs the VPC started.
    for c in plan.changes.iter().filter(|c| c.depends_on.contains(&ResourceKey::Vpc)) {
        assert!(!log.iter().any(|(k, _)| *k == c.key.to_string()), "{} started after the VPC failed", c.key);
    }
}

#[tokio::test]
async fn a_plan_with_a_refusal_runs_nothing() {
    let mut plan = new_cluster_plan();
    plan.changes[0].op = Step::Refuse { why: "a person must decide".into() };
    let cloud = Arc::new(MemoryCloud::default());
    let err = execute(&plan, cloud.clone(), &quiet()).await.unwrap_err();
    assert!(format!("{err:#}").contains("a person must decide"), "{err:#}");
    assert!(cloud.log.lock().unwrap().is_empty());
}
