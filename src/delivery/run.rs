//! Carrying a delivery out (effects), on the fleet rollout's engine: the
//! record, its lock, approvals, windows and resumption are
//! `fleet::run`'s; this adds what a delivery needs around it — the line
//! (stopped: nothing moves; a hotfix goes past it, audited), freeze
//! windows, versions marked bad refused before the first write, and the
//! automatic rollback: a wave that fails (its analysis, its Ready) or a
//! firing alert takes every touched cluster back to what it ran at once,
//! and marks the version bad. Where a delivery stands is read here too
//! (`observe`, for `status` to show), and a run's events put in words.
//! A run without `wait` ends at the first wait of any kind: the engine's
//! own (soaks, windows) and those inside its members' calls (a revision
//! coming up Ready, the bake, a measurement's interval: `waits`).
//!
//! ```text
//! DeliverySpec ─▶ Line (stopped? bad?) ─▶ fleet::run::apply_held(Members, Freeze) ─┬─▶ finished / waiting
//!                                          │ every member call parked (no wait) ───┴─▶ waiting
//!                                          ▲ alert (webhook) · line stopped ───────┴─▶ revert_held(together) + Line::mark_bad
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use tokio::sync::watch;

use super::book::{self, Audit, Bad, Line};
use super::members::Members;
use super::prometheus::Prometheus;
use super::spec::DeliverySpec;
use super::status::Status;
use super::waits::{Parked, Waits};
use crate::ami::window::Window;
use crate::fleet::rollout::{decide, FleetRollout, Snapshot, Windows};
use crate::fleet::run::{self as engine, Book, Clock, Note, Outcome};
use crate::fleet::{FleetSpec, Member};
use crate::state::lock::Lock;
use crate::state::{S3Access, Store};

/// Maintenance windows, and freeze windows no wave starts in (a hotfix ignores the freeze).
pub struct Freeze<'a> {
    pub waves: &'a FleetSpec,
    pub members: &'a [Member],
    pub freeze: &'a [Window],
    pub hotfix: bool,
}

/// The freeze window holding deliveries at `now`, and when it ends.
pub fn frozen(freeze: &[Window], now: DateTime<Utc>) -> Option<(String, DateTime<Utc>)> {
    freeze.iter().filter_map(|w| w.closes(now).map(|end| (w.to_string(), end))).max_by_key(|(_, end)| *end)
}

impl Windows for Freeze<'_> {
    fn open(&self, cluster: &str, now: DateTime<Utc>) -> Result<(), Option<DateTime<Utc>>> {
        if !self.hotfix {
            if let Some((_, end)) = frozen(self.freeze, now) {
                return Err(Some(end));
            }
        }
        (self.waves, self.members).open(cluster, now)
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Sleep through every wait: a revision coming up Ready, a bake, a
    /// measurement's interval, a soak, a window (else stop at the first,
    /// and say what it waits for and until when).
    pub wait: bool,
    /// Go past a stopped line and freeze windows, for this reason (audited).
    pub hotfix: Option<String>,
    /// How often a roll looks at the workload, and the line at its stop.
    pub poll: Duration,
    /// Who acts, as the store authenticated them (the AWS principal for an
    /// S3 store); the login name when none was given (a local store).
    pub by: Option<String>,
}

/// Who acts, for the delivery's audit and records: the principal AWS
/// authenticated (its ARN) for an S3 store, with the login it ran as; a
/// local store's only knows the login, and says so.
pub async fn principal(aws: Option<&crate::cloud::aws::Aws>) -> String {
    let (who, host) = crate::state::whoami();
    match aws {
        Some(a) => match a.caller_identity().await {
            Some(arn) => format!("{arn} (as {who}@{host})"),
            None => format!("{who}@{host} (the store's credentials named no principal)"),
        },
        None => format!("{who}@{host} (a local store: not authenticated)"),
    }
}

/// The AWS connection a store URL needs (S3, through the usual AWS
/// environment), none for a local one.
pub async fn aws_for(url: &str) -> Result<Option<crate::cloud::aws::Aws>> {
    if !url.starts_with("s3://") {
        return Ok(None);
    }
    let opts = crate::cloud::aws::AwsOptions::from_env(crate::cloud::aws::Target::Aws, None)?;
    Ok(Some(crate::cloud::aws::Aws::connect(&opts).await?))
}

