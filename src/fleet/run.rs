//! Carrying a fleet rollout out: the one writer. Under the fleet lock it
//! asks [`decide`] what may happen now, starts those clusters' rolls (each
//! through the cluster's own roll and gates, behind [`Fleet`]), soaks and
//! gates each stage, halts when the failure budget is spent, and writes the
//! record to the fleet's store after every change, so a run killed at any
//! point is picked up by the next one. [`revert`] rolls the clusters a
//! rollout touched back to what they ran before it.
//!
//! ```text
//! Book (state store) ─▶ FleetRollout ─▶ decide ─▶ Fleet::roll / Fleet::gate ─▶ record ─▶ Book
//! ```
//!
//! The time it reads is tokio's ([`Clock`]), so the same driver runs on a
//! paused clock in rehearsals (`benches/fleet.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use futures::stream::{FuturesUnordered, StreamExt as _};
use serde::{Deserialize, Serialize};

use super::rollout::{decide, ClusterState, FleetRollout, RolloutState, Snapshot, Why, Windows};
use super::Target;
use crate::state::lock::{Lock, LockError};
use crate::state::Store;

/// What the fleet driver needs from each cluster.
#[allow(async_fn_in_trait)]
pub trait Fleet {
    /// What the cluster runs now (its launch templates: what a new machine gets).
    async fn current(&self, cluster: &str) -> Result<Snapshot>;
    /// What its machines run now, in words: each group's images with how
    /// many machines run each (a roll that failed part-way leaves a group
    /// on two). Where the machines cannot be told apart, the templates'.
    async fn running(&self, cluster: &str) -> Result<String> {
        Ok(self.current(cluster).await?.summary())
    }
    /// Rolls the cluster to `to`, under its own lock, with its own
    /// end-to-end gates (after each group and after the roll).
    async fn roll(&self, cluster: &str, to: &Snapshot, why: &str) -> Result<()>;
    /// The end-to-end gate run on each cluster of a stage after its soak.
    async fn gate(&self, cluster: &str) -> Result<()>;
}

/// A gate that could neither pass nor fail (an inconclusive analysis):
/// returned by [`Fleet::gate`], it holds the stage for a person instead of
/// failing the cluster.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Hold(pub String);

/// Wall time read through tokio's clock (paused in rehearsals).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    at: DateTime<Utc>,
    base: tokio::time::Instant,
}

impl Clock {
    pub fn starting(at: DateTime<Utc>) -> Clock {
        Clock { at, base: tokio::time::Instant::now() }
    }
    pub fn wall() -> Clock {
        Clock::starting(Utc::now())
    }
    pub fn now(&self) -> DateTime<Utc> {
        self.at + chrono::Duration::from_std(self.base.elapsed()).unwrap_or_default()
    }
    /// The tokio instant of a wall time (now, if it has passed).
    fn instant(&self, t: DateTime<Utc>) -> tokio::time::Instant {
        tokio::time::Instant::now() + (t - self.now()).to_std().unwrap_or_default()
    }
}

/// Where the fleet's rollouts live: `<store>/.fleet/` — the latest rollout
/// (`rollout.json`), earlier ones (`rollouts/NNNNNNNN.json`), approvals
/// (`approvals/NNNNNNNN/STAGE.json`) and the fleet lock (`lock.json`).
#[derive(Clone)]
pub struct Book {
    pub store: Store,
}

const CURRENT: &str = "rollout.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    pub stage: String,
    pub by: String,
    pub at: DateTime<Utc>,
}

impl Book {
    pub async fn open(url: &str, aws: Option<&crate::cloud::aws::Aws>) -> Result<Book> {
        Ok(Book {
            store: Store::open(url, crate::state::lock::FLEET, aws.map(|a| a as &dyn crate::state::S3Access)).await?,
        })
    }

    /// The latest rollout (running or finished).
    pub async fn latest(&self) -> Result<Option<FleetRollout>> {
        self.store.get_json(CURRENT).await
    }

    pub async fn save(&self, r: &FleetRollout) -> Result<()> {
        self.store.put_json(CURRENT, r).await.map(|_| ())
    }

    /// The rollout in progress towards `target`, to pick up; none when the
    /// latest one is finished (or there is none). A rollout in progress
    /// towards another target is an error: one at a time.
    pub async fn in_progress(&self, target: &Target) -> Result<Option<FleetRollout>> {
        match self.latest().await? {
            Some(r) if !r.is_finished() && &r.target == target => Ok(Some(r)),
            Some(r) if !r.is_finished() => anyhow::bail!(
                "fleet rollout #{} ({}) is in progress; finish it (`pinfleet fleet rollout apply` with its target) or revert it before starting another",
                r.number,
                r.target
            ),
            _ => Ok(None),
        }
    }

