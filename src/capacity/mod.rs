//! Capacity as EC2 gives it (pure): offerings (market, instance type,
//! zone), the error codes that mean "EC2 cannot serve this offering now",
//! the order an instance group tries its offerings in, and the fleet-wide
//! ledger of offerings EC2 just refused, with their time to live.
//!
//! ```text
//! spec InstanceGroup { machineType, capacity { types, market, fallback } }
//!     │ offerings(group, zones): the group's file order
//!     ▼
//! [Offering] ─ ledger.usable(now) ─▶ the next offering to launch on
//!     ▲                                   │ RunInstances (aws::ops::launch)
//!     └── ledger.mark(offering, code) ◀───┘ an unfulfillable code
//! ```
//!
//! Pure, and below both the spec (which names a group's types, markets and
//! fallback with these types) and the cloud (which launches with them).
//! The ledger lives in the state store (one object per account and
//! region, behind [`LedgerStore`]), so a second cluster, the machine-health loop, a rollout and a
//! restarted run all skip what EC2 just refused. An entry lives 3 minutes,
//! doubled for each refusal of the same offering within the hour, at most
//! 30 minutes (Karpenter keeps 3 minutes in memory; cluster-autoscaler
//! backs a group off 5 minutes doubling to 30).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

pub mod launcher;
pub use launcher::{Launcher, Step};

/// On-Demand or Spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Market {
    OnDemand,
    Spot,
}

impl Market {
    pub fn as_str(self) -> &'static str {
        match self {
            Market::OnDemand => "on-demand",
            Market::Spot => "spot",
        }
    }
}

/// One way to launch a machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Offering {
    pub market: Market,
    pub instance_type: String,
    pub zone: String,
}

impl std::fmt::Display for Offering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} in {}", self.market.as_str(), self.instance_type, self.zone)
    }
}

/// Codes EC2 answers when it cannot serve an offering now: the next one is
/// tried at once, never the same one again until its entry expires.
pub const UNFULFILLABLE: &[(&str, &str)] = &[
    ("InsufficientInstanceCapacity", "EC2 has no capacity of this type in this zone now"),
    ("InsufficientHostCapacity", "no Dedicated Host capacity of this type in this zone now"),
    ("InsufficientReservedInstanceCapacity", "the reservation has no capacity left"),
    ("MaxSpotInstanceCountExceeded", "the account's Spot limit is reached"),
    ("SpotMaxPriceTooLow", "the Spot price is above the maximum price"),
    ("Unsupported", "this type is not offered in this zone"),
    ("UnfulfillableCapacity", "the fleet could not be fulfilled with this offering"),
    ("InsufficientFreeAddressesInSubnet", "the zone's subnet has no free addresses"),
    ("InsufficientCapacityOnOutpost", "the Outpost has no capacity of this type"),
    ("VcpuLimitExceeded", "the account's vCPU limit for this market is reached"),
];

/// Whether a code means the offering cannot be served now.
pub fn unfulfillable(code: &str) -> bool {
    UNFULFILLABLE.iter().any(|(c, _)| *c == code)
}

/// The first time an offering is refused it is skipped this long.
pub const FIRST_TTL: Duration = Duration::minutes(3);
/// However often it is refused, at most this long.
pub const MAX_TTL: Duration = Duration::minutes(30);
/// Refusals within this window double the time to live.
pub const REPEAT_WINDOW: Duration = Duration::hours(1);

/// One offering EC2 refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub offering: Offering,
    pub code: String,
    /// The first refusal of the current streak.
    pub since: DateTime<Utc>,
    /// The latest refusal.
    pub last: DateTime<Utc>,
    /// Skipped until then.
    pub until: DateTime<Utc>,
    /// Refusals in the streak (each within an hour of the last).
    pub strikes: u32,
    /// Who met it (`cluster/group`), for `pinfleet capacity`.
    pub by: String,
}

/// Offerings EC2 refused, for one account and region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    pub account: String,
    pub region: String,
    pub entries: Vec<Entry>,
    /// Launch attempts of groups with capacity settings, the last hour's:
    /// the rate cap and the churn halt read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<Launch>,
}

/// One launch of a group: every offering refused (`ok: false`) or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Launch {
    /// `cluster/group`.
    pub by: String,
    pub at: DateTime<Utc>,
    pub ok: bool,
    /// RunInstances calls it made (one per offering tried).
    pub calls: u32,
    /// Of those, the ones EC2 refused for capacity.
    #[serde(default)]
    pub refused: u32,
}

/// The ledgers as Prometheus metrics, per group (`cluster/group`) and code:
/// offerings held back now, and the last hour's launches and calls by
/// outcome. Served by the machine-health loop (`controller --machines`).
pub fn metrics(ledgers: &[Ledger], now: DateTime<Utc>) -> String {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let mut out = String::new();
    let mut out_now: BTreeMap<(String, String, String), u32> = BTreeMap::new();
    let mut launches: BTreeMap<(String, String, &str), u32> = BTreeMap::new();
    let mut calls: BTreeMap<(String, String, &str), u32> = BTreeMap::new();
    for l in ledgers {
        for e in l.entries.iter().filter(|e| e.until > now) {
            *out_now.entry((l.region.clone(), e.by.clone(), e.code.clone())).or_default() += 1;
        }
        for x in l.launches.iter().filter(|x| now - x.at <= Duration::hours(1)) {
            let result = if x.ok { "launched" } else { "failed" };
            *launches.entry((l.region.clone(), x.by.clone(), result)).or_default() += 1;
            *calls.entry((l.region.clone(), x.by.clone(), "refused")).or_default() += x.refused;
            *calls.entry((l.region.clone(), x.by.clone(), "served")).or_default() += x.calls.saturating_sub(x.refused);
        }
    }
    out.push_str("# HELP pinfleet_capacity_offerings_out Offerings the capacity ledger holds back now, by the group that met the refusal and EC2's code.\n# TYPE pinfleet_capacity_offerings_out gauge\n");
    for ((region, group, code), n) in &out_now {
        let _ = writeln!(
            out,
            "pinfleet_capacity_offerings_out{{region=\"{}\",group=\"{}\",code=\"{}\"}} {n}",
            esc(region),
            esc(group),
            esc(code)
        );
    }
    out.push_str("# HELP pinfleet_capacity_launches Launches of groups with capacity settings in the last hour, by outcome.\n# TYPE pinfleet_capacity_launches gauge\n");
    for ((region, group, result), n) in &launches {
        let _ = writeln!(
            out,
            "pinfleet_capacity_launches{{region=\"{}\",group=\"{}\",result=\"{result}\"}} {n}",
            esc(region),
            esc(group)
        );
    }
    out.push_str("# HELP pinfleet_capacity_launch_calls RunInstances calls in the last hour, served or refused for capacity.\n# TYPE pinfleet_capacity_launch_calls gauge\n");
    for ((region, group, result), n) in &calls {
        let _ = writeln!(
            out,
            "pinfleet_capacity_launch_calls{{region=\"{}\",group=\"{}\",result=\"{result}\"}} {n}",
            esc(region),
            esc(group)
        );
    }
    out
}

