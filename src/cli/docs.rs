//! `pinfleet docs`: the book's command reference and the man pages, both
//! drawn from the command line itself ([`super::command`]), so neither can
//! say what the commands no longer do. Hidden from `--help`: a
//! maintainer's tool, run by `scripts/test`.
//!
//! ```text
//! clap::Command ─▶ reference() ─▶ docs/src/reference/*.md   (--check: a unified diff, nothing written)
//!               └▶ man_pages() ─▶ DIR/pinfleet*.1
//! ```
//!
//! The drawing is pure (`reference`, `man_pages`, `diff_pages`); `run`
//! reads and writes the folders. `tests/book.rs` holds the committed pages
//! to what `reference` draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Arg, ArgAction, Args, Subcommand};

use super::GlobalArgs;

/// Where the book keeps the command reference, from the repository's root.
pub const REFERENCE_DIR: &str = "docs/src/reference";

/// How to bring the committed reference up to date (said when it is stale).
pub const REGENERATE: &str = "cargo run -- docs reference --out docs/src/reference";

/// The first lines of every generated page.
const GENERATED: &str = "<!-- Generated from the command line by `pinfleet docs reference`: \
edit the commands' doc comments, then regenerate. -->\n\n";

#[derive(Debug, Args)]
pub struct DocsArgs {
    #[command(subcommand)]
    pub command: DocsCommand,
}

