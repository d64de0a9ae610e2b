//! The sim's kubelet for pinfleet's own containers: a pod whose containers
//! all run pinfleet's image (the workload controller, the e2e and AMI jobs,
//! the serving-certificate approver) runs as real local processes of the
//! same binary, so a local cluster runs its own platform. Other pods keep
//! the simulated containers of [`super::controllers`].
//!
//! Each container is a process with the container's arguments (the image's
//! entrypoint is pinfleet), the pod's environment (values, field and
//! ConfigMap/Secret references) and nothing of the sim's own, and the
//! in-cluster configuration: `KUBERNETES_SERVICE_HOST/PORT` and a
//! kubeconfig holding a token the sim minted for the pod's service account,
//! so the process is authorized by RBAC exactly as there (see
//! [`super::auth`]). Each pod gets an address of its own on loopback
//! (127.P.Q.n, P.Q from the sim's port so that sims side by side differ;
//! its `podIP`), and what the process would bind on every
//! address (`0.0.0.0:`) is bound on that one, as a pod network gives every
//! pod its own. Output goes to a log file `kubectl logs` serves; the exit
//! code becomes the container's state; the restart policy restarts it with
//! the kubelet's back-off (10 s doubling to 5 min: CrashLoopBackOff in
//! between); a readiness probe (HTTP GET) is asked of the process; the
//! process is stopped when its pod goes, and every process when the sim
//! stops (and, through the parent-death signal, if the sim is killed).
//! Volumes are folders under the pod's (ConfigMaps and Secrets written out,
//! emptyDirs empty), and a mount path in the container's arguments or
//! environment names its folder: a process shares the host's filesystem.
//! Init containers are not run (none of pinfleet's pods has one).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::store::{Inner, Sub};

/// The store, as the server shares it.
type Shared = Arc<std::sync::Mutex<Inner>>;

/// The repository of pinfleet's own image, as the addons name it.
pub const OWN_REPOSITORY: &str = "ghcr.io/pinfleet/pinfleet";

/// The kubelet's crash back-off: 10 s, doubling, at most 5 minutes.
const BACKOFF_FIRST: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How long a stopped container gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);
/// How often the runner looks at the pods and its processes.
const TICK: Duration = Duration::from_millis(200);

/// What the runner needs: which images are pinfleet's, the binary to run,
/// where pods keep their files (logs, kubeconfig), and the API's port.
#[derive(Debug, Clone)]
pub struct OwnImages {
    /// Image repositories run as processes (any tag or digest).
    pub repositories: Vec<String>,
    pub exe: PathBuf,
    pub dir: PathBuf,
    /// What a process on one of the sim's machines gets from the machine
    /// itself: on a sim that follows EC2, the endpoint, region and
    /// credentials the sim reaches it with (a real node's instance role).
    pub machine_env: Vec<(String, String)>,
}

/// `registry/path/name` of an image reference, without tag or digest.
pub fn repository(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    }
}

/// Whether every container of the pod runs one of `repositories`.
pub fn is_own(pod: &Value, repositories: &[String]) -> bool {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    !repositories.is_empty()
        && containers.is_some_and(|cs| {
            !cs.is_empty()
                && cs.iter().all(|c| {
                    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                    repositories.iter().any(|r| r == repository(image))
                })
        })
}

/// The process's arguments: the container's command after the entrypoint
/// (pinfleet itself), then its args; `0.0.0.0:` bound on the pod's address.
pub fn arguments(container: &Value, pod_ip: &str) -> Vec<String> {
    let list = |k: &str| -> Vec<String> {
        container
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let command = list("command");
    let mut args: Vec<String> = command.into_iter().skip(1).collect();
    args.extend(list("args"));
    args.into_iter().map(|a| a.replace("0.0.0.0:", &format!("{pod_ip}:"))).collect()
}

/// `$(NAME)` in an argument replaced by the container's variable NAME, as
/// the kubelet does: `$$` is a literal `$`, and a reference to a variable
/// the container does not have is left as written.
pub fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment as the kubelet resolves it (values, field
/// references, ConfigMap and Secret keys); unresolvable references are
/// left out, as an optional reference is.
pub fn environment(inner: &Inner, pod: &Value, container: &Value, pod_ip: &str) -> Vec<(String, String)> {
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let mut out = Vec::new();
    for e in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = e.get("name").and_then(Value::as_str) else { continue };
        let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
            Some(v.to_string())
        } else if let Some(f) = e.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
            match f {
                "status.podIP" => Some(pod_ip.to_string()),
                _ => pod.pointer(&format!("/{}", f.replace('.', "/"))).and_then(Value::as_str).map(str::to_string),
            }
        } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            let cm = inner.peek("", "configmaps", ns, r.get("name").and_then(Value::as_str).unwrap_or_default());
            cm.and_then(|c| c.pointer(&format!("/data/{}", r.get("key").and_then(Value::as_str).unwrap_or_default())))
                .and_then(Value::as_str)
                .map(str::to_string)
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            use base64::Engine as _;
            let secret = inner.peek("", "secrets", ns, r.get("name").and_then(Value::as_str).unwrap_or_default());
            secret
                .and_then(|c| c.pointer(&format!("/data/{}", r.get("key").and_then(Value::as_str).unwrap_or_default())))
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        } else {
            None
        };
        if let Some(v) = value {
            out.push((name.to_string(), v));
        }
    }
    out
}

