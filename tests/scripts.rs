//! The scripts' process handling (scripts/lib.sh, used by the demo, the
//! test runner and the benchmarks): whatever way a script ends (success, a
//! failed command, Ctrl-C), nothing it started is left running: neither
//! its background programs nor the local clusters `--target sim` started.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SCRIPT: &str = r#"
source scripts/lib.sh
install_cleanup
start_bg sleep 300
echo "pid ${BG_LAST}"
# A local cluster as `pinfleet bootstrap --target sim` leaves one: detached,
# with a pid file under PINFLEET_HOME.
mkdir -p "${PINFLEET_HOME}/sim/dev"
sleep 300 &
echo $! >"${PINFLEET_HOME}/sim/dev/pid"
echo "pid $!"
echo ready
case "${MODE}" in
  ok) ;;
  fail) false ;;
  interrupt) sleep 60 ;;
esac
"#;

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

/// Waits (up to 30 s) until process `pid` has a child running `cmdline`
/// (NUL-separated as /proc has it).
fn waiting_on(pid: u32, cmdline: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if children.split_whitespace().any(|c| {
            std::fs::read(format!("/proc/{c}/cmdline"))
                .is_ok_and(|b| String::from_utf8_lossy(&b).trim_end_matches('\0') == cmdline)
        }) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid} never ran {cmdline:?}");
}

fn run(mode: &str) -> (Vec<u32>, Option<i32>) {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new("bash");
    child
        .args(["-c", SCRIPT])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("MODE", mode)
        .env("PINFLEET_HOME", home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own process group, as a terminal's foreground job: Ctrl-C
        // goes to the whole group.
        .process_group(0);
    // A terminal's job takes Ctrl-C: whoever started this test may have
    // started it in the background, where SIGINT is ignored, and an ignored
    // signal stays ignored across exec (a shell cannot even trap it).
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        child.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let mut pids = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(p) = line.strip_prefix("pid ") {
            pids.push(p.parse().unwrap());
        }
        if line == "ready" {
            if mode == "interrupt" {
                // Once the script waits on its foreground command, as a
                // person's Ctrl-C finds it (a fixed pause could end before
                // a busy machine had started it, and the signal went to a
                // script between commands).
                waiting_on(child.id(), "sleep\060");
                // SAFETY: signals the child's own process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) };
            }
            break;
        }
    }
    let status = child.wait().unwrap();
    (pids, status.code())
}

