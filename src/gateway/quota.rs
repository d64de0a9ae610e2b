//! Team quota and the ledger of what is admitted (pure).
//!
//! ```text
//! TeamQuota records (host cluster) + fleet capacity
//!     │ resolve: percentages of the fleet → absolute amounts
//!     ▼
//! Quotas ──► admission::decide ◄── Ledger (reservations, recent admissions)
//! ```
//!
//! Amounts are three resources: CPU in millicores, memory in bytes and
//! pods. A team has, per tier, a guaranteed amount (always its own) and a
//! maximum (what it may reach by borrowing what the other teams of its
//! cohort leave unused); a cap on admitted workloads; and a creation rate
//! (pods admitted per minute), so a spike of submissions cannot turn into
//! a spike of pods on the clusters.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::workloads::Tier;

pub const TIERS: [Tier; 3] = [Tier::Reserved, Tier::OnDemand, Tier::Preemptible];

pub fn tier_name(t: Tier) -> &'static str {
    match t {
        Tier::Reserved => "Reserved",
        Tier::OnDemand => "OnDemand",
        Tier::Preemptible => "Preemptible",
    }
}

/// The resources quota counts: cpu, memory, pods, and each accelerator
/// flavor (a GPU product, as Kueue's ResourceFlavors split one resource
/// name by the nodes' labels; AWS Neuron devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resource {
    Cpu,
    Memory,
    Pods,
    GpuA100,
    GpuH100,
    GpuA10g,
    GpuL4,
    Neuron,
}

pub const RESOURCES: [Resource; 8] = [
    Resource::Cpu,
    Resource::Memory,
    Resource::Pods,
    Resource::GpuA100,
    Resource::GpuH100,
    Resource::GpuA10g,
    Resource::GpuL4,
    Resource::Neuron,
];

/// The accelerator flavors, in the order a GPU request that names no
/// product is given one (the first the team's quota holds).
pub const FLAVORS: [Resource; 5] =
    [Resource::GpuA100, Resource::GpuH100, Resource::GpuA10g, Resource::GpuL4, Resource::Neuron];

impl Resource {
    /// The name a quota record and a why-not use (`gpu-a100`).
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
            Resource::Pods => "pods",
            Resource::GpuA100 => "gpu-a100",
            Resource::GpuH100 => "gpu-h100",
            Resource::GpuA10g => "gpu-a10g",
            Resource::GpuL4 => "gpu-l4",
            Resource::Neuron => "neuron",
        }
    }

    /// The quota's resource of an accelerator flavor.
    pub fn of_flavor(f: crate::workloads::demand::Flavor) -> Resource {
        use crate::workloads::demand::Flavor;
        match f {
            Flavor::GpuA100 => Resource::GpuA100,
            Flavor::GpuH100 => Resource::GpuH100,
            Flavor::GpuA10g => Resource::GpuA10g,
            Flavor::GpuL4 => Resource::GpuL4,
            Flavor::Neuron => Resource::Neuron,
        }
    }

    /// The accelerator flavor of this resource (none for cpu, memory, pods).
    pub fn flavor(self) -> Option<crate::workloads::demand::Flavor> {
        crate::workloads::demand::FLAVORS.into_iter().find(|f| Resource::of_flavor(*f) == self)
    }

    fn product_labels_nonempty(self) -> bool {
        self != Resource::Neuron && self.is_accelerator()
    }

    pub fn is_accelerator(self) -> bool {
        FLAVORS.contains(&self)
    }

    /// What a person reads (`nvidia.com/gpu A100`, `cpu`).
    pub fn long(self) -> String {
        match self.flavor() {
            Some(crate::workloads::demand::Flavor::Neuron) => crate::workloads::demand::NEURON.to_string(),
            Some(f) => format!("{} {}", crate::workloads::demand::GPU, f.short()),
            None => self.name().to_string(),
        }
    }

    /// A value of this resource as people write it (`2500m`, `12Gi`, `40`).
    pub fn show(self, v: u64) -> String {
        match self {
            Resource::Cpu if v % 1000 == 0 => (v / 1000).to_string(),
            Resource::Cpu => format!("{v}m"),
            Resource::Memory => show_bytes(v),
            _ => v.to_string(),
        }
    }
}

