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

/// What stops the election, in one line: a missing namespace says how to
/// fix it; an API error is its message, never the debug dump of its Status.
pub fn election_problem(lock: &LeaseLock, e: &kube::Error) -> String {
    let ns = lock.api.namespace().unwrap_or("default").to_string();
    match e {
        kube::Error::Api(s) if s.code == 404 => format!(
            "namespace {ns} does not exist, so the Lease {} cannot be created: create it (kubectl create namespace {ns}) or pass --lease-namespace; waiting for it",
            lock.name
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "not allowed to read or write Leases in namespace {ns} ({}): grant get, create and update on leases.coordination.k8s.io",
            s.message
        ),
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        other => other.to_string(),
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
    // A problem is said once, in one line, until it changes or goes away.
    let mut said: Option<String> = None;
    loop {
        let round = match lock.round().await {
            Ok(r) => {
                if said.take().is_some() {
                    tracing::info!("leader election: the Lease {} can be read and written again", lock.name);
                }
                r
            }
            Err(e) => {
                let why = election_problem(&lock, &e);
                if said.as_deref() != Some(why.as_str()) {
                    tracing::warn!("leader election: {why}");
                    said = Some(why);
                }
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

    #[tokio::test]
    async fn a_missing_namespace_is_said_in_one_line_with_the_fix() {
        crate::kube::install_crypto_provider();
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let lock = LeaseLock {
            api: Api::namespaced(client, "pinfleet-system"),
            name: "pinfleet-controller".into(),
            identity: "a".into(),
            lease_duration: Duration::from_secs(7),
            renew_every: Duration::from_secs(2),
        };
        let status = |code: u16, reason: &str, message: &str| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                reason: reason.into(),
                message: message.into(),
                ..Default::default()
            }))
        };
        let e = status(404, "NotFound", "namespaces \"pinfleet-system\" not found");
        let said = election_problem(&lock, &e);
        assert_eq!(
            said,
            "namespace pinfleet-system does not exist, so the Lease pinfleet-controller cannot be created: create it (kubectl create namespace pinfleet-system) or pass --lease-namespace; waiting for it"
        );
        assert!(!said.contains('\n') && !said.contains("Status {"));
        let e = status(500, "InternalError", "etcdserver: request timed out");
        assert_eq!(election_problem(&lock, &e), "etcdserver: request timed out (500 InternalError)");
    }

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