#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// Write the book's command reference: an index and a markdown page per command.
    Reference(ReferenceArgs),
    /// Write a man page per command and subcommand.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ReferenceArgs {
    /// The folder the pages go into (a `.md` file there that is no page is removed).
    #[arg(long, default_value = REFERENCE_DIR)]
    pub out: PathBuf,
    /// Write nothing: print how the folder differs from the pages as a
    /// unified diff, and exit 1 when it does.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The folder the man pages go into.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(_g: &GlobalArgs, args: DocsArgs) -> anyhow::Result<ExitCode> {
    let cmd = super::command();
    match args.command {
        DocsCommand::Reference(a) => {
            let pages: BTreeMap<String, String> = reference(&cmd).into_iter().collect();
            if !a.check {
                write_pages(&a.out, &pages).with_context(|| format!("writing {}", a.out.display()))?;
                return Ok(ExitCode::SUCCESS);
            }
            let committed = read_pages(&a.out).with_context(|| format!("reading {}", a.out.display()))?;
            let diff = diff_pages(&committed, &pages, &a.out);
            if diff.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            anstream::stdout().write_all(diff.as_bytes())?;
            writeln!(
                anstream::stderr(),
                "{} is not what the command line says; regenerate it: {REGENERATE}",
                a.out.display()
            )?;
            Ok(ExitCode::from(1))
        }
        DocsCommand::Man(a) => {
            std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
            for (name, page) in man_pages(&cmd).context("drawing the man pages")? {
                let path = a.out.join(&name);
                std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The command reference as (file name, markdown): `index.md` (the
/// program, its global options, its commands) and `NAME.md` for each
/// top-level command, with every subcommand below it. Hidden commands and
/// arguments are left out, as `--help` leaves them out.
pub fn reference(cmd: &clap::Command) -> Vec<(String, String)> {
    let root = built(cmd);
    let mut pages = vec![("index.md".to_string(), index_page(&root))];
    for sub in visible(&root) {
        let mut page = String::from(GENERATED);
        command_section(sub, 1, &mut page);
        pages.push((format!("{}.md", sub.get_name()), finish(&page)));
    }
    pages
}

/// A man page per visible command and subcommand (`pinfleet.1`,
/// `pinfleet-addons.1`, `pinfleet-addons-list.1`, …), as (file name, roff).
pub fn man_pages(cmd: &clap::Command) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        let man = clap_mangen::Man::new(cmd.clone());
        let mut page = Vec::new();
        man.render(&mut page)?;
        out.push((man.get_filename(), page));
        for sub in visible(cmd) {
            walk(sub, out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&built(cmd), &mut out)?;
    Ok(out)
}

/// The `.md` files of `dir` by name (none when the folder does not exist).
pub fn read_pages(dir: &Path) -> std::io::Result<BTreeMap<String, String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut out = BTreeMap::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|x| x == "md") {
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            out.insert(name, std::fs::read_to_string(&path)?);
        }
    }
    Ok(out)
}

/// Writes the pages into `dir`, and removes the `.md` files there that are
/// no page (a command that is gone).
pub fn write_pages(dir: &Path, pages: &BTreeMap<String, String>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for name in read_pages(dir)?.keys().filter(|n| !pages.contains_key(*n)) {
        std::fs::remove_file(dir.join(name))?;
    }
    for (name, text) in pages {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

/// How `committed` (the pages in `dir`) differs from `fresh`, as a unified
/// diff per page (`/dev/null` for a page one side lacks); empty when they
/// are the same.
pub fn diff_pages(committed: &BTreeMap<String, String>, fresh: &BTreeMap<String, String>, dir: &Path) -> String {
    let mut out = String::new();
    let names: std::collections::BTreeSet<&String> = committed.keys().chain(fresh.keys()).collect();
    for name in names {
        let (old, new) = (committed.get(name), fresh.get(name));
        if old == new {
            continue;
        }
        let path = dir.join(name).display().to_string();
        let label = |side: Option<&String>, prefix: &str| match side {
            Some(_) => format!("{prefix}/{path}"),
            None => "/dev/null".to_string(),
        };
        let (a, b) = (label(old, "a"), label(new, "b"));
        let (old, new) = (old.map_or("", String::as_str), new.map_or("", String::as_str));
        let diff = similar::TextDiff::from_lines(old, new);
        let _ = write!(out, "{}", diff.unified_diff().context_radius(3).header(&a, &b));
    }
    out
}

/// The command with everything clap fills in at parse time filled in:
/// global options copied down, each subcommand's full name
/// (`pinfleet addons list`) and usage. No `help` subcommand at the top.
fn built(cmd: &clap::Command) -> clap::Command {
    let mut root = cmd.clone().disable_help_subcommand(true);
    root.build();
    root
}

/// The subcommands `--help` lists (clap's own `help` left out).
fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

/// The arguments `--help` describes: not hidden, not `--help`/`--version`.
fn documented(a: &Arg) -> bool {
    !a.is_hide_set()
        && !matches!(a.get_action(), ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version)
}

fn index_page(root: &clap::Command) -> String {
    let mut out = String::from(GENERATED);
    out.push_str("# Command reference\n\n");
    if let Some(about) = root.get_long_about().or(root.get_about()) {
        let _ = writeln!(out, "{}\n", prose(&about.to_string()));
    }
    let _ = writeln!(out, "```text\n{}\n```\n", usage(root));
    let global: Vec<&Arg> = root.get_arguments().filter(|a| documented(a) && a.is_global_set()).collect();
    arg_list("## Global options\n\nEvery command takes these.", &global, &mut out);
    let own: Vec<&Arg> = root.get_arguments().filter(|a| documented(a) && !a.is_global_set()).collect();
    arg_list("## Options", &own, &mut out);
    out.push_str("## Commands\n\n| command | what it does |\n| --- | --- |\n");
    for sub in visible(root) {
        let name = sub.get_name();
        let about = first_line(sub.get_about().map(ToString::to_string));
        let _ = writeln!(out, "| [`{} {name}`]({name}.md) | {} |", root.get_name(), prose(&about).replace('|', "\\|"));
    }
    finish(&out)
}

/// A command's section (its heading at `level`), then its subcommands'
/// one level down.
fn command_section(cmd: &clap::Command, level: usize, out: &mut String) {
    let full = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let _ = writeln!(out, "{} {full}\n", "#".repeat(level.min(6)));
    let aliases: Vec<String> = cmd.get_visible_aliases().map(|a| format!("`{a}`")).collect();
    if !aliases.is_empty() {
        let _ = writeln!(out, "Also: {}.\n", aliases.join(", "));
    }
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", prose(&about.to_string()));
    }
    let _ = writeln!(out, "```text\n{}\n```\n", usage(cmd));
    // Global options are the index's; each command lists its own.
    let (positionals, options): (Vec<&Arg>, Vec<&Arg>) =
        cmd.get_arguments().filter(|a| documented(a) && !a.is_global_set()).partition(|a| a.is_positional());
    arg_list("**Arguments**", &positionals, out);
    arg_list("**Options**", &options, out);
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let _ = writeln!(out, "{}\n", prose(&after.to_string()));
    }
    let subs: Vec<&clap::Command> = visible(cmd).collect();
    if subs.is_empty() {
        return;
    }
    out.push_str("**Subcommands**\n\n");
    for sub in &subs {
        let about = first_line(sub.get_about().map(ToString::to_string));
        let anchor = anchor(sub.get_bin_name().unwrap_or_else(|| sub.get_name()));
        let _ = writeln!(out, "- [`{}`](#{anchor}): {}", sub.get_name(), prose(&about));
    }
    out.push('\n');
    for sub in subs {
        command_section(sub, level + 1, out);
    }
}

/// `title`, then one list item per argument; nothing when there are none.
fn arg_list(title: &str, args: &[&Arg], out: &mut String) {
    if args.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}\n");
    for a in args {
        arg_entry(a, out);
        out.push('\n');
    }
}