/// The deliveries' line kept at `url` (the gateway's `--delivery-store`).
pub async fn line_at(url: &str) -> Result<super::book::Line> {
    let aws = aws_for(url).await?;
    super::book::Line::open(url, aws.as_ref().map(|a| a as &dyn crate::state::S3Access)).await
}

/// The line kept at `url`, and who acts on it ([`principal`]).
pub async fn line_as(url: &str) -> Result<(Line, String)> {
    let aws = aws_for(url).await?;
    let by = principal(aws.as_ref()).await;
    let line = Line::open(url, aws.as_ref().map(|a| a as &dyn S3Access)).await?;
    Ok((line, by))
}

impl Default for Options {
    fn default() -> Self {
        Options { wait: true, hotfix: None, poll: Duration::from_millis(500), by: None }
    }
}

/// How a run of a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Finished,
    Waiting {
        until: Option<DateTime<Utc>>,
        why: BTreeMap<String, String>,
    },
    /// Every touched cluster was taken back; the version is marked bad.
    RolledBack {
        reason: String,
    },
    /// The line was stopped mid-run: the record stays, the next run picks it up.
    Stopped {
        reason: String,
    },
}

/// What a run says as it goes.
#[derive(Debug, Clone)]
pub enum Event {
    Engine(Note),
    Hotfix {
        reason: String,
    },
    RollingBack {
        reason: String,
        clusters: Vec<String>,
    },
    MarkedBad {
        image: String,
    },
    /// The image is a signed build of a landed ref (by this key).
    Trusted {
        image: String,
        key: String,
    },
    /// Not trusted, moved anyway: the policy only warns.
    Untrusted {
        image: String,
        why: String,
    },
}

impl Event {
    /// The line `pinfleet delivery` prints for it: the engine's words, as a
    /// delivery names its steps.
    pub fn text(&self) -> String {
        match self {
            Event::Engine(n) => {
                let t = crate::fleet::text::fleet_note(n)
                    .replace("end-to-end gate on", "bake and analysis on")
                    .replace("; soaking until", "; its bake starts (soak until")
                    .replace("rollout #", "delivery #");
                let t = if t.contains("(soak until") { format!("{t})") } else { t };
                format!("delivery: {}", t.strip_prefix("fleet: ").unwrap_or(&t))
            }
            Event::Hotfix { reason } => {
                format!("delivery: HOTFIX past the line and freeze windows (audited): {reason}")
            }
            Event::RollingBack { reason, clusters } => {
                format!("delivery: ROLLING BACK {} at once: {reason}", clusters.join(", "))
            }
            Event::MarkedBad { image } => format!("delivery: marked bad: {image} (the gateway refuses it from now on)"),
            Event::Trusted { image, key } => format!("delivery: {image}: signed ({key}), built from a landed ref"),
            Event::Untrusted { image, why } => {
                format!("delivery: WARNING {image} is not trusted ({why}); moved anyway: the policy warns")
            }
        }
    }
}

pub struct Opened {
    pub line: Line,
    pub book: Book,
}

/// The delivery's store: its folder and the line's.
pub async fn open(spec: &DeliverySpec, aws: Option<&dyn S3Access>) -> Result<Opened> {
    let line = Line::open(&spec.state_store, aws).await?;
    let (ns, name) = (&spec.workload.namespace, &spec.workload.name);
    let store = Store::open(&spec.state_store, &book::folder(ns, name), aws).await?;
    // An old-style folder is not read: its name is shared by workloads
    // whose namespace and name join alike (red/x-web, red-x/web), so it may
    // hold another team's record. Its owner moves it, once.
    if store.list("").await?.is_empty() {
        let legacy = store.sibling(&book::legacy_folder(ns, name));
        if !legacy.list("").await?.is_empty() {
            bail!(
                "deliveries of {} are in the old folder {} (its name is ambiguous between workloads, so it is not read): \
                 if they are this workload's, move them to {}",
                spec.workload,
                legacy.describe(""),
                store.describe("")
            );
        }
    }
    Ok(Opened { line, book: Book { store } })
}

/// The delivery's store through the AWS connection its URL needs (kept:
/// who acts is asked of it).
pub async fn open_with_aws(spec: &DeliverySpec) -> Result<(Option<crate::cloud::aws::Aws>, Opened)> {
    let aws = aws_for(&spec.state_store).await?;
    let opened = open(spec, aws.as_ref().map(|a| a as &dyn S3Access)).await?;
    Ok((aws, opened))
}

