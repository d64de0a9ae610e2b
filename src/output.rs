//! Printing results for people and for pipelines: `-o text|json|yaml`, with
//! colour only on a terminal and never under NO_COLOR (anstream decides),
//! and the progress of long operations ([`RollView`], [`AddonView`]).
//! What each domain's results look like as text is the views' (fleet,
//! cluster, team, workload: [`crate::views`]); the commands print them.

use std::io::Write;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

/// `value` as pretty JSON in which no character a terminal acts on is
/// raw: serde_json escapes the C0 controls only, so DEL, the C1 controls
/// (a terminal reads U+009B as CSI) and the bidirectional and zero-width
/// marks are written `\uXXXX` too (inside a string, the only place JSON
/// text can hold them, the escape means the same character).
pub fn json_text<T: Serialize>(value: &T) -> anyhow::Result<String> {
    let raw = serde_json::to_string_pretty(value)?;
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if acts(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// A character that acts on a terminal instead of showing: a control (but
/// a newline), a bidirectional override or a zero-width one.
fn acts(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// `value` as YAML; where a string holds a character that acts, as JSON
/// with it escaped (JSON is YAML: the output still parses as YAML), since
/// the YAML writer would print it raw.
pub fn yaml_text<T: Serialize>(value: &T) -> anyhow::Result<String> {
    let y = serde_saphyr::to_string(value)?;
    if y.chars().any(acts) {
        let mut s = json_text(value)?;
        s.push('\n');
        return Ok(s);
    }
    Ok(y)
}

/// Writes `value` as JSON or YAML to stdout.
pub fn print_data<T: Serialize>(format: Format, value: &T) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => {
            let mut s = json_text(value)?;
            s.push('\n');
            s
        }
        Format::Yaml | Format::Text => yaml_text(value)?,
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
                    Event::VersionStep { step } => format!("step: {step}"),
                    Event::BlockedOnCapacity { group, reason } => format!("{group}: waiting, {reason}"),
                    Event::Backup { message } => format!("etcd: {message}"),
                    Event::Kops { message } => format!("adopted: {message}"),
                    Event::Validated { after, checks, skipped } => {
                        format!("e2e gate after {after}: {checks} checks passed ({skipped} skipped)")
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

/// An addon install shown as it happens: JSON events (`-o json`), a bar on
/// a terminal, or one line per event.
pub struct AddonView {
    json: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl AddonView {
    pub fn new(json: bool, progress: bool, addons: usize) -> Self {
        let bar = (progress && !json).then(|| {
            let b = indicatif::ProgressBar::new(addons as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} addons [{bar:20}] {pos}/{len} {elapsed} {wide_msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        AddonView { json, bar }
    }

    pub fn show(&self, e: &crate::addons::install::Event) {
        use crate::addons::install::Event;
        use owo_colors::OwoColorize as _;
        if self.json {
            let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(e).unwrap_or_default());
            return;
        }
        let line = match e {
            Event::Applying { addon, objects } => format!("{addon}: applying {objects} object(s)"),
            Event::Waiting { addon, object, why } => format!("{addon}: waiting for {object}: {why}"),
            Event::Ready(r) => {
                let from = match &r.from {
                    Some(v) if v != &r.version => format!(" (was {v})"),
                    Some(_) => String::new(),
                    None => " (new)".into(),
                };
                format!("{} {}{from}: ready, {} changed, {:.1}s", r.name, r.version, r.changed, r.seconds)
            }
            Event::Pruned(k) => format!("pruned {k}"),
        };
        match &self.bar {
            Some(b) if matches!(e, Event::Ready(_)) => {
                b.inc(1);
                b.println(format!("{} {line}", "✓".green()));
            }
            Some(b) => b.set_message(line),
            None => {
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    }

    /// Clears the bar and, for people, sums up.
    pub fn finish(&self, report: Option<&crate::addons::install::Report>) {
        use owo_colors::OwoColorize as _;
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let Some(report) = report.filter(|_| !self.json) else { return };
        let changed: usize = report.addons.iter().map(|a| a.changed).sum();
        let mut e = anstream::stderr();
        let _ = writeln!(
            e,
            "{} {} addon(s) ready, {changed} object(s) changed, {} pruned",
            "addons:".bold(),
            report.addons.len(),
            report.pruned.len()
        );
        for k in &report.kept {
            let _ = writeln!(e, "  kept {k} (no addon renders it; --prune-crds removes it)");
        }
    }
}

/// Rows as an aligned table (the views' own).
pub use crate::views::text::{colored_diff, table};

/// Tracing to stderr: `-v` levels, or RUST_LOG when set; JSON lines with `--log-json`.
pub fn init_tracing(verbose: u8, json: bool) {
    // kube-client logs every failed request at ERROR before returning the
    // error to its caller, which reports it (or, waiting for a new API
    // server, expects it): shown from -vv on.
    // The AWS SDK's config loader logs every provider it tried (IMDS
    // refusals with their debug dumps) at WARN where pinfleet reports the
    // outcome itself in one line: shown from -vv on.
    let default = match verbose {
        0 if json => "info,kube_client::client::builder=off,aws_config=error",
        0 => "warn,kube_client::client::builder=off,aws_config=error",
        1 => "info,pinfleet=info,kube_client::client::builder=off,aws_config=error",
        2 => "info,pinfleet=debug",
        _ => "debug,pinfleet=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_ansi(std::env::var_os("NO_COLOR").is_none()).try_init()
    };
}

/// Prints an error and its causes, one per line.
pub fn report_error(err: &anyhow::Error) {
    let mut e = anstream::stderr();
    let _ = writeln!(e, "{} {err}", owo_colors::OwoColorize::bold(&owo_colors::OwoColorize::red(&"error:")));
    for cause in err.chain().skip(1) {
        let _ = writeln!(e, "  {} {cause}", owo_colors::OwoColorize::dimmed(&"caused by:"));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn yaml_never_prints_a_character_that_acts() {
        let v = serde_json::json!({"name": "abc\u{202E}gpj.exe", "plain": "x"});
        let y = super::yaml_text(&v).unwrap();
        assert!(!y.contains('\u{202E}') && y.contains("\\u202e"), "{y}");
        let back: serde_json::Value = serde_saphyr::from_str(&y).unwrap();
        assert_eq!(back, v, "still YAML, still the same data");
        assert_eq!(super::yaml_text(&serde_json::json!({"plain": "x"})).unwrap().trim(), "plain: x");
    }

    #[test]
    fn json_output_carries_no_raw_control_or_bidi_character() {
        let v = serde_json::json!({"name": "a\u{9b}31mred\u{7f}\u{202e}txt.exe\u{1b}[0m", "n": 1});
        let t = super::json_text(&v).unwrap();
        assert!(t.chars().all(|c| c == '\n' || !(c.is_control() || c == '\u{202e}')), "{t:?}");
        assert!(
            t.contains("\\u009b") && t.contains("\\u007f") && t.contains("\\u202e") && t.contains("\\u001b"),
            "{t}"
        );
        // The same value when read back.
        assert_eq!(serde_json::from_str::<serde_json::Value>(&t).unwrap(), v);
    }
}