    /// Why a cluster's own scheduled AMI job must leave it alone: a fleet
    /// rollout in progress has it in a stage it has not finished (the
    /// fleet rolls it when its stage's turn comes).
    pub async fn holds(&self, cluster: &str) -> Result<Option<String>> {
        let Some(r) = self.latest().await? else { return Ok(None) };
        if r.is_finished() {
            return Ok(None);
        }
        let held = r
            .clusters()
            .find(|(_, c)| c.name == cluster && matches!(c.state, ClusterState::Pending | ClusterState::Rolling))
            .map(|(s, c)| {
                format!(
                    "cluster {cluster} is in fleet rollout #{} ({}), stage {}, {}: the fleet rolls it in its turn (`pinfleet fleet rollout status`)",
                    r.number, r.target, s.name, c.state
                )
            });
        Ok(held)
    }

    /// The number a new rollout takes; the latest one moves to `rollouts/`.
    pub async fn retire_latest(&self) -> Result<u64> {
        match self.latest().await? {
            Some(old) => {
                self.store.put_json(&format!("rollouts/{:08}.json", old.number), &old).await?;
                Ok(old.number + 1)
            }
            None => Ok(1),
        }
    }

    pub async fn approvals(&self, number: u64) -> Result<BTreeSet<String>> {
        let prefix = format!("approvals/{number:08}/");
        Ok(self
            .store
            .list(&prefix)
            .await?
            .iter()
            .filter_map(|k| k.strip_prefix(&prefix)?.strip_suffix(".json").map(str::to_string))
            .collect())
    }

    /// Records an approval (its own object: the running writer never
    /// overwrites it).
    pub async fn approve(&self, number: u64, stage: &str, by: &str, at: DateTime<Utc>) -> Result<()> {
        let a = Approval { stage: stage.to_string(), by: by.to_string(), at };
        self.store.put_json(&format!("approvals/{number:08}/{stage}.json"), &a).await.map(|_| ())
    }
}

/// Progress, for the terminal and `-o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase", tag = "event")]
pub enum Note {
    Resumed {
        number: u64,
        clusters: Vec<String>,
    },
    Started {
        stage: String,
        cluster: String,
        attempt: u32,
        from: String,
        to: String,
    },
    Done {
        cluster: String,
        seconds: f64,
    },
    Failed {
        cluster: String,
        error: String,
    },
    Blocked {
        cluster: String,
        holder: String,
    },
    Soaking {
        stage: String,
        until: DateTime<Utc>,
    },
    Gate {
        stage: String,
        clusters: Vec<String>,
    },
    Passed {
        stage: String,
    },
    Held {
        stage: String,
        reason: String,
    },
    Waiting {
        until: Option<DateTime<Utc>>,
        why: BTreeMap<String, String>,
    },
    Halted {
        reason: String,
    },
    Finished {
        number: u64,
    },
    /// Through every stage, with clusters that failed within the budget.
    FinishedWithFailures {
        number: u64,
        failures: String,
    },
    Reverted {
        cluster: String,
        to: String,
    },
    RevertFailed {
        cluster: String,
        error: String,
    },
}

/// What each failed cluster's machines run now, read once (one that
/// cannot be read is named without it).
async fn read_runs(fleet: &impl Fleet, r: &mut FleetRollout) {
    let failed: Vec<String> =
        r.clusters().filter(|(_, c)| matches!(c.state, ClusterState::Failed(_))).map(|(_, c)| c.name.clone()).collect();
    let runs = futures::future::join_all(failed.iter().map(|name| fleet.running(name))).await;
    for (name, run) in failed.iter().zip(runs) {
        if let Some(c) = r.cluster_mut(name) {
            c.runs = run.ok();
        }
    }
}

/// How a run of `apply` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    /// Every stage went through, but these clusters failed (why, and what
    /// each runs now): not a success.
    FinishedWithFailures(String),
    /// Nothing can move until then (or until a human approves).
    Waiting {
        until: Option<DateTime<Utc>>,
        why: BTreeMap<String, Why>,
    },
    Halted(String),
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Sleep through soaks and closed windows (else return `Waiting`).
    pub wait: bool,
    /// After another run's cluster lock refused a roll, try again this much later.
    pub lock_retry: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { wait: true, lock_retry: Duration::from_secs(60) }
    }
}

type Rolling<'a> = Pin<Box<dyn Future<Output = (String, Result<()>, f64)> + 'a>>;

