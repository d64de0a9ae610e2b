//! `pinfleet bootstrap CLUSTER --yes`: the first apply of a cluster. Creates
//! the state bucket if needed, generates the PKI and join token once, writes
//! a kubeconfig, then applies like `apply`.

use std::process::ExitCode;

use super::apply::{run_apply, ApplyArgs};
use super::GlobalArgs;

pub async fn run(g: &GlobalArgs, args: ApplyArgs) -> anyhow::Result<ExitCode> {
    if args.cloud.target.aws().is_none() {
        return super::local::run(g, args, true).await;
    }
    run_apply(g, args, true).await
}