/// Approves `stage` of the latest delivery: a wave that needs approval,
/// or `WAVE.gate` for a wave its inconclusive analysis holds. Its number.
pub async fn approve(
    spec: &DeliverySpec,
    opened: &Opened,
    aws: Option<&crate::cloud::aws::Aws>,
    stage: &str,
) -> Result<u64> {
    let r = opened.book.latest().await?.context(format!("{} has no delivery yet", spec.workload))?;
    match stage.strip_suffix(".gate") {
        Some(wave) => {
            let s = r
                .stages
                .iter()
                .find(|s| s.name == wave)
                .context(format!("delivery #{} has no wave {wave}", r.number))?;
            if s.held.is_none() || r.is_finished() {
                bail!("wave {wave} of delivery #{} is not held by an inconclusive analysis", r.number);
            }
        }
        None => r.approvable(stage).map_err(anyhow::Error::msg)?,
    }
    let by = principal(aws).await;
    opened.book.approve(r.number, stage, &by, Utc::now()).await?;
    Ok(r.number)
}

/// Where the delivery stands at `now`, as `pinfleet delivery status`
/// shows it: its latest record, the analyses, the line, the versions marked
/// bad among those it moves to, why a cluster waits, the freeze window
/// holding it and the error budget left.
pub async fn observe(spec: &DeliverySpec, opened: &Opened, now: DateTime<Utc>) -> Result<Status> {
    let r = opened
        .book
        .latest()
        .await?
        .context(format!("{} has no delivery yet (`pinfleet delivery apply`)", spec.workload))?;
    let analyses = book::analyses(&opened.book.store, r.number).await?;
    let digests: Vec<String> = r
        .clusters()
        .flat_map(|(_, c)| c.to.images.values().filter_map(|i| book::digest_of(i).map(str::to_string)))
        .collect();
    let team = spec.workload.namespace.clone();
    let bad =
        opened.line.bad().await?.into_values().filter(|b| digests.contains(&b.digest) && b.team() == team).collect();
    let approved = opened.book.approvals(r.number).await?;
    let members = spec.members();
    let windows = Freeze { waves: &spec.waves, members: &members, freeze: &spec.freeze, hotfix: false };
    let mut s = Status::new(r, analyses, opened.line.stopped().await?, bad, &windows, &approved, now);
    s.judged_by = Some(spec.analysis.clone());
    if let Some(rec) = book::slo(&opened.book.store).await? {
        s.budget = Some(book::budget_text(&rec, &spec.workload.namespace, &spec.workload.name).await);
    }
    s.frozen = frozen(&spec.freeze, now)
        .map(|(w, end)| format!("freeze window {w} until {}", end.format("%Y-%m-%d %H:%M UTC")));
    Ok(s)
}

/// Why the delivery must not move now, before anything is written: the
/// line is stopped (without a hotfix) or the version is marked bad.
pub async fn refusal(spec: &DeliverySpec, line: &Line, hotfix: bool) -> Result<Option<String>> {
    if !hotfix {
        if let Some(s) = line.stopped().await? {
            return Ok(Some(format!(
                "the line is stopped by {} since {}: {}; nothing is delivered until `pinfleet delivery line resume`, or pass --hotfix REASON (audited)",
                s.by,
                s.at.format("%Y-%m-%d %H:%M UTC"),
                s.reason
            )));
        }
    }
    let bad = line.bad().await?;
    for (container, image) in &spec.images {
        if let Some(b) = book::digest_of(image).and_then(|d| book::mark_of(&bad, d, &spec.workload.namespace)) {
            return Ok(Some(format!(
                "images.{container}: {image} is marked bad (delivery #{} of {} {}: {}); deliver a fixed build",
                b.delivery, b.workload, b.version, b.reason
            )));
        }
    }
    Ok(None)
}

/// With a trust policy: every image must be a signed build of a landed
/// ref (the gateway's check, against the registry); the first one that is
/// not, with why. In warn mode an untrusted image is said, not refused.
pub async fn untrusted(spec: &DeliverySpec, on: &(dyn Fn(Event) + Sync)) -> Result<Option<String>> {
    let Some(path) = &spec.trust_policy else { return Ok(None) };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let policy: crate::provenance::TrustPolicy =
        serde_saphyr::from_str(&text).map_err(|e| anyhow::anyhow!("{}: not a trust policy: {e}", path.display()))?;
    for (container, image) in &spec.images {
        let host = image.split('/').next().unwrap_or_default().to_string();
        // A registry on loopback speaks plain HTTP (a local mirror's, a test's).
        let plain =
            if host.starts_with("127.0.0.1:") || host.starts_with("localhost:") { vec![host.clone()] } else { vec![] };
        let checked = crate::registry::Registries::new(vec![host], plain).check(image, &policy).await;
        match (&checked.verdict.refused, checked.verdict.admits(policy.mode)) {
            (Some(why), false) => return Ok(Some(format!("images.{container}: {image}: {why}"))),
            (Some(why), true) => on(Event::Untrusted { image: image.clone(), why: why.clone() }),
            (None, _) => {
                on(Event::Trusted { image: image.clone(), key: checked.verdict.key.clone().unwrap_or_default() })
            }
        }
    }
    Ok(None)
}