/// Of a group's last [`CHURN_OF`] launches, this many failed halts its rollouts.
pub const CHURN_FAILURES: usize = 2;
pub const CHURN_OF: usize = 4;

impl Ledger {
    /// Records a refusal: 3 minutes, doubled for each refusal within the
    /// hour since the last one, at most 30 minutes.
    pub fn mark(&mut self, offering: &Offering, code: &str, by: &str, now: DateTime<Utc>) -> &Entry {
        let i = match self.entries.iter().position(|e| e.offering == *offering) {
            Some(i) => {
                let e = &mut self.entries[i];
                if now - e.last <= REPEAT_WINDOW {
                    e.strikes = e.strikes.saturating_add(1);
                } else {
                    e.strikes = 1;
                    e.since = now;
                }
                e.last = now;
                e.code = code.to_string();
                e.by = by.to_string();
                e.until = now + ttl(e.strikes);
                i
            }
            None => {
                self.entries.push(Entry {
                    offering: offering.clone(),
                    code: code.to_string(),
                    since: now,
                    last: now,
                    until: now + ttl(1),
                    strikes: 1,
                    by: by.to_string(),
                });
                self.entries.len() - 1
            }
        };
        &self.entries[i]
    }

    /// The live entry for an offering, if EC2 refused it recently.
    pub fn out(&self, offering: &Offering, now: DateTime<Utc>) -> Option<&Entry> {
        self.entries.iter().find(|e| e.offering == *offering && e.until > now)
    }

    /// Entries whose streak ended over an hour ago are forgotten (an
    /// expired one stays within the hour: a repeat doubles its time), and
    /// launches older than an hour beyond each group's last [`CHURN_OF`].
    pub fn prune(&mut self, now: DateTime<Utc>) {
        self.entries.retain(|e| now - e.last <= REPEAT_WINDOW || e.until > now);
        self.launches.sort_by(|a, b| (&a.by, a.at).cmp(&(&b.by, b.at)));
        let mut keep = Vec::new();
        for (i, l) in self.launches.iter().enumerate() {
            let later = self.launches[i + 1..].iter().filter(|x| x.by == l.by).count();
            if later < CHURN_OF || now - l.at <= REPEAT_WINDOW {
                keep.push(l.clone());
            }
        }
        self.launches = keep;
    }

    /// Records one launch of `by`.
    pub fn launched(&mut self, by: &str, ok: bool, calls: u32, refused: u32, now: DateTime<Utc>) {
        self.launches.push(Launch { by: by.to_string(), at: now, ok, calls, refused });
    }

    /// RunInstances calls of `by` EC2 refused for capacity in the minute
    /// before `now` (what the rate cap counts: a healthy scale-up is never
    /// held back, a group under ICE is).
    pub fn refused_last_minute(&self, by: &str, now: DateTime<Utc>) -> u32 {
        self.launches
            .iter()
            .filter(|l| l.by == by && now - l.at < Duration::minutes(1) && l.at <= now)
            .map(|l| l.refused)
            .sum()
    }

    /// Why rollouts of `by` halt: [`CHURN_FAILURES`] of its last
    /// [`CHURN_OF`] launches failed (None otherwise).
    pub fn churn(&self, by: &str) -> Option<String> {
        let mut mine: Vec<&Launch> = self.launches.iter().filter(|l| l.by == by).collect();
        mine.sort_by_key(|l| l.at);
        let last: Vec<&&Launch> = mine.iter().rev().take(CHURN_OF).collect();
        let failed = last.iter().filter(|l| !l.ok).count();
        (failed >= CHURN_FAILURES).then(|| {
            format!(
                "{failed} of the last {} launches of {by} failed (the last at {}): halting rollouts of the group",
                last.len(),
                last.iter().find(|l| !l.ok).map(|l| l.at.format("%H:%M").to_string()).unwrap_or_default()
            )
        })
    }

    /// Merges another copy (a concurrent writer's): per offering, the later refusal.
    pub fn merge(&mut self, other: &Ledger) {
        for o in &other.entries {
            match self.entries.iter_mut().find(|e| e.offering == o.offering) {
                Some(e) if o.last > e.last => *e = o.clone(),
                Some(_) => {}
                None => self.entries.push(o.clone()),
            }
        }
        self.entries.sort_by(|a, b| a.offering.cmp(&b.offering));
        for l in &other.launches {
            if !self.launches.contains(l) {
                self.launches.push(l.clone());
            }
        }
        self.launches.sort_by(|a, b| (&a.by, a.at).cmp(&(&b.by, b.at)));
    }
}

