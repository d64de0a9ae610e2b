//! `pinfleet sim`: run the local Kubernetes API emulator until Ctrl-C,
//! writing a kubeconfig for it (and, with --snapshot, saving its objects
//! on exit and loading them on start).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::GlobalArgs;
use crate::sim::{load_snapshot, Inner, Sim};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = ".pinfleet/sim/kubeconfig.yaml")]
    pub kubeconfig: PathBuf,
    /// Load objects from this file at start and save them there on exit.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
}

pub async fn run(_g: &GlobalArgs, args: SimArgs) -> Result<ExitCode> {
    let inner = match &args.snapshot {
        Some(p) if p.exists() => load_snapshot(p)?,
        _ => Inner::new(),
    };
    let sim = Sim::start_with(args.port, inner).await?;
    sim.write_kubeconfig(&args.kubeconfig)?;
    writeln!(
        anstream::stderr(),
        "pinfleet sim serving {} (kubeconfig: {}); Ctrl-C to stop",
        sim.url(),
        args.kubeconfig.display()
    )?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    if let Some(p) = &args.snapshot {
        std::fs::write(p, serde_json::to_string(&sim.snapshot())?)?;
        writeln!(anstream::stderr(), "saved {} object(s) to {}", sim.snapshot().len(), p.display())?;
    }
    sim.stop().await;
    Ok(ExitCode::SUCCESS)
}
