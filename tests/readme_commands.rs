//! Every `pinfleet …` command the README and the book (every page under
//! `docs/src` but the command reference, which is generated from the
//! command line) name is one the command line has: each synopsis (in a
//! fenced block, or in inline code) is expanded to the command lines it
//! stands for and parsed with the real clap command
//! (`pinfleet::cli::command()`). The subcommands must exist and the flags
//! be known; where a value is a placeholder (`CLUSTER`, `<x>`, `TEAM/ID`),
//! any value is accepted in its place. A failure names the file and line.
//!
//! ```text
//! README.md, docs/src/**/*.md ─▶ named (code blocks, inline code) ─▶ expand (alternatives, [optional]) ─▶ argv ─▶ clap
//! ```

use std::path::{Path, PathBuf};

/// A command the README names: the line it starts on, as written.
#[derive(Debug, Clone, PartialEq)]
struct Named {
    line: usize,
    text: String,
}

/// The commands named in `markdown`: lines of fenced blocks that run
/// `pinfleet` (after a `$ ` prompt or a workflow's `run: `; a trailing `\`
/// continues a line, `# …` is a comment), and inline code that starts with
/// `pinfleet `.
fn named_commands(markdown: &str) -> Vec<Named> {
    let mut out = Vec::new();
    let mut fenced = false;
    // The text outside fences, blank where a fence was, so offsets keep their lines.
    let mut prose = String::new();
    let mut pending: Option<Named> = None;
    for (i, line) in markdown.lines().enumerate() {
        let n = i + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
            continue;
        }
        prose.push('\n');
        let (text, start) = match pending.take() {
            Some(p) => (format!("{} {}", p.text, line.trim()), p.line),
            None => (line.trim().to_string(), n),
        };
        if let Some(rest) = text.strip_suffix('\\') {
            pending = Some(Named { line: start, text: rest.trim_end().to_string() });
            continue;
        }
        let t = text.trim_start_matches("- ").trim_start_matches("$ ").trim_start_matches("run: ");
        if t.starts_with("pinfleet ") {
            out.push(Named { line: start, text: without_comment(t).trim().to_string() });
        }
    }
    // Inline code: a run of backticks to the next run as long, within a paragraph.
    let bytes = prose.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let ticks = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let open = i + ticks;
        let fence = "`".repeat(ticks);
        let mut j = open;
        let close = loop {
            match prose[j..].find(&fence) {
                None => break None,
                Some(k) => {
                    let at = j + k;
                    let run = bytes[at..].iter().take_while(|b| **b == b'`').count();
                    if run == ticks {
                        break Some(at);
                    }
                    j = at + run;
                }
            }
        };
        let Some(close) = close else {
            i = open;
            continue;
        };
        let content = &prose[open..close];
        if !content.contains("\n\n") {
            // In a table cell `\|` is a `|`.
            let text = content.replace("\\|", "|").split_whitespace().collect::<Vec<_>>().join(" ");
            if text.starts_with("pinfleet ") {
                out.push(Named { line: prose[..open].matches('\n').count() + 1, text });
            }
            i = close + ticks;
        } else {
            i = open;
        }
    }
    out.sort_by_key(|n| n.line);
    out
}

/// A line without its `# comment` (a `#` after a space, outside quotes).
fn without_comment(s: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return &s[..i],
            _ => {}
        }
        prev = c;
    }
    s
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Open,
    Close,
    Bar,
}

/// Words, `[`, `]` and `|`; quotes group a word; `…` and `${{ … }}` (a
/// workflow's expression) are placeholders.
fn tokens(s: &str) -> Vec<Token> {
    let mut s = s.to_string();
    while let Some(start) = s.find("${{") {
        let end = s[start..].find("}}").map(|e| start + e + 2).unwrap_or(s.len());
        s.replace_range(start..end, "VALUE");
    }
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let flush = |word: &mut String, out: &mut Vec<Token>| {
        let w = word.replace('…', "");
        if !w.is_empty() {
            out.push(Token::Word(w));
        } else if word.contains('…') {
            out.push(Token::Word("VALUE".into()));
        }
        word.clear();
    };
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, c) if c.is_whitespace() => flush(&mut word, &mut out),
            (None, '[' | ']' | '|') => {
                flush(&mut word, &mut out);
                out.push(match c {
                    '[' => Token::Open,
                    ']' => Token::Close,
                    _ => Token::Bar,
                });
            }
            (None, c) => word.push(c),
        }
    }
    flush(&mut word, &mut out);
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Word(String),
    /// `[a | b]`: optional, one of its alternatives.
    Optional(Vec<Vec<Item>>),
}