/// Runs the rollout under the fleet lock until it is finished, halted, or
/// waiting on something a run cannot wait for (an approval; any wait
/// without `wait`). A second run is refused with the holder's name.
#[allow(clippy::too_many_arguments)]
pub async fn apply<F: Fleet>(
    fleet: &F,
    book: &Book,
    record: FleetRollout,
    windows: &dyn Windows,
    clock: Clock,
    opts: Options,
    command: &str,
    on: &dyn Fn(Note),
) -> Result<(FleetRollout, Outcome)> {
    Lock::with(&book.store, command, apply_held(fleet, book, record, windows, clock, opts, on)).await
}

/// [`apply`] for a caller that already holds the fleet lock (taken before
/// it chose the record, so a refused run says nothing else first).
pub async fn apply_held<F: Fleet>(
    fleet: &F,
    book: &Book,
    record: FleetRollout,
    windows: &dyn Windows,
    clock: Clock,
    opts: Options,
    on: &dyn Fn(Note),
) -> Result<(FleetRollout, Outcome)> {
    drive(fleet, book, record, windows, clock, opts, on).await
}

async fn drive<F: Fleet>(
    fleet: &F,
    book: &Book,
    mut r: FleetRollout,
    windows: &dyn Windows,
    clock: Clock,
    opts: Options,
    on: &dyn Fn(Note),
) -> Result<(FleetRollout, Outcome)> {
    // Re-read under the lock: the caller's copy may predate another run's work.
    if let Some(latest) = book.latest().await? {
        if latest.number == r.number {
            r = latest;
        }
    }
    // Notes are shown once what they say is in the store.
    let mut said: Vec<Note> = Vec::new();
    let again = r.resume();
    if !again.is_empty() {
        said.push(Note::Resumed { number: r.number, clusters: again });
    }
    save(book, &r, &mut said, on).await?;
    let mut running: FuturesUnordered<Rolling<'_>> = FuturesUnordered::new();
    loop {
        let approved = book.approvals(r.number).await?;
        let now = clock.now();
        let d = decide(&r, windows, &approved, now);
        if let Some(reason) = &d.halt {
            if running.is_empty() {
                read_runs(fleet, &mut r).await;
                r.state = RolloutState::Halted(reason.clone());
                r.finished_at = Some(now);
                // The last word names every cluster that failed, in any
                // stage, and what its machines run now.
                let said_reason = match r.failures() {
                    Some(f) => format!("{reason}; {f}"),
                    None => reason.clone(),
                };
                said.push(Note::Halted { reason: said_reason.clone() });
                save(book, &r, &mut said, on).await?;
                return Ok((r, Outcome::Halted(said_reason)));
            }
        } else if let Some(i) = d.rolled {
            let s = &mut r.stages[i];
            s.rolled_at = Some(now);
            let until = s.soak_until().unwrap_or(now);
            said.push(Note::Soaking { stage: s.name.clone(), until });
            save(book, &r, &mut said, on).await?;
            continue;
        } else if let Some(i) = d.promote {
            let s = &mut r.stages[i];
            s.passed_at = Some(now);
            said.push(Note::Passed { stage: s.name.clone() });
            save(book, &r, &mut said, on).await?;
            continue;
        } else if let Some(i) = d.gate {
            gate_stage(fleet, book, &mut r, i, clock, &mut said, on).await?;
            continue;
        } else if d.finished {
            read_runs(fleet, &mut r).await;
            r.finished_at = Some(now);
            let outcome = match r.failures() {
                None => {
                    r.state = RolloutState::Done;
                    said.push(Note::Finished { number: r.number });
                    Outcome::Finished
                }
                Some(failures) => {
                    r.state = RolloutState::FinishedWithFailures(failures.clone());
                    said.push(Note::FinishedWithFailures { number: r.number, failures: failures.clone() });
                    Outcome::FinishedWithFailures(failures)
                }
            };
            save(book, &r, &mut said, on).await?;
            return Ok((r, outcome));
        } else {
            // What each starting cluster runs, read at once.
            let froms = futures::future::join_all(d.start.iter().map(|name| fleet.current(name))).await;
            for (name, from) in d.start.iter().zip(froms) {
                let (stage, to) = {
                    let stage = r.stages.iter().find(|s| s.clusters.iter().any(|c| &c.name == name));
                    let stage = stage.map(|s| s.name.clone()).unwrap_or_default();
                    let c = r.cluster_mut(name).expect("a cluster of the rollout");
                    c.blocked = None;
                    c.blocked_until = None;
                    match from {
                        Ok(from) => {
                            // A roll started again after a kill keeps what the cluster ran at first.
                            if c.attempts == 0 {
                                c.from = from;
                            }
                            c.state = ClusterState::Rolling;
                            c.attempts += 1;
                            c.started_at = Some(now);
                        }
                        Err(e) => {
                            let error = format!("reading what it runs: {e:#}");
                            c.state = ClusterState::Failed(error.clone());
                            c.finished_at = Some(now);
                            said.push(Note::Failed { cluster: name.clone(), error });
                            continue;
                        }
                    }
                    said.push(Note::Started {
                        stage: stage.clone(),
                        cluster: name.clone(),
                        attempt: c.attempts,
                        from: c.from.summary(),
                        to: c.to.over(&c.from).summary(),
                    });
                    (stage, c.to.clone())
                };
                save(book, &r, &mut said, on).await?;
                let name = name.clone();
                running.push(Box::pin(async move {
                    let started = tokio::time::Instant::now();
                    let why = format!("fleet rollout (stage {stage})");
                    let result = fleet.roll(&name, &to, &why).await;
                    (name, result, started.elapsed().as_secs_f64())
                }));
            }
            if !d.start.is_empty() {
                continue;
            }
        }
        if running.is_empty() {
            let why: BTreeMap<String, String> = d.why.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
            flush(&mut said, on);
            on(Note::Waiting { until: d.wake, why });
            match d.wake {
                Some(t) if opts.wait => {
                    // (A stage waiting for its approval has no wake: the run ends.)
                    tokio::time::sleep_until(clock.instant(t)).await;
                    continue;
                }
                until => return Ok((r, Outcome::Waiting { until, why: d.why })),
            }
        }
        let wake = d.wake.map(|t| clock.instant(t));
        tokio::select! {
            Some((name, result, seconds)) = running.next() => {
                let now = clock.now();
                said.push(finished_roll(&mut r, &name, result, seconds, now, opts));
                save(book, &r, &mut said, on).await?;
            }
            _ = sleep_until_or_forever(wake) => {}
        }
    }
}