/// One launch's calls, kept by the launcher as it tries offerings: the
/// rate cap before each call (refused calls a minute), the refusals, and
/// what the ledger records at the end. The same for the AWS launcher and
/// the capacity benchmark.
#[derive(Debug, Clone)]
pub struct Attempts {
    pub by: String,
    cap: u32,
    before: u32,
    pub calls: u32,
    /// Calls EC2 refused for capacity (a CreateFleet that launched nothing is one).
    refused_calls: u32,
    pub refusals: Vec<(Offering, String, String)>,
}

impl Attempts {
    /// `cap` calls a minute; `before`, the calls the ledger saw in the last minute.
    pub fn new(by: &str, cap: u32, ledger: &Ledger, now: DateTime<Utc>) -> Attempts {
        Attempts {
            by: by.to_string(),
            cap,
            before: ledger.refused_last_minute(by, now),
            calls: 0,
            refused_calls: 0,
            refusals: Vec::new(),
        }
    }

    /// Counts a call about to go out, or says why none may.
    pub fn call(&mut self) -> Result<(), String> {
        let made = self.before + self.refused_calls;
        if made >= self.cap {
            return Err(format!(
                "blocked on capacity: {made} refused launch calls in the last minute, the group's limit (capacity.launchesPerMinute: {}); waiting",
                self.cap
            ));
        }
        self.calls += 1;
        Ok(())
    }

    /// EC2 refused `o` with `code` (one of [`UNFULFILLABLE`]).
    pub fn refused(&mut self, o: &Offering, code: &str) {
        self.refusals.push((o.clone(), code.to_string(), self.by.clone()));
        self.refused_calls += 1;
    }

    /// A fleet's answer refused `o` with `code` (the call itself counts
    /// as refused only when it launched nothing: [`Self::fleet_refused`]).
    pub fn refused_override(&mut self, o: &Offering, code: &str) {
        self.refusals.push((o.clone(), code.to_string(), self.by.clone()));
    }

    /// The fleet call launched nothing: one refused call.
    pub fn fleet_refused(&mut self) {
        self.refused_calls += 1;
    }

    /// The launch record for the ledger (None when no call went out).
    pub fn launch(&self, ok: bool, now: DateTime<Utc>) -> Option<Launch> {
        (self.calls > 0).then(|| Launch {
            by: self.by.clone(),
            at: now,
            ok,
            calls: self.calls,
            refused: self.refused_calls,
        })
    }

    /// Starts the next batch of the same launch: the calls so far count
    /// toward the cap, the refusals are recorded per batch.
    pub fn next_batch(&mut self) {
        self.before += self.refused_calls;
        self.calls = 0;
        self.refused_calls = 0;
        self.refusals.clear();
    }
}

/// Where the fleet-wide ledger is kept (the state store: `state::capacity`);
/// launches read it and record refusals through this, so the cloud side
/// does not depend on the store.
pub trait LedgerStore: Send + Sync {
    fn load(&self) -> futures::future::BoxFuture<'_, anyhow::Result<Ledger>>;
    /// Records `(offering, code, who)` refusals and launches at `now`;
    /// the ledger as written.
    fn record<'a>(
        &'a self,
        refusals: &'a [(Offering, String, String)],
        launches: &'a [Launch],
        now: DateTime<Utc>,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Ledger>>;
}

/// EC2's `CapacityReservationPreference` as a group names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationPreference {
    /// Any open reservation that matches the machine (EC2's default).
    Open,
    /// Never a reservation.
    None,
    /// Only reservations: no machine outside them (a targeted one too).
    CapacityReservationsOnly,
}

impl ReservationPreference {
    /// EC2's value.
    pub fn as_ec2(self) -> &'static str {
        match self {
            ReservationPreference::Open => "open",
            ReservationPreference::None => "none",
            ReservationPreference::CapacityReservationsOnly => "capacity-reservations-only",
        }
    }
}

/// The On-Demand Capacity Reservation a launch template targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Reservation {
    /// `CapacityReservationTarget.CapacityReservationId`.
    Id(String),
    /// `CapacityReservationTarget.CapacityReservationResourceGroupArn`.
    ResourceGroup(String),
    /// `CapacityReservationPreference`.
    Preference(ReservationPreference),
}

impl std::fmt::Display for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reservation::Id(id) => write!(f, "target {id}"),
            Reservation::ResourceGroup(arn) => write!(f, "target resource group {arn}"),
            Reservation::Preference(p) => write!(f, "preference {}", p.as_ec2()),
        }
    }
}

/// Whether `id` is a Capacity Reservation id: `cr-` and 17 lowercase hex digits.
pub fn reservation_id_ok(id: &str) -> bool {
    id.strip_prefix("cr-")
        .is_some_and(|h| h.len() == 17 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// Whether `arn` is a resource group's ARN:
/// `arn:<partition>:resource-groups:<region>:<12 digits>:group/<name>`.
pub fn resource_group_arn_ok(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts.as_slice(), ["arn", partition, "resource-groups", region, account, resource]
    if partition.starts_with("aws")
        && !region.is_empty()
        && account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && resource.strip_prefix("group/").is_some_and(|n| {
            !n.is_empty() && n.len() <= 300 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }))
}

/// A group's offerings, as launches try them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCapacity {
    pub types: Vec<String>,
    pub markets: Vec<Market>,
    pub fallback: Vec<Fallback>,
    /// Refused RunInstances calls the group may make a minute (`capacity.launchesPerMinute`).
    pub launches_per_minute: u32,
    /// A Mixed market: (machines always On-Demand, Spot's share above them in percent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed: Option<(u32, u32)>,
}

/// Time to live after `strikes` refusals in a streak.
pub fn ttl(strikes: u32) -> Duration {
    let doubled = FIRST_TTL.num_seconds().saturating_mul(1i64 << strikes.saturating_sub(1).min(20));
    Duration::seconds(doubled.min(MAX_TTL.num_seconds()))
}

