//! The bake as data (pure): what is observed of a build (found by its
//! tags and names), the next step from there, and the verdicts — the
//! builder's report judged against the recipe, the image's static checks.
//!
//! Data flow: the engine (`cloud::aws::bake`) observes → [`next`] → acts →
//! observes again, until [`Step::Done`] or [`Step::Fail`]. Every step is
//! found again by a name tag, so a killed bake resumes where it stopped
//! and never makes a second image.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::recipe::Loaded;

/// Tags pinfleet writes on builders, images, copies and snapshots.
pub const TAG_BUILD: &str = "pinfleet:build-id";
pub const TAG_RECIPE: &str = "pinfleet:recipe";
pub const TAG_DIGEST: &str = "pinfleet:recipe-digest";
pub const TAG_BASE: &str = "pinfleet:base-image";
pub const TAG_KUBERNETES: &str = "pinfleet:kubernetes-version";
pub const TAG_ROLE: &str = "pinfleet:role";
/// The builder's own report (it writes these two).
pub const TAG_STATUS: &str = "pinfleet:bake-status";
pub const TAG_REPORT: &str = "pinfleet:bake-report";
/// The verdict on the builder's report and the static checks, on the image.
pub const TAG_CHECKS: &str = "pinfleet:checks";
/// The builder's facts, kept on the image (a gate compares nodes with them).
pub const TAG_FACTS: &str = "pinfleet:facts";

/// EC2's longest tag value.
const TAG_VALUE_CHARS: usize = 255;

/// The builder's facts as tags, 255 characters a tag (EC2's limit; an
/// accelerated image's report is longer): [`TAG_FACTS`], then
/// `pinfleet:facts-2`, `-3`, … ([`facts_of`] joins them).
pub fn facts_tags(facts: &str) -> Vec<(String, String)> {
    let chars: Vec<char> = facts.chars().collect();
    let mut out: Vec<(String, String)> = chars
        .chunks(TAG_VALUE_CHARS)
        .enumerate()
        .map(|(i, c)| {
            let key = if i == 0 { TAG_FACTS.to_string() } else { format!("{TAG_FACTS}-{}", i + 1) };
            (key, c.iter().collect())
        })
        .collect();
    if out.is_empty() {
        out.push((TAG_FACTS.to_string(), String::new()));
    }
    out
}

/// The builder's facts from an image's tags ([`facts_tags`]' parts, in order).
pub fn facts_of<'a>(get: impl Fn(&str) -> Option<&'a str>) -> String {
    let mut out = get(TAG_FACTS).unwrap_or_default().to_string();
    for i in 2.. {
        match get(&format!("{TAG_FACTS}-{i}")) {
            Some(part) => out.push_str(part),
            None => break,
        }
    }
    out
}
/// An accelerated image's driver stack (`nvidia 570.172.08/1.17.8`).
pub const TAG_ACCELERATOR: &str = "pinfleet:accelerator";

/// The value of [`TAG_ACCELERATOR`] for a recipe's stack.
pub fn accelerator_tag(a: &super::recipe::AcceleratorStack) -> String {
    format!("{} {}/{}", a.kind.as_str(), a.driver_version, a.runtime_version)
}

/// What is seen of the builder instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuilderSeen {
    pub id: String,
    /// pending, running, stopping, stopped, shutting-down, terminated.
    pub state: String,
    pub status: Option<String>,
    pub report: Option<String>,
}

/// What is seen of an image (the home one or a copy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageSeen {
    pub id: String,
    /// pending, available, failed, …
    pub state: String,
    /// The verdict tag, once written.
    pub checks: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Observed {
    pub builder: Option<BuilderSeen>,
    pub image: Option<ImageSeen>,
    /// Per copy region: the copy, if one exists.
    pub copies: BTreeMap<String, Option<ImageSeen>>,
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    Launch,
    AwaitReport { builder: String },
    Stop { builder: String },
    AwaitStopped { builder: String },
    CreateImage { builder: String },
    AwaitImage { image: String },
    Check { image: String },
    Copy { regions: Vec<String> },
    AwaitCopies { pending: Vec<String> },
    Cleanup { builder: String },
    Done { image: String },
    Fail { reason: String },
}

