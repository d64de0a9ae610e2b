//! `pinfleet submit FILE`: a workload to the gateway (or `--dry-run` for
//! the decision admission would make now).

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The workload (a PinterestService, JobSet, CronJob, TrainingJob or StatefulSet).
    pub file: PathBuf,
    /// The submission's id (a retry with the same id is the same submission;
    /// default: the workload's name and a digest of the file).
    #[arg(long)]
    pub id: Option<String>,
    /// A priority class the admins defined (default: normal); the gateway
    /// says which classes the workload's team may use.
    #[arg(long)]
    pub priority_class: Option<String>,
    /// Check everything and say what admission would decide now; record nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

pub async fn submit(g: &GlobalArgs, a: SubmitArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let node = crate::spec::yaml::parse_single(&text, &a.file)?;
    let workload = node.to_json();
    let id = match a.id {
        Some(id) => id,
        None => {
            use sha2::Digest as _;
            let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("workload");
            format!("{name}-{}", &hex::encode(sha2::Sha256::digest(text.as_bytes()))[..10])
        }
    };
    let client = a.client.client()?;
    let path = if a.dry_run { "/v1/submissions?dryRun=true" } else { "/v1/submissions" };
    let ans = client
        .call(
            "POST",
            path,
            Some(&{
                let mut body = json!({"id": id, "workload": workload});
                if let Some(c) = &a.priority_class {
                    body["priorityClass"] = json!(c);
                }
                body
            }),
        )
        .await?;
    if ans.status == 401 || ans.status == 403 || ans.status >= 500 {
        ans.ok()?;
        unreachable!("an error status");
    }
    print(g, &ans.body, render::decision)?;
    Ok(if (200..300).contains(&ans.status) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