/// One container's life.
enum State {
    Running {
        child: Child,
        started: chrono::DateTime<chrono::Utc>,
        ready: bool,
    },
    /// Exited; restarted at `again` (None: not restarted, its pod is done with it).
    Exited {
        code: i32,
        started: chrono::DateTime<chrono::Utc>,
        finished: chrono::DateTime<chrono::Utc>,
        again: Option<Instant>,
    },
}

struct Container {
    state: State,
    restarts: u32,
    backoff: Duration,
}

struct PodRun {
    ns: String,
    name: String,
    ip: String,
    dir: PathBuf,
    containers: BTreeMap<String, Container>,
    started: chrono::DateTime<chrono::Utc>,
}

/// The runner: one OS thread (so the parent-death signal of its children,
/// which follows the thread that started them, lasts as long as it does).
pub struct Runner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Runner {
    pub fn start(store: Shared, port: u16, cfg: OwnImages) -> Runner {
        {
            let mut inner = store.lock().expect("store lock");
            inner.own_images = cfg.repositories.clone();
            inner.pods_dir = Some(cfg.dir.clone());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sim-own-containers".into())
            .spawn(move || {
                let mut pods: BTreeMap<String, PodRun> = BTreeMap::new();
                while !flag.load(Ordering::SeqCst) {
                    pass(&store, port, &cfg, &mut pods);
                    std::thread::sleep(TICK);
                }
                for (_, p) in std::mem::take(&mut pods) {
                    stop_pod(p);
                }
            })
            .expect("a thread for the sim's own containers");
        Runner { stop, thread: Some(thread) }
    }

    /// Stops every process and the runner.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop();
    }
}

fn stop_pod(mut p: PodRun) {
    let children: Vec<&mut Child> = p
        .containers
        .values_mut()
        .filter_map(|c| match &mut c.state {
            State::Running { child, .. } => Some(child),
            State::Exited { .. } => None,
        })
        .collect();
    terminate(children);
    let _ = std::fs::remove_dir_all(&p.dir);
}

/// SIGTERM, up to [`GRACE`] to end, then SIGKILL (as the kubelet stops a container).
fn terminate(mut children: Vec<&mut Child>) {
    for c in &children {
        // SAFETY: signals a child this runner started and has not reaped.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && children.iter_mut().any(|c| matches!(c.try_wait(), Ok(None))) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The node's posted Ready condition (the kubelet runs nothing on a node that is not Ready).
fn node_ready(inner: &Inner, node: &str) -> bool {
    inner.peek("", "nodes", "", node).is_some_and(|n| {
        n.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    })
}

fn pass(store: &Shared, port: u16, cfg: &OwnImages, pods: &mut BTreeMap<String, PodRun>) {
    // What should run: own pods bound to a Ready node and not terminating.
    let wanted: Vec<Value> = {
        let inner = store.lock().expect("store lock");
        inner
            .scan("", "pods", None)
            .into_iter()
            .filter(|p| is_own(p, &cfg.repositories))
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| node_ready(&inner, n)))
            .cloned()
            .collect()
    };
    let uid = |p: &Value| p.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
    // Pods gone (or going): their processes stop.
    let keep: std::collections::BTreeSet<String> = wanted.iter().map(uid).collect();
    let gone: Vec<String> = pods.keys().filter(|k| !keep.contains(*k)).cloned().collect();
    for k in gone {
        if let Some(p) = pods.remove(&k) {
            stop_pod(p);
        }
    }
    for pod in &wanted {
        let id = uid(pod);
        if !pods.contains_key(&id) {
            // 127.P.Q.n: P.Q from this sim's port (several sims share the
            // host's loopback), n the lowest free for its pods.
            let used: std::collections::BTreeSet<&str> = pods.values().map(|p| p.ip.as_str()).collect();
            let prefix = format!("127.{}.{}", port >> 8, port & 0xff);
            let Some(ip) = (1..=254).map(|n| format!("{prefix}.{n}")).find(|ip| !used.contains(ip.as_str())) else {
                continue;
            };
            let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
            let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            let dir = cfg.dir.join(format!("{ns}_{name}_{id}"));
            if std::fs::create_dir_all(&dir).is_err() {
                continue;
            }
            pods.insert(
                id.clone(),
                PodRun { ns, name, ip, dir, containers: BTreeMap::new(), started: chrono::Utc::now() },
            );
        }
        let run = pods.get_mut(&id).expect("just inserted");
        step(store, port, cfg, pod, run);
    }
}

