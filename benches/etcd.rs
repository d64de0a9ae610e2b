//! etcd backups against three real etcd members on 127.0.0.1 (etcd's
//! binaries from PINFLEET_ETCD_DIR; scripts/bench-etcd installs them and
//! starts moto for the state store): the real `pinfleet` binary takes a
//! backup and proves it by a restore, then the members are killed, their
//! folders deleted, and `pinfleet etcd restore` brings them back.
//!
//! Prints, per size (PINFLEET_BENCH_ETCD_KEYS small keys; then
//! PINFLEET_BENCH_ETCD_BIG_MIB of 1 MiB values, 0 to skip): the backup's
//! time and the verification's, the backup process's peak memory (its
//! maxrss) against the snapshot's size, each restore phase and the RTO,
//! and beside it the bump's size and time (from the restore's record of
//! it: how many revisions, etcdutl's or written, and why that is enough);
//! and, with the agent following deltas every second while a writer
//! counts, the RPO as measured (the newest write that survived).
//! Measures; asserts only that what was backed up came back.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, Txn, TxnOp};
use pinfleet::etcd::scratch::{free_port, Binaries, Member};

const NAMES: [&str; 3] = ["cp-a", "cp-b", "cp-c"];

struct Trio {
    dir: std::path::PathBuf,
    ports: Vec<(u16, u16)>,
    members: Vec<Member>,
    bins: Binaries,
}

impl Trio {
    fn new(bins: Binaries, dir: &Path) -> Trio {
        let ports = (0..3).map(|_| (free_port().unwrap(), free_port().unwrap())).collect();
        Trio { dir: dir.to_path_buf(), ports, members: Vec::new(), bins }
    }
    fn endpoints(&self) -> String {
        self.ports.iter().map(|(c, _)| format!("http://127.0.0.1:{c}")).collect::<Vec<_>>().join(",")
    }
    fn cluster(&self) -> String {
        (0..3).map(|i| format!("{}=http://127.0.0.1:{}", NAMES[i], self.ports[i].1)).collect::<Vec<_>>().join(",")
    }
    fn data(&self, i: usize) -> std::path::PathBuf {
        self.dir.join(NAMES[i])
    }
    async fn boot(&mut self) {
        let cluster = self.cluster();
        for i in 0..3 {
            let log = self.dir.join(format!("{}.log", NAMES[i]));
            let m = Member::start(
                &self.bins,
                NAMES[i],
                &self.data(i),
                self.ports[i].0,
                self.ports[i].1,
                &cluster,
                "bench",
                &log,
            )
            .unwrap();
            self.members.push(m);
        }
        for m in &mut self.members {
            m.ready(Duration::from_secs(60)).await.unwrap();
        }
    }
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

fn pinfleet(state: &str, args: &[&str]) -> Command {
    // PINFLEET_BIN: a copy of the binary (a build folder shared by several
    // checkouts may swap the one cargo names while the bench runs).
    let bin = std::env::var("PINFLEET_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pinfleet").to_string());
    let mut c = Command::new(bin);
    c.args(args).arg("--state").arg(state).env("NO_COLOR", "1").env("PINFLEET_CLUSTERS_DIR", "/nonexistent");
    c
}

/// Runs to the end; (stdout, wall time, the child's peak RSS in MiB).
fn timed(mut c: Command) -> (String, Duration, f64) {
    let t0 = Instant::now();
    let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let out = child.wait_with_output();
    let took = t0.elapsed();
    let out = out.unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // The largest resident set of any child so far (ours run one at a time
    // and grow: the newest is the one measured unless an earlier was larger).
    let _ = pid;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    (String::from_utf8_lossy(&out.stdout).to_string(), took, ru.ru_maxrss as f64 / 1024.0)
}

async fn load_small(c: &mut Client, keys: usize) {
    let value = vec![b'x'; 100];
    let mut i = 0;
    while i < keys {
        let ops: Vec<TxnOp> = (i..(i + 128).min(keys))
            .map(|k| TxnOp::put(format!("/registry/configmaps/ns-{:03}/cm-{k:07}", k % 100), value.clone(), None))
            .collect();
        i += ops.len();
        c.txn(Txn::new().and_then(ops)).await.unwrap();
    }
}

