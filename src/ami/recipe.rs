//! Image recipes (pure): `images/NAME.yaml` read into a [`Recipe`] with
//! every problem located (unknown fields included), its digest, the bake's
//! id and names, and the builder's user-data.
//!
//! Data flow: recipe file → [`load`] → [`Recipe`] → the bake's plan
//! ([`super::bake`]) and the builder's script ([`user_data`]); the engine's
//! image side (`cloud::aws::bake`) carries it out.
//!
//! The builder reports back by tagging itself (`pinfleet:bake-status` =
//! `done` or `failed`, `pinfleet:bake-report` = `key=value;…` facts it
//! measured); pinfleet, not the script, judges those facts against the
//! recipe ([`super::bake::judge_report`]), so the verdict is the same code
//! whatever machine reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::spec::yaml::{self, Loc};
use crate::spec::{Diagnostic, Diagnostics, ImageSelector};

/// Where recipes live, relative to the project.
pub const DIR: &str = "images";

/// What the builder must leave free on its root volume unless the recipe says.
const DEFAULT_MIN_FREE_GIB: u32 = 2;

/// An image recipe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recipe {
    /// The image the builder starts from: newest available, not deprecated.
    pub base: ImageSelector,
    /// `uefi` or `legacy-bios`; the built image must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<BootMode>,
    /// The Kubernetes version whose node components the image preinstalls.
    pub kubernetes_version: String,
    /// Node components at pinned versions (the kubelet follows `kubernetesVersion`).
    #[serde(default)]
    pub components: Components,
    /// Distribution packages installed before the script.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// Files written before the script.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<RecipeFile>,
    /// Run as root after packages and files (bash, `set -euo pipefail`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub script: String,
    /// Regions the image lives in; the first is where it is baked, the rest
    /// receive copies.
    pub regions: Vec<String>,
    /// Tags on the image, its copies and snapshots (besides pinfleet's own).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The builder machine.
    #[serde(default)]
    pub builder: Builder,
    /// Snapshots encrypted (the default); public images cannot be.
    #[serde(default = "yes")]
    pub encrypted: bool,
    /// Checks run on the builder before the image is taken.
    #[serde(default)]
    pub checks: Checks,
    /// Channels in promotion order (`candidate` then `stable` unless said).
    #[serde(default = "default_channels")]
    pub channels: Vec<String>,
    /// What a soak gate lets differ between the previous image's nodes and
    /// the new ones (`kernel`, `osImage`, `containerRuntime`, `kubelet`,
    /// `cgroup`, `failedUnits`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_differences: Vec<String>,
    /// An accelerated image: the driver stack at pinned versions, as EKS's
    /// accelerated AMIs carry it (NVIDIA: the driver and
    /// nvidia-container-toolkit with containerd's default runtime `nvidia`;
    /// Neuron: the aws-neuronx driver and runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<AcceleratorStack>,
    /// The account images are baked, kept and promoted in, and the role
    /// pinfleet assumes there (`{id, roleArn, externalId}`, as a cluster's
    /// account). Absent: the caller's own account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_account: Option<crate::spec::Account>,
}

/// An accelerated image's driver stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcceleratorStack {
    /// `nvidia` or `neuron`.
    pub kind: crate::accelerated::Kind,
    /// The kernel driver's version: NVIDIA's (`570.172.08`, from Ubuntu's
    /// `nvidia-headless-570-server`), or `aws-neuronx-dkms`'s (`2.19.64.0`).
    pub driver_version: String,
    /// The container side: `nvidia-container-toolkit`'s version (`1.17.8`),
    /// or `aws-neuronx-runtime-lib`'s (`2.25.145.0`).
    pub runtime_version: String,
}

impl AcceleratorStack {
    /// NVIDIA's driver branch (`570` of `570.172.08`): Ubuntu's package names carry it.
    fn branch(&self) -> &str {
        self.driver_version.split('.').next().unwrap_or_default()
    }
}

fn yes() -> bool {
    true
}

