//! `--help` as kubectl shows its own: the commands in groups, each with
//! its one-line about (the command line's one rendering of itself).

use super::Cli;

/// The commands in the groups `--help` shows them in, as kubectl groups
/// its own ("Basic Commands", "Deploy Commands", …).
pub const GROUPS: &[(&str, &[&str])] = &[
    (
        "Cluster lifecycle",
        &[
            "validate",
            "import",
            "adopt",
            "render",
            "schema",
            "plan",
            "bootstrap",
            "apply",
            "upgrade",
            "destroy",
            "diff",
            "addons",
            "get",
            "orphans",
            "history",
            "etcd",
            "state",
        ],
    ),
    ("Fleet and images", &["fleet", "delivery", "capacity", "ami", "federation", "autoscaler"]),
    ("Platform and developers", &["crds", "controller", "gateway", "submit", "workloads", "queue", "quota", "view"]),
    ("Local rehearsal and diagnostics", &["sim", "e2e", "completions"]),
];

/// The command line, with `--help` listing the commands by group.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let groups = grouped_commands(&cmd);
    cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}\nOptions:\n{{options}}{{after-help}}"
    ))
}

/// Parses the process's arguments with [`command`].
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// Each group's commands with their one-line about, aligned.
fn grouped_commands(cmd: &clap::Command) -> String {
    use std::fmt::Write as _;
    let width = cmd.get_subcommands().map(|c| c.get_name().len()).max().unwrap_or(0);
    let mut out = String::new();
    let mut listed: Vec<&str> = Vec::new();
    let section = |title: &str, names: &[&str], out: &mut String| {
        let _ = writeln!(out, "{title}:");
        for name in names {
            if let Some(c) = cmd.find_subcommand(name) {
                let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
                let about = about.lines().next().unwrap_or_default().to_string();
                let _ = writeln!(out, "  {name:<width$}  {about}");
            }
        }
        out.push('\n');
    };
    for (title, names) in GROUPS {
        section(title, names, &mut out);
        listed.extend(names.iter());
    }
    let rest: Vec<&str> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name())
        .filter(|n| !listed.contains(n) && *n != "help")
        .collect();
    if !rest.is_empty() {
        section("Other commands", &rest, &mut out);
    }
    out.trim_end().to_string() + "\n"
}

#[cfg(test)]
mod tests {
    #[test]
    fn help_lists_every_command_once_under_its_group() {
        let cmd = super::command();
        let mut all: Vec<&str> = super::GROUPS.iter().flat_map(|(_, n)| n.iter().copied()).collect();
        let len = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), len, "a command in two groups");
        let mut names: Vec<&str> =
            cmd.get_subcommands().filter(|c| !c.is_hide_set()).map(|c| c.get_name()).filter(|n| *n != "help").collect();
        names.sort_unstable();
        assert_eq!(names, all, "every command has a group");
        let help = cmd.clone().render_help().to_string();
        insta::assert_snapshot!("help", help);
    }
}
