//! Provenance verifications per second against the local registry (the
//! one scripts/test starts, PINFLEET_TEST_REGISTRY): N signed, attested
//! releases pushed, then each checked cold (tag resolved, signature and
//! attestation fetched and verified) and again from the cache (one request:
//! the digest's existence). Prints figures and the ratio; asserts only
//! that every release is trusted.

#[path = "../tests/support/registry.rs"]
mod registry_support;

use std::sync::atomic::Ordering;
use std::time::Instant;

use pinfleet::registry::Registries;
use registry_support as reg;

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("PINFLEET_BENCH_IMAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let host = reg::registry();
    let oci = reg::client(&host);
    let signer = reg::key("bench-team");
    let policy = reg::policy(&signer);
    let run = std::process::id();
    let mut digests = Vec::new();
    for i in 0..n {
        let d = reg::release(&oci, &host, "bench/app", &format!("r{run}-{i}"), &signer, "refs/heads/main").await;
        digests.push(d);
    }
    let regs = Registries::new(vec![host.clone()], vec![host.clone()]);
    let t = Instant::now();
    for i in 0..n {
        let c = regs.check(&format!("{host}/bench/app:r{run}-{i}"), &policy).await;
        assert!(c.verdict.trusted(), "{:?}", c.verdict);
    }
    let cold = t.elapsed().as_secs_f64();
    let cold_calls = regs.calls.load(Ordering::Relaxed);
    let t = Instant::now();
    for d in &digests {
        let c = regs.check(&format!("{host}/bench/app@{d}"), &policy).await;
        assert!(c.verdict.trusted());
    }
    let cached = t.elapsed().as_secs_f64();
    let cached_calls = regs.calls.load(Ordering::Relaxed) - cold_calls;
    let rate = |s: f64| n as f64 / s.max(1e-9);
    println!("provenance over {n} releases in the local registry (debug build unless --release):");
    println!(
        "  cold:   {:>8.1} verifications/s ({:.1} registry requests each)",
        rate(cold),
        cold_calls as f64 / n as f64
    );
    println!(
        "  cached: {:>8.1} verifications/s ({:.1} registry requests each)",
        rate(cached),
        cached_calls as f64 / n as f64
    );
    println!("  cached / cold: {:.1}x", cold / cached.max(1e-9));
}