fn live(b: &BuilderSeen) -> bool {
    !matches!(b.state.as_str(), "terminated" | "shutting-down")
}

/// The next step from what is observed. Cleanup of the builder and its
/// security group also runs after a failure (the engine's `finally`).
pub fn next(o: &Observed) -> Step {
    let builder = o.builder.as_ref().filter(|b| live(b));
    let Some(image) = &o.image else {
        let Some(b) = builder else { return Step::Launch };
        let id = b.id.clone();
        return match (b.status.as_deref(), b.state.as_str()) {
            (Some("failed"), _) => Step::Fail {
                reason: format!(
                    "the builder {id} reported a failure: {}",
                    b.report.as_deref().unwrap_or("(no report)")
                ),
            },
            (Some("done"), "running" | "pending") => Step::Stop { builder: id },
            (Some("done"), "stopping") => Step::AwaitStopped { builder: id },
            (Some("done"), "stopped") => Step::CreateImage { builder: id },
            (Some(other), _) if other != "done" => {
                Step::Fail { reason: format!("the builder {id} reported `{other}` (known: done, failed)") }
            }
            (_, "stopped" | "stopping") => {
                Step::Fail { reason: format!("the builder {id} stopped before reporting (see its console output)") }
            }
            _ => Step::AwaitReport { builder: id },
        };
    };
    match image.state.as_str() {
        "pending" => return Step::AwaitImage { image: image.id.clone() },
        "available" => {}
        other => return Step::Fail { reason: format!("image {} is {other}", image.id) },
    }
    match image.checks.as_deref() {
        None => return Step::Check { image: image.id.clone() },
        Some(v) if !v.starts_with("passed") => {
            return Step::Fail { reason: format!("image {} failed its checks: {v}", image.id) }
        }
        Some(_) => {}
    }
    let missing: Vec<String> = o.copies.iter().filter(|(_, c)| c.is_none()).map(|(r, _)| r.clone()).collect();
    if !missing.is_empty() {
        return Step::Copy { regions: missing };
    }
    for (region, c) in &o.copies {
        if let Some(c) = c {
            if !matches!(c.state.as_str(), "pending" | "available") {
                return Step::Fail { reason: format!("copy {} in {region} is {}", c.id, c.state) };
            }
        }
    }
    let pending: Vec<String> = o
        .copies
        .iter()
        .filter(|(_, c)| c.as_ref().is_some_and(|c| c.state == "pending"))
        .map(|(r, _)| r.clone())
        .collect();
    if !pending.is_empty() {
        return Step::AwaitCopies { pending };
    }
    if let Some(b) = builder {
        return Step::Cleanup { builder: b.id.clone() };
    }
    Step::Done { image: image.id.clone() }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    pub check: String,
    pub ok: bool,
    pub detail: String,
}

/// `k=v;k=v` → map (values may hold `=`; a key without `=` is empty).
pub fn parse_report(report: &str) -> BTreeMap<String, String> {
    report
        .split(';')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (p.trim().to_string(), String::new()),
        })
        .collect()
}

