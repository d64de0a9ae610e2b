//! `pinfleet workloads list|describe|cancel`: a team's submissions and
//! where each one is.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct WorkloadsArgs {
    #[command(subcommand)]
    pub command: WorkloadsCommand,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadsCommand {
    /// Your teams' submissions.
    List {
        #[arg(long)]
        team: Option<String>,
        #[arg(long)]
        phase: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One submission: where it is, why it waits, its latency.
    Describe {
        /// TEAM/ID
        submission: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel a submission (released and removed from its clusters).
    Cancel {
        /// TEAM/ID
        submission: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn workloads(g: &GlobalArgs, a: WorkloadsArgs) -> Result<ExitCode> {
    match a.command {
        WorkloadsCommand::List { team, phase, client } => {
            let mut q = Vec::new();
            if let Some(t) = team {
                q.push(format!("team={t}"));
            }
            if let Some(p) = phase {
                q.push(format!("phase={p}"));
            }
            let path =
                if q.is_empty() { "/v1/submissions".to_string() } else { format!("/v1/submissions?{}", q.join("&")) };
            let v = client.client()?.call("GET", &path, None).await?.ok()?;
            print(g, &v, render::list)?;
        }
        WorkloadsCommand::Describe { submission, client } => {
            // The console's workload view: what was made of it, placement and
            // why, latency, its wait.
            let (t, i) = team_id(&submission)?;
            let seg = crate::views::html::seg;
            let path = format!("/v1/views/workloads/{}/{}", seg(t), seg(i));
            let v = client.client()?.call("GET", &path, None).await?.ok()?;
            if g.output != Format::Text {
                crate::output::print_data(g.output, &v)?;
            } else {
                let w: crate::views::workload::WorkloadView = serde_json::from_value(v).context(OLDER)?;
                print!("{}", crate::views::text::safe(&w.text()));
            }
        }
        WorkloadsCommand::Cancel { submission, client } => {
            let (t, i) = team_id(&submission)?;
            let v = client.client()?.call("DELETE", &format!("/v1/submissions/{t}/{i}"), None).await?.ok()?;
            print(g, &v, |v| {
                format!("{}: {}\n", v["name"].as_str().unwrap_or(""), v["message"].as_str().unwrap_or(""))
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
