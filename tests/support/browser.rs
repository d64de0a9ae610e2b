//! A real browser for the console's tests and benchmark: Debian's headless
//! Chromium driven through chromedriver (WebDriver, on loopback), and
//! axe-core for accessibility scans. scripts/test installs all three; a
//! run without them fails saying how to get them, it never passes quietly.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::{json, Value};

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn which(cmd: &str, env: &str, fallback: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(fallback);
    assert!(
        p.exists(),
        "{cmd} not found at {fallback} (set {env}): scripts/test installs Debian's chromium and chromium-driver \
         (apt-get install chromium chromium-driver)"
    );
    p
}

/// axe-core's script (scripts/test installs it with npm and sets PINFLEET_AXE_JS).
pub fn axe_source() -> String {
    let path = std::env::var("PINFLEET_AXE_JS").map(PathBuf::from).unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        PathBuf::from(target).join("npm/node_modules/axe-core/axe.min.js")
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core not found at {} ({e}): scripts/test installs it (npm install --prefix $CARGO_TARGET_DIR/npm axe-core), \
             or set PINFLEET_AXE_JS",
            path.display()
        )
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Browser {
    /// Headless Chromium at this window size, with a fresh profile.
    pub async fn start(width: u32, height: u32) -> Browser {
        Browser::start_with(width, height, &[]).await
    }

    /// [`Browser::start`] with more Chromium flags (`--host-resolver-rules=…`).
    pub async fn start_with(width: u32, height: u32, extra: &[&str]) -> Browser {
        let chromium = which("chromium", "PINFLEET_CHROMIUM", "/usr/bin/chromium");
        let chromedriver = which("chromedriver", "PINFLEET_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", chromedriver.display()));
        let profile = tempfile::tempdir().unwrap();
        // The flags this machine's closed network needs (without them
        // Chromium reaches out at start and is refused, many times over).
        let args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-extensions".into(),
            format!("--user-data-dir={}", profile.path().display()),
            format!("--window-size={width},{height}"),
        ]
        .into_iter()
        .chain(extra.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>();
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert("goog:chromeOptions".into(), json!({"binary": chromium, "args": args}));
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser { client, driver, _profile: profile };
                }
                Err(e) => {
                    last = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        let mut driver = driver;
        let _ = driver.kill();
        let _ = driver.wait();
        panic!("chromedriver at {url} did not start a session: {}", last.unwrap_or_default());
    }

    /// Ends the browser session and the driver.
    pub async fn stop(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }

    pub async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Waits (up to `within`) until `script` returns true; the last value on timeout.
    pub async fn until(&self, what: &str, script: &str, within: Duration) {
        let end = std::time::Instant::now() + within;
        let mut last = Value::Null;
        while std::time::Instant::now() < end {
            last = self.client.execute(script, vec![]).await.unwrap_or(Value::Null);
            if last == Value::Bool(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = self.eval("return document.body ? document.body.innerText : ''").await;
        panic!("{what}: not within {within:?} (last: {last})\npage text:\n{}", text.as_str().unwrap_or_default());
    }

    /// Pieces of text drawn over other text on the current page, at its
    /// current width: each text node's own boxes (one per line it wraps
    /// to), clipped by the scrolling or hidden-overflow boxes around it,
    /// compared with every other text node's. Each overlap as "`a` over `b`".
    pub async fn text_overlaps(&self) -> Vec<String> {
        let v = self.eval(TEXT_OVERLAPS).await;
        v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()).unwrap_or_default()
    }

    /// axe-core's violations on the current page: (rule, impact, help, nodes).
    pub async fn axe(&self, source: &str) -> Vec<(String, String, String, u64)> {
        self.client.execute(&format!("{source}\n;return true;"), vec![]).await.expect("loading axe-core");
        let r = self
            .client
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 axe.run(document, {resultTypes: ['violations']})\
                   .then(r => done(r.violations.map(v => [v.id, v.impact || '', v.help, v.nodes.length])))\
                   .catch(e => done({error: String(e)}));",
                vec![],
            )
            .await
            .expect("running axe-core");
        assert!(r.get("error").is_none(), "axe-core failed: {r}");
        r.as_array()
            .expect("a list of violations")
            .iter()
            .map(|v| {
                (
                    v[0].as_str().unwrap_or_default().to_string(),
                    v[1].as_str().unwrap_or_default().to_string(),
                    v[2].as_str().unwrap_or_default().to_string(),
                    v[3].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Saves a screenshot of the page (a test artifact).
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = std::env::var("PINFLEET_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(|_| {
            PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
                .join("console-screenshots")
        });
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{name}.png"));
        std::fs::write(&p, png).unwrap();
        p
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // A session not closed (a test that failed) leaves its Chromium
        // behind the driver: end every process of this profile.
        let _ = Command::new("pkill").arg("-f").arg(self._profile.path()).status();
    }
}

const TEXT_OVERLAPS: &str = r#"
const boxes = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
let n;
while ((n = walker.nextNode())) {
  if (!n.textContent.trim()) continue;
  const el = n.parentElement;
  if (!el || el.closest('script,style,noscript,title')) continue;
  const st = getComputedStyle(el);
  if (st.visibility === 'hidden' || st.display === 'none') continue;
  const range = document.createRange();
  range.selectNodeContents(n);
  for (const b of range.getClientRects()) {
    let r = {l: b.left, t: b.top, r: b.right, b: b.bottom};
    // What a scrolling or clipping box around it hides is not drawn.
    for (let e = el; e && e !== document.documentElement; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (/(hidden|clip|auto|scroll)/.test(s.overflowX + ' ' + s.overflowY)) {
        const c = e.getBoundingClientRect();
        r = {l: Math.max(r.l, c.left), t: Math.max(r.t, c.top), r: Math.min(r.r, c.right), b: Math.min(r.b, c.bottom)};
      }
    }
    if (r.r - r.l > 2 && r.b - r.t > 2) boxes.push({r, n});
  }
}
const out = [];
for (let i = 0; i < boxes.length && out.length < 20; i++) {
  for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.n === b.n) continue;
    const w = Math.min(a.r.r, b.r.r) - Math.max(a.r.l, b.r.l);
    const h = Math.min(a.r.b, b.r.b) - Math.max(a.r.t, b.r.t);
    if (w > 1 && h > 1) {
      out.push('`' + a.n.textContent.trim().slice(0, 60) + '` over `' + b.n.textContent.trim().slice(0, 60) + '` (' + Math.round(w) + 'x' + Math.round(h) + ' px)');
    }
  }
}
return out;
"#;