/// The builder's measurements judged against the recipe: no machine
/// identity or SSH host keys left, the free space, the kubelet and
/// containerd at the recipe's versions. (Failed systemd units are the
/// gate's business: a builder is no node; they are kept in the facts and
/// compared on the canary's nodes.)
pub fn judge_report(l: &Loaded, facts: &BTreeMap<String, String>) -> Vec<CheckResult> {
    let r = &l.recipe;
    let get = |k: &str| facts.get(k).map(String::as_str);
    let mut out = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| out.push(CheckResult { check: name.into(), ok, detail });
    match get("machineId") {
        Some("0") => check("no machine identity", true, "/etc/machine-id is empty".into()),
        Some(n) => check("no machine identity", false, format!("/etc/machine-id holds {n} bytes")),
        None => check("no machine identity", false, "not reported".into()),
    }
    match get("sshHostKeys") {
        Some("0") => check("no SSH host keys", true, "none left".into()),
        Some(n) => check("no SSH host keys", false, format!("{n} host key files left in /etc/ssh")),
        None => check("no SSH host keys", false, "not reported".into()),
    }
    match get("freeGiB").and_then(|v| v.parse::<u64>().ok()) {
        Some(n) if n >= u64::from(r.checks.min_free_gib) => {
            check("free space", true, format!("{n} GiB free (at least {})", r.checks.min_free_gib))
        }
        Some(n) => check("free space", false, format!("{n} GiB free, the recipe wants {}", r.checks.min_free_gib)),
        None => check("free space", false, "not reported".into()),
    }
    let want = format!("v{}", r.kubernetes_version.trim_start_matches('v'));
    match get("kubelet") {
        Some(v) if v == want => check("kubelet version", true, v.to_string()),
        Some(v) => check("kubelet version", false, format!("{v}, the recipe names {want}")),
        None => check("kubelet version", false, "not reported".into()),
    }
    if let Some(c) = &r.components.containerd {
        match get("containerd") {
            Some(v) if v.trim_start_matches('v') == c.trim_start_matches('v') => {
                check("containerd version", true, v.to_string())
            }
            Some(v) => check("containerd version", false, format!("{v}, the recipe names {c}")),
            None => check("containerd version", false, "not reported".into()),
        }
    }
    if let Some(a) = &r.accelerator {
        judge_accelerator(a, facts, &mut check);
    }
    out
}

/// An accelerated recipe's stack as the builder measured it: the driver
/// module and the runtime at the recipe's versions, and for NVIDIA
/// containerd's default runtime `nvidia` running nvidia-container-runtime
/// (what EKS's NVIDIA AMIs configure; without it a pod asking for a GPU
/// starts without the driver's libraries).
fn judge_accelerator(
    a: &super::recipe::AcceleratorStack,
    facts: &BTreeMap<String, String>,
    check: &mut impl FnMut(&str, bool, String),
) {
    let get = |k: &str| facts.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let mut version = |name: &str, key: &str, want: &str| match get(key) {
        Some(v) if v == want => check(name, true, v.to_string()),
        Some("none") => check(name, false, format!("not installed, the recipe names {want}")),
        Some(v) => check(name, false, format!("{v}, the recipe names {want}")),
        None => check(name, false, "not reported".into()),
    };
    match a.kind {
        crate::accelerated::Kind::Nvidia => {
            version("NVIDIA driver version", "nvidiaDriver", &a.driver_version);
            version("nvidia-container-toolkit version", "nvidiaToolkit", &a.runtime_version);
            match get("containerdRuntime").and_then(|v| v.split_once(':')) {
                Some(("nvidia", bin)) if bin.ends_with("/nvidia-container-runtime") => {
                    check("containerd runs the nvidia runtime", true, format!("default runtime nvidia ({bin})"))
                }
                Some((default, bin)) => check(
                    "containerd runs the nvidia runtime",
                    false,
                    format!(
                        "default runtime `{default}`, nvidia runtime binary `{bin}`: want `nvidia` running …/nvidia-container-runtime"
                    ),
                ),
                None => check("containerd runs the nvidia runtime", false, "not reported".into()),
            }
            // A container's own NVIDIA_VISIBLE_DEVICES (`all`) is ignored:
            // devices come as the device plugin's volume mounts only.
            let guard = "the runtime ignores a container's NVIDIA_VISIBLE_DEVICES";
            match get("nvidiaEnvGuard").and_then(|v| v.split_once(':')) {
                Some(("false", "true")) => check(guard, true, "envvar when unprivileged: false; volume mounts: true".into()),
                Some((env, mounts)) => check(
                    guard,
                    false,
                    format!("accept-nvidia-visible-devices-envvar-when-unprivileged = `{env}`, accept-nvidia-visible-devices-as-volume-mounts = `{mounts}`: want false and true"),
                ),
                None => check(guard, false, "not reported".into()),
            }
        }
        crate::accelerated::Kind::Neuron => {
            version("Neuron driver version", "neuronDriver", &a.driver_version);
            version("Neuron runtime version", "neuronRuntime", &a.runtime_version);
        }
    }
}

/// What is known of a built image for its static checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFacts {
    pub architecture: String,
    pub boot_mode: Option<String>,
    /// (device, snapshot, encrypted) for every EBS block device.
    pub volumes: Vec<(String, String, bool)>,
    pub tags: BTreeMap<String, String>,
}

