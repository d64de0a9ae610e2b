//! The waits inside a wave (bookkeeping for `run`): a roll waiting for
//! the new revision to run Ready, the bake, the interval between two
//! measurements. The engine (`fleet::run`) stops a run without `wait` at
//! its own waits only (soaks, windows, a held lock); these happen inside
//! `Fleet::roll` and `Fleet::gate`, where it cannot see them. So a member
//! that would wait parks instead, saying what it waits for and until when;
//! once every call in flight is parked, the run ends `Waiting`. What each
//! call did is in the store before it parks (the engine's record, the
//! analysis, the roll's deadline), so the next run picks up there.
//!
//! ```text
//! Members::roll / gate ─▶ Waits::enter ─▶ … ─▶ Waits::park (no wait) ─▶ settled ─▶ run: Ended::Waiting
//!                                           └▶ sleep (wait)
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

/// Where one cluster's call stopped: until when at most, and what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub until: DateTime<Utc>,
    pub what: String,
}

#[derive(Debug, Default)]
struct Calls {
    /// Member calls (rolls, gates) running now.
    active: usize,
    parked: BTreeMap<String, Parked>,
    /// Bumped at every change: a settled set did not move in between.
    changes: u64,
}

/// The waits of one run's member calls.
#[derive(Debug)]
pub struct Waits {
    park: AtomicBool,
    calls: Mutex<Calls>,
    changed: Notify,
}

/// A member call in flight; it ends when this drops.
pub struct Call<'a> {
    waits: &'a Waits,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.waits.change(|c| c.active = c.active.saturating_sub(1));
    }
}

/// A parked call, unparked when its future is dropped.
struct Unpark<'a> {
    waits: &'a Waits,
    cluster: String,
}

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        let cluster = std::mem::take(&mut self.cluster);
        self.waits.change(|c| {
            c.parked.remove(&cluster);
        });
    }
}

impl Waits {
    /// `park`: stop at every wait (a run without `wait`), else sleep through them.
    pub fn new(park: bool) -> Waits {
        Waits { park: AtomicBool::new(park), calls: Mutex::new(Calls::default()), changed: Notify::new() }
    }

    pub fn parks(&self) -> bool {
        self.park.load(Ordering::SeqCst)
    }

    /// From now on every wait is slept through: a rollback is never left
    /// half done (its record would say finished, and no run picks it up).
    pub fn sleep_through(&self) {
        self.park.store(false, Ordering::SeqCst);
    }

    fn change(&self, f: impl FnOnce(&mut Calls)) {
        {
            let mut c = self.calls.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut c);
            c.changes += 1;
        }
        self.changed.notify_waiters();
    }

    /// A member call (a roll, a gate) starts.
    pub fn enter(&self) -> Call<'_> {
        self.change(|c| c.active += 1);
        Call { waits: self }
    }

    /// Stops `cluster`'s call here for good (the run ends once every call
    /// in flight is parked, and drops them). Whatever the call did must be
    /// in the store before.
    pub async fn park(&self, cluster: &str, until: DateTime<Utc>, what: String) -> Infallible {
        self.change(|c| {
            c.parked.insert(cluster.to_string(), Parked { until, what });
        });
        let _unpark = Unpark { waits: self, cluster: cluster.to_string() };
        std::future::pending().await
    }

    /// Every call in flight parked (at least one): the change count and the parked.
    fn all_parked(&self) -> Option<(u64, BTreeMap<String, Parked>)> {
        let c = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        (!c.parked.is_empty() && c.parked.len() >= c.active).then(|| (c.changes, c.parked.clone()))
    }

    /// Resolves once every call in flight is parked and nothing changed for
    /// `quiet`: the engine's write after the last call that ended (a roll
    /// done, another started) lands before the run ends. What each waits for.
    pub async fn settled(&self, quiet: Duration) -> BTreeMap<String, Parked> {
        loop {
            // Created before the look, so no change between the two is missed.
            let changed = self.changed.notified();
            let Some((at, parked)) = self.all_parked() else {
                changed.await;
                continue;
            };
            tokio::time::sleep(quiet).await;
            if let Some((now, _)) = self.all_parked() {
                if now == at {
                    return parked;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_settles_once_every_call_in_flight_is_parked() {
        let w = Waits::new(true);
        let until = Utc::now();
        let north = w.enter();
        let south = w.enter();
        let parked_north = async {
            let _call = north;
            match w.park("north", until, "baking".into()).await {}
        };
        let south_rolls = async {
            let _call = south;
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Done: its call ends, only north is left, parked.
        };
        let settled = async {
            tokio::select! {
                _ = parked_north => unreachable!("a parked call never ends"),
                _ = async { south_rolls.await; std::future::pending::<()>().await } => unreachable!(),
                p = w.settled(Duration::from_millis(10)) => p,
            }
        };
        let parked = tokio::time::timeout(Duration::from_secs(5), settled).await.expect("settled");
        assert_eq!(parked.keys().collect::<Vec<_>>(), ["north"]);
        assert_eq!(parked["north"].what, "baking");
    }
}