fn default_channels() -> Vec<String> {
    vec!["candidate".into(), "stable".into()]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BootMode {
    Uefi,
    LegacyBios,
}

impl BootMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BootMode::Uefi => "uefi",
            BootMode::LegacyBios => "legacy-bios",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Components {
    /// containerd's version, checked on the builder (`containerd --version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecipeFile {
    /// Absolute path on the image.
    pub path: String,
    pub content: String,
    /// Octal permissions, `0644` unless said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Builder {
    #[serde(default = "default_builder_type")]
    pub instance_type: String,
    /// Root volume size in GiB.
    #[serde(default = "default_volume")]
    pub volume_gib: u32,
    /// Subnet to build in; the region's default VPC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// Instance profile allowing the builder to tag itself (its report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
}

fn default_builder_type() -> String {
    "m6i.large".into()
}

fn default_volume() -> u32 {
    20
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            instance_type: default_builder_type(),
            volume_gib: default_volume(),
            subnet: None,
            instance_profile: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checks {
    /// Free space the root volume must keep after the bake, in GiB.
    #[serde(default = "default_min_free")]
    pub min_free_gib: u32,
}

fn default_min_free() -> u32 {
    DEFAULT_MIN_FREE_GIB
}

impl Default for Checks {
    fn default() -> Self {
        Checks { min_free_gib: DEFAULT_MIN_FREE_GIB }
    }
}

/// A recipe read from its file, with its name (the file's stem).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub name: String,
    pub path: PathBuf,
    pub recipe: Recipe,
}

impl Loaded {
    /// The recipe's digest: SHA-256 of its canonical JSON (whitespace,
    /// comments and key order in the file do not change it).
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_vec(&self.recipe).expect("a recipe serializes")))
    }

    /// The bake's id: the recipe, its digest and the base image decide it,
    /// so a re-run of the same bake finds what a stopped one left.
    pub fn build_id(&self, base_image: &str) -> String {
        let h = hex::encode(Sha256::digest(format!("{}:{base_image}", self.digest())));
        format!("{}-{}", self.name, &h[..10])
    }

    /// The home region (where the builder runs).
    pub fn home(&self) -> &str {
        &self.recipe.regions[0]
    }
}

/// The image's name for a build (AMI names allow `/`).
pub fn image_name(recipe: &str, build_id: &str) -> String {
    format!("pinfleet/{recipe}/{build_id}")
}

fn recipe_schema() -> &'static serde_json::Value {
    static SCHEMA: OnceLock<serde_json::Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<Recipe>().to_value()
    })
}

/// Names of recipes and channels: lowercase letters, digits and `-`, as
/// they become SSM parameter path segments and image names.
pub use crate::spec::validate::image_name_ok as valid_name;

/// The recipe file for `name` in `dir` (`images/NAME.yaml`).
pub fn path_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.yaml"))
}

/// Reads and checks `images/NAME.yaml`.
pub fn load(dir: &Path, name: &str) -> Result<Loaded, Diagnostics> {
    let path = path_of(dir, name);
    let file = Arc::new(path.clone());
    let at = |message: String| {
        Diagnostics(vec![Diagnostic { loc: Loc::new(file.clone(), 1, 1), path: String::new(), message }])
    };
    if !valid_name(name) {
        return Err(at(format!("recipe name `{name}`: use lowercase letters, digits and `-` (at most 40)")));
    }
    let src = std::fs::read_to_string(&path).map_err(|e| {
        let known = list(dir).unwrap_or_default();
        at(format!(
            "cannot read recipe: {e}{}",
            if known.is_empty() { String::new() } else { format!(" (recipes here: {})", known.join(", ")) }
        ))
    })?;
    parse(name, &path, &src)
}

