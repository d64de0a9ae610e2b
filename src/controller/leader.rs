//! Leader election on a coordination.k8s.io Lease, as client-go's
//! leaderelection does: the holder renews `renewTime` every
//! `renew_every`; another replica takes the lease only once it has gone
//! unrenewed for `lease_duration`. Writes use the Lease's resourceVersion,
//! so two candidates can never both win a round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;

#[derive(Debug, Clone)]
pub struct LeaseLock {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
}

fn micro(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// What a round of election found: whether this candidate holds the
/// lease, and, when another does, when its lease runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    Held,
    /// Another holds it until this instant (None: unknown, e.g. a conflict).
    HeldByAnother(Option<DateTime<Utc>>),
}

impl LeaseLock {
    /// One round: acquire or renew. True when this candidate holds the lease.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        Ok(self.round().await? == Round::Held)
    }

    /// One round of election, saying when another holder's lease runs out.
    pub async fn round(&self) -> Result<Round, kube::Error> {
        let now = Utc::now();
        let spec = |acquired: String, transitions: i32| json!({"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration.as_secs().max(1), "acquireTime": acquired, "renewTime": micro(now), "leaseTransitions": transitions});
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let fresh: Lease =
                serde_json::from_value(json!({"metadata": {"name": self.name}, "spec": spec(micro(now), 0)}))
                    .expect("lease");
            return match self.api.create(&PostParams::default(), &fresh).await {
                Ok(_) => Ok(Round::Held),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Round::HeldByAnother(None)),
                Err(e) => Err(e),
            };
        };
        let s = lease.spec.clone().unwrap_or_default();
        let holder = s.holder_identity.clone().unwrap_or_default();
        let renewed = s.renew_time.as_ref().map(|t| t.0).map(|t| {
            DateTime::<Utc>::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32).unwrap_or(now)
        });
        let duration = chrono::Duration::seconds(i64::from(s.lease_duration_seconds.unwrap_or(15)));
        let expired = renewed.is_none_or(|r| r + duration < now);
        if holder != self.identity && !expired {
            return Ok(Round::HeldByAnother(renewed.map(|r| r + duration)));
        }
        let transitions = s.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
        let acquired = if holder == self.identity {
            s.acquire_time
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_string)))
                .unwrap_or_else(|| micro(now))
        } else {
            micro(now)
        };
        let mut next = lease.clone();
        next.spec = Some(serde_json::from_value(spec(acquired, transitions)).expect("lease spec"));
        match self.api.replace(&self.name, &PostParams::default(), &next).await {
            Ok(_) => Ok(Round::Held),
            // Someone else wrote first (resourceVersion moved): not ours this round.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Round::HeldByAnother(None)),
            Err(e) => Err(e),
        }
    }
}

/// How long to wait before the next round: the holder renews every
/// `renew_every`; a candidate tries again at the moment the holder's lease
/// runs out (client-go retries every RetryPeriod whatever the expiry, so a
/// standby takes over up to a RetryPeriod late), never later than
/// `renew_every`.
pub fn next_round(renew_every: Duration, round: Round, now: DateTime<Utc>) -> Duration {
    /// Past the expiry, so the round sees it expired (the check is strict).
    const PAST_EXPIRY: Duration = Duration::from_millis(50);
    match round {
        Round::Held | Round::HeldByAnother(None) => renew_every,
        Round::HeldByAnother(Some(until)) => {
            let left = (until - now).to_std().unwrap_or(Duration::ZERO) + PAST_EXPIRY;
            left.min(renew_every)
        }
    }
}

/// Runs `work` only while this candidate leads; stops it when leadership
/// is lost, restarts it when regained. `leading` mirrors the state.
pub async fn run_elected<F, Fut>(lock: LeaseLock, leading: Arc<AtomicBool>, work: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut task: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        let round = match lock.round().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("leader election: {e}");
                Round::HeldByAnother(None)
            }
        };
        let won = round == Round::Held;
        match (won, task.is_some()) {
            (true, false) => {
                tracing::info!(identity = lock.identity, "became leader");
                task = Some(tokio::spawn(work()));
            }
            (false, true) => {
                tracing::warn!(identity = lock.identity, "lost leadership; stopping controllers");
                if let Some(t) = task.take() {
                    t.abort();
                }
            }
            _ => {}
        }
        leading.store(won, Ordering::SeqCst);
        tokio::time::sleep(next_round(lock.renew_every, round, Utc::now())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_tries_again_when_the_lease_runs_out_never_later_than_a_renewal() {
        let now = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap();
        let every = Duration::from_secs(2);
        let ms = |n: i64| now + chrono::Duration::milliseconds(n);
        let cases = [
            (Round::Held, every),
            (Round::HeldByAnother(None), every),
            // Runs out in 700 ms: try 50 ms after.
            (Round::HeldByAnother(Some(ms(700))), Duration::from_millis(750)),
            // Runs out in 6 s: a renewal's wait, then look again.
            (Round::HeldByAnother(Some(ms(6_000))), every),
            // Already out: at once (past the strict check).
            (Round::HeldByAnother(Some(ms(-300))), Duration::from_millis(50)),
        ];
        for (round, want) in cases {
            assert_eq!(next_round(every, round, now), want, "{round:?}");
        }
    }
}