fn show_bytes(v: u64) -> String {
    for (unit, f) in [("Ti", 1u64 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if v >= f && v.checked_rem(f) == Some(0) {
            return format!("{}{unit}", v.checked_div(f).unwrap_or_default());
        }
    }
    if v >= 1 << 30 {
        return format!("{:.1}Gi", v as f64 / (1u64 << 30) as f64);
    }
    if v >= 1 << 20 {
        return format!("{:.1}Mi", v as f64 / (1u64 << 20) as f64);
    }
    v.to_string()
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// An amount of every resource (accelerators absent: none, so records
/// written before they were counted read as they were).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Amount {
    /// Millicores.
    pub cpu: u64,
    /// Bytes.
    pub memory: u64,
    pub pods: u64,
    /// `nvidia.com/gpu` on nodes labelled an A100 (and so for each product).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_a100: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_h100: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_a10g: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gpu_l4: u64,
    /// `aws.amazon.com/neuron` devices (Trainium, Inferentia).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub neuron: u64,
}

impl Amount {
    pub fn new(cpu: u64, memory: u64, pods: u64) -> Amount {
        Amount { cpu, memory, pods, ..Amount::default() }
    }

    /// This amount with `v` of `r` (`Amount::new(…).with(Resource::GpuA100, 8)`).
    pub fn with(mut self, r: Resource, v: u64) -> Amount {
        self.set(r, v);
        self
    }

    pub fn get(&self, r: Resource) -> u64 {
        match r {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
            Resource::Pods => self.pods,
            Resource::GpuA100 => self.gpu_a100,
            Resource::GpuH100 => self.gpu_h100,
            Resource::GpuA10g => self.gpu_a10g,
            Resource::GpuL4 => self.gpu_l4,
            Resource::Neuron => self.neuron,
        }
    }

    pub fn set(&mut self, r: Resource, v: u64) {
        match r {
            Resource::Cpu => self.cpu = v,
            Resource::Memory => self.memory = v,
            Resource::Pods => self.pods = v,
            Resource::GpuA100 => self.gpu_a100 = v,
            Resource::GpuH100 => self.gpu_h100 = v,
            Resource::GpuA10g => self.gpu_a10g = v,
            Resource::GpuL4 => self.gpu_l4 = v,
            Resource::Neuron => self.neuron = v,
        }
    }

    fn each(self, o: Amount, f: impl Fn(u64, u64) -> u64) -> Amount {
        let mut out = Amount::default();
        for r in RESOURCES {
            out.set(r, f(self.get(r), o.get(r)));
        }
        out
    }

    /// Sums saturate: a count too large to hold counts as the most there
    /// is (against the team, never wrapping round in its favour).
    pub fn plus(self, o: Amount) -> Amount {
        self.each(o, u64::saturating_add)
    }

    pub fn minus(self, o: Amount) -> Amount {
        self.each(o, u64::saturating_sub)
    }

    pub fn times(self, n: u64) -> Amount {
        self.each(self, |a, _| a.saturating_mul(n))
    }

    pub fn min(self, o: Amount) -> Amount {
        self.each(o, u64::min)
    }

    /// The first resource where `self` is above `limit`: an accelerator
    /// flavor first (the scarcest, and the one a refusal should name).
    pub fn over(&self, limit: &Amount) -> Option<Resource> {
        FLAVORS.into_iter().chain(RESOURCES).find(|r| self.get(*r) > limit.get(*r))
    }

    pub fn is_zero(&self) -> bool {
        RESOURCES.iter().all(|r| self.get(*r) == 0)
    }

    /// The accelerators of this amount, flavor by flavor (none: empty).
    pub fn accelerators(&self) -> Vec<(Resource, u64)> {
        FLAVORS.iter().map(|r| (*r, self.get(*r))).filter(|(_, v)| *v > 0).collect()
    }

    /// `cpu 2, memory 4Gi, pods 2` (and each accelerator flavor it holds).
    pub fn show(&self) -> String {
        RESOURCES
            .iter()
            .filter(|r| !r.is_accelerator() || self.get(**r) > 0)
            .map(|r| format!("{} {}", r.name(), r.show(self.get(*r))))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An integer or a string, as Kubernetes types it (`x-kubernetes-int-or-string`):
/// the untyped union schemars derives is not a structural schema, and a real
/// API server refuses the CRD.
impl schemars::JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        crate::workloads::types::int_or_string(g)
    }
}

/// A quantity as a quota record writes it: absolute, or a percentage of
/// the fleet's allocatable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Count(u64),
    Text(String),
}

