//! The member clusters as the fleet engine sees them (effects): what a
//! cluster runs of the workload (its containers' images), moving it to a
//! version and waiting until the new revision runs Ready, and a wave's
//! gate — the bake, then the analysis against Prometheus, each
//! measurement kept in the delivery's store; a firing alert ends it.
//! Every wait here goes through [`Waits`]: a run without `wait` parks at
//! it, and the next run goes on from what the store keeps (the roll's
//! deadline, the bake's end, the measurements taken).
//!
//! ```text
//! fleet::run (the engine) ─▶ Members::current / roll / gate ─▶ Waits (sleep, or park)
//!                              │ kube (the members' API servers)
//!                              │ Prometheus (analysis::measure, judge)
//!                              ▼ state store: analysis/<number>/<cluster>.json, rolls/<number>/<cluster>.json
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;
use tokio::sync::watch;

use super::analysis::{self, Answer, Vars, Verdict};
use super::book::{self, ClusterAnalysis, ReadyBy};
use super::prometheus::Prometheus;
use super::spec::DeliverySpec;
use super::waits::Waits;
use crate::fleet::rollout::Snapshot;
use crate::fleet::run::{Fleet, Hold};
use crate::state::Store;

pub struct Members<'a> {
    pub spec: &'a DeliverySpec,
    pub clients: BTreeMap<String, kube::Client>,
    pub prometheus: Option<Prometheus>,
    /// The delivery's folder (analyses are written there).
    pub store: Store,
    pub number: u64,
    /// A firing alert for the workload (set by the webhook): gates fail at once.
    pub alert: watch::Receiver<Option<String>>,
    /// How often a roll looks at the workload's status.
    pub poll: Duration,
    /// Sleep through the waits, or park at them (a run without `wait`).
    pub waits: Waits,
}

