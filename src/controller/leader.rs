//! Leader election on a coordination.k8s.io Lease, as client-go's
//! leaderelection does: the holder renews `renewTime` every
//! `renew_every`; another replica takes the lease only once it has gone
//! unrenewed for `lease_duration`. Writes use the Lease's resourceVersion,
//! so two candidates can never both win a round.
//!
//! A leader keeps leading through a slow or failed renewal (a busy API
//! server) and retries at once, but steps down when it has not renewed for
//! the renew deadline (two thirds of the lease, as client-go's 10 s of
//! 15 s): before any standby may take the lease, so two never lead at once.
//! A holder renews with one write from the Lease it last wrote (client-go's
//! fast path: no read first, so a busy API server costs one request's
//! latency, not two), reading only when that write conflicts; and it renews
//! every `renew_every` counted from the start of the last renewal, not from
//! its end, so a slow answer does not push the next one toward the deadline.
//! A replica that stops releases what it holds (holder emptied, as
//! client-go's ReleaseOnCancel): a standby takes over at once instead of a
//! lease later.

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
        Ok(self.round_from(None).await?.0)
    }

    /// One round, from the Lease this candidate last wrote when it holds
    /// one: a holder renews with that one write, and reads the Lease only
    /// when the write conflicts (another wrote since, or an earlier write of
    /// its own that timed out here landed there). Gives back the Lease as
    /// written when this candidate holds it.
    pub async fn round_from(&self, held: Option<&Lease>) -> Result<(Round, Option<Lease>), kube::Error> {
        if let Some(lease) = held.filter(|l| self.holds(l)) {
            let s = lease.spec.clone().unwrap_or_default();
            let now = Utc::now();
            let next = self.written(lease, now, self.acquired(&s, now), s.lease_transitions.unwrap_or(0));
            match self.api.replace(&self.name, &PostParams::default(), &next).await {
                Ok(written) => return Ok((Round::Held, Some(written))),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        self.round_read().await
    }

    fn holds(&self, lease: &Lease) -> bool {
        lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(self.identity.as_str())
    }

    /// When this candidate first took the Lease it holds (now, if unknown).
    fn acquired(&self, s: &k8s_openapi::api::coordination::v1::LeaseSpec, now: DateTime<Utc>) -> String {
        s.acquire_time
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok().and_then(|v| v.as_str().map(str::to_string)))
            .unwrap_or_else(|| micro(now))
    }

    /// The Lease as this candidate writes it: held by it, renewed now.
    fn written(&self, lease: &Lease, now: DateTime<Utc>, acquired: String, transitions: i32) -> Lease {
        let mut next = lease.clone();
        next.spec = Some(
            serde_json::from_value(json!({"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration.as_secs().max(1), "acquireTime": acquired, "renewTime": micro(now), "leaseTransitions": transitions}))
                .expect("lease spec"),
        );
        next
    }

    /// The round's slow path: read the Lease, then take or renew it.
    async fn round_read(&self) -> Result<(Round, Option<Lease>), kube::Error> {
        let now = Utc::now();
        let spec = |acquired: String, transitions: i32| json!({"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_duration.as_secs().max(1), "acquireTime": acquired, "renewTime": micro(now), "leaseTransitions": transitions});
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let fresh: Lease =
                serde_json::from_value(json!({"metadata": {"name": self.name}, "spec": spec(micro(now), 0)}))
                    .expect("lease");
            return match self.api.create(&PostParams::default(), &fresh).await {
                Ok(written) => Ok((Round::Held, Some(written))),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok((Round::HeldByAnother(None), None)),
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
        // An empty holder is a released lease: free at once.
        if !holder.is_empty() && holder != self.identity && !expired {
            return Ok((Round::HeldByAnother(renewed.map(|r| r + duration)), None));
        }
        // Any change of holder counts, a released lease's taking too (as client-go).
        let transitions = s.lease_transitions.unwrap_or(0) + i32::from(holder != self.identity);
        let acquired = if holder == self.identity { self.acquired(&s, now) } else { micro(now) };
        let next = self.written(&lease, now, acquired, transitions);
        match self.api.replace(&self.name, &PostParams::default(), &next).await {
            Ok(written) => Ok((Round::Held, Some(written))),
            // Someone else wrote first (resourceVersion moved): not ours this round.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok((Round::HeldByAnother(None), None)),
            Err(e) => Err(e),
        }
    }
}

impl LeaseLock {
    /// A leader that has not renewed this long steps down: before the
    /// lease runs out for the others (two thirds of it, as client-go's
    /// 10 s renew deadline of a 15 s lease).
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration.mul_f64(2.0 / 3.0)
    }

    /// After a failed renewal, the next try comes this soon.
    pub fn retry_every(&self) -> Duration {
        (self.renew_every / 4).max(Duration::from_millis(100))
    }

    /// Gives the lease up if this candidate holds it: the holder emptied,
    /// a one-second duration (client-go's release). Ok(false) when another
    /// holds it (nothing to release).
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let Some(lease) = self.api.get_opt(&self.name).await? else { return Ok(false) };
        let s = lease.spec.clone().unwrap_or_default();
        if s.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let now = micro(Utc::now());
        let mut next = lease.clone();
        next.spec = Some(
            serde_json::from_value(json!({"leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
                "leaseTransitions": s.lease_transitions.unwrap_or(0)}))
            .expect("lease spec"),
        );
        self.api.replace(&self.name, &PostParams::default(), &next).await?;
        Ok(true)
    }
}

/// What a leader does after a round that did not renew (an error, a
/// timeout, a conflict): keep leading and try again soon while within the
/// renew deadline; step down past it. A round that saw another holder is
/// not this: that leader has lost.
pub fn keep_leading(lock: &LeaseLock, since_renewed: Duration) -> bool {
    since_renewed < lock.renew_deadline()
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

/// Resolves when `stop` turns true (never, when its sender is gone).
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        futures::future::pending::<()>().await;
    }
}

/// Runs `work` only while this candidate leads; stops it when leadership
/// is lost, restarts it when regained. `leading` mirrors the state. Ends
/// when `stop` turns true: the work stopped first, then the lease released.
pub async fn run_elected<F, Fut>(
    lock: LeaseLock,
    leading: Arc<AtomicBool>,
    work: F,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut task: Option<tokio::task::JoinHandle<()>> = None;
    // A problem is said once, in one line, until it changes or goes away.
    let mut said: Option<String> = None;
    // When the lease this replica holds was last written (the start of the
    // round that wrote it: its renewTime is no earlier).
    let mut renewed: Option<std::time::Instant> = None;
    // The Lease as this replica last wrote it, while it holds it.
    let mut held: Option<Lease> = None;
    loop {
        // A leader whose work has ended (it gave up: a pass that panicked
        // or overran) must not keep the Lease: it is released, so a
        // standby leads, rather than renewed for a leader doing nothing.
        if task.as_ref().is_some_and(|t| t.is_finished()) {
            tracing::error!(identity = lock.identity, "the leader's work has ended; giving up the Lease");
            break;
        }
        let started = std::time::Instant::now();
        // A round is bounded: a leader's by what is left of its deadline,
        // a standby's by a renewal period.
        let limit = match (task.is_some(), renewed) {
            (true, Some(at)) => lock.renew_deadline().saturating_sub(at.elapsed()).max(Duration::from_millis(100)),
            _ => lock.renew_every.max(Duration::from_secs(1)),
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(limit, lock.round_from(held.as_ref())) => r,
            _ = stopped(&mut stop) => break,
        };
        let round = match outcome {
            Ok(Ok((r, written))) => {
                held = written;
                if said.take().is_some() {
                    tracing::info!("leader election: the Lease {} can be read and written again", lock.name);
                }
                Some(r)
            }
            Ok(Err(e)) => {
                let why = election_problem(&lock, &e);
                if said.as_deref() != Some(why.as_str()) {
                    tracing::warn!("leader election: {why}");
                    said = Some(why);
                }
                None
            }
            Err(_) => {
                tracing::debug!(after = ?limit, "leader election: a round timed out");
                None
            }
        };
        let won = match round {
            Some(Round::Held) => {
                let took = started.elapsed();
                if took > lock.renew_every {
                    tracing::warn!(
                        ?took,
                        "leader election: a renewal took longer than the renewal period (a slow API server)"
                    );
                } else {
                    tracing::debug!(?took, "leader election: renewed");
                }
                renewed = Some(started);
                true
            }
            // Another holds it for certain.
            Some(Round::HeldByAnother(Some(_))) => false,
            // Not known this round (a conflict, an error, a timeout): a
            // leader keeps leading within its deadline.
            Some(Round::HeldByAnother(None)) | None => {
                task.is_some() && renewed.is_some_and(|at| keep_leading(&lock, at.elapsed()))
            }
        };
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
                renewed = None;
            }
            _ => {}
        }
        leading.store(won, Ordering::SeqCst);
        let wait = match round {
            // Renewals every renew_every from the start of the last one.
            Some(Round::Held) => lock.renew_every.saturating_sub(started.elapsed()),
            Some(r) => next_round(lock.renew_every, r, Utc::now()),
            None if won => lock.retry_every(),
            None => lock.renew_every,
        };
        // A leader never sleeps past its deadline.
        let wait = match (won, renewed) {
            (true, Some(at)) => wait.min(lock.renew_deadline().saturating_sub(at.elapsed())),
            _ => wait,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stopped(&mut stop) => break,
        }
    }
    // Stopping: the work first, then the lease, so no two lead at once.
    if let Some(t) = task.take() {
        t.abort();
        let _ = t.await;
    }
    leading.store(false, Ordering::SeqCst);
    match tokio::time::timeout(lock.renew_deadline(), lock.release()).await {
        Ok(Ok(true)) => tracing::info!(identity = lock.identity, "released the Lease {}", lock.name),
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!("could not release the Lease {}: {}", lock.name, election_problem(&lock, &e)),
        Err(_) => tracing::warn!("could not release the Lease {}: the API server did not answer", lock.name),
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