/// One argument: how it is written, its help (every paragraph), then its
/// default, environment variable and possible values.
fn arg_entry(a: &Arg, out: &mut String) {
    let help = a.get_long_help().or(a.get_help()).map(ToString::to_string).unwrap_or_default();
    let mut paragraphs = help.split("\n\n").map(str::trim).filter(|p| !p.is_empty());
    let _ = write!(out, "- `{}`", synopsis(a));
    match paragraphs.next() {
        Some(first) => {
            let _ = writeln!(out, ": {}", indent(&prose(first)));
        }
        None => out.push('\n'),
    }
    for p in paragraphs {
        let _ = writeln!(out, "\n  {}", indent(&prose(p)));
    }
    let facts = facts(a);
    if !facts.is_empty() {
        let _ = writeln!(out, "\n  {}", facts.join(" "));
    }
    let values: Vec<clap::builder::PossibleValue> = if a.is_hide_possible_values_set() {
        Vec::new()
    } else {
        a.get_possible_values().into_iter().filter(|v| !v.is_hide_set()).collect()
    };
    if values.iter().any(|v| v.get_help().is_some()) {
        out.push_str("\n  Possible values:\n\n");
        for v in &values {
            let help = v.get_help().map(|h| h.to_string().split_whitespace().collect::<Vec<_>>().join(" "));
            match help {
                Some(h) => {
                    let _ = writeln!(out, "  - `{}`: {}", v.get_name(), prose(&h));
                }
                None => {
                    let _ = writeln!(out, "  - `{}`", v.get_name());
                }
            }
        }
    } else if !values.is_empty() {
        let names: Vec<String> = values.iter().map(|v| format!("`{}`", v.get_name())).collect();
        let _ = writeln!(out, "\n  Possible values: {}.", names.join(", "));
    }
}

/// Required, aliases, repeatable, default and environment, as sentences.
fn facts(a: &Arg) -> Vec<String> {
    let mut facts = Vec::new();
    if a.is_required_set() && !a.is_positional() {
        facts.push("Required.".to_string());
    }
    let mut aliases: Vec<String> =
        a.get_visible_aliases().unwrap_or_default().iter().map(|l| format!("`--{l}`")).collect();
    aliases.extend(a.get_visible_short_aliases().unwrap_or_default().iter().map(|s| format!("`-{s}`")));
    if !aliases.is_empty() {
        facts.push(format!("Also {}.", aliases.join(", ")));
    }
    if !a.is_positional() && matches!(a.get_action(), ArgAction::Append | ArgAction::Count) {
        facts.push("Can be given more than once.".to_string());
    }
    // A flag's implied `false` or a count's `0` is no default anyone sets.
    let defaults = a.get_default_values();
    if a.get_action().takes_values() && !a.is_hide_default_value_set() && !defaults.is_empty() {
        let shown: Vec<String> = defaults
            .iter()
            .map(|v| match v.to_string_lossy() {
                s if s.is_empty() => "`\"\"`".to_string(),
                s => format!("`{s}`"),
            })
            .collect();
        facts.push(format!("Default: {}.", shown.join(", ")));
    }
    if let Some(env) = a.get_env().filter(|_| !a.is_hide_env_set()) {
        facts.push(format!("Environment: `{}`.", env.to_string_lossy()));
    }
    facts
}

/// How the argument is written on the command line, as `--help` shows it:
/// `-o, --output <OUTPUT>`, `--member <MEMBER>`, `<CLUSTER>`, `[PATH]...`.
fn synopsis(a: &Arg) -> String {
    let names: Vec<String> = match a.get_value_names() {
        Some(names) => names.iter().map(ToString::to_string).collect(),
        None => vec![a.get_id().as_str().to_uppercase()],
    };
    let range = a.get_num_args().unwrap_or_default();
    let more = range.max_values() > names.len();
    if a.is_positional() {
        let inner = names.join(" ");
        let mut s = if a.is_required_set() { format!("<{inner}>") } else { format!("[{inner}]") };
        if more || matches!(a.get_action(), ArgAction::Append) {
            s.push_str("...");
        }
        return s;
    }
    let mut s = match (a.get_short(), a.get_long()) {
        (Some(c), Some(l)) => format!("-{c}, --{l}"),
        (Some(c), None) => format!("-{c}"),
        (None, Some(l)) => format!("--{l}"),
        (None, None) => a.get_id().as_str().to_string(),
    };
    if a.get_action().takes_values() {
        let mut values = names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" ");
        if more {
            values.push_str("...");
        }
        if range.min_values() == 0 {
            values = format!("[{values}]");
        }
        s.push(if a.is_require_equals_set() { '=' } else { ' ' });
        s.push_str(&values);
    }
    s
}