/// A cluster's roll ended: done, failed, or put off because another run
/// held its lock (tried again after `lock_retry`). Returns what to say.
fn finished_roll(
    r: &mut FleetRollout,
    name: &str,
    result: Result<()>,
    seconds: f64,
    now: DateTime<Utc>,
    opts: Options,
) -> Note {
    let c = r.cluster_mut(name).expect("a cluster of the rollout");
    let name = name.to_string();
    match result {
        Ok(()) => {
            c.state = ClusterState::Done;
            c.finished_at = Some(now);
            Note::Done { cluster: name, seconds }
        }
        Err(e) => match e.downcast_ref::<LockError>() {
            Some(LockError::Held { info, .. }) => {
                let holder = format!("{} on {} (pid {}, `{}`)", info.holder, info.host, info.pid, info.command);
                c.state = ClusterState::Pending;
                c.blocked = Some(holder.clone());
                c.blocked_until = Some(now + chrono::Duration::from_std(opts.lock_retry).unwrap_or_default());
                Note::Blocked { cluster: name, holder }
            }
            None => {
                let error = format!("{e:#}");
                c.state = ClusterState::Failed(error.clone());
                c.finished_at = Some(now);
                Note::Failed { cluster: name, error }
            }
        },
    }
}

/// Writes the record, then shows what it says.
async fn save(book: &Book, r: &FleetRollout, said: &mut Vec<Note>, on: &dyn Fn(Note)) -> Result<()> {
    book.save(r).await?;
    flush(said, on);
    Ok(())
}

fn flush(said: &mut Vec<Note>, on: &dyn Fn(Note)) {
    for n in said.drain(..) {
        on(n);
    }
}