/// A group that may run Spot names at least this many instance types:
/// Spot capacity is reclaimed by type and zone, and the price-capacity
/// allocation needs pools to choose from (AWS's own advice is "at least 10").
pub const MIN_SPOT_TYPES: usize = 5;

/// EC2's instance families by their leading letters (`m` general purpose,
/// `c` compute, `r` memory, `g`/`p` accelerated, …).
const FAMILY_PREFIXES: &[&str] = &[
    "a", "c", "d", "dl", "f", "g", "gr", "h", "hpc", "i", "im", "inf", "is", "m", "mac", "p", "r", "t", "trn", "u",
    "vt", "x", "z",
];

/// Whether `t` reads as an EC2 instance type: a known family (letters, a
/// generation, options) and a size (`nano` … `metal`, `NxlargeN`).
pub fn known_type(t: &str) -> Result<(), String> {
    let bad = || Err(format!("`{t}` is not an EC2 instance type (family.size, e.g. m6i.large)"));
    let Some((family, size)) = t.split_once('.') else { return bad() };
    let letters: String = family.chars().take_while(|c| c.is_ascii_lowercase()).collect();
    let rest = &family[letters.len()..];
    let generation: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let options = &rest[generation.len()..];
    let family_ok = FAMILY_PREFIXES.contains(&letters.as_str())
        && !generation.is_empty()
        && options.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    let sizes = ["nano", "micro", "small", "medium", "large", "xlarge", "metal"];
    let size_ok = sizes.contains(&size)
        || size.strip_suffix("xlarge").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        || size.strip_prefix("metal-").is_some_and(|n| n.ends_with("xl"));
    if family_ok && size_ok {
        Ok(())
    } else if family_ok {
        Err(format!("`{size}` is not an instance size (nano … 48xlarge, metal) in `{t}`"))
    } else {
        bad()
    }
}

/// An instance type's processor architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Arm64,
}

impl Arch {
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }
}

/// The architecture of an instance type: Graviton families carry a `g`
/// right after their generation (`m7g`, `c6gn`, `g5g`, `im4gn`), and `a1`.
pub fn architecture_of(t: &str) -> Arch {
    let family = t.split('.').next().unwrap_or_default();
    let letters = family.chars().take_while(|c| c.is_ascii_lowercase()).count();
    let rest = &family[letters..];
    let options = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    if family == "a1" || options.starts_with('g') {
        Arch::Arm64
    } else {
        Arch::X86_64
    }
}

/// A group's instance types by what they offer instead of by name:
/// vCPU and memory ranges over the families and generations named (the
/// architecture is the group's image's). Expanded by [`matching`] from the
/// shapes EC2 gives its general (m), compute (c) and memory (r) families.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Requirements {
    /// vCPUs per machine (any number when absent).
    #[serde(default)]
    pub vcpu: Range,
    /// Memory per machine, in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<Range>,
    /// Instance families: `m` (4 GiB a vCPU), `c` (2), `r` (8).
    #[serde(default = "default_families")]
    pub families: Vec<String>,
    /// Generations, newest first by default: 7, 6 (5 too if named).
    #[serde(default = "default_generations")]
    pub generations: Vec<u32>,
    /// Accelerators per machine: the types come from the accelerated
    /// families instead (`families` and `generations` are not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerators: Option<AcceleratorRequirements>,
}

/// What a machine's accelerators must be: how many, which products, and
/// how much memory each has (EC2's `GpuInfo`/`NeuronInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcceleratorRequirements {
    /// Devices per machine (at least one when absent).
    #[serde(default = "at_least_one")]
    pub count: Range,
    /// Products in preference order: `A10G`, `L4`, `A100`, `H100` (NVIDIA)
    /// or `Trainium`, `Inferentia2` (Neuron); the NVIDIA ones when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub products: Vec<crate::accelerated::Product>,
    /// Memory of each device, in GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_memory_gib: Option<Range>,
}

fn at_least_one() -> Range {
    Range { min: 1, max: None }
}

impl AcceleratorRequirements {
    /// The products asked for, in preference order.
    pub fn products(&self) -> Vec<crate::accelerated::Product> {
        use crate::accelerated::{Kind, Product};
        if self.products.is_empty() {
            Product::ALL.into_iter().filter(|p| p.kind() == Kind::Nvidia).collect()
        } else {
            self.products.clone()
        }
    }
}

