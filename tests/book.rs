//! The book under `docs/` (an mdBook) holds together: its command
//! reference is what the command line says (drawn again here, into a
//! scratch folder, and compared with `docs/src/reference`); every page
//! `SUMMARY.md` lists exists and every page is listed (mdBook leaves an
//! unlisted page out, and with `create-missing = false` fails on a missing
//! one); and the man pages cover every command.
//!
//! `scripts/test` also builds the book with mdBook, and runs
//! `pinfleet docs reference --check` with the binary itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pinfleet::cli::docs;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src")
}

/// The subcommands `--help` lists (clap's own `help` left out).
fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

#[test]
fn the_command_reference_is_what_the_command_line_says() {
    let cli = pinfleet::cli::command();
    let pages: BTreeMap<String, String> = docs::reference(&cli).into_iter().collect();
    // An index, and a page per top-level command `--help` lists (`docs` is hidden).
    let mut want: BTreeSet<String> = visible(&cli).map(|c| format!("{}.md", c.get_name())).collect();
    want.insert("index.md".into());
    assert_eq!(pages.keys().cloned().collect::<BTreeSet<_>>(), want);
    assert!(!pages.contains_key("docs.md"), "the hidden `docs` command has no page");

    let scratch = tempfile::tempdir().unwrap();
    docs::write_pages(scratch.path(), &pages).unwrap();
    let fresh = docs::read_pages(scratch.path()).unwrap();
    assert_eq!(fresh, pages, "the pages read back as they were written");

    let committed = docs::read_pages(&src().join("reference")).unwrap();
    let diff = docs::diff_pages(&committed, &fresh, Path::new(docs::REFERENCE_DIR));
    assert!(
        diff.is_empty(),
        "{} is not what the command line says:\n{diff}\nregenerate it: {}",
        docs::REFERENCE_DIR,
        docs::REGENERATE
    );
}

/// The pages `SUMMARY.md` links to, as paths under `docs/src`.
fn summary_links(summary: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = summary;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

/// Every `.md` file under `dir`, relative to `root`, with `/` between folders.
fn pages_under(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages_under(root, &path, out);
        } else if path.extension().is_some_and(|x| x == "md") {
            let rel = path.strip_prefix(root).unwrap();
            out.push(rel.iter().map(|p| p.to_string_lossy()).collect::<Vec<_>>().join("/"));
        }
    }
}

#[test]
fn the_summary_lists_every_page_and_every_page_it_lists_exists() {
    let summary = std::fs::read_to_string(src().join("SUMMARY.md")).unwrap();
    let listed = summary_links(&summary);
    assert!(listed.len() > 20, "SUMMARY.md lists only {listed:?}");
    let mut seen = BTreeSet::new();
    let twice: Vec<&String> = listed.iter().filter(|p| !seen.insert(p.as_str())).collect();
    assert!(twice.is_empty(), "SUMMARY.md lists these pages twice: {twice:?}");

    let missing: Vec<&String> = listed.iter().filter(|p| !src().join(p).is_file()).collect();
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists pages docs/src does not have: {missing:?}\n\
         (pages under reference/ are generated: {})",
        docs::REGENERATE
    );

    let mut pages = Vec::new();
    pages_under(&src(), &src(), &mut pages);
    pages.sort();
    let unlisted: Vec<&String> =
        pages.iter().filter(|p| p.as_str() != "SUMMARY.md" && !seen.contains(p.as_str())).collect();
    assert!(
        unlisted.is_empty(),
        "pages under docs/src that SUMMARY.md does not list (the book would leave them out): {unlisted:?}"
    );
}

#[test]
fn the_summary_is_read_as_mdbook_reads_it() {
    let summary = "# Summary\n\n[Intro](introduction.md)\n\n# Part\n\n- [A](a.md)\n  - [B](reference/b.md)\n";
    assert_eq!(summary_links(summary), ["introduction.md", "a.md", "reference/b.md"]);
}

#[test]
fn a_man_page_per_command() {
    let cli = pinfleet::cli::command();
    let pages = docs::man_pages(&cli).unwrap();
    let names: BTreeSet<String> = pages.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names.len(), pages.len(), "a man page drawn twice");

    // `pinfleet.1`, then `pinfleet-CMD.1` and `pinfleet-CMD-SUB.1` for
    // every command and subcommand `--help` lists.
    fn every(cmd: &clap::Command, stem: &str, out: &mut BTreeSet<String>) {
        out.insert(format!("{stem}.1"));
        for sub in visible(cmd) {
            every(sub, &format!("{stem}-{}", sub.get_name()), out);
        }
    }
    let mut want = BTreeSet::new();
    every(&cli, "pinfleet", &mut want);
    assert!(want.len() > 32, "only {} commands: {want:?}", want.len());
    assert_eq!(names, want, "a man page per command and subcommand");
    assert!(!names.iter().any(|n| n.starts_with("pinfleet-docs")), "the hidden `docs` command has no man page");

    for (name, page) in &pages {
        let page = String::from_utf8(page.clone()).unwrap_or_else(|e| panic!("{name}: not UTF-8: {e}"));
        assert!(page.contains(".TH ") && page.contains(".SH NAME") && page.contains(".SH SYNOPSIS"), "{name}:\n{page}");
    }
}

#[test]
fn the_readmes_map_of_the_book_names_pages_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let links: Vec<String> = summary_links(&readme).into_iter().filter(|l| l.starts_with("docs/")).collect();
    assert!(links.len() > 20, "README.md maps only {links:?}");
    let missing: Vec<&String> = links.iter().filter(|l| !root.join(l.split('#').next().unwrap()).is_file()).collect();
    assert!(missing.is_empty(), "README.md links to pages the book does not have: {missing:?}");
}