/// Parses a recipe's text said to live at `path`.
pub fn parse(name: &str, path: &Path, src: &str) -> Result<Loaded, Diagnostics> {
    let tree = yaml::parse_single(src, path).map_err(|e| Diagnostics(vec![Diagnostic::from(e)]))?;
    let json = crate::spec::check::Checker::new(recipe_schema()).check_root(&tree).map_err(Diagnostics)?;
    let recipe: Recipe = serde_json::from_value(json).map_err(|e| {
        Diagnostics(vec![Diagnostic { loc: tree.loc.clone(), path: String::new(), message: e.to_string() }])
    })?;
    let problems = validate(&recipe);
    if !problems.is_empty() {
        return Err(Diagnostics(
            problems.into_iter().map(|(p, message)| Diagnostic { loc: tree.locate(&p), path: p, message }).collect(),
        ));
    }
    Ok(Loaded { name: name.to_string(), path: path.to_path_buf(), recipe })
}

/// The recipes in `dir`, by name.
pub fn list(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    out.sort();
    Ok(out)
}

/// Semantic checks, as (field path, message).
pub fn validate(r: &Recipe) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut say = |p: &str, m: String| out.push((p.to_string(), m));
    match parse_version(&r.kubernetes_version) {
        None => say("kubernetesVersion", format!("`{}` is not a version like 1.36.2", r.kubernetes_version)),
        Some((minor, patch)) => match crate::spec::versions::minor(minor) {
            None => {
                let (lo, hi) = crate::spec::versions::range();
                say("kubernetesVersion", format!("1.{minor} is not a minor pinfleet knows (1.{lo}–1.{hi})"))
            }
            Some(m) if patch > m.newest_patch => say(
                "kubernetesVersion",
                format!("1.{minor}.{patch} is newer than the newest patch known (1.{minor}.{})", m.newest_patch),
            ),
            Some(_) => {}
        },
    }
    if r.regions.is_empty() {
        say("regions", "name at least one region (the first is where the image is baked)".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, region) in r.regions.iter().enumerate() {
        if !looks_like_region(region) {
            say(&format!("regions[{i}]"), format!("`{region}` is not a region name like us-east-1"));
        } else if !seen.insert(region) {
            say(&format!("regions[{i}]"), format!("`{region}` is listed twice"));
        }
    }
    if let Some(a) = &r.build_account {
        let id_ok = a.id.len() == 12 && a.id.bytes().all(|b| b.is_ascii_digit());
        if !id_ok {
            say("buildAccount.id", format!("`{}` is not an AWS account id (12 digits)", a.id));
        }
        match crate::spec::validate::parse_role_arn(&a.role_arn) {
            None => say(
                "buildAccount.roleArn",
                format!("`{}` is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)", a.role_arn),
            ),
            Some((partition, account, _)) => {
                // The image is baked in the first region, with this role.
                let baked_in = r.regions.first().map(String::as_str).filter(|x| looks_like_region(x));
                if let Some(why) = crate::spec::validate::role_partition_problem(&a.role_arn, partition, baked_in) {
                    say("buildAccount.roleArn", why);
                }
                if id_ok && account != a.id {
                    say(
                        "buildAccount.roleArn",
                        format!("the role `{}` is in account {account}, not in the build account {}", a.role_arn, a.id),
                    );
                }
            }
        }
    }
    if r.base.owners.is_empty() {
        say("base.owners", "name at least one owner (an account id, `self` or `amazon`)".into());
    }
    for (i, f) in r.files.iter().enumerate() {
        if !f.path.starts_with('/') || f.path.contains("..") {
            say(&format!("files[{i}].path"), format!("`{}` must be an absolute path without `..`", f.path));
        }
        if let Some(m) = &f.mode {
            if !(m.len() == 4 && m.starts_with('0') && m.bytes().all(|b| (b'0'..=b'7').contains(&b))) {
                say(&format!("files[{i}].mode"), format!("`{m}` is not an octal mode like 0644"));
            }
        }
    }
    for (i, p) in r.packages.iter().enumerate() {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.:=~_".contains(&b)) {
            say(&format!("packages[{i}]"), format!("`{p}` is not a package name"));
        }
    }
    if r.channels.is_empty() {
        say("channels", "name at least one channel".into());
    }
    for (i, c) in r.channels.iter().enumerate() {
        if !valid_name(c) {
            say(&format!("channels[{i}]"), format!("`{c}`: use lowercase letters, digits and `-`"));
        }
    }
    for (i, a) in r.allow_differences.iter().enumerate() {
        if !super::gate::ASPECTS.contains(&a.as_str()) {
            say(
                &format!("allowDifferences[{i}]"),
                format!("`{a}` is not something a gate compares ({})", super::gate::ASPECTS.join(", ")),
            );
        }
    }
    for k in r.tags.keys() {
        if k.starts_with("pinfleet:") || k.starts_with("aws:") {
            say(&format!("tags.{k}"), "tags under `pinfleet:` and `aws:` are reserved".into());
        }
    }
    if r.builder.volume_gib < 8 || r.builder.volume_gib > 16384 {
        say("builder.volumeGib", format!("{} GiB is outside 8–16384", r.builder.volume_gib));
    }
    if let Some(a) = &r.accelerator {
        let version = |v: &str| {
            let parts: Vec<&str> = v.split('.').collect();
            parts.len() >= 2
                && parts.len() <= 4
                && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        };
        for (field, v, like) in [
            (
                "driverVersion",
                &a.driver_version,
                if a.kind == crate::accelerated::Kind::Nvidia { "570.172.08" } else { "2.19.64.0" },
            ),
            (
                "runtimeVersion",
                &a.runtime_version,
                if a.kind == crate::accelerated::Kind::Nvidia { "1.17.8" } else { "2.25.145.0" },
            ),
        ] {
            if !version(v) {
                say(&format!("accelerator.{field}"), format!("`{v}` is not a pinned version like {like}"));
            }
        }
        if a.kind == crate::accelerated::Kind::Neuron && r.base.architecture == crate::spec::Architecture::Arm64 {
            say("accelerator.kind", "Neuron machines (trn1, inf2) are x86_64: the base image is arm64".into());
        }
    }
    if r.checks.min_free_gib >= r.builder.volume_gib {
        say(
            "checks.minFreeGib",
            format!("{} GiB cannot be free on a {} GiB volume", r.checks.min_free_gib, r.builder.volume_gib),
        );
    }
    out
}