#[test]
fn nothing_a_script_starts_outlives_it() {
    for (mode, code) in [("ok", Some(0)), ("fail", Some(1)), ("interrupt", Some(130))] {
        let (pids, got) = run(mode);
        assert_eq!(pids.len(), 2, "{mode}: the script reported its processes");
        assert_eq!(got, code, "{mode}: the script's exit status is kept");
        let deadline = Instant::now() + Duration::from_secs(5);
        while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        for p in &left {
            // SAFETY: ends what the failed assertion below reports.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
        assert!(left.is_empty(), "{mode}: processes left running: {left:?}");
    }
}

/// A package install that fails while another install holds the machine's
/// package manager (a fresh machine's first `scripts/test`): apt waits for
/// dpkg's lock, and a failed install is finished and tried once more, saying so.
#[test]
fn a_package_install_waits_for_the_lock_and_is_retried_once() {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = tempfile::tempdir().unwrap();
    let calls = bin.path().join("calls");
    let fake = |name: &str, body: &str| {
        let p = bin.path().join(name);
        std::fs::write(&p, format!("#!/usr/bin/env bash\necho \"{name} $*\" >>{}\n{body}\n", calls.display())).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // The first install fails as dpkg does when another install races it; the next succeeds.
    let marker = bin.path().join("failed-once");
    fake(
        "apt-get",
        &format!(
            "if [[ \" $* \" == *' install '* && ! -f {m} ]]; then touch {m}; echo 'E: Sub-process /usr/bin/dpkg returned an error code (1)' >&2; exit 100; fi",
            m = marker.display()
        ),
    );
    fake("dpkg", "exit 0");
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-c", "source scripts/lib.sh && apt_install cloud-init"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATH", path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("installing cloud-init failed; finishing half-configured packages and trying once more"),
        "{err}"
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    let installs: Vec<&str> = calls.lines().filter(|l| l.starts_with("apt-get") && l.contains(" install ")).collect();
    assert_eq!(installs.len(), 2, "tried once more, not more: {calls}");
    assert!(installs.iter().all(|l| l.contains("DPkg::Lock::Timeout=")), "waits for the lock: {calls}");
    assert!(calls.lines().any(|l| l == "dpkg --configure -a"), "{calls}");
}

/// scripts/prune-build keeps, in a shared build directory, only the build
/// that just ran: other builds of this package (other checkouts, older
/// changes) and untouched incremental caches go; other packages' artifacts
/// stay; and nothing goes when the build did not finish.
#[test]
fn a_build_directory_keeps_only_the_build_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("debug");
    let files = [
        "deps/libpinfleet-1111111111111111.rlib",
        "deps/pinfleet-1111111111111111.d",
        "deps/aws_engine-2222222222222222",
        "deps/pinfleet-3333333333333333",
        "deps/libpinfleet-aaaaaaaaaaaaaaaa.rlib",
        "deps/aws_engine-bbbbbbbbbbbbbbbb",
        "deps/libserde-cccccccccccccccc.rlib",
        ".fingerprint/pinfleet-1111111111111111/lib-pinfleet",
        ".fingerprint/pinfleet-2222222222222222/test-integration-test-aws_engine",
        ".fingerprint/pinfleet-3333333333333333/bin-pinfleet",
        ".fingerprint/pinfleet-4444444444444444/run-build-script",
        ".fingerprint/pinfleet-aaaaaaaaaaaaaaaa/lib-pinfleet",
        ".fingerprint/pinfleet-bbbbbbbbbbbbbbbb/test-integration-test-aws_engine",
        ".fingerprint/serde-cccccccccccccccc/lib-serde",
        "build/pinfleet-4444444444444444/out/x",
        "incremental/pinfleet-old/s-1/x",
        "incremental/aws_engine-fresh/s-1/x",
        "build/pinfleet-5555555555555555/build-script-build",
        ".fingerprint/pinfleet-5555555555555555/build-script-build-script-build",
    ];
    for f in files {
        let p = profile.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"x").unwrap();
    }
    // The binary cargo uplifts (target/debug/pinfleet) is a hard link of its deps file.
    std::fs::hard_link(profile.join("deps/pinfleet-3333333333333333"), profile.join("pinfleet")).unwrap();
    let stamp = dir.path().join("stamp");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&stamp, b"").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    std::fs::create_dir_all(profile.join("incremental/pinfleet-new/s-2")).unwrap();
    let p = |f: &str| profile.join(f).display().to_string();
    let package = "path+file:///src/pinfleet#pinfleet@0.1.0";
    let messages = |finished: bool| {
        let mut m = vec![
            serde_json::json!({"reason": "compiler-artifact", "package_id": package,
                "filenames": [p("deps/libpinfleet-1111111111111111.rlib")], "executable": null}),
            serde_json::json!({"reason": "compiler-artifact", "package_id": package,
                "filenames": [p("deps/aws_engine-2222222222222222")], "executable": p("deps/aws_engine-2222222222222222")}),
            serde_json::json!({"reason": "compiler-artifact", "package_id": package,
                "filenames": [p("pinfleet")], "executable": p("pinfleet")}),
            serde_json::json!({"reason": "compiler-artifact", "package_id": package,
                "filenames": [p("build/pinfleet-5555555555555555/build-script-build")], "executable": null}),
            serde_json::json!({"reason": "build-script-executed", "package_id": package,
                "out_dir": p("build/pinfleet-4444444444444444/out")}),
        ];
        if finished {
            m.push(serde_json::json!({"reason": "build-finished", "success": true}));
        }
        m.iter().map(|v| v.to_string() + "\n").collect::<String>()
    };
    let prune = |input: String| {
        let mut child = Command::new("scripts/prune-build")
            .arg(&profile)
            .arg(&stamp)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let present = |f: &str| profile.join(f).exists();

    // A build that did not finish removes nothing.
    prune(messages(false));
    assert!(files.iter().all(|f| present(f)));

    prune(messages(true));
    for kept in [
        "deps/libpinfleet-1111111111111111.rlib",
        "deps/pinfleet-1111111111111111.d",
        "deps/aws_engine-2222222222222222",
        "deps/pinfleet-3333333333333333",
        "deps/libserde-cccccccccccccccc.rlib",
        ".fingerprint/pinfleet-4444444444444444/run-build-script",
        ".fingerprint/serde-cccccccccccccccc/lib-serde",
        "build/pinfleet-4444444444444444/out/x",
        "incremental/pinfleet-new/s-2",
        // A crate the build found fresh keeps its cache.
        "incremental/aws_engine-fresh/s-1/x",
        "build/pinfleet-5555555555555555/build-script-build",
        ".fingerprint/pinfleet-5555555555555555",
    ] {
        assert!(present(kept), "{kept} was removed");
    }
    for gone in [
        "deps/libpinfleet-aaaaaaaaaaaaaaaa.rlib",
        "deps/aws_engine-bbbbbbbbbbbbbbbb",
        ".fingerprint/pinfleet-aaaaaaaaaaaaaaaa",
        ".fingerprint/pinfleet-bbbbbbbbbbbbbbbb",
        "incremental/pinfleet-old",
    ] {
        assert!(!present(gone), "{gone} was kept");
    }
}

