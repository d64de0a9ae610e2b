//! Running pinfleet as a user with no AWS account would: the local-target
//! tests' harness (local_sim, local_federation).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// pinfleet with no AWS anywhere in its environment and its own home.
pub fn pinfleet(home: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pinfleet"));
    cmd.args(args).env("PINFLEET_HOME", home).env("NO_COLOR", "1").env_remove("KUBECONFIG");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("AWS_CONFIG_FILE", home.join("none")).env("AWS_SHARED_CREDENTIALS_FILE", home.join("none"));
    cmd.output().unwrap()
}

/// stdout and stderr together.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}