fn looks_like_region(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
        && parts.last().is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

/// `1.36.2` → (36, 2).
pub fn parse_version(v: &str) -> Option<(u32, u32)> {
    let mut it = v.strip_prefix('v').unwrap_or(v).split('.');
    let (major, minor, patch) = (it.next()?, it.next()?, it.next()?);
    if major != "1" || it.next().is_some() {
        return None;
    }
    Some((minor.parse().ok()?, patch.parse().ok()?))
}

/// Single-quotes a string for bash.
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The builder's user-data: files, packages, the node components at the
/// recipe's versions, the recipe's script, then the measurements pinfleet
/// judges, reported as tags on the builder itself.
pub fn user_data(l: &Loaded, build_id: &str) -> String {
    use base64::Engine as _;
    let r = &l.recipe;
    let (minor, _) = parse_version(&r.kubernetes_version).unwrap_or((0, 0));
    let mut s = String::new();
    s += "#!/bin/bash\n";
    s += &format!("# pinfleet bake {build_id}: recipe {} (digest {})\n", l.name, l.digest());
    s += "set -euo pipefail\n";
    s += "exec >>/var/log/pinfleet-bake.log 2>&1\n";
    s += "STEP=start\n";
    s += "imds() { curl -sf -H \"X-aws-ec2-metadata-token: $(curl -sf -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')\" \"http://169.254.169.254/latest/meta-data/$1\"; }\n";
    s += "report() {\n";
    s += "  aws ec2 create-tags --region \"$(imds placement/region)\" --resources \"$(imds instance-id)\" \\\n";
    s += "    --tags \"Key=pinfleet:bake-status,Value=$1\" \"Key=pinfleet:bake-report,Value=${2:0:255}\"\n";
    s += "}\n";
    s += "trap 'report failed \"step=$STEP;line=$LINENO\"' ERR\n";
    if !r.files.is_empty() {
        s += "STEP=files\n";
        for f in &r.files {
            let b64 = base64::engine::general_purpose::STANDARD.encode(f.content.as_bytes());
            s += &format!(
                "install -D -m {} /dev/null {p} && echo {} | base64 -d > {p}\n",
                f.mode.as_deref().unwrap_or("0644"),
                sh(&b64),
                p = sh(&f.path)
            );
        }
    }
    s += "STEP=packages\n";
    s += "export DEBIAN_FRONTEND=noninteractive\n";
    s += "apt-get update -q\n";
    let mut packages: Vec<String> = vec!["awscli".into(), "curl".into(), "gpg".into()];
    packages.extend(r.packages.iter().cloned());
    s += &format!("apt-get install -y -q {}\n", packages.iter().map(|p| sh(p)).collect::<Vec<_>>().join(" "));
    s += "STEP=components\n";
    s += "install -d -m 0755 /etc/apt/keyrings\n";
    s += &format!(
        "curl -fsSL https://pkgs.k8s.io/core:/stable:/v1.{minor}/deb/Release.key | gpg --dearmor -o /etc/apt/keyrings/kubernetes.gpg\n"
    );
    s += &format!(
        "echo 'deb [signed-by=/etc/apt/keyrings/kubernetes.gpg] https://pkgs.k8s.io/core:/stable:/v1.{minor}/deb/ /' > /etc/apt/sources.list.d/kubernetes.list\n"
    );
    s += "apt-get update -q\n";
    s += &format!(
        "apt-get install -y -q {} {}\n",
        sh(&format!("kubelet={}-*", r.kubernetes_version)),
        sh(&format!("kubectl={}-*", r.kubernetes_version))
    );
    match &r.components.containerd {
        Some(v) => s += &format!("apt-get install -y -q {}\n", sh(&format!("containerd={v}*"))),
        None => s += "apt-get install -y -q containerd\n",
    }
    s += "apt-mark hold kubelet kubectl containerd\n";
    if !r.script.is_empty() {
        s += "STEP=script\n";
        s += "bash -euo pipefail <<'PINFLEET_RECIPE_SCRIPT'\n";
        s += &r.script;
        if !r.script.ends_with('\n') {
            s += "\n";
        }
        s += "PINFLEET_RECIPE_SCRIPT\n";
    }
    if let Some(a) = &r.accelerator {
        s += &accelerator_steps(a);
    }
    s += "STEP=checks\n";
    s += "truncate -s 0 /etc/machine-id\n";
    s += "rm -f /etc/ssh/ssh_host_* /var/lib/dbus/machine-id\n";
    s += "cloud-init clean --logs || true\n";
    s += "R=\"kernel=$(uname -r)\"\n";
    s += "R=\"$R;osImage=$(. /etc/os-release && echo \"$PRETTY_NAME\")\"\n";
    s += "R=\"$R;kubelet=$(kubelet --version | awk '{print $2}')\"\n";
    s += "R=\"$R;containerd=$(containerd --version | awk '{print $3}')\"\n";
    s += "R=\"$R;cgroup=$(stat -fc %T /sys/fs/cgroup | sed 's/cgroup2fs/v2/;s/tmpfs/v1/')\"\n";
    s += "R=\"$R;machineId=$(wc -c </etc/machine-id)\"\n";
    s += "R=\"$R;sshHostKeys=$(ls /etc/ssh/ssh_host_* 2>/dev/null | wc -l)\"\n";
    s += "R=\"$R;freeGiB=$(df --output=avail -BG / | tail -1 | tr -dc 0-9)\"\n";
    match r.accelerator.as_ref().map(|a| a.kind) {
        Some(crate::accelerated::Kind::Nvidia) => {
            s += "R=\"$R;nvidiaDriver=$(modinfo -F version nvidia 2>/dev/null || echo none)\"\n";
            s += "R=\"$R;nvidiaToolkit=$(nvidia-ctk --version 2>/dev/null | awk 'NR==1{print $NF}')\"\n";
            s += "R=\"$R;containerdRuntime=$(sed -n 's/^ *default_runtime_name = \"\\(.*\\)\"/\\1/p' /etc/containerd/config.toml | head -1):$(sed -n 's/^ *BinaryName = \"\\(.*nvidia.*\\)\"/\\1/p' /etc/containerd/config.toml | head -1)\"\n";
            s += "R=\"$R;nvidiaEnvGuard=$(sed -n 's/^ *accept-nvidia-visible-devices-envvar-when-unprivileged *= *//p' /etc/nvidia-container-runtime/config.toml | head -1):$(sed -n 's/^ *accept-nvidia-visible-devices-as-volume-mounts *= *//p' /etc/nvidia-container-runtime/config.toml | head -1)\"\n";
        }
        Some(crate::accelerated::Kind::Neuron) => {
            s += "R=\"$R;neuronDriver=$(modinfo -F version neuron 2>/dev/null || echo none)\"\n";
            s += "R=\"$R;neuronRuntime=$(dpkg-query -W -f='${Version}' aws-neuronx-runtime-lib 2>/dev/null)\"\n";
        }
        None => {}
    }
    s += "R=\"$R;failedUnits=$(systemctl list-units --state=failed --no-legend --plain | awk '{print $1}' | paste -sd, -)\"\n";
    s += "sync\n";
    s += "report done \"$R\"\n";
    s
}

/// The accelerated variant's steps, after the recipe's script so that the
/// containerd configuration it writes gets the accelerator's runtime: the
/// vendor's apt repository, the driver and runtime at the recipe's
/// versions (held), and for NVIDIA containerd's default runtime set to
/// `nvidia` by `nvidia-ctk`, as EKS's NVIDIA AMIs configure it.
fn accelerator_steps(a: &AcceleratorStack) -> String {
    let mut s = String::from("STEP=accelerator\n");
    match a.kind {
        crate::accelerated::Kind::Nvidia => {
            let branch = a.branch();
            s += "curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o /etc/apt/keyrings/nvidia-container-toolkit.gpg\n";
            s += "curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list | sed 's#deb https://#deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] https://#g' > /etc/apt/sources.list.d/nvidia-container-toolkit.list\n";
            s += "apt-get update -q\n";
            let driver = [format!("nvidia-headless-{branch}-server"), format!("nvidia-utils-{branch}-server")];
            let toolkit = ["nvidia-container-toolkit", "nvidia-container-toolkit-base"];
            let mut pins: Vec<String> = driver.iter().map(|p| sh(&format!("{p}={}-*", a.driver_version))).collect();
            pins.extend(toolkit.iter().map(|p| sh(&format!("{p}={}-*", a.runtime_version))));
            s += &format!("apt-get install -y -q {}\n", pins.join(" "));
            s += &format!("apt-mark hold {} {}\n", driver.join(" "), toolkit.join(" "));
            s += "nvidia-ctk runtime configure --runtime=containerd --set-as-default --config=/etc/containerd/config.toml\n";
            // A container sees the GPUs the device plugin mounted for it, never
            // the ones its own NVIDIA_VISIBLE_DEVICES names (`all` would be every
            // GPU of the node, counted by no quota): NVIDIA's documented guard.
            s += "nvidia-ctk config --in-place --set accept-nvidia-visible-devices-envvar-when-unprivileged=false --set accept-nvidia-visible-devices-as-volume-mounts=true\n";
        }
        crate::accelerated::Kind::Neuron => {
            s += "curl -fsSL https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB | gpg --dearmor -o /etc/apt/keyrings/neuron.gpg\n";
            s += "echo \"deb [signed-by=/etc/apt/keyrings/neuron.gpg] https://apt.repos.neuron.amazonaws.com $(. /etc/os-release && echo \"$VERSION_CODENAME\") main\" > /etc/apt/sources.list.d/neuron.list\n";
            s += "apt-get update -q\n";
            s += &format!(
                "apt-get install -y -q \"linux-headers-$(uname -r)\" {} {} aws-neuronx-tools\n",
                sh(&format!("aws-neuronx-dkms={}", a.driver_version)),
                sh(&format!("aws-neuronx-runtime-lib={}*", a.runtime_version))
            );
            s += "apt-mark hold aws-neuronx-dkms aws-neuronx-runtime-lib\n";
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
base:
  owners: ["099720109477"]
  name: "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*"
kubernetesVersion: "1.36.2"
components:
  containerd: "2.1.4"
packages: [conntrack, socat]
files:
  - path: /etc/sysctl.d/99-kubernetes.conf
    content: "net.ipv4.ip_forward = 1\n"
script: |
  echo 'it''s baked' > /etc/motd
regions: [us-east-1, eu-west-1]
"#;

    fn at(src: &str) -> Result<Loaded, Diagnostics> {
        parse("node", Path::new("images/node.yaml"), src)
    }

    #[test]
    fn a_good_recipe_loads_with_defaults_and_a_stable_digest() {
        let l = at(GOOD).unwrap();
        assert_eq!(l.recipe.channels, ["candidate", "stable"]);
        assert!(l.recipe.encrypted);
        assert_eq!(l.home(), "us-east-1");
        // Comments, spacing and key order do not change the digest; content does.
        let reordered = format!(
            "# the node image\nregions: [us-east-1, eu-west-1]\n{}",
            GOOD.replace("regions: [us-east-1, eu-west-1]\n", "")
        );
        assert_eq!(at(&reordered).unwrap().digest(), l.digest());
        assert_ne!(at(&GOOD.replace("socat", "ebtables")).unwrap().digest(), l.digest());
        // The build id follows the base image too.
        assert_ne!(l.build_id("ami-1"), l.build_id("ami-2"));
        assert!(l.build_id("ami-1").starts_with("node-"));
    }

    #[test]
    fn bad_recipes_are_located() {
        let e = at(&GOOD.replace("packages:", "pakages:")).unwrap_err().to_string();
        assert!(e.contains("images/node.yaml:") && e.contains("pakages"), "{e}");
        let e = at(&GOOD.replace("1.36.2", "1.99.0")).unwrap_err().to_string();
        assert!(e.contains("kubernetesVersion") && e.contains("1.99"), "{e}");
        let e = at(&GOOD.replace("eu-west-1]", "us-east-1]")).unwrap_err().to_string();
        assert!(e.contains("regions[1]") && e.contains("twice"), "{e}");
        let e = at(&format!("{GOOD}allowDifferences: [kernal]\n")).unwrap_err().to_string();
        assert!(e.contains("allowDifferences[0]") && e.contains("kernel"), "{e}");
        let e = at(&format!("{GOOD}tags: {{\"pinfleet:recipe\": x}}\n")).unwrap_err().to_string();
        assert!(e.contains("reserved"), "{e}");
        let elsewhere = "buildAccount: {id: \"111122223333\", roleArn: \"arn:aws:iam::444455556666:role/pinfleet\"}\n";
        let e = at(&format!("{GOOD}{elsewhere}")).unwrap_err().to_string();
        assert!(e.contains("buildAccount.roleArn") && e.contains("in account 444455556666"), "{e}");
        let mars = "buildAccount: {id: \"111122223333\", roleArn: \"arn:aws-mars:iam::111122223333:role/pinfleet\"}\n";
        let e = at(&format!("{GOOD}{mars}")).unwrap_err().to_string();
        assert!(
            e.contains("buildAccount.roleArn") && e.contains("partition `aws-mars`, which AWS does not have"),
            "{e}"
        );
        let china = "buildAccount: {id: \"111122223333\", roleArn: \"arn:aws-cn:iam::111122223333:role/pinfleet\"}\n";
        let e = at(&format!("{GOOD}{china}")).unwrap_err().to_string();
        assert!(e.contains("partition aws-cn but region us-east-1 is in partition aws"), "{e}");
        let e =
            at(&format!("{GOOD}buildAccount: {{id: \"1111\", roleArn: \"arn:aws:iam::1111:role/x\"}}\n")).unwrap_err();
        assert!(e.to_string().contains("buildAccount.id"), "{e}");
        let good = "buildAccount: {id: \"111122223333\", roleArn: \"arn:aws:iam::111122223333:role/pinfleet\"}\n";
        assert_eq!(at(&format!("{GOOD}{good}")).unwrap().recipe.build_account.unwrap().id, "111122223333");
    }

    #[test]
    fn user_data_is_the_recipe_in_order() {
        let l = at(GOOD).unwrap();
        let ud = user_data(&l, "node-0123456789");
        insta::assert_snapshot!(ud.replace(&l.digest(), "DIGEST"));
        // Quotes in the script survive: it is passed through a quoted heredoc.
        assert!(ud.contains("echo 'it''s baked' > /etc/motd"));
    }

    #[test]
    fn an_accelerated_recipe_installs_its_stack_after_the_script_and_reports_it() {
        let nvidia = format!(
            "{GOOD}accelerator:\n  kind: nvidia\n  driverVersion: \"570.172.08\"\n  runtimeVersion: \"1.17.8\"\n"
        );
        let l = at(&nvidia).unwrap();
        let ud = user_data(&l, "gpu-0123456789");
        insta::assert_snapshot!("user_data_nvidia", ud.replace(&l.digest(), "DIGEST"));
        let pos = |needle: &str| ud.find(needle).unwrap_or_else(|| panic!("no {needle} in {ud}"));
        assert!(pos("STEP=script") < pos("STEP=accelerator"), "the script's containerd config gets the runtime");
        assert!(pos("STEP=accelerator") < pos("STEP=checks"));
        let neuron = format!(
            "{GOOD}accelerator:\n  kind: neuron\n  driverVersion: \"2.19.64.0\"\n  runtimeVersion: \"2.25.145.0\"\n"
        );
        let l = at(&neuron).unwrap();
        insta::assert_snapshot!("user_data_neuron", user_data(&l, "inf-0123456789").replace(&l.digest(), "DIGEST"));
        // A recipe without an accelerator renders as before.
        assert!(!user_data(&at(GOOD).unwrap(), "x").contains("STEP=accelerator"));
    }

    #[test]
    fn bad_accelerators_are_located() {
        let e =
            at(&format!("{GOOD}accelerator: {{kind: nvidia, driverVersion: latest, runtimeVersion: \"1.17.8\"}}\n"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("accelerator.driverVersion") && e.contains("`latest` is not a pinned version"), "{e}");
        let e = at(&format!("{GOOD}accelerator: {{kind: amd, driverVersion: \"1.0\", runtimeVersion: \"1.0\"}}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("images/node.yaml:") && e.contains("amd"), "{e}");
        let e =
            at(&format!("{GOOD}accelerator: {{kind: nvidia, driverVersion: \"570.1\"}}\n")).unwrap_err().to_string();
        assert!(e.contains("runtimeVersion"), "{e}");
    }

    #[test]
    fn names_and_versions() {
        assert!(valid_name("node") && valid_name("gpu-node-2"));
        assert!(!valid_name("Node") && !valid_name("-x") && !valid_name("a/b") && !valid_name(""));
        assert_eq!(parse_version("1.36.2"), Some((36, 2)));
        assert_eq!(parse_version("v1.36.2"), Some((36, 2)));
        assert_eq!(parse_version("2.0.0"), None);
        assert!(looks_like_region("eu-west-1") && looks_like_region("us-gov-west-1") && !looks_like_region("europe"));
    }
}