/// On a machine that never built pinfleet the profile directory does not
/// exist when the build starts: prune-build must still read the build's
/// messages to their end, or the build dies writing into a closed pipe
/// ("Broken pipe") and the run fails though every test passed. The build
/// here is a writer that sends more than a pipe holds before it makes the
/// directory, piped exactly as scripts/test pipes `cargo test --no-run`.
#[test]
fn prune_build_reads_a_fresh_machines_whole_build() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("debug");
    let stamp = dir.path().join("stamp");
    std::fs::write(&stamp, b"").unwrap();
    let build = r#"
import json, os, sys
profile = sys.argv[1]
package = "path+file:///src/pinfleet#pinfleet@0.1.0"
for i in range(20000):
    print(json.dumps({"reason": "compiler-message", "package_id": package, "message": {"rendered": "warning %d" % i}}))
sys.stdout.flush()
os.makedirs(os.path.join(profile, "deps"))
os.makedirs(os.path.join(profile, ".fingerprint", "pinfleet-1111111111111111"))
os.makedirs(os.path.join(profile, ".fingerprint", "pinfleet-aaaaaaaaaaaaaaaa"))
for name in ("libpinfleet-1111111111111111.rlib", "libpinfleet-aaaaaaaaaaaaaaaa.rlib"):
    open(os.path.join(profile, "deps", name), "w").close()
print(json.dumps({"reason": "compiler-artifact", "package_id": package,
    "filenames": [os.path.join(profile, "deps", "libpinfleet-1111111111111111.rlib")], "executable": None}))
print(json.dumps({"reason": "build-finished", "success": True}))
"#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"set -euo pipefail; python3 -c "$1" "$2" | scripts/prune-build "$2" "$3""#)
        .arg("build")
        .arg(build)
        .arg(&profile)
        .arg(&stamp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the pipeline failed ({}): {err}", out.status);
    assert!(!err.contains("Broken pipe"), "{err}");
    // The messages were read and used once the build had made the directory.
    assert!(profile.join("deps/libpinfleet-1111111111111111.rlib").exists(), "{err}");
    assert!(!profile.join("deps/libpinfleet-aaaaaaaaaaaaaaaa.rlib").exists(), "{err}");
}