/// Connects to every member of the delivery.
pub async fn connect(spec: &DeliverySpec) -> Result<BTreeMap<String, kube::Client>> {
    let mut out = BTreeMap::new();
    for (name, c) in &spec.clusters {
        let client = crate::kube::apply::connect(&c.kubeconfig)
            .await
            .with_context(|| format!("clusters.{name}: connecting with {}", c.kubeconfig.display()))?;
        out.insert(name.clone(), client);
    }
    Ok(out)
}

/// A new record for the delivery (every cluster moves to the file's images).
pub fn record(spec: &DeliverySpec, number: u64, by: &str, now: DateTime<Utc>) -> FleetRollout {
    let members = spec.members();
    let plan = crate::fleet::plan(&spec.waves, &members, &spec.target(), &BTreeMap::new(), now);
    let to: BTreeMap<String, Snapshot> = members
        .iter()
        .map(|m| (m.name.clone(), Snapshot { images: spec.images.clone(), ..Default::default() }))
        .collect();
    FleetRollout::new(number, &plan, &spec.waves, &to, by, now)
}

/// Runs the delivery under its lock until it finishes, waits, is rolled
/// back or is stopped with the line. `alert`: a firing alert's reason.
pub async fn apply(
    spec: &DeliverySpec,
    opened: &Opened,
    clients: BTreeMap<String, kube::Client>,
    opts: &Options,
    alert: watch::Receiver<Option<String>>,
    command: &str,
    on: &(dyn Fn(Event) + Sync),
) -> Result<(FleetRollout, Ended)> {
    if let Some(why) = refusal(spec, &opened.line, opts.hotfix.is_some()).await? {
        bail!("{}: {why}", spec.target());
    }
    if let Some(why) = untrusted(spec, on).await? {
        bail!("{}: not a trusted build, nothing moved: {why}", spec.target());
    }
    let (line, book) = (&opened.line, &opened.book);
    // Boxed: the engine's future is deep, and a caller's stack may be a test thread's.
    Lock::with(&book.store, command, Box::pin(async {
        let now = Utc::now();
        let by = opts.by.clone().unwrap_or_else(|| crate::state::whoami().0);
        if let Some(r) = book.latest().await?.filter(|r| !r.is_finished() && r.target != spec.target()) {
            bail!(
                "delivery #{} ({}) is in progress; finish it (`pinfleet delivery apply` with its file) or roll it back (`pinfleet delivery rollback`) before starting {}",
                r.number,
                r.target.to_string().trim_start_matches("workload "),
                spec.version
            );
        }
        let record = match book.in_progress(&spec.target()).await? {
            Some(r) => r,
            None => {
                let number = book.retire_latest().await?;
                record(spec, number, &by, now)
            }
        };
        if let (Some(slo), Some(prometheus)) = (&spec.slo, &spec.prometheus) {
            let rec = book::SloRecord { slo: slo.clone(), prometheus: prometheus.clone() };
            book::save_slo(&book.store, &rec).await?;
        }
        if let Some(reason) = &opts.hotfix {
            line.audit(&Audit { at: now, by: by.clone(), act: "hotfix".into(), what: format!("{} (delivery #{})", spec.target(), record.number), reason: reason.clone() })
                .await?;
            on(Event::Hotfix { reason: reason.clone() });
        }
        let prometheus = spec.prometheus.as_deref().map(Prometheus::new).transpose()?;
        let members = Members {
            spec,
            clients,
            prometheus,
            store: book.store.clone(),
            number: record.number,
            alert: alert.clone(),
            poll: opts.poll,
            waits: Waits::new(!opts.wait),
        };
        let ms = spec.members();
        let windows = Freeze { waves: &spec.waves, members: &ms, freeze: &spec.freeze, hotfix: opts.hotfix.is_some() };
        let engine_opts = engine::Options { wait: opts.wait, lock_retry: Duration::from_secs(60) };
        let note = |n: Note| on(Event::Engine(n));
        let number = record.number;
        let ran = tokio::select! {
            r = Box::pin(engine::apply_held(&members, book, record, &windows, Clock::wall(), engine_opts, &note)) => Some(r?),
            _ = fired(alert.clone()) => None,
            s = line_stopped(line, opts.poll, opts.hotfix.is_some()) => {
                let r = book.latest().await?.filter(|r| r.number == number).context("the delivery's record is gone")?;
                return Ok((r, Ended::Stopped { reason: s }));
            }
            // Without `wait`: every member call in flight is at a wait (the
            // engine's own waits end it above). What they did is stored.
            parked = members.waits.settled(opts.poll), if !opts.wait => {
                let r = book.latest().await?.filter(|r| r.number == number).context("the delivery's record is gone")?;
                let approved = book.approvals(number).await?;
                let (until, why) = waiting(&r, parked, &windows, &approved, Utc::now());
                on(Event::Engine(Note::Waiting { until, why: why.clone() }));
                return Ok((r, Ended::Waiting { until, why }));
            }
        };
        let (r, reason) = match ran {
            Some((r, Outcome::Finished)) => return Ok((r, Ended::Finished)),
            Some((r, Outcome::Waiting { until, why })) => {
                let why = why.into_iter().map(|(k, v)| (k, v.to_string())).collect();
                return Ok((r, Ended::Waiting { until, why }));
            }
            // Through every wave with clusters failed within a budget: a
            // delivery takes a failed cluster back like a failed wave.
            Some((r, Outcome::Halted(reason) | Outcome::FinishedWithFailures(reason))) => {
                // The halt names the clusters; the reason is what each of them failed on.
                use crate::fleet::rollout::ClusterState;
                let why: Vec<String> = r
                    .clusters()
                    .filter_map(|(_, c)| match &c.state {
                        ClusterState::Failed(e) => Some(e.strip_prefix("stage gate: ").unwrap_or(e).to_string()),
                        _ => None,
                    })
                    .collect();
                let reason = if why.is_empty() { reason } else { why.join("; ") };
                (r, reason)
            }
            None => {
                let reason = alert.borrow().clone().unwrap_or_default();
                let r = book.latest().await?.filter(|r| r.number == number).context("the delivery's record is gone")?;
                (r, reason)
            }
        };
        // A rollback runs to its end, with or without `wait`.
        members.waits.sleep_through();
        Box::pin(rollback(spec, line, book, &members, r, &reason, on)).await
    }))
    .await
}

