//! `pinfleet ami gate`: a candidate rolled onto a canary group, judged, promoted or stopped.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct GateArgs {
    /// The recipe whose candidate is gated.
    pub recipe: String,
    /// The canary cluster.
    #[arg(long)]
    pub cluster: String,
    /// The channel holding the candidate (default: the recipe's first).
    #[arg(long)]
    pub from: Option<String>,
    /// The group rolled (default: the first node group following the recipe).
    #[arg(long)]
    pub canary_group: Option<String>,
    /// How long the canary must stay healthy on the candidate.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub soak: Duration,
    /// e2e phases run after the upgrade and after the downgrade.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "preflight,cluster,smoke")]
    pub e2e_phases: Vec<crate::e2e::Phase>,
    /// How long e2e's smoke workloads may take.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub smoke_timeout: Duration,
    /// Promote to the recipe's next channel when the gate passes (without: say what would be written).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Folder holding the image recipes.
    #[arg(long, env = "PINFLEET_IMAGES_DIR", default_value = "images")]
    pub images_dir: PathBuf,
    #[command(flatten)]
    pub roll: super::super::super::upgrade::RollArgs,
    #[command(flatten)]
    pub cloud: super::super::super::cloud::CloudArgs,
}

pub async fn gate(g: &GlobalArgs, a: GateArgs) -> Result<ExitCode> {
    let images = ImagesArgs { images_dir: a.images_dir.clone(), target: a.cloud.target };
    let l = images.recipe(&a.recipe)?;
    let from = a.from.clone().unwrap_or_else(|| l.recipe.channels[0].clone());
    let s = super::super::super::cloud::Session::open(g, &a.cluster, &a.cloud).await?;
    let gate = crate::imaging::gating::Gate {
        roller: super::super::roller(&s, &a.cloud, &a.roll).await?,
        recipe: &l,
        from: from.clone(),
        canary_group: a.canary_group.clone(),
        soak: a.soak,
        e2e: crate::e2e::Options { phases: a.e2e_phases.clone(), smoke_timeout: a.smoke_timeout, ..Default::default() },
    };
    let view = crate::output::RollView::new(g.output == Format::Json);
    let say = |line: &str| {
        let _ = writeln!(anstream::stderr(), "{}", crate::views::text::safe(line));
    };
    let outcome = crate::imaging::gating::run(&gate, &|e| view.show(&e), &say).await;
    view.clear();
    let outcome = outcome?;
    let mut written = Vec::new();
    if let crate::ami::gate::Verdict::Promote { to } = &outcome.verdict {
        let clients = images.clients(&l).await?;
        let refs: Vec<&Aws> = clients.iter().collect();
        let note = crate::ami::channel::note(
            &format!("promoted from {from}"),
            &who(&clients[0]).await,
            &format!("gate passed on {} ({})", outcome.cluster, outcome.group),
        );
        written = channels::plan_promotion(&refs, &l.name, &Source::Channel(from.clone()), to, &note).await?;
        if a.yes {
            channels::write_all(&refs, &written).await?;
            super::share_where_served(g, &images, &refs, &l.name, to, &written).await?;
        }
    }
    if g.output != Format::Text {
        print_data(g.output, &serde_json::json!({"gate": outcome, "writes": written, "written": a.yes}))?;
    } else {
        let mut out = anstream::stdout();
        match &outcome.verdict {
            crate::ami::gate::Verdict::Promote { to } => {
                writeln!(out, "gate passed: {} ({}/{from}) may go to {to}", outcome.candidate, l.name)?;
                let rows: Vec<_> = written
                    .iter()
                    .map(|w| (w.region.clone(), w.parameter.clone(), w.from.clone(), w.to.clone()))
                    .collect();
                write!(out, "{}", crate::views::images::writes(&rows, a.yes))?;
            }
            crate::ami::gate::Verdict::Stop { reason } => {
                writeln!(
                    out,
                    "gate stopped: {} stays on {from}: {}",
                    outcome.candidate,
                    crate::views::text::safe(reason)
                )?;
            }
        }
    }
    Ok(if matches!(outcome.verdict, crate::ami::gate::Verdict::Promote { .. }) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