pub fn workload_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(crate::workloads::GROUP, crate::workloads::VERSION, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Container → image of a workload's pod template (init containers too).
pub fn images_of(obj: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for list in ["containers", "initContainers"] {
        for c in obj.pointer(&format!("/spec/template/spec/{list}")).and_then(Value::as_array).into_iter().flatten() {
            if let (Some(n), Some(i)) = (c["name"].as_str(), c["image"].as_str()) {
                out.insert(n.to_string(), i.to_string());
            }
        }
    }
    out
}

/// Sets the named containers' images; the containers `to` names that the
/// template does not have.
pub fn set_images(obj: &mut Value, to: &BTreeMap<String, String>) -> Vec<String> {
    let mut seen = Vec::new();
    for list in ["containers", "initContainers"] {
        if let Some(cs) = obj.pointer_mut(&format!("/spec/template/spec/{list}")).and_then(Value::as_array_mut) {
            for c in cs {
                let Some(name) = c["name"].as_str().map(str::to_string) else { continue };
                if let Some(image) = to.get(&name) {
                    c["image"] = Value::String(image.clone());
                    seen.push(name);
                }
            }
        }
    }
    to.keys().filter(|k| !seen.contains(k)).cloned().collect()
}

/// The annotation that says which version a delivery put on a member.
pub const VERSION_ANNOTATION: &str = "pinfleet.dev/delivered-version";
/// The annotation that names the delivery (`NAMESPACE/NAME #NUMBER`).
pub const DELIVERY_ANNOTATION: &str = "pinfleet.dev/delivery";

/// Marks the workload with what a delivery moved it to (`version`, or
/// `back from VERSION` on a rollback) and which delivery did.
pub fn mark(obj: &mut Value, version: &str, delivery: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
    if !annotations.is_object() {
        *annotations = Value::Object(Default::default());
    }
    annotations[VERSION_ANNOTATION] = Value::String(version.to_string());
    annotations[DELIVERY_ANNOTATION] = Value::String(delivery.to_string());
}

/// What a member runs when a delivery moved it: `v3 (delivery feeds/web #4)`;
/// none when it runs what the gateway placed.
pub fn delivered(obj: &Value) -> Option<String> {
    let a = obj.pointer("/metadata/annotations")?;
    let version = a.get(VERSION_ANNOTATION)?.as_str()?;
    let by = a.get(DELIVERY_ANNOTATION).and_then(Value::as_str).unwrap_or("a delivery");
    Some(format!("{version} (delivery {by})"))
}

/// Whether the workload runs its latest generation Ready, and what its
/// Ready condition says.
pub fn ready_on(obj: &Value) -> (bool, String) {
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
    let observed = obj.pointer("/status/observedGeneration").and_then(Value::as_i64).unwrap_or(0);
    let cond = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let ready = cond.is_some_and(|c| c["status"] == "True");
    let message = cond.and_then(|c| c["message"].as_str()).unwrap_or("no Ready condition yet").to_string();
    if observed < generation {
        return (false, format!("the controller has not seen generation {generation} yet (at {observed})"));
    }
    (ready, message)
}

impl Members<'_> {
    fn client(&self, cluster: &str) -> Result<&kube::Client> {
        self.clients.get(cluster).ok_or_else(|| anyhow!("no connection to cluster {cluster}"))
    }

    fn api(&self, cluster: &str) -> Result<Api<DynamicObject>> {
        let w = &self.spec.workload;
        Ok(workload_api(self.client(cluster)?, &w.kind, &w.namespace))
    }

    async fn get(&self, cluster: &str) -> Result<Value> {
        let w = &self.spec.workload;
        let obj = self
            .api(cluster)?
            .get_opt(&w.name)
            .await
            .with_context(|| format!("reading {} {w} on {cluster}", w.kind))?;
        let obj = obj
            .ok_or_else(|| anyhow!("{} {w} does not run on {cluster} (a delivery moves a placed workload)", w.kind))?;
        Ok(serde_json::to_value(obj)?)
    }

    async fn save(&self, a: &ClusterAnalysis) -> Result<()> {
        self.store.put_json(&book::analysis_key(self.number, &a.cluster), a).await.map(|_| ())
    }

    fn alerted(&self) -> Option<String> {
        self.alert.borrow().clone()
    }
}