/// The usage line(s), without clap's `Usage: ` title.
fn usage(cmd: &clap::Command) -> String {
    let text = cmd.clone().render_usage().to_string();
    let text = text.strip_prefix("Usage:").unwrap_or(&text);
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
}

/// Help text as markdown prose: outside `code`, `<`, `>` and `*` are
/// escaped, so `<cluster>` is not taken for an HTML tag nor two `*` for
/// emphasis.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            '*' if !code => out.push_str("\\*"),
            c => out.push(c),
        }
    }
    out
}

/// A paragraph's later lines indented into its list item.
fn indent(text: &str) -> String {
    text.replace('\n', "\n  ")
}

fn first_line(text: Option<String>) -> String {
    text.unwrap_or_default().lines().next().unwrap_or_default().trim().to_string()
}

/// The id mdBook (and GitHub) give a heading: lower case, spaces as `-`,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// One newline at the end, no trailing spaces, no blank line twice.
fn finish(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut blank = false;
    for line in page.lines().map(str::trim_end) {
        if line.is_empty() && blank {
            continue;
        }
        blank = line.is_empty();
        out.push_str(line);
        out.push('\n');
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool.")
            .arg(Arg::new("verbose").short('v').long("verbose").action(ArgAction::Count).global(true).help("Louder."))
            .subcommand(
                clap::Command::new("run")
                    .about("Run a thing.\n\nThe whole story, with <cluster> and a * or two *.")
                    .arg(Arg::new("name").required(true).help("What to run."))
                    .arg(
                        Arg::new("mode")
                            .long("mode")
                            .default_value("fast")
                            .env("TOOL_MODE")
                            .value_parser(["fast", "slow"])
                            .help("How."),
                    )
                    .arg(Arg::new("secret").long("secret").hide(true))
                    .subcommand(clap::Command::new("now").about("At once."))
                    .subcommand(clap::Command::new("never").hide(true)),
            )
            .subcommand(clap::Command::new("hidden").hide(true))
    }

    #[test]
    fn a_page_per_visible_command_with_every_argument_fact() {
        let pages = reference(&demo());
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["index.md", "run.md"]);
        let index = &pages[0].1;
        assert!(index.contains("## Global options"), "{index}");
        assert!(index.contains("- `-v, --verbose`: Louder.\n\n  Can be given more than once."), "{index}");
        assert!(index.contains("| [`tool run`](run.md) | Run a thing. |"), "{index}");
        let run = &pages[1].1;
        assert!(run.contains("# tool run\n"), "{run}");
        assert!(run.contains("&lt;cluster&gt; and a \\* or two \\*."), "{run}");
        assert!(run.contains("tool run [OPTIONS] <name> [COMMAND]"), "{run}");
        assert!(run.contains("- `<NAME>`: What to run."), "{run}");
        assert!(
            run.contains("- `--mode <MODE>`: How.\n\n  Default: `fast`. Environment: `TOOL_MODE`.\n\n  Possible values: `fast`, `slow`."),
            "{run}"
        );
        assert!(run.contains("- [`now`](#tool-run-now): At once."), "{run}");
        assert!(run.contains("## tool run now\n"), "{run}");
        assert!(!run.contains("secret") && !run.contains("never") && !run.contains("--verbose"), "{run}");
        assert!(run.ends_with("```\n") && !run.ends_with("\n\n"), "{run:?}");
    }

    #[test]
    fn man_pages_for_every_visible_command() {
        let names: Vec<String> = man_pages(&demo()).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["tool.1", "tool-run.1", "tool-run-now.1"]);
    }

    #[test]
    fn a_stale_page_shows_as_a_unified_diff() {
        let committed = BTreeMap::from([("a.md".to_string(), "one\ntwo\n".to_string())]);
        let fresh = BTreeMap::from([
            ("a.md".to_string(), "one\nthree\n".to_string()),
            ("b.md".to_string(), "new\n".to_string()),
        ]);
        let diff = diff_pages(&committed, &fresh, Path::new("ref"));
        assert!(diff.contains("--- a/ref/a.md\n+++ b/ref/a.md\n"), "{diff}");
        assert!(diff.contains("-two\n+three\n"), "{diff}");
        assert!(diff.contains("--- /dev/null\n+++ b/ref/b.md\n"), "{diff}");
        assert!(diff_pages(&fresh, &fresh, Path::new("ref")).is_empty());
    }
}