/// Where a run parked at its members' waits stands: until the earliest of
/// them, what each parked cluster waits for, and why every other one does.
fn waiting(
    r: &FleetRollout,
    parked: BTreeMap<String, Parked>,
    windows: &dyn Windows,
    approved: &BTreeSet<String>,
    now: DateTime<Utc>,
) -> (Option<DateTime<Utc>>, BTreeMap<String, String>) {
    let until = parked.values().map(|p| p.until).min();
    let mut why: BTreeMap<String, String> =
        decide(r, windows, approved, now).why.into_iter().map(|(k, v)| (k, v.to_string())).collect();
    why.extend(parked.into_iter().map(|(c, p)| (c, p.what)));
    (until, why)
}

async fn fired(mut alert: watch::Receiver<Option<String>>) {
    loop {
        if alert.borrow().is_some() {
            return;
        }
        if alert.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn line_stopped(line: &Line, poll: Duration, hotfix: bool) -> String {
    if hotfix {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(poll.max(Duration::from_millis(200))).await;
        if let Ok(Some(s)) = line.stopped().await {
            return format!("the line was stopped by {}: {}", s.by, s.reason);
        }
    }
}

/// Takes every touched cluster back at once and marks the version bad.
async fn rollback(
    spec: &DeliverySpec,
    line: &Line,
    book: &Book,
    members: &Members<'_>,
    r: FleetRollout,
    reason: &str,
    on: &(dyn Fn(Event) + Sync),
) -> Result<(FleetRollout, Ended)> {
    let clusters: Vec<String> = r.clusters().filter(|(_, c)| c.touched()).map(|(_, c)| c.name.clone()).collect();
    on(Event::RollingBack { reason: reason.to_string(), clusters });
    // The version is bad before the clusters are back: the gateway refuses it from now on.
    mark_bad(spec, line, r.number, reason, on).await?;
    let note = |n: Note| on(Event::Engine(n));
    let r = engine::revert_held(members, book, r, Clock::wall(), true, &note).await?;
    Ok((r, Ended::RolledBack { reason: reason.to_string() }))
}

pub async fn mark_bad(
    spec: &DeliverySpec,
    line: &Line,
    number: u64,
    reason: &str,
    on: &(dyn Fn(Event) + Sync),
) -> Result<()> {
    for image in spec.images.values() {
        let Some(digest) = book::digest_of(image) else { continue };
        line.mark_bad(&Bad {
            image: image.clone(),
            digest: digest.to_string(),
            workload: spec.workload.to_string(),
            version: spec.version.clone(),
            delivery: number,
            reason: reason.to_string(),
            at: Utc::now(),
        })
        .await?;
        on(Event::MarkedBad { image: image.clone() });
    }
    Ok(())
}

/// Takes the delivery's touched clusters back by hand (all at once);
/// `bad`: mark the version bad for this reason too.
pub async fn rollback_by_hand(
    spec: &DeliverySpec,
    opened: &Opened,
    clients: BTreeMap<String, kube::Client>,
    bad: Option<&str>,
    command: &str,
    on: &(dyn Fn(Event) + Sync),
) -> Result<FleetRollout> {
    let (line, book) = (&opened.line, &opened.book);
    let Some(r) = book.latest().await? else { bail!("{} has no delivery to roll back", spec.workload) };
    if r.target != spec.target() {
        bail!("the latest delivery of {} is #{} ({}), not {}", spec.workload, r.number, r.target, spec.target());
    }
    let (_tx, alert) = watch::channel(None);
    let members = Members {
        spec,
        clients,
        prometheus: None,
        store: book.store.clone(),
        number: r.number,
        alert,
        poll: Duration::from_millis(500),
        waits: Waits::new(false),
    };
    Lock::with(&book.store, command, async {
        if let Some(reason) = bad {
            mark_bad(spec, line, r.number, reason, on).await?;
        }
        let note = |n: Note| on(Event::Engine(n));
        engine::revert_held(&members, book, r, Clock::wall(), true, &note).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_freeze_holds_every_wave_until_it_ends_and_a_hotfix_goes_past_it() {
        let waves = FleetSpec::parse("stages:\n  - {name: all, selector: \"\"}\n").unwrap();
        let members = [Member { name: "north".into(), labels: Default::default(), region: "r".into() }];
        let freeze: Vec<Window> = vec!["Fri 16:00-23:59 UTC".parse().unwrap(), "Fri 20:00-02:00 UTC".parse().unwrap()];
        // Friday 2026-11-27 21:00 UTC: both hold; the later end counts.
        let friday = Utc.with_ymd_and_hms(2026, 11, 27, 21, 0, 0).unwrap();
        let f = Freeze { waves: &waves, members: &members, freeze: &freeze, hotfix: false };
        let end = Utc.with_ymd_and_hms(2026, 11, 28, 2, 0, 0).unwrap();
        assert_eq!(f.open("north", friday), Err(Some(end)));
        assert_eq!(frozen(&freeze, friday).unwrap().0, "Fri 20:00-02:00 UTC");
        assert_eq!(f.open("north", end), Ok(()));
        let hot = Freeze { hotfix: true, ..f };
        assert_eq!(hot.open("north", friday), Ok(()));
    }

    #[test]
    fn a_run_parked_at_the_bake_says_until_when_and_why_the_rest_waits() {
        use crate::fleet::rollout::ClusterState;
        let spec = DeliverySpec::parse(crate::delivery::spec::tests::FILE, std::path::Path::new("/d")).unwrap();
        // A Wednesday: no freeze window holds.
        let t0 = Utc.with_ymd_and_hms(2026, 11, 25, 6, 0, 0).unwrap();
        let mut r = record(&spec, 1, "dev", t0);
        r.cluster_mut("north").unwrap().state = ClusterState::Done;
        r.stages[0].rolled_at = Some(t0);
        let bake = Parked { until: t0 + chrono::Duration::minutes(5), what: "baking v3 until 06:05:00 UTC".into() };
        let parked: BTreeMap<String, Parked> = [("north".to_string(), bake.clone())].into();
        let (until, why) = waiting(&r, parked, &crate::fleet::rollout::Always, &BTreeSet::new(), t0);
        assert_eq!(until, Some(bake.until));
        assert_eq!(why["north"], bake.what);
        assert!(why["south"].contains("canary"), "the rest waits for the canary's wave: {why:?}");
    }
}