/// Starts, watches, restarts and probes one pod's containers, then writes
/// its status if it changed.
fn step(store: &Shared, port: u16, cfg: &OwnImages, pod: &Value, run: &mut PodRun) {
    let policy = pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always").to_string();
    let containers: Vec<Value> = pod.pointer("/spec/containers").and_then(Value::as_array).cloned().unwrap_or_default();
    for c in &containers {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let now = Instant::now();
        let due = match run.containers.get(&cname) {
            None => true,
            Some(Container { state: State::Exited { again: Some(at), .. }, .. }) => *at <= now,
            _ => false,
        };
        if due {
            let log = run.dir.join(format!("{cname}.log"));
            match spawn(store, port, cfg, pod, c, run, &log) {
                Ok(child) => {
                    let started = chrono::Utc::now();
                    let entry = run.containers.entry(cname.clone()).or_insert(Container {
                        state: State::Exited { code: 0, started, finished: started, again: None },
                        restarts: 0,
                        backoff: BACKOFF_FIRST,
                    });
                    if matches!(entry.state, State::Exited { again: Some(_), .. }) {
                        entry.restarts += 1;
                    }
                    entry.state = State::Running { child, started, ready: false };
                }
                Err(e) => {
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).ok();
                    if let Some(f) = f.as_mut() {
                        let _ = writeln!(f, "sim: could not start the container: {e:#}");
                    }
                }
            }
        }
        let Some(entry) = run.containers.get_mut(&cname) else { continue };
        if let State::Running { child, started, ready } = &mut entry.state {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let code = status
                        .code()
                        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(9));
                    let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
                    let again = restart.then(|| Instant::now() + entry.backoff);
                    if restart {
                        entry.backoff = (entry.backoff * 2).min(BACKOFF_MAX);
                    }
                    entry.state = State::Exited { code, started: *started, finished: chrono::Utc::now(), again };
                }
                Ok(None) => *ready = probe(c, &run.ip),
                Err(_) => {}
            }
        }
    }
    let status = pod_status(pod, run, &containers);
    let mut inner = store.lock().expect("store lock");
    let Some(current) = inner.peek("", "pods", &run.ns, &run.name).cloned() else { return };
    if current.pointer("/metadata/uid") != pod.pointer("/metadata/uid") || current.get("status") == Some(&status) {
        return;
    }
    let mut updated = current.clone();
    updated["status"] = status;
    if let Some(t) = inner.registry.get("", "v1", "pods").cloned() {
        let _ = inner.update(&t, &run.ns, &run.name, updated, "kubelet", Sub::Status, false);
    }
}

fn spawn(
    store: &Shared,
    port: u16,
    cfg: &OwnImages,
    pod: &Value,
    container: &Value,
    run: &PodRun,
    log: &Path,
) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    let sa = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or("default").to_string();
    let (env, token, mounts) = {
        let mut inner = store.lock().expect("store lock");
        let env = environment(&inner, pod, container, &run.ip);
        let mounts = volumes(&inner, pod, container, &run.dir)?;
        (env, inner.mint_token(&run.ns, &sa), mounts)
    };
    // A mount path in the arguments or the environment (or in any of an
    // argument's `=`-separated parts) is its volume's folder.
    let at_host_one = |v: &str| {
        mounts
            .iter()
            .find(|(path, _)| v.starts_with(path.as_str()))
            .map_or(v.to_string(), |(path, host)| format!("{}{}", host.display(), &v[path.len()..]))
    };
    let at_host = |v: String| v.split('=').map(at_host_one).collect::<Vec<_>>().join("=");
    let args: Vec<String> = arguments(container, &run.ip).into_iter().map(|a| at_host(expand(&a, &env))).collect();
    let env: Vec<(String, String)> = env.into_iter().map(|(k, v)| (k, at_host(v))).collect();
    // The in-cluster configuration, as a kubeconfig (the client's first
    // choice): the API's address and the service account's token.
    let kubeconfig = run.dir.join("kubeconfig.yaml");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n  - name: in-cluster\n    cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n  - name: {sa}\n    user: {{token: \"{token}\"}}\ncontexts:\n  - name: in-cluster\n    context: {{cluster: in-cluster, user: {sa}, namespace: {ns}}}\ncurrent-context: in-cluster\n",
            ns = run.ns
        ),
    )?;
    let out = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let mut cmd = Command::new(&cfg.exe);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &run.dir)
        .env("HOSTNAME", &run.name)
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", port.to_string())
        .env("KUBECONFIG", &kubeconfig)
        .envs(cfg.machine_env.iter().cloned())
        .envs(env)
        .current_dir(&run.dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0);
    // SAFETY: prctl in the child before exec: ask for SIGKILL when the
    // thread that started it (the runner's) ends, so a killed sim leaves no process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    Ok(cmd.spawn()?)
}