async fn sleep_until_or_forever(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Runs the stage's end-to-end gate on each of its rolled clusters at
/// once; a cluster that fails it counts as failed (then the failure budget
/// decides), else the stage passes.
async fn gate_stage<F: Fleet>(
    fleet: &F,
    book: &Book,
    r: &mut FleetRollout,
    i: usize,
    clock: Clock,
    said: &mut Vec<Note>,
    on: &dyn Fn(Note),
) -> Result<()> {
    let names: Vec<String> =
        r.stages[i].clusters.iter().filter(|c| c.state == ClusterState::Done).map(|c| c.name.clone()).collect();
    // The gate is about to run: said now.
    on(Note::Gate { stage: r.stages[i].name.clone(), clusters: names.clone() });
    let results = futures::future::join_all(names.iter().map(|n| fleet.gate(n))).await;
    let now = clock.now();
    let mut failed = false;
    let mut held = Vec::new();
    for (name, result) in names.iter().zip(results) {
        if let Err(e) = result {
            if let Some(Hold(reason)) = e.downcast_ref::<Hold>() {
                held.push(format!("{name}: {reason}"));
                continue;
            }
            failed = true;
            let error = format!("stage gate: {e:#}");
            let c = r.cluster_mut(name).expect("a cluster of the stage");
            c.state = ClusterState::Failed(error.clone());
            said.push(Note::Failed { cluster: name.clone(), error });
        }
    }
    if !failed && !held.is_empty() {
        let reason = held.join("; ");
        r.stages[i].held = Some(reason.clone());
        said.push(Note::Held { stage: r.stages[i].name.clone(), reason });
    } else if !failed {
        r.stages[i].passed_at = Some(now);
        said.push(Note::Passed { stage: r.stages[i].name.clone() });
    }
    save(book, r, said, on).await
}

/// Rolls every cluster the rollout touched back to what it ran before,
/// latest stage first (a stage's clusters at once), under the fleet lock.
pub async fn revert<F: Fleet>(
    fleet: &F,
    book: &Book,
    r: FleetRollout,
    clock: Clock,
    command: &str,
    on: &dyn Fn(Note),
) -> Result<FleetRollout> {
    Lock::with(&book.store, command, revert_held(fleet, book, r, clock, false, on)).await
}

/// [`revert`] for a caller that holds the fleet lock; `together`: every
/// touched cluster of every stage at once (a delivery's rollback), else
/// latest stage first.
pub async fn revert_held<F: Fleet>(
    fleet: &F,
    book: &Book,
    mut r: FleetRollout,
    clock: Clock,
    together: bool,
    on: &dyn Fn(Note),
) -> Result<FleetRollout> {
    if let Target::KubernetesVersion(v) = &r.target {
        let moved: Vec<&str> = r.clusters().filter(|(_, c)| c.touched()).map(|(_, c)| c.name.as_str()).collect();
        if !moved.is_empty() {
            anyhow::bail!(
                "a Kubernetes version is not rolled back: kubeadm does not downgrade a control plane, and {} already moved towards {v}. Nothing was changed; roll forward with a fixed version, or restore from an etcd backup",
                moved.join(", ")
            );
        }
    }
    {
        let mut said: Vec<Note> = Vec::new();
        if let Some(latest) = book.latest().await? {
            if latest.number == r.number {
                r = latest;
            }
        }
        let rounds: Vec<Vec<usize>> = if together {
            vec![(0..r.stages.len()).collect()]
        } else {
            (0..r.stages.len()).rev().map(|i| vec![i]).collect()
        };
        for round in rounds {
            let back: Vec<(String, Snapshot)> = round
                .iter()
                .flat_map(|i| r.stages[*i].clusters.iter())
                .filter(|c| c.touched() || matches!(c.state, ClusterState::RevertFailed(_)))
                .filter(|c| !c.from.images.is_empty() || c.from.kubernetes_version.is_some())
                .map(|c| {
                    let mut to = c.from.clone();
                    to.launch_template_versions.clear();
                    (c.name.clone(), to)
                })
                .collect();
            let results =
                futures::future::join_all(back.iter().map(|(name, to)| fleet.roll(name, to, "fleet rollout revert")))
                    .await;
            for ((name, to), result) in back.iter().zip(results) {
                let c = r.cluster_mut(name).expect("a cluster of the stage");
                match result {
                    Ok(()) => {
                        c.state = ClusterState::Reverted;
                        said.push(Note::Reverted { cluster: name.clone(), to: to.summary() });
                    }
                    Err(e) => {
                        let error = format!("{e:#}");
                        c.state = ClusterState::RevertFailed(error.clone());
                        said.push(Note::RevertFailed { cluster: name.clone(), error });
                    }
                }
                save(book, &r, &mut said, on).await?;
            }
        }
        let failed: Vec<&str> = r
            .clusters()
            .filter(|(_, c)| matches!(c.state, ClusterState::RevertFailed(_)))
            .map(|(_, c)| c.name.as_str())
            .collect();
        if !failed.is_empty() {
            let msg = format!("the revert failed on {}; run `pinfleet fleet rollout revert` again", failed.join(", "));
            book.save(&r).await?;
            anyhow::bail!(msg);
        }
        r.state = RolloutState::Reverted;
        r.finished_at = Some(clock.now());
        book.save(&r).await?;
        Ok(r)
    }
}
