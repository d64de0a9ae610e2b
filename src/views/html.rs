//! HTML for the console (pure): the page around a view, escaping, tables
//! and status badges. No script writes data into a page: the server draws
//! every page, and the one script only asks for a fresh copy of `<main>`
//! when the server says something changed (server-sent events).
//!
//! Built for people: landmarks and a skip link, real table headers,
//! statuses as a symbol and a word (colour is a second cue, in the
//! Okabe–Ito palette that holds for colour-blind readers, with dark text on
//! light tints for contrast), a layout that reflows to a phone's width.

use std::fmt::Write as _;

use super::{Status, Viewer};

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment, escaped for a URL (team, cluster and ids are DNS-like,
/// but nothing is trusted).
pub fn seg(s: &str) -> String {
    // Unreserved characters (RFC 3986) stay as they are.
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// A status as a badge; with a link when its reason is shown elsewhere.
pub fn badge(s: &Status) -> String {
    let tone = format!("{:?}", s.tone).to_lowercase();
    let inner = format!(
        "<span class=\"badge b-{tone}\"><span aria-hidden=\"true\">{}</span> {}</span>",
        s.tone.symbol(),
        esc(&s.label)
    );
    let reason = s.reason.as_deref().map(|r| format!(" <span class=\"why\">{}</span>", esc(r))).unwrap_or_default();
    match &s.link {
        Some(l) => format!("<a class=\"status\" href=\"{}\">{inner}</a>{reason}", esc(l)),
        None => format!("{inner}{reason}"),
    }
}

/// A table: a caption (its accessible name), headers, rows of HTML cells
/// (already escaped by the caller). Wrapped so it scrolls sideways on a
/// narrow screen instead of breaking the page.
pub fn table(caption: &str, head: &[&str], rows: &[Vec<String>], id: &str) -> String {
    let mut out = String::with_capacity(64 * rows.len() * head.len().max(1) + 256);
    let _ = write!(
        out,
        "<div class=\"scroll\" role=\"region\" aria-labelledby=\"{id}-cap\" tabindex=\"0\"><table id=\"{id}\"><caption id=\"{id}-cap\">{}</caption><thead><tr>",
        esc(caption)
    );
    for h in head {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        let _ = write!(out, "<tr><td colspan=\"{}\" class=\"none\">none</td></tr>", head.len().max(1));
    }
    for r in rows {
        out.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "<th scope=\"row\">{c}</th>");
            } else {
                let _ = write!(out, "<td>{c}</td>");
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// Rows per page in the console's long tables (a page of thousands of rows
/// takes the browser seconds to lay out; JSON and text carry every row).
pub const PAGE: usize = 200;

/// The rows of `page` (1-based) and the pager under them: which rows are
/// shown, of how many, and links to the pages before and after.
pub fn paged<T>(rows: &[T], page: usize, path: &str, what: &str) -> (std::ops::Range<usize>, String) {
    let pages = rows.len().div_ceil(PAGE).max(1);
    let page = page.clamp(1, pages);
    let range = ((page - 1) * PAGE).min(rows.len())..(page * PAGE).min(rows.len());
    if pages == 1 {
        return (range, String::new());
    }
    let link = |p: usize, text: &str, rel: &str| format!("<a href=\"{}?page={p}\" rel=\"{rel}\">{text}</a>", esc(path));
    let mut nav = format!(
        "<nav class=\"pager\" aria-label=\"Pages of {}\"><p>{}–{} of {} {} · page {page} of {pages}",
        esc(what),
        range.start + 1,
        range.end,
        rows.len(),
        esc(what)
    );
    if page > 1 {
        let _ = write!(nav, " · {}", link(page - 1, "‹ previous", "prev"));
    }
    if page < pages {
        let _ = write!(nav, " · {}", link(page + 1, "next ›", "next"));
    }
    nav.push_str("</p></nav>");
    (range, nav)
}

/// A definition list of label → HTML value.
pub fn facts(items: &[(&str, String)]) -> String {
    let mut out = String::from("<dl class=\"facts\">");
    for (k, v) in items {
        let _ = write!(out, "<div><dt>{}</dt><dd>{v}</dd></div>", esc(k));
    }
    out.push_str("</dl>");
    out
}

/// The page around a view's body. `teams` are the viewer's (for the
/// navigation); `current` is the page's path (marked for screen readers).
pub fn page(title: &str, current: &str, viewer: &Viewer, body: &str) -> String {
    let mut nav = String::new();
    let mut link = |href: &str, text: &str| {
        let cur = if href == current { " aria-current=\"page\"" } else { "" };
        let _ = write!(nav, "<li><a href=\"{}\"{cur}>{}</a></li>", esc(href), esc(text));
    };
    link("/", "Fleet");
    for t in &viewer.teams {
        link(&format!("/teams/{}", seg(t)), &format!("Team {t}"));
    }
    let sign = if viewer.via == "loopback" || viewer.via.is_empty() {
        "<a href=\"/login\">Sign in with a token</a>".to_string()
    } else {
        // A POST (a GET changes nothing), carrying the viewer's token.
        format!(
            "<form class=\"signout\" method=\"post\" action=\"/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\"><button type=\"submit\">Sign out</button></form>",
            esc(&viewer.csrf)
        )
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{t} · pinfleet</title><link rel=\"stylesheet\" href=\"/ui/console.css\"></head>\
<body><a class=\"skip\" href=\"#content\">Skip to content</a>\
<header><p class=\"brand\">pinfleet</p><nav aria-label=\"Main\"><ul>{nav}</ul></nav>\
<div class=\"who\">{who} · {sign}</div></header>\
<main id=\"content\" tabindex=\"-1\">{body}</main>\
<footer><p id=\"live\" role=\"status\" aria-live=\"polite\">Live updates: connecting…</p></footer>\
<script src=\"/ui/console.js\"></script></body></html>\n",
        t = esc(title),
        who = esc(&viewer.note()),
    )
}

/// The console's one style sheet.
pub const CSS: &str = r#"
:root{--fg:#1a1a1a;--muted:#4a4a4a;--bg:#fff;--line:#c8c8c8;--link:#0b5cad;
--ok:#009E73;--ok-bg:#daf2e8;--progress:#0072B2;--progress-bg:#d6e8f5;--warn:#E69F00;--warn-bg:#fcebc7;
--bad:#D55E00;--bad-bg:#f9dccb;--stale:#6b6b6b;--stale-bg:#e8e8e8;--unknown:#8a8a8a;--unknown-bg:#f0f0f0}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
a{color:var(--link)}
a:focus,[tabindex]:focus{outline:3px solid var(--progress);outline-offset:2px}
.skip{position:absolute;left:-999px;top:0;background:#fff;padding:.5em}
.skip:focus{left:.5em}
header{display:flex;flex-wrap:wrap;gap:.5em 1.5em;align-items:center;padding:.6em 1em;border-bottom:1px solid var(--line);background:#f7f7f7}
.brand{font-weight:700;margin:0}
nav ul{display:flex;flex-wrap:wrap;gap:.25em 1em;list-style:none;margin:0;padding:0}
nav a[aria-current=page]{font-weight:700;text-decoration-thickness:3px}
.who{margin:0;color:var(--muted);font-size:.9em}
.signout{display:inline;margin:0}.signout button{font:inherit;color:var(--link, #0645ad);background:none;border:0;padding:0;text-decoration:underline;cursor:pointer}
main{padding:1em;max-width:100rem}
h1{font-size:1.5em;margin:.2em 0 .6em}
h2{font-size:1.15em;margin:1.4em 0 .5em}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;min-width:100%}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{text-align:left;vertical-align:top;padding:.35em .6em;border-bottom:1px solid var(--line)}
thead th{border-bottom:2px solid var(--fg);white-space:nowrap}
tbody th{font-weight:600}
td.none{color:var(--muted)}
.badge{display:inline-block;padding:0 .45em;border-radius:.3em;border-left:4px solid;white-space:nowrap}
.b-ok{background:var(--ok-bg);border-color:var(--ok)}
.b-progress{background:var(--progress-bg);border-color:var(--progress)}
.b-warn{background:var(--warn-bg);border-color:var(--warn)}
.b-bad{background:var(--bad-bg);border-color:var(--bad)}
.b-stale{background:var(--stale-bg);border-color:var(--stale)}
.b-unknown{background:var(--unknown-bg);border-color:var(--unknown)}
a.status{text-decoration:none}
a.status .badge{text-decoration:underline}
.why{color:var(--muted);font-size:.92em}
.pager p{margin:.5em 0}
.chart{margin:.5em 0 1em;max-width:40em}
.chart svg{width:100%;height:7.5em;border-left:1px solid var(--line)}
.chart figcaption{font-size:.85em;color:var(--muted)}
.key{white-space:nowrap}
.key-cpu{border-bottom:2px solid var(--progress)}
.key-mem{border-bottom:2px dashed var(--bad)}
.key-pods{border-bottom:2px dotted var(--ok)}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(10em,1fr));gap:.4em 1em;margin:0 0 1em}
.facts dt{color:var(--muted);font-size:.85em}
.facts>div{min-width:0}
.facts dd{margin:0;overflow-wrap:anywhere}
td{overflow-wrap:anywhere}
td code,td a{overflow-wrap:anywhere}
.injected{background:var(--warn-bg);border-left:4px solid var(--warn)}
pre{background:#f4f4f4;padding:.8em;overflow-x:auto;font-size:.9em}
.stale-note{background:var(--stale-bg);border-left:4px solid var(--stale);padding:.5em .8em}
footer{padding:.5em 1em;color:var(--muted);font-size:.85em;border-top:1px solid var(--line)}
form label{display:block;margin:.5em 0 .2em}
textarea{width:100%;max-width:40em;min-height:6em;font:inherit}
button{font:inherit;padding:.3em 1em}
@media (max-width:40rem){main{padding:.6em}th,td{padding:.3em .4em}}
"#;

/// The console's one script: when the server says something changed, ask
/// for a fresh `<main>` (the server draws it) and say when it arrived.
pub const JS: &str = r#"(function () {
  var live = document.getElementById('live');
  var main = document.getElementById('content');
  if (!window.EventSource || !main) { if (live) live.textContent = 'Live updates unavailable in this browser: reload to refresh.'; return; }
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, { headers: { 'x-pinfleet-fragment': '1' }, credentials: 'same-origin' })
      .then(function (r) { if (!r.ok) throw new Error('the server answered ' + r.status); return r.text(); })
      .then(function (t) {
        main.innerHTML = t;
        document.body.setAttribute('data-updates', String(Number(document.body.getAttribute('data-updates') || 0) + 1));
        live.textContent = 'Live: updated ' + new Date().toLocaleTimeString();
      })
      .catch(function (e) { live.textContent = 'Live updates paused: ' + e.message; })
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var es = new EventSource('/ui/events');
  es.addEventListener('open', function () { live.textContent = 'Live: connected'; });
  es.addEventListener('change', refresh);
  es.addEventListener('error', function () { live.textContent = 'Live updates: reconnecting…'; });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::Tone;

    #[test]
    fn long_tables_are_paged() {
        let rows: Vec<usize> = (0..450).collect();
        let (r, nav) = paged(&rows, 1, "/teams/a", "queued");
        assert_eq!(r, 0..200);
        assert!(nav.contains("1–200 of 450 queued · page 1 of 3") && nav.contains("href=\"/teams/a?page=2\""), "{nav}");
        let (r, nav) = paged(&rows, 3, "/teams/a", "queued");
        assert_eq!(r, 400..450);
        assert!(nav.contains("?page=2") && !nav.contains("next"), "{nav}");
        assert_eq!(paged(&rows, 9, "/x", "q").0, 400..450, "past the end: the last page");
        assert_eq!(paged(&rows[..10], 1, "/x", "q"), (0..10, String::new()), "one page: no pager");
    }

    #[test]
    fn text_and_attributes_are_escaped() {
        assert_eq!(esc("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
        assert_eq!(seg("web-1.a_b~"), "web-1.a_b~");
    }

    #[test]
    fn a_status_is_a_symbol_and_a_word_and_links_to_its_reason() {
        let s = Status::new(Tone::Bad, "failed").because("2 checks <failed>").at("/clusters/a#e2e");
        insta::assert_snapshot!(badge(&s), @r#"<a class="status" href="/clusters/a#e2e"><span class="badge b-bad"><span aria-hidden="true">✗</span> failed</span></a> <span class="why">2 checks &lt;failed&gt;</span>"#);
    }
}
