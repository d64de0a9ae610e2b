//! etcd's own binaries on this machine, and a scratch etcd on loopback:
//! a snapshot restored by `etcdutl snapshot restore` into a temporary
//! folder and served by `etcd` on free ports, stopped (and its folder
//! removed) when dropped. The verifier and the restore drill use it; a
//! member's restore runs the same `etcdutl` with the cluster's names.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// Where `etcd` and `etcdutl` are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: Option<PathBuf>,
}

impl Binaries {
    /// `PINFLEET_ETCD_DIR`, else `PATH`; None when `etcdutl` is in neither.
    pub fn find() -> Option<Binaries> {
        if let Some(d) = std::env::var_os("PINFLEET_ETCD_DIR") {
            let dir = PathBuf::from(d);
            return dir.join("etcdutl").is_file().then_some(Binaries { dir: Some(dir) });
        }
        let on_path = std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join("etcdutl").is_file() && d.join("etcd").is_file())
        });
        on_path.then_some(Binaries { dir: None })
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        match &self.dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        }
    }

    /// `etcd --version`'s version (`3.5.1`).
    pub fn version(&self) -> Result<String> {
        let out = Command::new(self.bin("etcd")).arg("--version").output().context("running etcd --version")?;
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("etcd Version: "))
            .map(|v| v.trim().to_string())
            .context("etcd --version said no version")
    }

    /// `etcdutl snapshot restore` of `snapshot` into `data_dir` as member
    /// `name` of a new cluster (`initial_cluster`, `token`).
    pub fn restore(
        &self,
        snapshot: &Path,
        data_dir: &Path,
        name: &str,
        peer_url: &str,
        initial_cluster: &str,
        token: &str,
    ) -> Result<()> {
        let out = Command::new(self.bin("etcdutl"))
            .arg("snapshot")
            .arg("restore")
            .arg(snapshot)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--name", name, "--initial-advertise-peer-urls", peer_url])
            .args(["--initial-cluster", initial_cluster, "--initial-cluster-token", token])
            .output()
            .context("running etcdutl snapshot restore")?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            bail!("etcdutl snapshot restore of {} failed: {last}", snapshot.display());
        }
        Ok(())
    }
}

/// How a member's failed start says its port was taken meanwhile.
pub const PORT_TAKEN: &str = "its port was taken before it started";

/// A free port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One etcd process serving a data folder on loopback.
pub struct Member {
    child: Option<Child>,
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    /// Removed on drop (a scratch member's folder).
    scratch: Option<PathBuf>,
    /// Where its output goes (read when it ends before it answers).
    log: Option<PathBuf>,
}

impl Member {
    /// Starts `etcd` for `data_dir` (already restored or new).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        bins: &Binaries,
        name: &str,
        data_dir: &Path,
        client_port: u16,
        peer_port: u16,
        initial_cluster: &str,
        token: &str,
        log: &Path,
    ) -> Result<Member> {
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log_path = log.to_path_buf();
        let log = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(bins.bin("etcd"));
        // The member ends with the thread that started it, however that
        // ends: an agent killed while it verifies leaves no scratch etcd
        // running (tokio's workers live as long as their runtime).
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .args(["--name", name])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial_cluster, "--initial-cluster-token", token])
            .args(["--initial-cluster-state", "new", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting etcd")?;
        Ok(Member {
            child: Some(child),
            name: name.to_string(),
            client_url,
            peer_url,
            data_dir: data_dir.to_path_buf(),
            scratch: None,
            log: Some(log_path),
        })
    }

    /// Restores `snapshot` into a new temporary folder and serves it alone.
    /// A free port is free only until someone else takes it: a member that
    /// ends before it answers because its port was taken meanwhile is
    /// started again on other ports (three tries).
    pub async fn scratch(bins: &Binaries, snapshot: &Path) -> Result<Member> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Member::scratch_once(bins, snapshot).await {
                Err(e) if tries < 3 && e.to_string().contains(PORT_TAKEN) => {
                    tracing::debug!("a scratch etcd's port was taken before it started; trying others: {e:#}");
                }
                other => return other,
            }
        }
    }

    async fn scratch_once(bins: &Binaries, snapshot: &Path) -> Result<Member> {
        let dir = std::env::temp_dir().join(format!(
            "pinfleet-scratch-etcd-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        let (cp, pp) = (free_port()?, free_port()?);
        let peer = format!("http://127.0.0.1:{pp}");
        let cluster = format!("scratch={peer}");
        let data = dir.join("data");
        let restored = bins.restore(snapshot, &data, "scratch", &peer, &cluster, "pinfleet-scratch");
        if let Err(e) = restored {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        let mut m = Member::start(bins, "scratch", &data, cp, pp, &cluster, "pinfleet-scratch", &dir.join("etcd.log"))?;
        m.scratch = Some(dir);
        m.ready(Duration::from_secs(30)).await?;
        Ok(m)
    }

    /// Waits until the member answers a status call.
    pub async fn ready(&mut self, within: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    // A port taken since it was found free says so (the caller may try others).
                    let log = self.log.as_ref().and_then(|l| std::fs::read_to_string(l).ok()).unwrap_or_default();
                    if log.contains("address already in use") {
                        bail!("etcd {} exited ({status}) before it answered: {PORT_TAKEN}", self.name);
                    }
                    bail!("etcd {} exited ({status}) before it answered", self.name);
                }
            }
            if let Ok(mut c) = etcd_client::Client::connect([self.client_url.as_str()], None).await {
                if c.status().await.is_ok() {
                    return Ok(());
                }
            }
            if t0.elapsed() > within {
                bail!("etcd {} did not answer at {} within {within:?}", self.name, self.client_url);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn client(&self) -> Result<etcd_client::Client> {
        etcd_client::Client::connect([self.client_url.as_str()], None)
            .await
            .with_context(|| format!("connecting to etcd at {}", self.client_url))
    }

    /// Kills the process (a disaster, or the end of a scratch restore).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
        if let Some(d) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
