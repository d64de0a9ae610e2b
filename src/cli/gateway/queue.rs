//! `pinfleet queue` and `pinfleet quota`: each team's queue and its quota
//! per tier, from the team view the console shows.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct QueueArgs {
    #[arg(long)]
    pub team: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The team views a command shows: the team named, else every team the
/// caller may see (as the quota API lists them). With `-o`, their JSON.
async fn team_views(g: &GlobalArgs, a: &QueueArgs) -> Result<Option<Vec<crate::views::team::TeamView>>> {
    let client = a.client.client()?;
    let teams: Vec<String> = match &a.team {
        Some(t) => vec![t.clone()],
        None => client.call("GET", "/v1/quota", None).await?.ok()?["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["team"].as_str().map(str::to_string))
            .collect(),
    };
    let mut raw = Vec::new();
    for t in &teams {
        raw.push(client.call("GET", &format!("/v1/views/teams/{}", crate::views::html::seg(t)), None).await?.ok()?);
    }
    if g.output != Format::Text {
        crate::output::print_data(g.output, &json!({"items": raw}))?;
        return Ok(None);
    }
    let views = raw.into_iter().map(serde_json::from_value).collect::<Result<Vec<_>, _>>().context(OLDER)?;
    Ok(Some(views))
}

/// Each team's queue, from the team view the console shows.
pub async fn queue(g: &GlobalArgs, a: QueueArgs) -> Result<ExitCode> {
    if let Some(views) = team_views(g, &a).await? {
        if views.is_empty() {
            println!("no teams to show");
        }
        for (i, v) in views.iter().enumerate() {
            if i > 0 {
                println!();
            }
            if !v.queue.is_empty() {
                println!("team {}", crate::views::text::safe(&v.team));
            }
            print!("{}", crate::views::text::safe(&v.queue_text()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each team's quota per tier, from the team view the console shows.
pub async fn quota(g: &GlobalArgs, a: QueueArgs) -> Result<ExitCode> {
    if let Some(views) = team_views(g, &a).await? {
        if views.is_empty() {
            println!("no teams to show");
        }
        for v in &views {
            print!("{}", crate::views::text::safe(&v.quota_text()));
        }
    }
    Ok(ExitCode::SUCCESS)
}