impl Fleet for Members<'_> {
    async fn current(&self, cluster: &str) -> Result<Snapshot> {
        Ok(Snapshot { images: images_of(&self.get(cluster).await?), ..Default::default() })
    }

    async fn roll(&self, cluster: &str, to: &Snapshot, _why: &str) -> Result<()> {
        let _call = self.waits.enter();
        let api = self.api(cluster)?;
        let name = &self.spec.workload.name;
        // Write at the version read: another writer in between is a conflict, read again.
        let mut generation = 0;
        for attempt in 0..5 {
            let mut obj = self.get(cluster).await?;
            let missing = set_images(&mut obj, &to.images);
            if !missing.is_empty() {
                bail!("{} on {cluster} has no container named {}", self.spec.workload, missing.join(", "));
            }
            // Forward to the delivery's images, or back (a rollback): said on the object,
            // so the gateway's record and views follow what the member runs.
            let forward = self.spec.images.iter().all(|(c, i)| to.images.get(c) == Some(i));
            let version = if forward { self.spec.version.clone() } else { format!("back from {}", self.spec.version) };
            mark(&mut obj, &version, &format!("{} #{}", self.spec.workload, self.number));
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
            let typed: DynamicObject = serde_json::from_value(obj)?;
            match api.replace(name, &PostParams::default(), &typed).await {
                Ok(o) => {
                    generation = o.metadata.generation.unwrap_or(0);
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => continue,
                Err(e) => {
                    return Err(anyhow!(e)).with_context(|| format!("writing {} on {cluster}", self.spec.workload))
                }
            }
        }
        let deadline = self.ready_by(cluster, &to.images).await?;
        let timeout = humantime::format_duration(self.spec.ready_timeout);
        loop {
            let obj = self.get(cluster).await?;
            let (ready, message) = ready_on(&obj);
            let seen = obj.pointer("/status/observedGeneration").and_then(Value::as_i64).unwrap_or(0) >= generation;
            if ready && seen {
                self.store.delete(&book::ready_key(self.number, cluster)).await?;
                return Ok(());
            }
            if Utc::now() >= deadline {
                bail!("the new revision is not Ready on {cluster} after {timeout}: {message}");
            }
            if self.waits.parks() {
                let what = format!(
                    "for its new revision to run Ready ({message}); the wave fails if it does not by {} (analysis.readyTimeout {timeout})",
                    deadline.format("%H:%M:%S UTC")
                );
                match self.waits.park(cluster, deadline, what).await {}
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    async fn gate(&self, cluster: &str) -> Result<()> {
        let _call = self.waits.enter();
        let a = &self.spec.analysis;
        // A run stopped mid-gate (killed, or parked at a wait) kept where it
        // was: the next goes on from there, a concluded gate is not run again.
        let key = book::analysis_key(self.number, cluster);
        let mut record = match self.store.get_json::<ClusterAnalysis>(&key).await? {
            Some(saved) => match concluded(&saved) {
                Some(verdict) => return verdict,
                None => saved,
            },
            None => ClusterAnalysis {
                cluster: cluster.to_string(),
                measurements: vec![],
                verdict: "baking".into(),
                bake_until: None,
            },
        };
        let mut alert = self.alert.clone();
        // The bake: the wave runs the new version before anything is measured; an alert ends it.
        if record.measurements.is_empty() {
            let until = match record.bake_until {
                Some(t) => t,
                None => {
                    let t = Utc::now() + chrono::Duration::from_std(a.bake).unwrap_or_default();
                    record.bake_until = Some(t);
                    self.save(&record).await?;
                    t
                }
            };
            let what = format!(
                "baking {} until {} (analysis.bake {}), then {} measurement(s) {} apart",
                self.spec.version,
                until.format("%H:%M:%S UTC"),
                humantime::format_duration(a.bake),
                a.count,
                humantime::format_duration(a.interval)
            );
            if let Some(why) = self.wait_unless_alerted(cluster, until, what, &mut alert).await {
                return self.alert_failed(record, why).await;
            }
        }
        let Some(prom) = &self.prometheus else {
            record.verdict = "successful (no metrics to analyse)".into();
            self.save(&record).await?;
            return Ok(());
        };
        let vars = Vars {
            cluster: cluster.to_string(),
            namespace: self.spec.workload.namespace.clone(),
            workload: self.spec.workload.name.clone(),
            version: self.spec.version.clone(),
        };
        let range = format!("{}s", a.interval.as_secs().max(60));
        // The rounds already measured (by a run that stopped) count.
        let done = (record.measurements.len() / a.metrics.len().max(1)) as u32;
        for round in done..a.count {
            if round > 0 {
                let last = record.measurements.last().map_or_else(Utc::now, |m| m.at);
                let next = last + chrono::Duration::from_std(a.interval).unwrap_or_default();
                let what = format!(
                    "measurement {} of {} at {} (analysis.interval {})",
                    round + 1,
                    a.count,
                    next.format("%H:%M:%S UTC"),
                    humantime::format_duration(a.interval)
                );
                if let Some(why) = self.wait_unless_alerted(cluster, next, what, &mut alert).await {
                    return self.alert_failed(record, why).await;
                }
            }
            for m in &a.metrics {
                let answer: Answer = prom.query(&analysis::render(&m.query, &vars, &range), None).await;
                record.measurements.push(analysis::measure(m, answer, chrono::Utc::now()));
            }
            let verdict = analysis::judge(a, &record.measurements);
            match verdict {
                Verdict::Running => {
                    record.verdict = "running".into();
                    self.save(&record).await?;
                }
                Verdict::Successful => break,
                Verdict::Failed(why) => {
                    record.verdict = format!("failed: {why}");
                    self.save(&record).await?;
                    bail!("analysis failed on {cluster}: {why}");
                }
                Verdict::Inconclusive(why) => {
                    record.verdict = format!("inconclusive: {why}");
                    self.save(&record).await?;
                    return Err(Hold(format!("analysis inconclusive on {cluster}: {why}")).into());
                }
            }
        }
        record.verdict = "successful".into();
        self.save(&record).await?;
        Ok(())
    }
}

/// The verdict a stopped run's gate reached, given again: its analysis is
/// not measured twice.
fn concluded(a: &ClusterAnalysis) -> Option<Result<()>> {
    let cluster = &a.cluster;
    if a.verdict.starts_with("successful") {
        Some(Ok(()))
    } else if let Some(why) = a.verdict.strip_prefix("failed: ") {
        Some(Err(anyhow!("analysis failed on {cluster}: {why}")))
    } else {
        let why = a.verdict.strip_prefix("inconclusive: ")?;
        Some(Err(Hold(format!("analysis inconclusive on {cluster}: {why}")).into()))
    }
}

impl Members<'_> {
    /// When the new revision must run Ready on `cluster`: `readyTimeout`
    /// after the first write of `images`, kept in the store so that a roll
    /// picked up by the next run has the same deadline.
    async fn ready_by(&self, cluster: &str, images: &BTreeMap<String, String>) -> Result<DateTime<Utc>> {
        let key = book::ready_key(self.number, cluster);
        if let Some(r) = self.store.get_json::<ReadyBy>(&key).await? {
            if r.images == *images {
                return Ok(r.until);
            }
        }
        let until = Utc::now() + chrono::Duration::from_std(self.spec.ready_timeout).unwrap_or_default();
        self.store.put_json(&key, &ReadyBy { images: images.clone(), until }).await?;
        Ok(until)
    }

    /// Waits until `until` (`what`: for what, in words), or less when an
    /// alert fires: its reason. A run without `wait` parks here instead.
    async fn wait_unless_alerted(
        &self,
        cluster: &str,
        until: DateTime<Utc>,
        what: String,
        alert: &mut watch::Receiver<Option<String>>,
    ) -> Option<String> {
        if let Some(why) = self.alerted() {
            return Some(why);
        }
        let left = (until - Utc::now()).to_std().unwrap_or_default();
        if left.is_zero() {
            return None;
        }
        if self.waits.parks() {
            // An alert while parked ends the run itself (`run::apply` watches it).
            match self.waits.park(cluster, until, what).await {}
        }
        let until = tokio::time::Instant::now() + left;
        loop {
            if let Some(why) = self.alerted() {
                return Some(why);
            }
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return None,
                changed = alert.changed() => {
                    if changed.is_err() {
                        // No one can send an alert any more: only the wait is left.
                        tokio::time::sleep_until(until).await;
                        return None;
                    }
                }
            }
        }
    }

    async fn alert_failed(&self, mut record: ClusterAnalysis, why: String) -> Result<()> {
        record.verdict = format!("failed: {why}");
        self.save(&record).await?;
        bail!("{why}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_delivery_marks_what_it_moved_and_the_mark_is_read_back() {
        let mut obj = json!({"metadata": {"name": "web"}, "spec": {}});
        assert_eq!(delivered(&obj), None);
        mark(&mut obj, "v3", "feeds/web #4");
        assert_eq!(delivered(&obj).as_deref(), Some("v3 (delivery feeds/web #4)"));
        // Other annotations are kept; a rollback says so.
        obj["metadata"]["annotations"]["team"] = json!("feeds");
        mark(&mut obj, "back from v3", "feeds/web #4");
        assert_eq!(delivered(&obj).as_deref(), Some("back from v3 (delivery feeds/web #4)"));
        assert_eq!(obj["metadata"]["annotations"]["team"], "feeds");
    }
}