impl std::fmt::Display for AcceleratorRequirements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let products: Vec<&str> = self.products().iter().map(|p| p.as_str()).collect();
        write!(f, "{} × {}", self.count, products.join(" or "))?;
        if let Some(m) = self.device_memory_gib {
            write!(f, " with {m} GiB each")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Range {
    #[serde(default)]
    pub min: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

impl Range {
    fn holds(&self, n: u32) -> bool {
        n >= self.min && self.max.is_none_or(|m| n <= m)
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.max {
            Some(m) => write!(f, "{}–{m}", self.min),
            None => write!(f, "at least {}", self.min),
        }
    }
}

fn default_families() -> Vec<String> {
    vec!["m".into(), "c".into(), "r".into()]
}

fn default_generations() -> Vec<u32> {
    vec![7, 6]
}

/// GiB of memory a vCPU of each family has.
pub const FAMILY_SHAPES: &[(&str, u32)] = &[("m", 4), ("c", 2), ("r", 8)];
/// The generations [`matching`] knows.
pub const GENERATIONS: &[u32] = &[5, 6, 7];
const SIZES: &[(&str, u32)] = &[
    ("large", 2),
    ("xlarge", 4),
    ("2xlarge", 8),
    ("4xlarge", 16),
    ("8xlarge", 32),
    ("12xlarge", 48),
    ("16xlarge", 64),
];

/// What is wrong with the requirements (besides matching nothing).
pub fn requirement_errors(r: &Requirements) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (field, range) in [("vcpu", Some(&r.vcpu)), ("memoryGib", r.memory_gib.as_ref())] {
        if let Some(Range { min, max: Some(max) }) = range {
            if min > max {
                out.push((field.to_string(), format!("min {min} is above max {max}")));
            }
        }
    }
    if let Some(a) = &r.accelerators {
        for (field, range) in [("count", Some(&a.count)), ("deviceMemoryGib", a.device_memory_gib.as_ref())] {
            match range {
                Some(Range { min, max: Some(max) }) if min > max => {
                    out.push((format!("accelerators.{field}"), format!("min {min} is above max {max}")))
                }
                Some(Range { max: Some(0), .. }) if field == "count" => out.push((
                    "accelerators.count".to_string(),
                    "max 0: a machine without accelerators needs no accelerator requirements".to_string(),
                )),
                _ => {}
            }
        }
        if let Some(first) = a.products.first() {
            for (i, p) in a.products.iter().enumerate() {
                if p.kind() != first.kind() {
                    out.push((
                        format!("accelerators.products[{i}]"),
                        format!(
                            "{} needs the {} driver stack and {} the {} one: a group's machines run one image",
                            p.as_str(),
                            p.kind().as_str(),
                            first.as_str(),
                            first.kind().as_str()
                        ),
                    ));
                }
                if a.products[..i].contains(p) {
                    out.push((format!("accelerators.products[{i}]"), format!("{} is named twice", p.as_str())));
                }
            }
        }
        return out;
    }
    for (i, f) in r.families.iter().enumerate() {
        if !FAMILY_SHAPES.iter().any(|(k, _)| k == f) {
            out.push((
                format!("families[{i}]"),
                format!("`{f}`: requirements know the m, c and r families; name other types in `types`"),
            ));
        }
    }
    for (i, g) in r.generations.iter().enumerate() {
        if !GENERATIONS.contains(g) {
            out.push((format!("generations[{i}]"), format!("{g}: requirements know generations 5, 6 and 7")));
        }
    }
    out
}

/// The instance types that meet `r` on `arch`, smallest first, then in
/// the order of the families and generations named.
pub fn matching(r: &Requirements, arch: Arch) -> Vec<String> {
    if let Some(a) = &r.accelerators {
        return matching_accelerated(r, a, arch);
    }
    let mut out = Vec::new();
    for (size, vcpu) in SIZES {
        if !r.vcpu.holds(*vcpu) {
            continue;
        }
        for family in &r.families {
            let Some((_, per)) = FAMILY_SHAPES.iter().find(|(k, _)| k == family) else { continue };
            if r.memory_gib.is_some_and(|m| !m.holds(vcpu * per)) {
                continue;
            }
            for g in &r.generations {
                let options: &[&str] = match (arch, g) {
                    (Arch::X86_64, 5) => &["", "a"],
                    (Arch::X86_64, 6 | 7) => &["i", "a"],
                    (Arch::Arm64, 6 | 7) => &["g"],
                    _ => &[],
                };
                for o in options {
                    // c5 has 9xlarge and 18xlarge instead.
                    if (family, g, *o) == (&"c".to_string(), &5, "") && matches!(*size, "8xlarge" | "16xlarge") {
                        continue;
                    }
                    out.push(format!("{family}{g}{o}.{size}"));
                }
            }
        }
    }
    out
}

/// The accelerated types that meet `r`: fewest devices first, then fewest
/// vCPUs and least memory, then the products in the order named (so a
/// group asking for A10G then L4 tries g5.xlarge, then g6.xlarge, before
/// any larger machine). Every accelerated type pinfleet knows is x86_64.
fn matching_accelerated(r: &Requirements, a: &AcceleratorRequirements, arch: Arch) -> Vec<String> {
    if arch != Arch::X86_64 {
        return Vec::new();
    }
    let products = a.products();
    let mut fit: Vec<(usize, &crate::accelerated::Shape)> = crate::accelerated::SHAPES
        .iter()
        .filter_map(|s| products.iter().position(|p| *p == s.product).map(|rank| (rank, s)))
        .filter(|(_, s)| {
            a.count.holds(s.count)
                && a.device_memory_gib.is_none_or(|m| s.device_memory_within(m.min, m.max))
                && r.vcpu.holds(s.vcpu)
                && r.memory_gib.is_none_or(|m| m.holds(s.memory_gib))
        })
        .collect();
    fit.sort_by_key(|(rank, s)| (s.count, s.vcpu, s.memory_gib, *rank));
    fit.into_iter().map(|(_, s)| s.instance_type.to_string()).collect()
}

/// A launch EC2 could not serve on any offering the group may use now,
/// or that the group's own limits held back: the roll waits ("blocked on
/// capacity: …") and counts no failure, unless the group's launches keep
/// failing (`churn`), which halts the rollouts that need it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{group}: {reason}{}", churn.as_ref().map(|c| format!("; {c}")).unwrap_or_default())]
pub struct Blocked {
    pub group: String,
    /// "blocked on capacity: …" with what was refused and since when.
    pub reason: String,
    /// Why the group's rollouts halt ("2 of the last 4 launches … failed").
    pub churn: Option<String>,
}

/// A change that launched some of its machines before it stopped: they
/// run, and the apply's summary counts them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} machine(s) of this change launched before it stopped: {}", ids.len(), ids.join(","))]
pub struct PartlyLaunched {
    pub ids: Vec<String>,
}

/// Why a launch stopped at the per-minute cap: the cap's own words, and
/// the offerings of the batch it had not asked for yet (not "every
/// offering is out": they were never tried).
pub fn capped_reason(capped: &str, offered: &[Offering], asked: &[Offering]) -> String {
    let mut untried: Vec<String> = Vec::new();
    for o in offered.iter().filter(|o| !asked.contains(o)) {
        let o = o.to_string();
        if !untried.contains(&o) {
            untried.push(o);
        }
    }
    if untried.is_empty() {
        return capped.to_string();
    }
    format!("{capped}; not yet tried: {}", untried.join(", "))
}

impl Blocked {
    /// The capacity refusal somewhere in `e`'s chain, if there is one.
    pub fn find(e: &anyhow::Error) -> Option<&Blocked> {
        e.chain().find_map(|c| c.downcast_ref::<Blocked>())
    }
}

/// Of `n` new machines of a Mixed group already running `on_demand` and
/// `spot`, how many must be On-Demand so that the group keeps its base
/// On-Demand and at most `spot_percent` of the rest on Spot (rounded down,
/// as EC2 Fleet and Auto Scaling round the Spot share).
pub fn on_demand_needed(base: u32, spot_percent: u32, on_demand: u32, spot: u32, n: u32) -> u32 {
    let total = on_demand + spot + n;
    let above = total.saturating_sub(base);
    let want_spot = (above as u64 * spot_percent.min(100) as u64 / 100) as u32;
    (total - want_spot).saturating_sub(on_demand).min(n)
}

/// What a group falls back across first when an offering is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Fallback {
    /// Another market (Spot → On-Demand) before anything else.
    Market,
    /// Another zone of the group's subnets.
    Zone,
    /// Another instance type of the group.
    Type,
}