/// The container's volume mounts made on the host, under the pod's folder:
/// ConfigMaps and Secrets written out key by key, emptyDirs as empty
/// folders (other sources: empty folders too). The pairs are (mountPath,
/// folder), longest path first.
fn volumes(inner: &Inner, pod: &Value, container: &Value, dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    use base64::Engine as _;
    let ns = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let vols: Vec<Value> = pod.pointer("/spec/volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for m in container.get("volumeMounts").and_then(Value::as_array).into_iter().flatten() {
        let (Some(name), Some(path)) =
            (m.get("name").and_then(Value::as_str), m.get("mountPath").and_then(Value::as_str))
        else {
            continue;
        };
        let host = dir.join("volumes").join(name);
        std::fs::create_dir_all(&host)?;
        let v = vols.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(name));
        let files: Vec<(String, Vec<u8>)> = match v {
            Some(v) if v.get("configMap").is_some() => {
                let cm_name = v.pointer("/configMap/name").and_then(Value::as_str).unwrap_or_default();
                let cm = inner.peek("", "configmaps", ns, cm_name);
                let mut f: Vec<(String, Vec<u8>)> = cm
                    .and_then(|c| c.get("data"))
                    .and_then(Value::as_object)
                    .map(|d| {
                        d.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().as_bytes().to_vec())).collect()
                    })
                    .unwrap_or_default();
                if let Some(b) = cm.and_then(|c| c.get("binaryData")).and_then(Value::as_object) {
                    for (k, v) in b {
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(v.as_str().unwrap_or_default())
                            .unwrap_or_default();
                        f.push((k.clone(), bytes));
                    }
                }
                f
            }
            Some(v) if v.get("secret").is_some() => {
                let s_name = v.pointer("/secret/secretName").and_then(Value::as_str).unwrap_or_default();
                inner
                    .peek("", "secrets", ns, s_name)
                    .and_then(|c| c.get("data"))
                    .and_then(Value::as_object)
                    .map(|d| {
                        d.iter()
                            .map(|(k, v)| {
                                let bytes = base64::engine::general_purpose::STANDARD
                                    .decode(v.as_str().unwrap_or_default())
                                    .unwrap_or_default();
                                (k.clone(), bytes)
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            }
            _ => Vec::new(),
        };
        for (k, bytes) in files {
            // Keys are file names (the API refuses '/' and '..' in them).
            std::fs::write(host.join(&k), bytes)?;
        }
        out.push((path.trim_end_matches('/').to_string(), host));
    }
    out.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    Ok(out)
}

/// A readiness probe's HTTP GET against the pod's address (a probe on a
/// named port looks the port up); no probe: ready while running.
fn probe(container: &Value, ip: &str) -> bool {
    let Some(get) = container.pointer("/readinessProbe/httpGet") else { return true };
    let port = match get.get("port") {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(name)) => container
            .get("ports")
            .and_then(Value::as_array)
            .and_then(|ps| ps.iter().find(|p| p.get("name").and_then(Value::as_str) == Some(name)))
            .and_then(|p| p.get("containerPort").and_then(Value::as_u64))
            .unwrap_or(0),
        _ => 0,
    };
    let path = get.get("path").and_then(Value::as_str).unwrap_or("/");
    let Ok(addr) = format!("{ip}:{port}").parse::<std::net::SocketAddr>() else { return false };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && (head[9] == b'2' || head[9] == b'3')
}