/// Alternatives (`|`) of sequences, up to a `]` or the end.
fn alternatives(toks: &[Token], at: &mut usize) -> Vec<Vec<Item>> {
    let mut alts = vec![Vec::new()];
    while *at < toks.len() {
        let t = toks[*at].clone();
        *at += 1;
        match t {
            Token::Word(w) => alts.last_mut().unwrap().push(Item::Word(w)),
            Token::Open => {
                let inner = alternatives(toks, at);
                alts.last_mut().unwrap().push(Item::Optional(inner));
            }
            Token::Close => break,
            Token::Bar => alts.push(Vec::new()),
        }
    }
    alts.retain(|a| !a.is_empty());
    alts
}

fn is_flag(i: &Item) -> bool {
    matches!(i, Item::Word(w) if w.starts_with('-'))
}

/// How many leading words of `items` are `pinfleet` and its subcommands,
/// and at each of those lengths, the command reached.
fn path<'c>(cli: &'c clap::Command, items: &[Item]) -> Vec<(usize, &'c clap::Command)> {
    let mut out = vec![(1, cli)];
    let mut cmd = cli;
    for item in items.iter().skip(1) {
        let Item::Word(w) = item else { break };
        match cmd.find_subcommand(w) {
            Some(sub) => {
                cmd = sub;
                out.push((out.len() + 1, cmd));
            }
            None => break,
        }
    }
    out
}

/// Each alternative as a whole command: the first as written; a later one
/// that names a subcommand replaces the previous one from where that
/// subcommand goes (`list | describe ID`), one that starts with a flag
/// replaces the previous one's last flag (`--ami ID|--kubernetes-version V`),
/// and a value replaces the previous one's last word (`--target sim|kind`).
/// `cli` is None inside `[…]`, where alternatives are flags and values.
fn whole(alts: Vec<Vec<Item>>, cli: Option<&clap::Command>) -> Vec<Vec<Item>> {
    let mut out: Vec<Vec<Item>> = Vec::new();
    for alt in alts {
        let Some(prev) = out.last() else {
            out.push(alt);
            continue;
        };
        let levels = cli.map(|c| path(c, prev)).unwrap_or_default();
        let base: Vec<Item> = match &alt[0] {
            Item::Word(w) if w.starts_with('-') => match prev.iter().rposition(is_flag) {
                Some(p) => prev[..p].to_vec(),
                None => prev[..levels.last().map(|l| l.0).unwrap_or(0)].to_vec(),
            },
            Item::Word(w) => match levels.iter().rev().find(|(_, c)| c.find_subcommand(w).is_some()) {
                Some((len, _)) => prev[..*len].to_vec(),
                None => prev[..prev.len() - 1].to_vec(),
            },
            Item::Optional(_) => prev.clone(),
        };
        out.push(base.into_iter().chain(alt).collect());
    }
    out
}

/// Every command line a synopsis stands for (each `[…]` taken, one
/// alternative at a time).
fn expand(cli: &clap::Command, synopsis: &str) -> Vec<Vec<String>> {
    fn lines(items: &[Item]) -> Vec<Vec<String>> {
        let mut out = vec![Vec::new()];
        for item in items {
            out = match item {
                Item::Word(w) => out.into_iter().map(|mut l| (l.push(w.clone()), l).1).collect(),
                Item::Optional(alts) => {
                    let choices: Vec<Vec<String>> = whole(alts.clone(), None).iter().flat_map(|a| lines(a)).collect();
                    out.iter().flat_map(|l| choices.iter().map(move |c| [l.clone(), c.clone()].concat())).collect()
                }
            };
        }
        out
    }
    let toks = tokens(synopsis);
    let alts = alternatives(&toks, &mut 0);
    let mut out: Vec<Vec<String>> = whole(alts, Some(cli)).iter().flat_map(|a| lines(a)).collect();
    out.dedup();
    out
}

