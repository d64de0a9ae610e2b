//! `pinfleet validate [PATH…]`: check cluster files, report every problem.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use owo_colors::OwoColorize;
use serde::Serialize;

use super::GlobalArgs;
use crate::output::{print_data, Format};
use crate::spec;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Cluster files or folders (default: the clusters folder).
    pub paths: Vec<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    valid: Vec<Valid>,
    errors: Vec<Problem>,
    /// Valid, but to be changed (a minor out of upstream support).
    warnings: Vec<Problem>,
    /// The day support was judged by.
    judged_on: chrono::NaiveDate,
}

#[derive(Serialize)]
struct Valid {
    file: String,
    name: String,
}

#[derive(Serialize)]
struct Problem {
    file: String,
    line: usize,
    column: usize,
    path: String,
    message: String,
}

/// Addon packages present under `addons/` (a folder per package with an addon.yaml).
pub fn known_addons(dir: &std::path::Path) -> Option<std::collections::BTreeSet<String>> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(Result::ok)
            .filter(|e| e.path().join("addon.yaml").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// The image recipes under `PINFLEET_IMAGES_DIR` (`images/` unless set),
/// each with the accelerator stack it bakes; a recipe that does not load
/// counts as absent (`pinfleet ami bake` says why).
pub fn known_recipes() -> Option<std::collections::BTreeMap<String, Option<crate::accelerated::Kind>>> {
    let dir = std::path::PathBuf::from(std::env::var("PINFLEET_IMAGES_DIR").unwrap_or_else(|_| "images".into()));
    let names = crate::ami::recipe::list(&dir).ok()?;
    Some(
        names
            .into_iter()
            .filter_map(|n| crate::ami::recipe::load(&dir, &n).ok())
            .map(|l| (l.name, l.recipe.accelerator.map(|a| a.kind)))
            .collect(),
    )
}

/// What validation knows beyond the files: the addon packages and the image recipes.
pub fn load_options(addons_dir: &std::path::Path) -> spec::LoadOptions {
    spec::LoadOptions { known_addons: known_addons(addons_dir), recipes: known_recipes() }
}

pub fn run(g: &GlobalArgs, args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let paths = if args.paths.is_empty() { vec![g.clusters_dir.clone()] } else { args.paths };
    let opts = load_options(&g.addons_dir);
    let (loaded, mut problems) = spec::load_paths(&paths, &opts);
    let today = chrono::Utc::now().date_naive();
    // The addons a cluster gets must support its minor: refused here, as
    // apply refuses them before its first write.
    let mut refused = std::collections::BTreeSet::new();
    if let Ok(packages) = crate::addons::load_all(&g.addons_dir) {
        for l in &loaded {
            for p in packages.iter().filter(|p| crate::addons::render::enabled(&l.cluster, p)) {
                if let Some(why) = crate::addons::render::minor_unsupported(&l.cluster, p) {
                    refused.insert(l.path.clone());
                    problems.0.push(spec::Diagnostic {
                        loc: l.tree.locate("spec.kubernetesVersion"),
                        path: "spec.kubernetesVersion".into(),
                        message: format!("addon {}: {why}", p.meta.name),
                    });
                }
            }
        }
    }
    // The fleet's list of accounts (deny by default once there is one).
    if let Ok(fleet) = crate::fleet::spec::FleetSpec::load(&g.clusters_dir.join("fleet.yaml")) {
        for l in &loaded {
            for d in crate::fleet::tenancy::check(&fleet, std::slice::from_ref(l)) {
                refused.insert(l.path.clone());
                problems.0.push(d);
            }
        }
    }
    let loaded: Vec<_> = loaded.into_iter().filter(|l| !refused.contains(&l.path)).collect();
    let warnings: Vec<Problem> = loaded
        .iter()
        .flat_map(|l| {
            spec::validate::warnings(&l.cluster, today).into_iter().map(move |(path, message)| {
                let loc = l.tree.locate(&path);
                Problem { file: loc.file.display().to_string(), line: loc.line, column: loc.col, path, message }
            })
        })
        .collect();
    let report = Report {
        valid: loaded
            .iter()
            .map(|l| Valid { file: l.path.display().to_string(), name: l.cluster.metadata.name.clone() })
            .collect(),
        errors: problems
            .0
            .iter()
            .map(|d| Problem {
                file: d.loc.file.display().to_string(),
                line: d.loc.line,
                column: d.loc.col,
                path: d.path.clone(),
                message: d.message.clone(),
            })
            .collect(),
        warnings,
        judged_on: today,
    };
    if g.output == Format::Text {
        let mut out = anstream::stdout();
        for v in &report.valid {
            writeln!(out, "{} {} ({})", "ok".green(), v.file, v.name)?;
        }
        let mut err = anstream::stderr();
        for w in &report.warnings {
            writeln!(
                err,
                "{}",
                format!("warning: {}:{}:{}: {}: {}", w.file, w.line, w.column, w.path, w.message).yellow()
            )?;
        }
        for d in &problems.0 {
            writeln!(err, "{}", d.to_string().red())?;
        }
        if !problems.0.is_empty() || report.valid.is_empty() {
            let files: std::collections::BTreeSet<_> = problems.0.iter().map(|d| d.loc.file.clone()).collect();
            writeln!(err, "{} valid, {} problem(s) in {} file(s)", report.valid.len(), problems.0.len(), files.len())?;
        }
    } else {
        print_data(g.output, &report)?;
    }
    if report.valid.is_empty() && problems.0.is_empty() {
        anyhow::bail!(
            "no cluster files found in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(if problems.0.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
