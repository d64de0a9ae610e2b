//! `pinfleet view fleet|team|workload`: the console's views, drawn for the
//! terminal.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct ViewArgs {
    #[command(subcommand)]
    pub what: ViewWhat,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum ViewWhat {
    /// Every member cluster: reachable, version, images, nodes, last e2e run, drift.
    Fleet,
    /// One cluster: machines, addons, the last e2e run's checks, workloads placed there.
    Cluster { name: String },
    /// One team: quota per tier, its queue with positions, estimates and reasons.
    Team { team: String },
    /// One workload (TEAM/ID): placement and why, status per cluster, latency, what was made.
    Workload { submission: String },
}

/// The console's views, drawn for the terminal (or as JSON/YAML with -o).
pub async fn view(g: &GlobalArgs, a: ViewArgs) -> Result<ExitCode> {
    use crate::views;
    let seg = views::html::seg;
    let path = match &a.what {
        ViewWhat::Fleet => "/v1/views/fleet".to_string(),
        ViewWhat::Cluster { name } => format!("/v1/views/clusters/{}", seg(name)),
        ViewWhat::Team { team } => format!("/v1/views/teams/{}", seg(team)),
        ViewWhat::Workload { submission } => {
            let (t, i) = team_id(submission)?;
            format!("/v1/views/workloads/{}/{}", seg(t), seg(i))
        }
    };
    let v = a.client.client()?.call("GET", &path, None).await?.ok()?;
    if g.output != Format::Text {
        crate::output::print_data(g.output, &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = OLDER;
    let text = match a.what {
        ViewWhat::Fleet => serde_json::from_value::<views::fleet::FleetView>(v).context(what)?.text(),
        ViewWhat::Cluster { .. } => serde_json::from_value::<views::cluster::ClusterView>(v).context(what)?.text(),
        ViewWhat::Team { .. } => serde_json::from_value::<views::team::TeamView>(v).context(what)?.text(),
        ViewWhat::Workload { .. } => serde_json::from_value::<views::workload::WorkloadView>(v).context(what)?.text(),
    };
    print!("{}", crate::views::text::safe(&text));
    Ok(ExitCode::SUCCESS)
}
