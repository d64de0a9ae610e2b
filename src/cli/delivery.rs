//! `pinfleet delivery`: a new version of a placed workload across its
//! member clusters in waves (apply, status, approve, rollback), the line
//! (stop, resume), the versions marked bad, and the workload's SLO rules.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};

use super::GlobalArgs;
use crate::delivery::run::{self, Ended, Event};
use crate::delivery::{book, status, DeliverySpec};
use crate::output::Format;

#[derive(Debug, Args)]
pub struct DeliveryArgs {
    #[command(subcommand)]
    pub command: DeliveryCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeliveryCommand {
    /// Start the file's delivery, or pick it up where the last run stopped.
    Apply(ApplyArgs),
    /// Where the delivery stands: each wave, its clusters, the analysis' numbers, why it waits.
    Status(FileArgs),
    /// Let a wave that needs approval start, or a wave whose analysis was inconclusive go on (WAVE.gate).
    Approve(ApproveArgs),
    /// Take every cluster the delivery touched back to what it ran before, at once.
    Rollback(RollbackArgs),
    /// Stop or resume the line: while stopped no delivery moves (a --hotfix does, audited).
    Line(LineArgs),
    /// The versions marked bad (the gateway refuses their images).
    Bad(StoreArgs),
    /// The workload's SLO as Prometheus rules (multi-window, multi-burn-rate alerts).
    Rules(FileArgs),
}

#[derive(Debug, Args)]
pub struct FileArgs {
    /// The delivery file (deliveries/*.yaml).
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    pub file: PathBuf,
    /// Stop at the first wait (the new revision coming up Ready, a bake, a
    /// measurement's interval, a soak, a window) and say when to come back.
    #[arg(long)]
    pub no_wait: bool,
    /// Go past a stopped line and freeze windows, for this reason (audited).
    #[arg(long, value_name = "REASON")]
    pub hotfix: Option<String>,
    /// Serve Alertmanager's webhook here while the delivery runs (POST /alerts).
    #[arg(long, requires = "alerts_token_file")]
    pub alerts_listen: Option<String>,
    /// The bearer token Alertmanager sends (its http_config.authorization).
    #[arg(long)]
    pub alerts_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    pub file: PathBuf,
    /// A wave's name, or WAVE.gate for a wave whose analysis was inconclusive.
    pub stage: String,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    pub file: PathBuf,
    /// Mark the version bad too, for this reason.
    #[arg(long, value_name = "REASON")]
    pub bad: Option<String>,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The deliveries' state store (s3://bucket/prefix or file://dir).
    #[arg(long)]
    pub store: String,
}

#[derive(Debug, Args)]
pub struct LineArgs {
    #[command(subcommand)]
    pub command: LineCommand,
}

#[derive(Debug, Subcommand)]
pub enum LineCommand {
    /// Stop every delivery on the store.
    Stop {
        #[arg(long)]
        store: String,
        #[arg(long)]
        reason: String,
    },
    /// Let deliveries move again.
    Resume {
        #[arg(long)]
        store: String,
    },
}

fn say(g: &GlobalArgs, e: &Event) {
    if let (Format::Json, Event::Engine(n)) = (&g.output, e) {
        let mut v = serde_json::to_value(n).unwrap_or_default();
        v["type"] = serde_json::json!("note");
        let _ = writeln!(anstream::stdout(), "{v}");
        return;
    }
    let _ = writeln!(anstream::stderr(), "{}", e.text());
}

pub async fn run(g: &GlobalArgs, a: DeliveryArgs) -> Result<ExitCode> {
    match a.command {
        DeliveryCommand::Apply(a) => apply(g, a).await,
        DeliveryCommand::Status(a) => show(g, &a.file).await,
        DeliveryCommand::Approve(a) => approve(&a).await,
        DeliveryCommand::Rollback(a) => rollback(g, &a).await,
        DeliveryCommand::Line(a) => line(a).await,
        DeliveryCommand::Bad(a) => bad(g, &a.store).await,
        DeliveryCommand::Rules(a) => rules(&a.file),
    }
}

async fn apply(g: &GlobalArgs, a: ApplyArgs) -> Result<ExitCode> {
    let spec = DeliverySpec::load(&a.file)?;
    let (aws, opened) = run::open_with_aws(&spec).await?;
    let clients = run::connect(&spec).await?;
    let (tx, alert) = tokio::sync::watch::channel(None);
    let receiver = match (&a.alerts_listen, &a.alerts_token_file) {
        (Some(listen), Some(file)) => {
            // The receiver's refusals are audited on stderr, beside the
            // delivery's own lines (rate-limited: a flood writes a count).
            let audit: std::sync::Arc<dyn crate::edge::Audit> =
                std::sync::Arc::new(crate::gateway::audit::AuditLog::stderr());
            let (addr, task) = crate::delivery::alerts::serve_for(&spec, listen, file, tx, Some(audit)).await?;
            writeln!(anstream::stderr(), "delivery: Alertmanager's webhook at http://{addr}/alerts")?;
            Some(task)
        }
        _ => None,
    };
    let opts = run::Options {
        wait: !a.no_wait,
        hotfix: a.hotfix.clone(),
        by: Some(run::principal(aws.as_ref()).await),
        ..Default::default()
    };
    let command = format!("pinfleet delivery apply {}", a.file.display());
    let ended = run::apply(&spec, &opened, clients, &opts, alert, &command, &|e| say(g, &e)).await;
    if let Some(t) = receiver {
        t.abort();
    }
    let (r, ended) = ended?;
    let mut err = anstream::stderr();
    match ended {
        Ended::Finished => {
            writeln!(err, "delivery #{} of {}: every wave passed", r.number, spec.target())?;
            Ok(ExitCode::SUCCESS)
        }
        Ended::Waiting { until, why } => {
            let when = until.map(|t| t.format(" until %Y-%m-%d %H:%M:%S UTC").to_string()).unwrap_or_default();
            writeln!(err, "delivery #{} waits{when}:", r.number)?;
            if let (None, Some((w, end))) = (&opts.hotfix, run::frozen(&spec.freeze, Utc::now())) {
                writeln!(
                    err,
                    "  frozen: freeze window {w} until {} (--hotfix REASON goes past it, audited)",
                    end.format("%Y-%m-%d %H:%M UTC")
                )?;
            }
            for (c, w) in why {
                writeln!(err, "  {c}: {w}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Ended::RolledBack { reason } => {
            writeln!(err, "delivery #{} of {} ROLLED BACK: {reason}", r.number, spec.target())?;
            Ok(ExitCode::from(1))
        }
        Ended::Stopped { reason } => {
            writeln!(
                err,
                "delivery #{} stopped: {reason}; the next `apply` after `delivery line resume` picks it up",
                r.number
            )?;
            Ok(ExitCode::from(1))
        }
    }
}

async fn show(g: &GlobalArgs, file: &std::path::Path) -> Result<ExitCode> {
    let spec = DeliverySpec::load(file)?;
    let (_, opened) = run::open_with_aws(&spec).await?;
    let s = run::observe(&spec, &opened, Utc::now()).await?;
    if g.output == Format::Json {
        writeln!(anstream::stdout(), "{}", crate::output::json_text(&s)?)?;
    } else {
        write!(anstream::stdout(), "{}", status::text(&s))?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn approve(a: &ApproveArgs) -> Result<ExitCode> {
    let spec = DeliverySpec::load(&a.file)?;
    let (aws, opened) = run::open_with_aws(&spec).await?;
    let number = run::approve(&spec, &opened, aws.as_ref(), &a.stage).await?;
    writeln!(anstream::stderr(), "approved {} of delivery #{number}; the next `apply` goes on", a.stage)?;
    Ok(ExitCode::SUCCESS)
}

async fn rollback(g: &GlobalArgs, a: &RollbackArgs) -> Result<ExitCode> {
    let spec = DeliverySpec::load(&a.file)?;
    let (_, opened) = run::open_with_aws(&spec).await?;
    let clients = run::connect(&spec).await?;
    let command = format!("pinfleet delivery rollback {}", a.file.display());
    let r = run::rollback_by_hand(&spec, &opened, clients, a.bad.as_deref(), &command, &|e| say(g, &e)).await?;
    writeln!(anstream::stderr(), "delivery #{} of {}: {}", r.number, spec.target(), r.state)?;
    Ok(ExitCode::SUCCESS)
}

async fn line(a: LineArgs) -> Result<ExitCode> {
    let mut err = anstream::stderr();
    match a.command {
        LineCommand::Stop { store, reason } => {
            let (l, by) = run::line_as(&store).await?;
            l.stop(&book::Stopped { by, at: Utc::now(), reason: reason.clone() }).await?;
            writeln!(err, "the line is stopped: {reason}; running deliveries stop at their next look")?;
        }
        LineCommand::Resume { store } => {
            let (l, by) = run::line_as(&store).await?;
            match l.lift(&by, Utc::now()).await? {
                Some(s) => writeln!(err, "the line moves again (it was stopped by {}: {})", s.by, s.reason)?,
                None => writeln!(err, "the line was not stopped")?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn bad(g: &GlobalArgs, store: &str) -> Result<ExitCode> {
    let l = run::line_at(store).await?;
    let bad: Vec<book::Bad> = l.bad().await?.into_values().collect();
    if g.output == Format::Json {
        writeln!(anstream::stdout(), "{}", crate::output::json_text(&bad)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = bad
        .iter()
        .map(|b| {
            vec![b.image.clone(), format!("{} {}", b.workload, b.version), format!("#{}", b.delivery), b.reason.clone()]
        })
        .collect();
    write!(anstream::stdout(), "{}", crate::output::table(&["IMAGE", "VERSION", "DELIVERY", "WHY"], &rows))?;
    Ok(ExitCode::SUCCESS)
}

fn rules(file: &std::path::Path) -> Result<ExitCode> {
    let spec = DeliverySpec::load(file)?;
    let slo = spec.slo.as_ref().context(format!("{}: the delivery declares no `slo:`", file.display()))?;
    write!(anstream::stdout(), "{}", crate::delivery::slo::rules(slo, &spec.workload.namespace, &spec.workload.name))?;
    Ok(ExitCode::SUCCESS)
}