fn ts(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The pod's status as the kubelet reports it.
fn pod_status(pod: &Value, run: &PodRun, containers: &[Value]) -> Value {
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    let mut statuses = Vec::new();
    let (mut all_ready, mut running, mut failed, mut done) = (true, false, false, 0usize);
    for c in containers {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
        let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
        let Some(entry) = run.containers.get(cname) else {
            all_ready = false;
            statuses.push(json!({"name": cname, "image": image, "imageID": "", "ready": false, "restartCount": 0, "started": false, "state": {"waiting": {"reason": "ContainerCreating"}}}));
            continue;
        };
        let (state, last, ready) = match &entry.state {
            State::Running { started, ready, .. } => {
                running = true;
                (json!({"running": {"startedAt": ts(*started)}}), None, *ready)
            }
            State::Exited { code, started, finished, again } => {
                let reason = if *code == 0 { "Completed" } else { "Error" };
                let terminated =
                    json!({"exitCode": code, "reason": reason, "startedAt": ts(*started), "finishedAt": ts(*finished)});
                match again {
                    Some(_) => {
                        let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {}s restarting failed container={cname} pod={}_{}({uid})", entry.backoff.as_secs() / 2, run.name, run.ns)}});
                        (waiting, Some(json!({"terminated": terminated})), false)
                    }
                    None => {
                        done += 1;
                        failed |= *code != 0;
                        (json!({"terminated": terminated}), None, false)
                    }
                }
            }
        };
        all_ready &= ready;
        let mut st = json!({"name": cname, "image": image, "imageID": "", "ready": ready, "restartCount": entry.restarts, "started": matches!(entry.state, State::Running { .. }), "state": state});
        if let Some(l) = last {
            st["lastState"] = l;
        }
        statuses.push(st);
    }
    let finished = done == containers.len() && !containers.is_empty();
    let phase = match (finished, failed) {
        (true, true) => "Failed",
        (true, false) => "Succeeded",
        _ if running || !run.containers.is_empty() => "Running",
        _ => "Pending",
    };
    let ready = all_ready && !finished;
    let started = ts(run.started);
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": started});
    json!({
        "phase": phase,
        "podIP": run.ip,
        "podIPs": [{"ip": run.ip}],
        "hostIP": "127.0.0.1",
        "startTime": started,
        "conditions": [cond("PodScheduled", true), cond("Initialized", true), cond("ContainersReady", ready), cond("Ready", ready)],
        "containerStatuses": statuses,
    })
}

/// The log of a container the runner ran, if any.
pub fn log_file(dir: &Path, ns: &str, name: &str, uid: &str, container: &str) -> PathBuf {
    dir.join(format!("{ns}_{name}_{uid}")).join(format!("{container}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_of_image_references() {
        assert_eq!(repository("ghcr.io/pinfleet/pinfleet:0.1.0"), "ghcr.io/pinfleet/pinfleet");
        assert_eq!(repository("ghcr.io/pinfleet/pinfleet@sha256:abc"), "ghcr.io/pinfleet/pinfleet");
        assert_eq!(repository("localhost:5000/pinfleet"), "localhost:5000/pinfleet");
        assert_eq!(repository("localhost:5000/pinfleet:1"), "localhost:5000/pinfleet");
    }

    #[test]
    fn arguments_follow_the_entrypoint_and_bind_the_pod_address() {
        let c = json!({"args": ["controller", "--metrics-addr", "0.0.0.0:8080"]});
        assert_eq!(arguments(&c, "127.0.1.2"), ["controller", "--metrics-addr", "127.0.1.2:8080"]);
        let c = json!({"command": ["/usr/local/bin/pinfleet", "e2e"], "args": ["dev"]});
        assert_eq!(arguments(&c, "127.0.1.2"), ["e2e", "dev"]);
    }

    #[test]
    fn arguments_expand_the_containers_variables_as_the_kubelet_does() {
        let env = vec![("NODE_NAME".to_string(), "cp-1".to_string()), ("IP".to_string(), "10.0.0.5".to_string())];
        assert_eq!(expand("$(NODE_NAME)=https://$(IP):2380", &env), "cp-1=https://10.0.0.5:2380");
        assert_eq!(expand("$$(NODE_NAME) $(MISSING) $x $", &env), "$(NODE_NAME) $(MISSING) $x $");
        assert_eq!(expand("$(UNCLOSED", &env), "$(UNCLOSED");
    }

    #[test]
    fn a_pod_is_run_only_when_every_container_is_pinfleet() {
        let repos = vec![OWN_REPOSITORY.to_string()];
        let own = json!({"spec": {"containers": [{"image": "ghcr.io/pinfleet/pinfleet:0.1.0"}]}});
        let mixed = json!({"spec": {"containers": [{"image": "ghcr.io/pinfleet/pinfleet:0.1.0"}, {"image": "nginx"}]}});
        assert!(is_own(&own, &repos));
        assert!(!is_own(&mixed, &repos));
        assert!(!is_own(&own, &[]));
    }
}