/// The offerings of a group in the order its file gives: `fallback` names
/// which dimension changes fastest (the first is tried first). `markets`,
/// `types` and `zones` are each in preference order.
pub fn offerings(markets: &[Market], types: &[String], zones: &[String], fallback: &[Fallback]) -> Vec<Offering> {
    // The dimensions from slowest to fastest changing: the last of
    // `fallback` varies slowest.
    let mut order: Vec<Fallback> = fallback.to_vec();
    for f in [Fallback::Market, Fallback::Zone, Fallback::Type] {
        if !order.contains(&f) {
            order.push(f);
        }
    }
    let len = |f: Fallback| match f {
        Fallback::Market => markets.len(),
        Fallback::Zone => zones.len(),
        Fallback::Type => types.len(),
    };
    let total: usize = [Fallback::Market, Fallback::Zone, Fallback::Type].iter().map(|f| len(*f)).product();
    let mut out = Vec::with_capacity(total);
    for n in 0..total {
        let mut rest = n;
        let (mut m, mut z, mut t) = (0, 0, 0);
        for f in &order {
            let l = len(*f).max(1);
            let i = rest % l;
            rest /= l;
            match f {
                Fallback::Market => m = i,
                Fallback::Zone => z = i,
                Fallback::Type => t = i,
            }
        }
        out.push(Offering { market: markets[m], instance_type: types[t].clone(), zone: zones[z].clone() });
    }
    out
}

/// The offerings not held back by the ledger, in order.
pub fn usable<'a>(all: &'a [Offering], ledger: &Ledger, now: DateTime<Utc>) -> Vec<&'a Offering> {
    all.iter().filter(|o| ledger.out(o, now).is_none()).collect()
}

