//! The executor: walks a [`Plan`] as a dependency graph with bounded
//! parallelism. A change starts when everything it depends on is done;
//! retriable failures (dependencies still draining, eventual consistency)
//! are retried with backoff, while throttling and 5xx are already retried
//! inside the SDK. On a failure nothing new starts, running changes finish,
//! and the error names the change. Every operation is idempotent and the
//! plan is recomputed from observation, so a re-run after any interruption
//! converges without duplicates.

pub mod cluster;
pub mod prepare;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use futures::stream::{FuturesUnordered, StreamExt};
use owo_colors::OwoColorize;
use serde::Serialize;

use crate::cloud::ops::Operations;
use crate::plan::{Action, Change, Plan};

/// How many changes run at once. EC2 mutating-call rate limits are per
/// account; eight keeps a big apply quick without drawing throttling.
pub const DEFAULT_PARALLELISM: usize = 8;
/// How long one change may keep failing retriably before the apply stops.
const RETRY_FOR: Duration = Duration::from_secs(600);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct Options {
    pub parallelism: usize,
    /// Pause after each change (`PINFLEET_TEST_STEP_DELAY_MS`): lets tests
    /// interrupt an apply in the middle.
    pub step_delay: Option<Duration>,
    /// Print progress lines to stderr.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        let step_delay =
            std::env::var("PINFLEET_TEST_STEP_DELAY_MS").ok().and_then(|v| v.parse().ok()).map(Duration::from_millis);
        Options { parallelism: DEFAULT_PARALLELISM, step_delay, progress: true }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Done {
    pub key: crate::cloud::key::ResourceKey,
    pub action: Action,
    pub result: String,
    pub seconds: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub done: Vec<Done>,
}

async fn run_with_retries<C: Operations + ?Sized>(
    ctx: &C,
    change: &Change,
    op: &crate::cloud::ops::Op,
) -> Result<String> {
    let start = Instant::now();
    let mut backoff = Duration::from_millis(500);
    loop {
        match ctx.run(&change.key, op).await {
            Ok(r) => return Ok(r),
            Err(e) if e.retriable && start.elapsed() < RETRY_FOR => {
                tracing::info!(key = %change.key, "retrying: {:#}", e.error);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
            Err(e) => return Err(e.error),
        }
    }
}

/// Applies `plan`. Refuses up front, changing nothing, if any change is one
/// pinfleet will not make by itself.
pub async fn execute<C: Operations + ?Sized>(plan: &Plan, ctx: Arc<C>, opts: &Options) -> Result<Report> {
    let refusals = plan.refusals();
    if !refusals.is_empty() {
        let reasons: Vec<String> = refusals
            .iter()
            .filter_map(|c| match &c.op {
                crate::plan::Step::Refuse { why } => Some(format!("{}: {why}", c.key)),
                crate::plan::Step::Run(_) => None,
            })
            .collect();
        bail!("nothing was applied; these changes need a person:\n  {}", reasons.join("\n  "));
    }
    // Refusals stopped the run above: every change left is an operation.
    let mut pending: Vec<(&Change, &crate::cloud::ops::Op)> =
        plan.changes.iter().filter_map(|c| c.op.op().map(|op| (c, op))).collect();
    let mut done: BTreeSet<crate::cloud::key::ResourceKey> = BTreeSet::new();
    let mut report = Report::default();
    let mut failure: Option<anyhow::Error> = None;
    // Machines started by changes that then stopped (a launch partly served).
    let mut partly_launched = 0usize;
    let mut running = FuturesUnordered::new();
    loop {
        while failure.is_none() && running.len() < opts.parallelism.max(1) {
            let Some(pos) = pending.iter().position(|(c, _)| c.depends_on.iter().all(|d| done.contains(d))) else {
                break;
            };
            let (change, op) = pending.remove(pos);
            let ctx = ctx.clone();
            let delay = opts.step_delay;
            running.push(async move {
                let start = Instant::now();
                let r = run_with_retries(ctx.as_ref(), change, op).await;
                if let Some(d) = delay {
                    tokio::time::sleep(d).await;
                }
                (change, r, start.elapsed())
            });
        }
        let Some((change, result, took)) = running.next().await else { break };
        match result {
            Ok(r) => {
                if opts.progress {
                    let line = format!(
                        "  {} {} {}  ({:.1}s)",
                        change.action.symbol(),
                        change.key,
                        r.dimmed(),
                        took.as_secs_f64()
                    );
                    let _ = writeln!(anstream::stderr(), "{line}");
                }
                done.insert(change.key.clone());
                report.done.push(Done {
                    key: change.key.clone(),
                    action: change.action,
                    result: r,
                    seconds: took.as_secs_f64(),
                });
            }
            Err(e) => {
                if let Some(p) = e.downcast_ref::<crate::capacity::PartlyLaunched>() {
                    partly_launched += p.ids.len();
                }
                if opts.progress {
                    let _ = writeln!(anstream::stderr(), "  {} {} {}", "✗".red(), change.key, format!("{e:#}").red());
                }
                failure.get_or_insert(e.context(format!("applying {}", change.key)));
            }
        }
    }
    if let Some(e) = failure {
        let partly = match partly_launched {
            0 => String::new(),
            n => format!(" ({n} machine(s) launched by a change partly served)"),
        };
        return Err(e.context(format!(
            "{} of {} changes applied{partly}; run again to finish",
            report.done.len(),
            plan.changes.len()
        )));
    }
    if !pending.is_empty() {
        bail!("{} change(s) could not start (dependency cycle in the plan)", pending.len());
    }
    Ok(report)
}
