//! A real Prometheus on loopback for one test (Debian's package, unpacked
//! by scripts/test: PINFLEET_PROMETHEUS_DIR), its data backfilled with
//! `promtool tsdb create-blocks-from openmetrics` before it starts; and
//! the request counters a workload's versions export on each cluster.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var("PINFLEET_PROMETHEUS_DIR").ok().filter(|d| !d.is_empty()).expect(
        "Prometheus is needed: run scripts/test (it unpacks Debian's prometheus package), or set PINFLEET_PROMETHEUS_DIR to the folder holding prometheus and promtool",
    );
    PathBuf::from(dir).join(name)
}

pub struct Prometheus {
    pub url: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Prometheus {
    /// Backfills `openmetrics` (ending in `# EOF`) and serves it.
    pub fn start(openmetrics: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let om = dir.path().join("data.om");
        std::fs::write(&om, openmetrics).unwrap();
        let data = dir.path().join("tsdb");
        let out = Command::new(bin("promtool"))
            .args(["tsdb", "create-blocks-from", "openmetrics"])
            .arg(&om)
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "promtool backfill: {}", String::from_utf8_lossy(&out.stderr));
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1h\n").unwrap();
        let port = free_port();
        let mut cmd = Command::new(bin("prometheus"));
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap());
        #[cfg(target_os = "linux")]
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                // Dies with the thread that started it (the test's), however the test ends.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let p = Prometheus { url: url.clone(), child, _dir: dir };
        for _ in 0..300 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let _ = s.write_all(b"GET /-/ready HTTP/1.0\r\n\r\n");
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
                    return p;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("Prometheus did not become ready on {url}");
    }
}

/// `http_requests_total` of one workload version on one cluster, every 15 s
/// from an hour ago to two hours ahead, at 100 requests/s with this share
/// of 5xx answers.
pub fn requests(out: &mut String, cluster: &str, version: &str, error_share: f64) {
    let now = chrono::Utc::now().timestamp();
    let (start, end) = (now - 3600, now + 7200);
    let mut t = start;
    let (mut ok, mut bad) = (0.0f64, 0.0f64);
    while t <= end {
        let labels = |code: &str| {
            format!(r#"cluster="{cluster}",namespace="feeds",workload="web",version="{version}",code="{code}""#)
        };
        out.push_str(&format!("http_requests_total{{{}}} {ok} {t}\n", labels("200")));
        out.push_str(&format!("http_requests_total{{{}}} {bad} {t}\n", labels("500")));
        ok += 1500.0 * (1.0 - error_share);
        bad += 1500.0 * error_share;
        t += 15;
    }
}

/// The OpenMetrics document: a TYPE line, every series, `# EOF`.
pub fn openmetrics(series: &str) -> String {
    // Samples of one series must be contiguous and in time order: sort by series, then time.
    let mut lines: Vec<&str> = series.lines().filter(|l| !l.is_empty()).collect();
    lines.sort_by_key(|l| {
        let (name, rest) = l.split_once('}').unwrap_or((l, ""));
        let t: i64 = rest.split_whitespace().nth(1).and_then(|t| t.parse().ok()).unwrap_or(0);
        (name.to_string(), t)
    });
    format!("# TYPE http_requests counter\n{}\n# EOF\n", lines.join("\n"))
}