async fn load_big(c: &mut Client, mib: usize) {
    let value = vec![b'y'; 1 << 20];
    for k in 0..mib {
        c.put(format!("/registry/secrets/big/s-{k:05}"), value.clone(), None).await.unwrap();
    }
}

async fn count(c: &mut Client, prefix: &str) -> i64 {
    c.get(prefix, Some(GetOptions::new().with_prefix().with_count_only())).await.unwrap().count()
}

/// Restores while playing the kubelet: the members start when the command says.
async fn restore(trio: &mut Trio, state: &str, cluster: &str) -> String {
    let mut args: Vec<String> =
        vec!["etcd".into(), "restore".into(), cluster.into(), "--endpoints".into(), trio.endpoints()];
    for i in 0..3 {
        args.push("--member".into());
        args.push(format!("{}=http://127.0.0.1:{}={}", NAMES[i], trio.ports[i].1, trio.data(i).display()));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = pinfleet(state, &argv).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut tx = Some(tx);
        for l in std::io::BufReader::new(stdout).lines() {
            let l = l.unwrap();
            if l.starts_with("waiting for the restored members") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
            text.push_str(&l);
            text.push('\n');
        }
        text
    });
    let said = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(600)).is_ok()).await.unwrap();
    assert!(said, "the restore never got to its members");
    trio.boot().await;
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    let text = reader.join().unwrap();
    assert!(status.success(), "{text}");
    text
}

/// The newest bump a restore of `cluster` recorded in the state store.
async fn last_bump(state: &str, cluster: &str) -> Option<pinfleet::etcd::manifest::Bumped> {
    let aws = if state.starts_with("s3://") {
        let opts = pinfleet::cloud::aws::AwsOptions { region: std::env::var("AWS_REGION").ok(), ..Default::default() };
        Some(pinfleet::cloud::aws::Aws::connect(&opts).await.ok()?)
    } else {
        None
    };
    let s3 = aws.as_ref().map(|a| a as &dyn pinfleet::state::S3Access);
    let store = pinfleet::state::Store::open(state, cluster, s3).await.ok()?;
    let mut newest: Option<pinfleet::etcd::manifest::Bumped> = None;
    for k in store.list(pinfleet::etcd::manifest::BUMPS).await.ok()? {
        if let Ok(Some(b)) = store.get_json::<pinfleet::etcd::manifest::Bumped>(&k).await {
            if newest.as_ref().is_none_or(|n| b.at > n.at) {
                newest = Some(b);
            }
        }
    }
    newest
}

/// The bump's size and time, beside the RTO the restore printed.
async fn print_bump(state: &str, cluster: &str, rto: &str) {
    let rto = rto.lines().find(|l| l.contains("(the RTO)")).map(str::trim).unwrap_or("no RTO printed");
    match last_bump(state, cluster).await {
        Some(b) => {
            println!("  the bump: {} in {:.1}s, beside the RTO ({rto})", b.size(), b.seconds);
            println!("    why that is enough: {}", b.why);
        }
        None => println!("  the bump: none recorded (restore --no-bump, or a restore that records none)"),
    }
}

fn size_of(out: &str) -> String {
    out.lines().next().unwrap_or_default().to_string()
}