/// A value written as a placeholder: upper case (`CLUSTER`, `TEAM/ID`,
/// `L,`), `<x>`, or what `…` stood for.
fn placeholder(s: &str) -> bool {
    (s.starts_with('<') && s.ends_with('>'))
        || (s.chars().any(|c| c.is_ascii_uppercase()) && !s.chars().any(|c| c.is_ascii_lowercase()))
}

/// The command with every value taken as a string (for lines with placeholders).
fn loosen(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.value_parser(clap::builder::ValueParser::string())
        } else {
            a
        }
    });
    let subs: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    subs.into_iter().fold(cmd, |c, name| c.mut_subcommand(name, loosen))
}

/// Whether `argv` parses: its subcommands exist, its flags are known and
/// its values are valid (a placeholder stands for any value). A missing
/// argument or two arguments that exclude each other are fine: a synopsis
/// lists what a command takes, not one call.
fn check(cli: &clap::Command, loose: &clap::Command, argv: &[String]) -> Result<(), String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let fine = |e: &clap::Error| {
        matches!(
            e.kind(),
            ErrorKind::MissingRequiredArgument
                | ErrorKind::MissingSubcommand
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::ArgumentConflict
                | ErrorKind::TooFewValues
                | ErrorKind::WrongNumberOfValues
        )
    };
    let first_line = |e: clap::Error| e.render().to_string().lines().next().unwrap_or_default().to_string();
    match cli.clone().try_get_matches_from(argv) {
        Ok(_) => Ok(()),
        Err(e) if fine(&e) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(v)) => v.clone(),
                _ => String::new(),
            };
            if !placeholder(&value) {
                return Err(first_line(e));
            }
            match loose.clone().try_get_matches_from(argv) {
                Ok(_) => Ok(()),
                Err(e) if fine(&e) => Ok(()),
                Err(e) => Err(first_line(e)),
            }
        }
        Err(e) => Err(first_line(e)),
    }
}

/// Every named command that does not parse: `line N: argv: why`.
fn unknown_commands(markdown: &str) -> Vec<String> {
    let cli = pinfleet::cli::command();
    let loose = loosen(cli.clone());
    let mut out = Vec::new();
    for n in named_commands(markdown) {
        for argv in expand(&cli, &n.text) {
            if let Err(why) = check(&cli, &loose, &argv) {
                out.push(format!("line {}: `{}` (from `{}`): {why}", n.line, argv.join(" "), n.text));
            }
        }
    }
    out
}