impl Quantity {
    /// This quantity of `r` against the fleet's `fleet` of it.
    pub fn resolve(&self, r: Resource, fleet: u64) -> Result<u64, String> {
        let text = match self {
            Quantity::Count(n) => {
                return match r {
                    Resource::Cpu => n.checked_mul(1000).ok_or_else(|| format!("{n}: more CPUs than can be counted")),
                    _ => Ok(*n),
                }
            }
            Quantity::Text(t) => t.trim(),
        };
        if let Some(p) = text.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| format!("{text:?} is not a percentage"))?;
            if !(0.0..=100.0).contains(&p) {
                return Err(format!("{text:?}: a percentage of the fleet is between 0% and 100%"));
            }
            return Ok((fleet as f64 * p / 100.0).floor() as u64);
        }
        let v = match r {
            Resource::Cpu => crate::federation::fanout::cpu_millis(text),
            Resource::Memory => crate::federation::fanout::mem_bytes(text),
            _ => text.parse().ok(),
        };
        v.ok_or_else(|| format!("{text:?} is not a {} quantity", r.name()))
    }
}

/// Amounts per resource as written (absent: zero).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Quantities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Quantity>,
    /// `nvidia.com/gpu` on nodes whose `nvidia.com/gpu.product` is an A100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_a100: Option<Quantity>,
    /// … an H100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_h100: Option<Quantity>,
    /// … an A10G (g5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_a10g: Option<Quantity>,
    /// … an L4 (g6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_l4: Option<Quantity>,
    /// `aws.amazon.com/neuron` devices (trn1, inf2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neuron: Option<Quantity>,
}

impl Quantities {
    fn get(&self, r: Resource) -> Option<&Quantity> {
        match r {
            Resource::Cpu => self.cpu.as_ref(),
            Resource::Memory => self.memory.as_ref(),
            Resource::Pods => self.pods.as_ref(),
            Resource::GpuA100 => self.gpu_a100.as_ref(),
            Resource::GpuH100 => self.gpu_h100.as_ref(),
            Resource::GpuA10g => self.gpu_a10g.as_ref(),
            Resource::GpuL4 => self.gpu_l4.as_ref(),
            Resource::Neuron => self.neuron.as_ref(),
        }
    }

    pub fn resolve(&self, fleet: &Amount, at: &str) -> Result<Amount, String> {
        let mut a = Amount::default();
        for r in RESOURCES {
            if let Some(q) = self.get(r) {
                a.set(r, q.resolve(r, fleet.get(r)).map_err(|e| format!("{at}.{}: {e}", r.name()))?);
            }
        }
        Ok(a)
    }
}

/// One tier of a team's quota as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TierQuota {
    /// Always the team's, whatever the others use.
    #[serde(default)]
    pub guaranteed: Quantities,
    /// What the team may reach by borrowing its cohort's unused guarantees
    /// (absent: the guaranteed amount, no borrowing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Quantities>,
}

/// A team's quota as the admission sees it: absolute amounts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Quota {
    pub team: String,
    /// Teams of one cohort lend each other what they leave unused.
    pub cohort: String,
    pub tiers: BTreeMap<&'static str, Limits>,
    pub max_workloads: Option<u64>,
    pub pods_per_minute: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Limits {
    pub guaranteed: Amount,
    pub max: Amount,
}

impl Quota {
    pub fn limits(&self, tier: Tier) -> Option<&Limits> {
        self.tiers.get(tier_name(tier))
    }

    /// The GPU products any tier of this quota may reach, in [`FLAVORS`]' order.
    pub fn gpu_products(&self) -> Vec<crate::workloads::demand::Flavor> {
        FLAVORS
            .into_iter()
            .filter(|r| r.product_labels_nonempty() && self.tiers.values().any(|l| l.max.get(*r) > 0))
            .filter_map(Resource::flavor)
            .collect()
    }
}