async fn round(bins: &Binaries, state: &str, label: &str, name: &str, big_mib: usize, keys: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut trio = Trio::new(bins.clone(), dir.path());
    trio.boot().await;
    let mut c = trio.client().await;
    let t0 = Instant::now();
    if big_mib > 0 {
        load_big(&mut c, big_mib).await;
    } else {
        load_small(&mut c, keys).await;
    }
    let loaded = t0.elapsed();
    let cluster = format!("bench-{name}");
    let (out, took, rss) =
        timed(pinfleet(state, &["etcd", "backup", &cluster, "--endpoints", &trio.endpoints(), "--no-verify"]));
    let (vout, vtook, _) = timed(pinfleet(state, &["etcd", "verify", &cluster, "--endpoints", &trio.endpoints()]));
    assert!(vout.contains("verified"), "{vout}");
    println!("{label}: loaded in {:.1}s", loaded.as_secs_f64());
    println!("  backup:       {:>7.1}s   ({})", took.as_secs_f64(), size_of(&out));
    println!("  verification: {:>7.1}s   (download, checksums, etcdutl restore, scratch etcd, keys and HashKV against the live store)", vtook.as_secs_f64());
    println!(
        "  peak memory of the backup process: {rss:.0} MiB (parts of 8 MiB in memory, whatever the snapshot's size)"
    );
    let prefix = if big_mib > 0 { "/registry/secrets/big/" } else { "/registry/configmaps/" };
    let before = count(&mut c, prefix).await;
    drop(c);
    trio.destroy();
    let text = restore(&mut trio, state, &cluster).await;
    let mut c = trio.client().await;
    let after = count(&mut c, prefix).await;
    assert_eq!(before, after, "what was backed up came back");
    println!("  restore of three members ({after} keys back):");
    for l in text.lines().skip_while(|l| !l.contains("each phase's time")).skip(1) {
        println!("  {l}");
    }
    print_bump(state, &cluster, &text).await;
    drop(c);
    trio.destroy();
}

/// The agent follows deltas every second while a writer counts; the
/// members die; the restore shows the newest count that survived.
async fn rpo(bins: &Binaries, state: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut trio = Trio::new(bins.clone(), dir.path());
    trio.boot().await;
    let cluster = "bench-rpo";
    let mut agent = pinfleet(
        state,
        &["etcd", "agent", cluster, "--endpoints", &trio.endpoints(), "--interval", "1h", "--delta-interval", "1s"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait for the first full backup (its manifest).
    for _ in 0..600 {
        let o = pinfleet(state, &["etcd", "backups", cluster, "-o", "json"]).output().unwrap();
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"verdict\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut c = trio.client().await;
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_secs(5) {
        c.put("/registry/counter", n.to_string(), None).await.unwrap();
        n += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last = n - 1;
    let wrote_for = t0.elapsed();
    let _ = agent.kill();
    let _ = agent.wait();
    drop(c);
    trio.destroy();
    let text = restore(&mut trio, state, cluster).await;
    let mut c = trio.client().await;
    let got = c.get("/registry/counter", None).await.unwrap();
    let survived: u64 = got.kvs().first().map(|kv| kv.value_str().unwrap().parse().unwrap()).unwrap_or(0);
    let per_second = last as f64 / wrote_for.as_secs_f64();
    println!(
        "RPO as measured: the newest write that survived is #{survived} of #{last} ({} lost, {:.1}s of writes at {per_second:.0}/s; deltas every 1s)",
        last - survived,
        (last - survived) as f64 / per_second
    );
    print_bump(state, cluster, &text).await;
    drop(c);
    trio.destroy();
}

#[tokio::main]
async fn main() {
    let Some(bins) = Binaries::find() else {
        println!("bench-etcd: skipped: etcd's binaries are not here (PINFLEET_ETCD_DIR or PATH; scripts/bench-etcd installs them)");
        return;
    };
    let keys: usize = std::env::var("PINFLEET_BENCH_ETCD_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let big: usize = std::env::var("PINFLEET_BENCH_ETCD_BIG_MIB").ok().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let scratch = tempfile::tempdir().unwrap();
    let state =
        std::env::var("PINFLEET_BENCH_STATE").unwrap_or_else(|_| format!("file://{}", scratch.path().display()));
    println!("bench-etcd: etcd {} ×3 on 127.0.0.1, state store {state}", bins.version().unwrap_or_default());
    round(&bins, &state, &format!("{keys} keys"), "small", 0, keys).await;
    if big > 0 {
        round(&bins, &state, &format!("{big} MiB of 1 MiB values"), "big", big, 0).await;
    }
    rpo(&bins, &state).await;
}