/// The markdown files whose commands are checked, relative to the
/// repository: README.md, then every page of the book but the generated
/// command reference.
fn documents() -> Vec<PathBuf> {
    fn pages(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if path.is_dir() && rel != Path::new("docs/src/reference") {
                pages(root, &rel, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(rel);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![PathBuf::from("README.md")];
    pages(root, Path::new("docs/src"), &mut out);
    out
}

/// [`unknown_commands`] of one file, each as `FILE:LINE: …`.
fn unknown_commands_in(file: &Path, markdown: &str) -> Vec<String> {
    unknown_commands(markdown)
        .into_iter()
        .map(|b| format!("{}:{}", file.display(), b.strip_prefix("line ").unwrap_or(&b)))
        .collect()
}

#[test]
fn every_command_the_readme_and_the_book_name_is_one_the_cli_has() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = documents();
    // The README and the book's chapters, each read.
    assert!(files.len() > 20, "found only {files:?}");
    let (mut named, mut bad) = (0, Vec::new());
    for file in &files {
        let markdown = std::fs::read_to_string(root.join(file)).unwrap();
        let n = named_commands(&markdown).len();
        if file == Path::new("README.md") {
            // Its quick start names a handful.
            assert!(n > 5, "found only {n} commands in README.md");
        }
        named += n;
        bad.extend(unknown_commands_in(file, &markdown));
    }
    // The Commands chapter's table alone names more than twenty.
    assert!(named > 40, "found only {named} commands in the README and the book");
    assert!(bad.is_empty(), "the README and the book name commands the CLI does not have:\n{}", bad.join("\n"));
}

#[test]
fn a_failure_names_the_file_and_line() {
    let bad = unknown_commands_in(Path::new("docs/src/x.md"), "# X\n\n`pinfleet frobnicate`\n");
    assert_eq!(bad.len(), 1, "{bad:#?}");
    assert!(bad[0].starts_with("docs/src/x.md:3: `pinfleet frobnicate`"), "{}", bad[0]);
}

#[test]
fn a_command_the_cli_does_not_have_is_reported_with_its_line() {
    let md = "# Title\n\nshown by the API's view (`pinfleet gateway view`), and\n\n```sh\n\
$ pinfleet ami gc --frobnicate   # a flag no one has\npinfleet view workload TEAM/ID -o json\n```\n";
    let bad = unknown_commands(md);
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(bad[0].starts_with("line 3: `pinfleet gateway view`") && bad[0].contains("'view'"), "{}", bad[0]);
    assert!(
        bad[1].starts_with("line 6: `pinfleet ami gc --frobnicate`") && bad[1].contains("--frobnicate"),
        "{}",
        bad[1]
    );
    // A value the command refuses is reported; a placeholder is not.
    assert_eq!(unknown_commands("`pinfleet bootstrap c --target moon --yes`").len(), 1);
    assert!(unknown_commands("`pinfleet sim --nodes N` and `pinfleet completions SHELL`").is_empty());
}

#[test]
fn commands_are_found_in_blocks_continued_lines_tables_and_spans_over_lines() {
    let md =
        "| `pinfleet state lock\\|unlock CLUSTER` | x |\n\nA (`pinfleet gateway serve --trust-policy\nTEAM=FILE`).\n\n\
```yaml\n      - run: pinfleet ami rollout ${{ matrix.cluster }} --soak 30m --yes\n```\n\
```sh\npinfleet gateway serve --host-kubeconfig host.yaml \\\n  --member east=east.yaml\necho `pinfleet.dev/x`\n```\n";
    let named: Vec<(usize, String)> = named_commands(md).into_iter().map(|n| (n.line, n.text)).collect();
    assert_eq!(
        named,
        [
            (1, "pinfleet state lock|unlock CLUSTER".to_string()),
            (3, "pinfleet gateway serve --trust-policy TEAM=FILE".to_string()),
            (7, "pinfleet ami rollout ${{ matrix.cluster }} --soak 30m --yes".to_string()),
            (10, "pinfleet gateway serve --host-kubeconfig host.yaml --member east=east.yaml".to_string()),
        ]
    );
}

#[test]
fn a_synopsis_stands_for_each_of_its_alternatives() {
    let cli = pinfleet::cli::command();
    let lines = |s: &str| expand(&cli, s).into_iter().map(|l| l.join(" ")).collect::<Vec<_>>();
    assert_eq!(
        lines("pinfleet fleet rollout status|approve STAGE|revert [--yes]|unlock --force"),
        [
            "pinfleet fleet rollout status",
            "pinfleet fleet rollout approve STAGE",
            "pinfleet fleet rollout revert --yes",
            "pinfleet fleet rollout unlock --force"
        ]
    );
    assert_eq!(
        lines("pinfleet view fleet | cluster NAME | workload TEAM/ID [-o json|yaml]"),
        [
            "pinfleet view fleet",
            "pinfleet view cluster NAME",
            "pinfleet view workload TEAM/ID -o json",
            "pinfleet view workload TEAM/ID -o yaml"
        ]
    );
    assert_eq!(
        lines("pinfleet fleet rollout plan|apply [--yes] --ami ID|newest|--kubernetes-version V"),
        [
            "pinfleet fleet rollout plan",
            "pinfleet fleet rollout apply --yes --ami ID",
            "pinfleet fleet rollout apply --yes --ami newest",
            "pinfleet fleet rollout apply --yes --kubernetes-version V"
        ]
    );
    assert_eq!(
        lines("pinfleet get instances [CLUSTER|--all] --target sim|kind"),
        [
            "pinfleet get instances CLUSTER --target sim",
            "pinfleet get instances --all --target sim",
            "pinfleet get instances CLUSTER --target kind",
            "pinfleet get instances --all --target kind"
        ]
    );
    assert_eq!(lines("pinfleet validate [PATH…]"), ["pinfleet validate PATH"]);
    assert_eq!(
        lines("pinfleet ami promote node --image ami-07c… --reason \"a b\""),
        ["pinfleet ami promote node --image ami-07c --reason a b"]
    );
}
