//! What a team's release pipeline does, for the demo (tests do the same
//! through tests/support/registry.rs): pushes a one-layer image to a
//! registry, signs it in cosign's format and attests its SLSA provenance
//! (built from a ref of the team's repository), with a P-256 key derived
//! from a seed. Prints the image's digest.
//!
//! ```text
//! cargo run --example release -- HOST REPO TAG SEED [REF]   # the digest
//! cargo run --example release -- policy SEED                # the team's trust policy (YAML)
//! ```

#[path = "../tests/support/registry.rs"]
mod registry_support;

use registry_support as reg;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["policy", seed] => {
            print!("{}", serde_saphyr::to_string(&reg::policy(&reg::key(seed))).expect("a policy as YAML"));
        }
        [host, repo, tag, seed] | [host, repo, tag, seed, _] => {
            let git_ref = args.get(4).map(String::as_str).unwrap_or("refs/heads/main");
            let client = reg::client(host);
            println!("{}", reg::release(&client, host, repo, tag, &reg::key(seed), git_ref).await);
        }
        _ => {
            eprintln!("usage: release HOST REPO TAG SEED [REF] | release policy SEED");
            std::process::exit(2);
        }
    }
}