/// Resolves a team's written quota against the fleet's capacity: located
/// errors (`spec.tiers.OnDemand.max.cpu: ...`) for what does not parse or
/// a maximum below the guarantee.
pub fn resolve(
    team: &str,
    cohort: Option<&str>,
    tiers: &BTreeMap<String, TierQuota>,
    max_workloads: Option<u64>,
    pods_per_minute: Option<u64>,
    fleet: &Amount,
) -> Result<Quota, Vec<String>> {
    let mut errors = Vec::new();
    let mut out = BTreeMap::new();
    for (name, tq) in tiers {
        let Some(tier) = TIERS.into_iter().find(|t| tier_name(*t) == name) else {
            errors.push(format!("spec.tiers.{name}: not a tier (Reserved, OnDemand, Preemptible)"));
            continue;
        };
        let at = format!("spec.tiers.{name}");
        let g = tq.guaranteed.resolve(fleet, &format!("{at}.guaranteed"));
        let m = tq.max.as_ref().map(|m| m.resolve(fleet, &format!("{at}.max")));
        match (g, m) {
            (Ok(g), None) => {
                out.insert(tier_name(tier), Limits { guaranteed: g, max: g });
            }
            (Ok(g), Some(Ok(m))) => {
                if let Some(r) = g.over(&m) {
                    errors.push(format!(
                        "{at}.max.{}: {} is below the guaranteed {}",
                        r.name(),
                        r.show(m.get(r)),
                        r.show(g.get(r))
                    ));
                }
                out.insert(tier_name(tier), Limits { guaranteed: g, max: m });
            }
            (g, m) => {
                errors.extend(g.err());
                errors.extend(m.and_then(Result::err));
            }
        }
    }
    if errors.is_empty() {
        Ok(Quota {
            team: team.to_string(),
            cohort: cohort.unwrap_or(team).to_string(),
            tiers: out,
            max_workloads,
            pods_per_minute,
        })
    } else {
        Err(errors)
    }
}

/// What one admitted workload holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub team: String,
    pub tier: Tier,
    pub priority: i32,
    pub amount: Amount,
    pub admitted_at: DateTime<Utc>,
    /// When it is expected to end (batch work that said how long it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_end: Option<DateTime<Utc>>,
}

/// The ledger: every reservation by submission, and the pods admitted in
/// the last minute per team (the creation rate counts work that has
/// already finished too).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ledger {
    #[serde(default)]
    pub reservations: BTreeMap<String, Reservation>,
    /// (team, when, pods), oldest first.
    #[serde(default)]
    pub recent: Vec<(String, DateTime<Utc>, u64)>,
    /// Submissions released (finished, cancelled, preempted) whose records
    /// may not say so yet, with the reason: the next leader finishes what a
    /// killed one began.
    #[serde(default)]
    pub released: BTreeMap<String, String>,
}

pub const RATE_WINDOW: i64 = 60;

impl Ledger {
    pub fn usage(&self, team: &str, tier: Tier) -> Amount {
        self.reservations
            .values()
            .filter(|r| r.team == team && r.tier == tier)
            .fold(Amount::default(), |a, r| a.plus(r.amount))
    }

    pub fn workloads(&self, team: &str) -> u64 {
        self.reservations.values().filter(|r| r.team == team).count() as u64
    }

    pub fn total(&self) -> Amount {
        self.reservations.values().fold(Amount::default(), |a, r| a.plus(r.amount))
    }

    /// Pods admitted for `team` in the minute before `now`.
    pub fn pods_last_minute(&self, team: &str, now: DateTime<Utc>) -> u64 {
        let since = now.checked_sub_signed(Duration::seconds(RATE_WINDOW)).unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.recent.iter().filter(|(t, at, _)| t == team && *at > since).map(|(_, _, p)| p).sum()
    }

    /// When the team's rate window has room for `pods` more (the oldest
    /// admissions leave the window one by one).
    pub fn rate_room_at(&self, team: &str, pods: u64, limit: u64, now: DateTime<Utc>) -> DateTime<Utc> {
        let since = now.checked_sub_signed(Duration::seconds(RATE_WINDOW)).unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut used = self.pods_last_minute(team, now);
        for (_, at, p) in self.recent.iter().filter(|(t, at, _)| t == team && *at > since) {
            if used.saturating_add(pods) <= limit || used == 0 {
                break;
            }
            used = used.saturating_sub(*p);
            if used.saturating_add(pods) <= limit || used == 0 {
                return at.checked_add_signed(Duration::seconds(RATE_WINDOW)).unwrap_or(DateTime::<Utc>::MAX_UTC);
            }
        }
        now
    }

    pub fn reserve(&mut self, name: &str, r: Reservation) {
        self.recent.push((r.team.clone(), r.admitted_at, r.amount.pods));
        self.released.remove(name);
        self.reservations.insert(name.to_string(), r);
    }