/// Why a group cannot launch now, as `plan`, `get instances` and the
/// rollouts say it: "blocked on capacity: m6i.large in us-east-1a,
/// InsufficientInstanceCapacity since 10:42, trying m6a.large".
pub fn blocked_reason(entry: &Entry, next: Option<&Offering>) -> String {
    let mut s = format!(
        "blocked on capacity: {} in {}, {} since {}",
        entry.offering.instance_type,
        entry.offering.zone,
        entry.code,
        entry.since.format("%H:%M")
    );
    match next {
        Some(n) if n.zone != entry.offering.zone && n.instance_type == entry.offering.instance_type => {
            s.push_str(&format!(", trying {}", n.zone))
        }
        Some(n) if n.market != entry.offering.market && n.instance_type == entry.offering.instance_type => {
            s.push_str(&format!(", trying {}", n.market.as_str()))
        }
        Some(n) => s.push_str(&format!(", trying {}", n.instance_type)),
        None => s.push_str(", every offering of the group is out"),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_count_by_group_and_code() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let mut l = Ledger { account: "1".into(), region: "us-east-1".into(), ..Default::default() };
        let o = |t: &str| Offering { market: Market::Spot, instance_type: t.into(), zone: "us-east-1a".into() };
        l.mark(&o("m6i.large"), "InsufficientInstanceCapacity", "prod/gen\"eral", now);
        l.mark(&o("m6a.large"), "InsufficientInstanceCapacity", "prod/gen\"eral", now);
        l.mark(&o("m5.large"), "SpotInterruption", "prod/batch", now - Duration::hours(2));
        l.launched("prod/batch", false, 3, 3, now);
        l.launched("prod/batch", true, 2, 1, now);
        insta::assert_snapshot!(metrics(&[l], now));
    }

    #[test]
    fn a_mixed_group_keeps_its_base_and_share_however_it_grows() {
        // Base 2, 50% Spot above it: the first two On-Demand, then alternating.
        let (mut od, mut sp) = (0, 0);
        for _ in 0..10 {
            let k = on_demand_needed(2, 50, od, sp, 1);
            od += k;
            sp += 1 - k;
        }
        assert_eq!((od, sp), (6, 4));
        // At once: the same split.
        assert_eq!(on_demand_needed(2, 50, 0, 0, 10), 6);
        // Spot machines that went (interruptions) are replaced by Spot again; a missing base by On-Demand.
        assert_eq!(on_demand_needed(2, 50, 6, 2, 2), 0);
        assert_eq!(on_demand_needed(2, 50, 1, 4, 1), 1);
        assert_eq!(on_demand_needed(0, 100, 0, 0, 5), 0);
        assert_eq!(on_demand_needed(3, 0, 0, 0, 5), 5);
    }

    #[test]
    fn requirements_expand_to_the_shapes_that_meet_them_smallest_first() {
        let r: Requirements =
            serde_json::from_value(serde_json::json!({"vcpu": {"min": 2, "max": 4}, "memoryGib": {"min": 8}})).unwrap();
        assert_eq!(
            matching(&r, Arch::X86_64),
            [
                "m7i.large",
                "m7a.large",
                "m6i.large",
                "m6a.large",
                "r7i.large",
                "r7a.large",
                "r6i.large",
                "r6a.large",
                "m7i.xlarge",
                "m7a.xlarge",
                "m6i.xlarge",
                "m6a.xlarge",
                "c7i.xlarge",
                "c7a.xlarge",
                "c6i.xlarge",
                "c6a.xlarge",
                "r7i.xlarge",
                "r7a.xlarge",
                "r6i.xlarge",
                "r6a.xlarge"
            ]
        );
        assert!(matching(&r, Arch::Arm64).iter().all(|t| architecture_of(t) == Arch::Arm64 && known_type(t).is_ok()));
        let c5: Requirements = serde_json::from_value(
            serde_json::json!({"vcpu": {"min": 32, "max": 32}, "families": ["c"], "generations": [5]}),
        )
        .unwrap();
        assert!(matching(&c5, Arch::X86_64) == ["c5a.8xlarge"], "c5 has no 8xlarge");
        let none: Requirements = serde_json::from_value(serde_json::json!({"vcpu": {"min": 128}})).unwrap();
        assert!(matching(&none, Arch::X86_64).is_empty());
        assert_eq!(
            requirement_errors(&serde_json::from_value(serde_json::json!({"vcpu": {"min": 8, "max": 2}})).unwrap())
                .len(),
            1
        );
    }

    #[test]
    fn accelerator_requirements_pick_accelerated_types_fewest_devices_first_then_product_order() {
        let req = |v: serde_json::Value| -> Requirements { serde_json::from_value(v).unwrap() };
        // One A10G or L4 with 8–16 vCPUs: g5 before g6 at each size.
        let r = req(serde_json::json!({
            "vcpu": {"min": 8, "max": 16},
            "accelerators": {"count": {"min": 1, "max": 1}, "products": ["A10G", "L4"]}
        }));
        assert_eq!(matching(&r, Arch::X86_64), ["g5.2xlarge", "g6.2xlarge", "g5.4xlarge", "g6.4xlarge"]);
        // The order named is the preference: L4 first.
        let r = req(serde_json::json!({"vcpu": {"max": 4}, "accelerators": {"products": ["L4", "A10G"]}}));
        assert_eq!(matching(&r, Arch::X86_64), ["g6.xlarge", "g5.xlarge"]);
        // 8 devices of at least 80 GiB each, any NVIDIA product: p4de then p5.
        let r = req(serde_json::json!({"accelerators": {"count": {"min": 8}, "deviceMemoryGib": {"min": 80}}}));
        assert_eq!(matching(&r, Arch::X86_64), ["p4de.24xlarge", "p5.48xlarge"]);
        // Without products, only NVIDIA types; Neuron ones when named.
        let r = req(serde_json::json!({"accelerators": {"count": {"max": 1}}}));
        assert!(matching(&r, Arch::X86_64).iter().all(|t| t.starts_with('g')), "{:?}", matching(&r, Arch::X86_64));
        let r = req(serde_json::json!({"accelerators": {"products": ["Inferentia2"], "count": {"min": 6}}}));
        assert_eq!(matching(&r, Arch::X86_64), ["inf2.24xlarge", "inf2.48xlarge"]);
        // Nothing pinfleet knows is an arm64 accelerated type; 9 × A100 is nobody.
        assert!(matching(&r, Arch::Arm64).is_empty());
        let none = req(serde_json::json!({"accelerators": {"count": {"min": 9}, "products": ["A100"]}}));
        assert!(matching(&none, Arch::X86_64).is_empty() && requirement_errors(&none).is_empty());
        // What is wrong is said per field.
        let bad = req(serde_json::json!({"accelerators": {
            "count": {"min": 4, "max": 2}, "products": ["A10G", "Trainium", "A10G"], "deviceMemoryGib": {"min": 80, "max": 40}
        }}));
        let errors = requirement_errors(&bad);
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "accelerators.count",
                "accelerators.deviceMemoryGib",
                "accelerators.products[1]",
                "accelerators.products[2]"
            ],
            "{errors:?}"
        );
        assert!(errors[2].1.contains("Trainium needs the neuron driver stack"), "{errors:?}");
        // An unknown product is refused by its schema.
        assert!(
            serde_json::from_value::<Requirements>(serde_json::json!({"accelerators": {"products": ["T4"]}})).is_err()
        );
    }

    #[test]
    fn churn_halts_after_two_failed_launches_of_four_and_the_rate_counts_calls() {
        let now = t("2026-11-26T10:00:00Z");
        let mut l = Ledger::default();
        let at = |m: i64| now + Duration::seconds(m);
        l.launched("dev/general", true, 1, 0, at(0));
        l.launched("dev/general", false, 3, 3, at(10));
        assert_eq!(l.churn("dev/general"), None);
        l.launched("dev/other", false, 3, 3, at(15));
        l.launched("dev/general", false, 3, 3, at(20));
        let why = l.churn("dev/general").unwrap();
        assert!(why.starts_with("2 of the last 3 launches of dev/general failed"), "{why}");
        assert_eq!(l.churn("dev/other"), None, "another group is not blocked");
        assert_eq!(l.refused_last_minute("dev/general", at(30)), 6);
        assert_eq!(l.refused_last_minute("dev/general", at(75)), 3, "only the last minute's");
        // Two good launches: the last four hold two failures still; a third clears it.
        l.launched("dev/general", true, 1, 0, at(100));
        l.launched("dev/general", true, 1, 0, at(110));
        assert!(l.churn("dev/general").is_some());
        l.launched("dev/general", true, 1, 0, at(120));
        assert_eq!(l.churn("dev/general"), None);
        // Pruning keeps each group's last four whatever their age.
        l.prune(now + Duration::hours(3));
        assert_eq!(l.launches.iter().filter(|x| x.by == "dev/general").count(), 4);
        let mut other = Ledger::default();
        other.launched("dev/general", false, 2, 2, at(130));
        l.merge(&other);
        l.merge(&other);
        assert_eq!(l.launches.iter().filter(|x| x.by == "dev/general").count(), 5, "merge adds each launch once");
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn o(m: Market, ty: &str, z: &str) -> Offering {
        Offering { market: m, instance_type: ty.into(), zone: z.into() }
    }

    #[test]
    fn a_refusal_is_skipped_3_minutes_doubled_on_repeats_within_the_hour_capped_at_30() {
        let mut l = Ledger::default();
        let a = o(Market::OnDemand, "m6i.large", "us-east-1a");
        let now = t("2026-11-26T10:42:00Z");
        assert_eq!(l.mark(&a, "InsufficientInstanceCapacity", "c/g", now).until, now + Duration::minutes(3));
        assert!(l.out(&a, now + Duration::minutes(2)).is_some());
        assert!(l.out(&a, now + Duration::minutes(3)).is_none(), "expired: tried again");
        let now2 = now + Duration::minutes(4);
        assert_eq!(l.mark(&a, "InsufficientInstanceCapacity", "c/g", now2).until, now2 + Duration::minutes(6));
        let mut last = now2;
        for _ in 0..5 {
            last += Duration::minutes(10);
            l.mark(&a, "InsufficientInstanceCapacity", "c/g", last);
        }
        assert_eq!(l.out(&a, last).unwrap().until, last + Duration::minutes(30), "capped");
        assert_eq!(l.out(&a, last).unwrap().since, now, "one streak");
        // Over an hour later a refusal starts a new streak of 3 minutes.
        let later = last + Duration::minutes(61);
        let e = l.mark(&a, "Unsupported", "c/g", later).clone();
        assert_eq!((e.strikes, e.until, e.since), (1, later + Duration::minutes(3), later));
        l.prune(later + Duration::hours(2));
        assert!(l.entries.is_empty());
    }

    #[test]
    fn instance_types_are_read_with_their_architecture() {
        use Arch::*;
        for (t, arch) in [
            ("m6i.large", X86_64),
            ("m7g.xlarge", Arm64),
            ("c6gn.2xlarge", Arm64),
            ("g5.xlarge", X86_64),
            ("g5g.xlarge", Arm64),
            ("g4dn.12xlarge", X86_64),
            ("im4gn.large", Arm64),
            ("a1.medium", Arm64),
            ("m5.metal", X86_64),
        ] {
            assert_eq!(known_type(t), Ok(()), "{t}");
            assert_eq!(architecture_of(t), arch, "{t}");
        }
        for t in ["m6i", "foo9.large", "m6i.huge", "M6i.large", "m.large"] {
            assert!(known_type(t).is_err(), "{t}");
        }
    }

    #[test]
    fn offerings_follow_the_files_fallback_order() {
        let types = vec!["m6i.large".to_string(), "m6a.large".to_string()];
        let zones = vec!["a".to_string(), "b".to_string()];
        let shown = |v: Vec<Offering>| {
            v.iter().map(|o| format!("{}/{}/{}", o.market.as_str(), o.instance_type, o.zone)).collect::<Vec<_>>()
        };
        // Zone first, then type: a zone out of a type tries the other zone, then the next type.
        assert_eq!(
            shown(offerings(&[Market::OnDemand], &types, &zones, &[Fallback::Zone, Fallback::Type])),
            ["on-demand/m6i.large/a", "on-demand/m6i.large/b", "on-demand/m6a.large/a", "on-demand/m6a.large/b"]
        );
        // Spot → On-Demand first, then zone, then type.
        let v = offerings(&[Market::Spot, Market::OnDemand], &types, &zones, &[Fallback::Market, Fallback::Zone]);
        assert_eq!(shown(v)[..3], ["spot/m6i.large/a", "on-demand/m6i.large/a", "spot/m6i.large/b"]);
    }

    #[test]
    fn the_ledger_holds_back_what_ec2_refused_and_says_why() {
        let types = vec!["m6i.large".to_string(), "m6a.large".to_string()];
        let zones = vec!["us-east-1a".to_string(), "us-east-1b".to_string()];
        let all = offerings(&[Market::OnDemand], &types, &zones, &[Fallback::Zone, Fallback::Type]);
        let now = t("2026-11-26T10:42:00Z");
        let mut l = Ledger::default();
        let e = l.mark(&all[0], "InsufficientInstanceCapacity", "c/general", now).clone();
        let next = usable(&all, &l, now);
        assert_eq!(next[0], &all[1]);
        assert_eq!(
            blocked_reason(&e, Some(next[0])),
            "blocked on capacity: m6i.large in us-east-1a, InsufficientInstanceCapacity since 10:42, trying us-east-1b"
        );
        l.mark(&all[1], "InsufficientInstanceCapacity", "c/general", now);
        assert_eq!(
            blocked_reason(&e, usable(&all, &l, now).first().copied()),
            "blocked on capacity: m6i.large in us-east-1a, InsufficientInstanceCapacity since 10:42, trying m6a.large"
        );
        // Two writers' copies merge to the later refusal of each offering.
        let mut other = Ledger::default();
        other.mark(&all[0], "Unsupported", "d/general", now + Duration::minutes(1));
        l.merge(&other);
        assert_eq!(l.out(&all[0], now).unwrap().code, "Unsupported");
        assert!(unfulfillable("InsufficientInstanceCapacity") && !unfulfillable("RequestLimitExceeded"));
    }
}
