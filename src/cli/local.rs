//! `bootstrap|apply CLUSTER --target sim|kind`: the Kubernetes side of a
//! cluster only, on this machine (a background sim with the cluster's
//! nodes, or a kind cluster), with its addons installed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use owo_colors::OwoColorize;

use super::apply::ApplyArgs;
use super::GlobalArgs;

/// `--target sim|kind`: the Kubernetes side only, on this machine.
pub async fn run(g: &GlobalArgs, args: ApplyArgs, bootstrap: bool) -> Result<ExitCode> {
    use super::cloud::Target;
    let loaded = super::render::load_one(g, &args.cluster)?;
    let cluster = &args.cloud.target.cluster_as_run(loaded.cluster.clone());
    let name = &cluster.metadata.name;
    let set = crate::addons::rendered(&g.addons_dir, cluster)?;
    if !args.yes {
        let nodes: u32 = cluster.spec.instance_groups.iter().map(|g| g.desired.unwrap_or(g.min_size)).sum();
        let mut e = anstream::stderr();
        writeln!(
            e,
            "would {} {name} on {:?} with {nodes} node(s) and install:",
            if bootstrap { "create" } else { "update" },
            args.cloud.target
        )?;
        for a in &set {
            writeln!(e, "  {} {} ({} objects)", a.name, a.version, a.objects.len())?;
        }
        writeln!(e, "\nNothing changed. Run with --yes to do it.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let kubeconfig = match (args.cloud.target, bootstrap) {
        (Target::Sim, true) => crate::sim::local::up(cluster, &args.cluster, &g.clusters_dir, &g.addons_dir).await?,
        (Target::Kind, true) => crate::kube::kind::up(
            &crate::state::home(),
            cluster,
            &crate::render::Renderer::new().kind_config(cluster)?,
        )?,
        (t, false) => {
            let k = t.kubeconfig(name);
            if !k.exists() {
                bail!(
                    "cluster {name} has not been bootstrapped on {t:?}: run `pinfleet bootstrap {name} --target {}`",
                    format!("{t:?}").to_lowercase()
                );
            }
            k
        }
        (Target::Aws | Target::Localstack, true) => unreachable!("AWS targets are handled by run_apply"),
    };
    writeln!(anstream::stderr(), "kubeconfig: {}", kubeconfig.display())?;
    if !args.skip_addons {
        super::apply::install_addons(g, cluster, &set, &args.addons_kubeconfig.clone().unwrap_or(kubeconfig), &args)
            .await?;
    }
    writeln!(anstream::stderr(), "{} {name} is up on {:?}", "done:".green().bold(), args.cloud.target)?;
    Ok(ExitCode::SUCCESS)
}