    pub fn release(&mut self, name: &str, why: &str) -> Option<Reservation> {
        let r = self.reservations.remove(name);
        if r.is_some() {
            self.released.insert(name.to_string(), why.to_string());
        }
        r
    }

    /// Forgets rate entries older than the window.
    pub fn prune(&mut self, now: DateTime<Utc>) {
        let since = now.checked_sub_signed(Duration::seconds(RATE_WINDOW)).unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.recent.retain(|(_, at, _)| *at > since);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn quantities_resolve_absolute_and_as_a_share_of_the_fleet() {
        let fleet = Amount::new(100_000, 400 << 30, 1000);
        let q = Quantities {
            cpu: Some(Quantity::Text("10%".into())),
            memory: Some(Quantity::Text("32Gi".into())),
            pods: Some(Quantity::Count(40)),
            gpu_a100: Some(Quantity::Count(8)),
            neuron: Some(Quantity::Text("50%".into())),
            ..Default::default()
        };
        let fleet = fleet.with(Resource::GpuA100, 16).with(Resource::Neuron, 32);
        assert_eq!(
            q.resolve(&fleet, "x").unwrap(),
            Amount::new(10_000, 32 << 30, 40).with(Resource::GpuA100, 8).with(Resource::Neuron, 16)
        );
        let gpu: Quantities = serde_json::from_value(serde_json::json!({"gpu-h100": "x"})).unwrap();
        assert_eq!(gpu.resolve(&fleet, "g").unwrap_err(), "g.gpu-h100: \"x\" is not a gpu-h100 quantity");
        assert!(
            serde_json::from_value::<Quantities>(serde_json::json!({"nvidia.com/gpu": 8})).is_err(),
            "a resource the quota does not count is refused"
        );
        let bad = Quantities { cpu: Some(Quantity::Text("lots".into())), ..Default::default() };
        assert_eq!(
            bad.resolve(&fleet, "spec.tiers.OnDemand.max").unwrap_err(),
            "spec.tiers.OnDemand.max.cpu: \"lots\" is not a cpu quantity"
        );
        assert_eq!(
            Quantity::Text("120%".into()).resolve(Resource::Cpu, 1).unwrap_err(),
            "\"120%\": a percentage of the fleet is between 0% and 100%"
        );
    }

    #[test]
    fn a_maximum_below_the_guarantee_is_refused_where_it_is_written() {
        let mut tiers = BTreeMap::new();
        tiers.insert(
            "OnDemand".to_string(),
            TierQuota {
                guaranteed: Quantities { cpu: Some(Quantity::Count(8)), ..Default::default() },
                max: Some(Quantities { cpu: Some(Quantity::Count(4)), ..Default::default() }),
            },
        );
        tiers.insert("Gold".to_string(), TierQuota::default());
        let errs = resolve("search", None, &tiers, None, None, &Amount::default()).unwrap_err();
        assert_eq!(
            errs,
            vec![
                "spec.tiers.Gold: not a tier (Reserved, OnDemand, Preemptible)".to_string(),
                "spec.tiers.OnDemand.max.cpu: 4 is below the guaranteed 8".to_string(),
            ]
        );
    }

    #[test]
    fn the_rate_window_frees_as_its_oldest_admissions_age_out() {
        let mut l = Ledger::default();
        let now = t("2026-11-24T10:01:00Z");
        for (s, pods) in [("2026-11-24T10:00:10Z", 30), ("2026-11-24T10:00:40Z", 30)] {
            l.recent.push(("a".into(), t(s), pods));
        }
        assert_eq!(l.pods_last_minute("a", now), 60);
        // 20 more under a limit of 60: after the first 30 leave (10:01:10).
        assert_eq!(l.rate_room_at("a", 20, 60, now), t("2026-11-24T10:01:10Z"));
        // 40 more: the same (30 left, 30 + 40 > 60 … after both leave: 10:01:40).
        assert_eq!(l.rate_room_at("a", 40, 60, now), t("2026-11-24T10:01:40Z"));
        l.prune(t("2026-11-24T10:01:20Z"));
        assert_eq!(l.recent.len(), 1);
    }

    #[test]
    fn amounts_read_as_people_write_them() {
        assert_eq!(Amount::new(2500, 12 << 30, 3).show(), "cpu 2500m, memory 12Gi, pods 3");
        assert_eq!(Resource::Cpu.show(4000), "4");
    }
}
