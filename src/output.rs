//! Printing results for people and for pipelines: `-o text|json|yaml`, with
//! colour only on a terminal and never under NO_COLOR (anstream decides),
//! and the progress of long operations ([`RollView`]).

use std::io::Write;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

/// Writes `value` as JSON or YAML to stdout.
pub fn print_data<T: Serialize>(format: Format, value: &T) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        Format::Yaml | Format::Text => serde_saphyr::to_string(value)?,
    };
    let mut out = anstream::stdout();
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// A roll shown as it happens: JSON events on stdout (`-o json`), progress
/// bars on a terminal, or one line per event in a log. `upgrade` and
/// `ami rollout` show their rolls with it.
pub struct RollView {
    json: bool,
    bars: Option<indicatif::MultiProgress>,
    group_bars: std::sync::Mutex<std::collections::BTreeMap<String, indicatif::ProgressBar>>,
}

impl RollView {
    pub fn new(json: bool) -> Self {
        use std::io::IsTerminal as _;
        let bars = (!json && std::io::stderr().is_terminal()).then(indicatif::MultiProgress::new);
        RollView { json, bars, group_bars: Default::default() }
    }

    pub fn show(&self, e: &crate::rollout::driver::Event) {
        use crate::rollout::driver::Event;
        if self.json {
            let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(e).unwrap_or_default());
            return;
        }
        let mut gb = self.group_bars.lock().expect("bars");
        match (&self.bars, e) {
            (Some(mp), Event::Started { group, outdated, .. }) => {
                let b = mp.add(indicatif::ProgressBar::new(*outdated as u64));
                b.set_style(
                    indicatif::ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_prefix(group.clone());
                gb.insert(group.clone(), b);
            }
            (Some(_), Event::Replaced { group, instance, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.inc(1);
                    b.set_message(format!("replaced {instance}"));
                }
            }
            (Some(_), Event::Draining { group, instance, node }) => {
                if let Some(b) = gb.get(group) {
                    b.set_message(format!("draining {} ({instance})", node.as_deref().unwrap_or("-")));
                }
            }
            (Some(_), Event::Finished { group, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.finish();
                }
            }
            _ => {
                let line = match e {
                    Event::Started { group, outdated, machines } => {
                        format!("{group}: {outdated} of {machines} machine(s) to replace")
                    }
                    Event::Launched { group, ids } => format!("{group}: launched {}", ids.join(", ")),
                    Event::Draining { group, instance, node } => {
                        format!("{group}: draining {} ({instance})", node.as_deref().unwrap_or("no node"))
                    }
                    Event::Replaced { group, instance, done, total } => {
                        format!("{group}: replaced {instance} ({done}/{total})")
                    }
                    Event::Finished { group, replaced, seconds } => {
                        format!("{group}: done, {replaced} replaced in {seconds:.1}s")
                    }
                };
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    }

    /// Removes the bars once the roll ended.
    pub fn clear(&self) {
        if let Some(mp) = &self.bars {
            let _ = mp.clear();
        }
    }
}
