//! `pinfleet ami waves`: how a channel's image would reach the fleet.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct WavesArgs {
    /// Folder of the fleet's cluster files (default: --clusters-dir).
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = crate::ami::waves::Profile::Standard)]
    pub profile: crate::ami::waves::Profile,
}

pub fn waves(g: &GlobalArgs, a: WavesArgs) -> Result<ExitCode> {
    let dir = a.fleet.clone().unwrap_or_else(|| g.clusters_dir.clone());
    let opts = super::super::super::validate::load_options(&g.addons_dir);
    let folder = crate::fleet::Folder::load(&dir, &opts)?;
    let members = &folder.members;
    // Canaries first, then by region and name: the order fleet stages use.
    let mut order: Vec<(bool, String, String)> = members
        .iter()
        .map(|m| (m.labels.get("canary").is_none_or(|v| v != "true"), m.region.clone(), m.name.clone()))
        .collect();
    order.sort();
    let names: Vec<String> = order.into_iter().map(|(_, _, n)| n).collect();
    let ws = crate::ami::waves::plan(a.profile, &names);
    if g.output != Format::Text {
        print_data(g.output, &ws)?;
    } else {
        write!(anstream::stdout(), "{}", crate::views::images::waves(&ws))?;
    }
    Ok(ExitCode::SUCCESS)
}