/// Static checks on the image itself, before anything boots it.
pub fn static_checks(l: &Loaded, digest: &str, img: &ImageFacts) -> Vec<CheckResult> {
    let r = &l.recipe;
    let mut out = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| out.push(CheckResult { check: name.into(), ok, detail });
    let want = r.base.architecture.as_str();
    check(
        "architecture",
        img.architecture == want,
        if img.architecture == want { want.into() } else { format!("{}, the recipe names {want}", img.architecture) },
    );
    if let Some(mode) = r.boot_mode {
        match img.boot_mode.as_deref() {
            Some(m) if m == mode.as_str() => check("boot mode", true, m.into()),
            Some(m) => check("boot mode", false, format!("{m}, the recipe names {}", mode.as_str())),
            None => check("boot mode", false, "the image does not say".into()),
        }
    }
    if img.volumes.is_empty() {
        check("encrypted volumes", !r.encrypted, "the image has no EBS block devices".into());
    } else if r.encrypted {
        let plain: Vec<String> =
            img.volumes.iter().filter(|(_, _, e)| !e).map(|(d, s, _)| format!("{d} ({s})")).collect();
        check(
            "encrypted volumes",
            plain.is_empty(),
            if plain.is_empty() {
                format!("{} encrypted", img.volumes.len())
            } else {
                format!("not encrypted: {}", plain.join(", "))
            },
        );
    } else {
        check("encrypted volumes", true, "not required by the recipe (encrypted: false)".into());
    }
    if let Some(a) = &r.accelerator {
        let want = accelerator_tag(a);
        match img.tags.get(TAG_ACCELERATOR) {
            Some(v) if *v == want => check("accelerator recorded", true, v.clone()),
            Some(v) => check("accelerator recorded", false, format!("{v}, the recipe names {want}")),
            None => check("accelerator recorded", false, format!("no {TAG_ACCELERATOR} tag (the recipe names {want})")),
        }
    }
    match img.tags.get(TAG_DIGEST) {
        Some(d) if d == digest => check("recipe digest recorded", true, d[..12.min(d.len())].to_string()),
        Some(d) => check("recipe digest recorded", false, format!("{d} is not this recipe's {digest}")),
        None => check("recipe digest recorded", false, "no digest tag".into()),
    }
    out
}

/// One line for the verdict tag (tags hold 256 characters).
pub fn verdict(results: &[CheckResult]) -> String {
    let failed: Vec<&str> = results.iter().filter(|r| !r.ok).map(|r| r.check.as_str()).collect();
    let s = if failed.is_empty() {
        format!("passed {} checks", results.len())
    } else {
        format!("failed: {}", failed.join(", "))
    };
    s.chars().take(255).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(state: &str, status: Option<&str>) -> Option<BuilderSeen> {
        Some(BuilderSeen { id: "i-1".into(), state: state.into(), status: status.map(Into::into), report: None })
    }

    fn image(state: &str, checks: Option<&str>) -> Option<ImageSeen> {
        Some(ImageSeen { id: "ami-1".into(), state: state.into(), checks: checks.map(Into::into) })
    }

    #[test]
    fn the_bake_resumes_from_whatever_it_finds() {
        let mut o = Observed { copies: [("eu-west-1".to_string(), None)].into(), ..Default::default() };
        assert_eq!(next(&o), Step::Launch);
        o.builder = builder("running", None);
        assert_eq!(next(&o), Step::AwaitReport { builder: "i-1".into() });
        o.builder = builder("running", Some("done"));
        assert_eq!(next(&o), Step::Stop { builder: "i-1".into() });
        o.builder = builder("stopped", Some("done"));
        assert_eq!(next(&o), Step::CreateImage { builder: "i-1".into() });
        o.image = image("pending", None);
        assert_eq!(next(&o), Step::AwaitImage { image: "ami-1".into() });
        o.image = image("available", None);
        assert_eq!(next(&o), Step::Check { image: "ami-1".into() });
        o.image = image("available", Some("passed 9 checks"));
        assert_eq!(next(&o), Step::Copy { regions: vec!["eu-west-1".into()] });
        o.copies.insert("eu-west-1".into(), image("pending", None));
        assert_eq!(next(&o), Step::AwaitCopies { pending: vec!["eu-west-1".into()] });
        o.copies.insert("eu-west-1".into(), image("available", None));
        assert_eq!(next(&o), Step::Cleanup { builder: "i-1".into() });
        o.builder = builder("terminated", Some("done"));
        assert_eq!(next(&o), Step::Done { image: "ami-1".into() });
        // A terminated builder with no image yet: a fresh builder.
        let o = Observed { builder: builder("terminated", None), ..Default::default() };
        assert_eq!(next(&o), Step::Launch);
    }

    #[test]
    fn failures_say_why() {
        let o = Observed {
            builder: Some(BuilderSeen {
                id: "i-9".into(),
                state: "running".into(),
                status: Some("failed".into()),
                report: Some("step=packages;line=12".into()),
            }),
            ..Default::default()
        };
        assert!(matches!(next(&o), Step::Fail { reason } if reason.contains("step=packages")));
        let o = Observed { builder: builder("stopped", None), ..Default::default() };
        assert!(matches!(next(&o), Step::Fail { reason } if reason.contains("before reporting")));
        let o = Observed { image: image("available", Some("failed: encrypted volumes")), ..Default::default() };
        assert!(matches!(next(&o), Step::Fail { reason } if reason.contains("encrypted volumes")));
    }

    fn recipe() -> Loaded {
        super::super::recipe::parse(
            "node",
            std::path::Path::new("images/node.yaml"),
            "base: {owners: [self], name: base-*}\nkubernetesVersion: 1.36.2\ncomponents: {containerd: 2.1.4}\nregions: [us-east-1]\nchecks: {minFreeGib: 4}\n",
        )
        .unwrap()
    }

    #[test]
    fn the_report_is_judged_against_the_recipe() {
        let l = recipe();
        let good = parse_report("kernel=6.8.0-1015-aws;osImage=Ubuntu 24.04.1 LTS;kubelet=v1.36.2;containerd=v2.1.4;cgroup=v2;machineId=0;sshHostKeys=0;freeGiB=11;failedUnits=");
        let r = judge_report(&l, &good);
        assert!(r.iter().all(|c| c.ok), "{r:?}");
        assert_eq!(verdict(&r), "passed 5 checks");
        let mut bad = good.clone();
        bad.insert("sshHostKeys".into(), "3".into());
        bad.insert("kubelet".into(), "v1.36.1".into());
        bad.insert("freeGiB".into(), "1".into());
        bad.insert("failedUnits".into(), "fwupd.service".into());
        let r = judge_report(&l, &bad);
        assert_eq!(verdict(&r), "failed: no SSH host keys, free space, kubelet version");
        assert!(r.iter().any(|c| c.detail == "v1.36.1, the recipe names v1.36.2"));
    }

    fn gpu_recipe() -> Loaded {
        super::super::recipe::parse(
            "gpu",
            std::path::Path::new("images/gpu.yaml"),
            "base: {owners: [self], name: base-*}\nkubernetesVersion: 1.36.2\ncomponents: {containerd: 2.1.4}\nregions: [us-east-1]\nchecks: {minFreeGib: 4}\naccelerator: {kind: nvidia, driverVersion: 570.172.08, runtimeVersion: 1.17.8}\n",
        )
        .unwrap()
    }

    /// An accelerated image's report is longer than a tag holds: it is
    /// kept in parts and read back whole.
    #[test]
    fn facts_longer_than_a_tag_are_kept_in_parts() {
        let long: String = (0..40).map(|i| format!("key{i}=value{i};")).collect();
        assert!(long.len() > 255);
        let tags = facts_tags(&long);
        assert!(tags.len() > 1 && tags.iter().all(|(_, v)| v.chars().count() <= 255), "{tags:?}");
        let map: BTreeMap<String, String> = tags.into_iter().collect();
        assert_eq!(facts_of(|k| map.get(k).map(String::as_str)), long);
        assert_eq!(facts_tags("a=1"), [(TAG_FACTS.to_string(), "a=1".to_string())]);
    }

    #[test]
    fn an_accelerated_recipes_stack_is_judged_from_the_report_and_the_image() {
        let l = gpu_recipe();
        let base = "kernel=6.8.0-1015-aws;osImage=Ubuntu 24.04.1 LTS;kubelet=v1.36.2;containerd=v2.1.4;cgroup=v2;machineId=0;sshHostKeys=0;freeGiB=11";
        let good = parse_report(&format!(
            "{base};nvidiaDriver=570.172.08;nvidiaToolkit=1.17.8;containerdRuntime=nvidia:/usr/bin/nvidia-container-runtime;nvidiaEnvGuard=false:true;failedUnits="
        ));
        let r = judge_report(&l, &good);
        assert_eq!(verdict(&r), "passed 9 checks", "{r:?}");
        // The driver the recipe pins is what counts; a runtime installed but not containerd's default fails.
        let bad = parse_report(&format!(
            "{base};nvidiaDriver=550.90.07;nvidiaToolkit=1.17.8;containerdRuntime=runc:/usr/bin/nvidia-container-runtime"
        ));
        let r = judge_report(&l, &bad);
        assert_eq!(
            verdict(&r),
            "failed: NVIDIA driver version, containerd runs the nvidia runtime, the runtime ignores a container's NVIDIA_VISIBLE_DEVICES"
        );
        assert!(r.iter().any(|c| c.detail == "550.90.07, the recipe names 570.172.08"), "{r:?}");
        // No driver module, no toolkit, no runtime at all (a builder whose step was skipped).
        let r =
            judge_report(&l, &parse_report(&format!("{base};nvidiaDriver=none;nvidiaToolkit=;containerdRuntime=:")));
        assert_eq!(
            verdict(&r),
            "failed: NVIDIA driver version, nvidia-container-toolkit version, containerd runs the nvidia runtime, the runtime ignores a container's NVIDIA_VISIBLE_DEVICES"
        );
        assert!(r.iter().any(|c| c.detail == "not installed, the recipe names 570.172.08"), "{r:?}");
        // A Neuron stack.
        let mut n = l.clone();
        n.recipe.accelerator = Some(super::super::recipe::AcceleratorStack {
            kind: crate::accelerated::Kind::Neuron,
            driver_version: "2.19.64.0".into(),
            runtime_version: "2.25.145.0".into(),
        });
        let r = judge_report(&n, &parse_report(&format!("{base};neuronDriver=2.19.64.0;neuronRuntime=2.24.1.0")));
        assert_eq!(verdict(&r), "failed: Neuron runtime version");
        // The image records the stack; a plain image of this recipe fails.
        let d = l.digest();
        let mut tags: BTreeMap<String, String> = [(TAG_DIGEST.to_string(), d.clone())].into();
        let facts = ImageFacts {
            architecture: "x86_64".into(),
            boot_mode: None,
            volumes: vec![("/dev/sda1".into(), "snap-1".into(), true)],
            tags: tags.clone(),
        };
        assert_eq!(verdict(&static_checks(&l, &d, &facts)), "failed: accelerator recorded");
        tags.insert(TAG_ACCELERATOR.into(), "nvidia 570.172.08/1.17.8".into());
        assert!(static_checks(&l, &d, &ImageFacts { tags, ..facts }).iter().all(|c| c.ok));
    }

    #[test]
    fn static_checks_read_the_image() {
        let l = recipe();
        let d = l.digest();
        let facts = ImageFacts {
            architecture: "x86_64".into(),
            boot_mode: Some("uefi".into()),
            volumes: vec![("/dev/sda1".into(), "snap-1".into(), true)],
            tags: [(TAG_DIGEST.to_string(), d.clone())].into(),
        };
        assert!(static_checks(&l, &d, &facts).iter().all(|c| c.ok));
        let plain = ImageFacts { volumes: vec![("/dev/sda1".into(), "snap-1".into(), false)], ..facts.clone() };
        let r = static_checks(&l, &d, &plain);
        assert_eq!(verdict(&r), "failed: encrypted volumes");
        assert!(r.iter().any(|c| c.detail == "not encrypted: /dev/sda1 (snap-1)"));
        let arm = ImageFacts { architecture: "arm64".into(), tags: BTreeMap::new(), ..facts };
        assert_eq!(verdict(&static_checks(&l, &d, &arm)), "failed: architecture, recipe digest recorded");
    }
}
