//! The leader's loop of the gateway's service (effects): under the Lease,
//! each pass first migrates the records of the previous release's form
//! ([`Service::migrate_once`]), then admits ([`Service::admit_once`]: gangs whose pods are not
//! ready in time evicted and requeued first, then the ledger, then the
//! statuses), places ([`Service::place_once`]: each gang's pods packed
//! onto a member's nodes), rolls members' status up
//! ([`Service::rollup_once`]) and samples each team's use
//! ([`Service::record_usage`]); a follower keeps its caches and computes
//! the same views from the same records ([`Service::follow`], `standby`).

#[allow(unused_imports)]
use super::*;
use kube::api::{Patch, PatchParams};

impl Service {
    /// Usage of a team per tier (from the ledger).
    pub async fn usage(&self, team: &str) -> Result<BTreeMap<&'static str, Amount>> {
        let ledger = self.ledger().await?;
        Ok(quota::TIERS.into_iter().map(|t| (quota::tier_name(t), ledger.usage(team, t))).collect())
    }

    /// Each team's use per tier now, as shares of each tier's maximum.
    pub async fn usage_now(&self, now: DateTime<Utc>) -> Result<Vec<(String, records::UsageSample)>> {
        let (world, _) = self.world().await?;
        // One read of the ledger for every team.
        let ledger = self.ledger().await?;
        let mut out = Vec::new();
        for (team, q) in &world.quotas {
            for t in quota::TIERS {
                let Some(l) = q.limits(t) else { continue };
                let u = ledger.usage(team, t);
                let share = |used: u64, max: u64| if max == 0 { 0.0 } else { used as f64 / max as f64 };
                out.push((
                    team.clone(),
                    records::UsageSample {
                        at: now,
                        tier: quota::tier_name(t).to_string(),
                        cpu: share(u.cpu, l.max.cpu),
                        memory: share(u.memory, l.max.memory),
                        pods: share(u.pods, l.max.pods),
                    },
                ));
            }
        }
        Ok(out)
    }

    /// The leader samples every team's use into its hour's `UsageHistory`
    /// on the host, and drops hours older than [`USAGE_KEPT`]; a follower
    /// does nothing (the leader's records are everyone's). Returns the
    /// samples written.
    pub async fn record_usage(&self, now: DateTime<Utc>) -> Result<usize> {
        use records::{UsageHistory, UsageHistorySpec};
        if !self.leading.load(Ordering::Relaxed) {
            return Ok(0);
        }
        let api: Api<UsageHistory> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let hour = records::hour_of(now);
        let mut by_team: BTreeMap<String, Vec<records::UsageSample>> = BTreeMap::new();
        for (team, sample) in self.usage_now(now).await? {
            by_team.entry(team).or_default().push(sample);
        }
        let mut written: usize = 0;
        for (team, samples) in by_team {
            let name = records::usage_history_name(&team, hour);
            let n = samples.len();
            match api.get_opt(&name).await? {
                Some(mut h) => {
                    h.spec.samples.extend(samples);
                    h.metadata.managed_fields = None;
                    // Replace at the read version: a write in between is a conflict, and
                    // this sample is dropped rather than another one lost.
                    match api.replace(&name, &PostParams::default(), &h).await {
                        Ok(_) => written = written.saturating_add(n),
                        Err(kube::Error::Api(e)) if e.code == 409 => continue,
                        Err(e) => return Err(e).with_context(|| format!("writing {name}")),
                    }
                }
                None => {
                    let mut h = UsageHistory::new(&name, UsageHistorySpec { team: team.clone(), hour, samples });
                    h.metadata.labels = Some([(records::TEAM_LABEL.to_string(), team.clone())].into());
                    match api.create(&PostParams::default(), &h).await {
                        Ok(_) => written = written.saturating_add(n),
                        Err(kube::Error::Api(e)) if e.code == 409 => continue,
                        Err(e) => return Err(e).with_context(|| format!("writing {name}")),
                    }
                }
            }
        }
        // Once an hour: the hours past keeping go.
        let pruned_hour = *self.usage_pruned.lock().expect("usage pruned");
        if pruned_hour != Some(hour) {
            let oldest = records::hour_of(now.checked_sub_signed(USAGE_KEPT).unwrap_or(DateTime::<Utc>::MIN_UTC));
            for h in api.list(&ListParams::default()).await?.items {
                if h.spec.hour < oldest {
                    let name = h.metadata.name.clone().unwrap_or_default();
                    api.delete(&name, &DeleteParams::default()).await.map(|_| ()).or_else(not_found_ok)?;
                }
            }
            *self.usage_pruned.lock().expect("usage pruned") = Some(hour);
        }
        Ok(written)
    }

    /// A team's use over the last [`USAGE_KEPT`], oldest first, as the host keeps it.
    pub async fn usage_history(&self, team: &str, now: DateTime<Utc>) -> Result<Vec<records::UsageSample>> {
        let api: Api<records::UsageHistory> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let since = now.checked_sub_signed(USAGE_KEPT).unwrap_or(DateTime::<Utc>::MIN_UTC);
        let mut out: Vec<records::UsageSample> = api
            .list(&ListParams::default().labels(&format!("{}={team}", records::TEAM_LABEL)))
            .await
            .context("reading the team's use over time")?
            .items
            .into_iter()
            .filter(|h| h.spec.team == team)
            .flat_map(|h| h.spec.samples)
            .filter(|s| s.at >= since)
            .collect();
        out.sort_by_key(|s| s.at);
        Ok(out)
    }

    /// One admission pass (the leader's). Returns (admitted, preempted).
    pub async fn admit_once(&self) -> Result<(usize, usize)> {
        let (world, _) = self.world().await?;
        let (mut ledger, rv) = self.read_ledger().await?;
        let before = ledger.clone();
        let now = Utc::now();
        let all = self.all();
        let by_name: HashMap<String, Arc<Submission>> =
            all.iter().map(|s| (s.metadata.name.clone().unwrap_or_default(), s.clone())).collect();
        let mut roll_admitted = Vec::new();
        let mut roll_released = Vec::new();
        let mut cancel_queued = Vec::new();
        // A cancelled workload keeps its quota until every member says it
        // and its pods are gone (a finalizer or a long grace period keeps
        // pods running after the delete): asked again each pass.
        let mut lingering: HashMap<String, String> = HashMap::new();
        for (name, s) in &by_name {
            if s.spec.cancel && ledger.reservations.contains_key(name) && phase(s).holds() {
                if let Some(what) = self.still_on_members(s).await {
                    lingering.insert(name.clone(), what);
                }
            }
        }
        // Placed gangs whose pods are not all ready in time: released here
        // (and so rolled back into the queue below, as a release whose
        // record still holds is; a leader killed in between finishes it).
        for (name, verdict) in self.judge_gangs(&by_name, now).await {
            match verdict {
                gang::Verdict::Evict { why, .. } | gang::Verdict::Fail { why, .. } => {
                    tracing::warn!("admission: {name} {why}");
                    ledger.release(&name, &why);
                }
                gang::Verdict::Ready => {
                    self.set_status(&name, |st| st.pods_ready_at = Some(now)).await?;
                }
                gang::Verdict::Wait { .. } => {}
            }
        }
        for (name, s) in &by_name {
            let p = phase(s);
            let reserved = ledger.reservations.contains_key(name);
            if lingering.contains_key(name) {
                continue;
            }
            if reserved && p == Phase::Queued && !s.spec.cancel {
                roll_admitted.push(name.clone());
            }
            if s.spec.cancel && p == Phase::Queued && !reserved {
                cancel_queued.push(name.clone());
            }
            if (s.spec.cancel || p.done()) && reserved {
                let why = if s.spec.cancel { "cancelled".to_string() } else { format!("{p:?}").to_lowercase() };
                ledger.release(name, &why);
            }
            if let Some(why) = ledger.released.get(name) {
                // An evicted gang back in the queue is done with its release.
                let requeued = p == Phase::Queued && evicted(why);
                if p.holds() || (p == Phase::Queued && !s.spec.cancel && !requeued) {
                    roll_released.push((name.clone(), why.clone()));
                }
            }
        }
        // Releases whose records say so: forgotten.
        ledger.released.retain(|n, _| by_name.get(n).is_some_and(|s| phase(s).holds() || phase(s) == Phase::Queued));
        let mut queue = Self::admission_queue(&all, &ledger);
        let (batch, set_aside) = self.decide_holding_drift(&world, &mut ledger, &mut queue, now).await?;
        for (name, why) in &set_aside {
            tracing::error!("admission: {name} set aside: {why}");
            self.set_status(name, |st| {
                st.phase = Phase::Failed;
                st.finished_at = Some(now);
                st.message = Some(format!(
                    "set aside by admission: it cannot be evaluated ({why}); the pass went on without it"
                ));
            })
            .await?;
        }
        if ledger != before && !self.write_ledger(&ledger, rv).await? {
            tracing::warn!("the admission ledger moved under this pass (another leader?): pass dropped");
            return Ok((0, 0));
        }
        // Only now is anyone told.
        use futures::StreamExt;
        let tell: Vec<(String, DateTime<Utc>, Option<DateTime<Utc>>)> = roll_admitted
            .iter()
            .chain(batch.admitted.iter().map(|(n, _)| n))
            .map(|name| {
                let at = ledger.reservations.get(name).map(|r| r.admitted_at).unwrap_or(now);
                let accepted = by_name.get(name).and_then(|s| s.status.as_ref()).and_then(|s| s.accepted_at);
                (name.clone(), at, accepted)
            })
            .collect();
        let told: Vec<Result<()>> = futures::stream::iter(tell)
            .map(|(name, at, accepted)| async move {
                self.set_status(&name, |st| {
                    st.phase = Phase::Admitted;
                    st.admitted_at = Some(at);
                    st.retry_at = None;
                    st.message = None;
                })
                .await?;
                if let Some(a) = accepted {
                    self.metrics.stage("admitted", at.signed_duration_since(a).num_milliseconds() as f64 / 1000.0);
                }
                Ok(())
            })
            .buffer_unordered(32)
            .collect()
            .await;
        told.into_iter().collect::<Result<Vec<()>>>()?;
        self.tell_released(batch.preempted.iter().chain(roll_released.iter()), &by_name, now).await?;
        for (name, what) in &lingering {
            let message = format!("cancelling: its quota is held until the members have removed it ({what})");
            if by_name.get(name).and_then(|s| s.status.as_ref()).and_then(|s| s.message.as_ref()) != Some(&message) {
                self.set_status(name, |st| st.message = Some(message.clone())).await?;
            }
        }
        for name in &cancel_queued {
            self.set_status(name, |st| {
                st.phase = Phase::Cancelled;
                st.finished_at = Some(now);
                st.message = Some("cancelled before admission".into());
            })
            .await?;
        }
        self.publish_waiting(&world, &ledger, &queue, &batch, now).await;
        self.metrics.cycle(batch.admitted.len(), batch.preempted.len());
        Ok((batch.admitted.len().saturating_add(roll_admitted.len()), batch.preempted.len()))
    }

    /// The queue a pass decides, in [`admission::order`]: every record
    /// queued and not cancelled, of the current form (one of the previous
    /// form waits for its migration), not already reserved in `ledger`.
    /// The leader's pass and a standby's views ([`Self::observe_once`])
    /// decide over the same queue.
    pub(super) fn admission_queue(all: &[Arc<Submission>], ledger: &crate::gateway::quota::Ledger) -> Vec<Pending> {
        let mut queue: Vec<Pending> = all
            .iter()
            .filter(|s| phase(s) == Phase::Queued && !s.spec.cancel)
            // A record of the previous form waits for its migration.
            .filter(|s| s.spec.workload.is_none())
            .filter(|s| !ledger.reservations.contains_key(s.metadata.name.as_deref().unwrap_or_default()))
            .map(|s| Self::pending_of(s))
            .collect();
        admission::order(&mut queue);
        queue
    }

    /// [`decide_shielded`] with each team's drift held: what the members run
    /// beyond the ledger counts against its team, held in `ledger` for this
    /// decision only (taken out again, never written). The leader's pass
    /// and a standby's views decide alike.
    pub(super) async fn decide_holding_drift(
        &self,
        world: &admission::World,
        ledger: &mut crate::gateway::quota::Ledger,
        queue: &mut Vec<Pending>,
        now: DateTime<Utc>,
    ) -> Result<(admission::Batch, Vec<(String, String)>)> {
        self.hold_drift(ledger, now).await;
        let decided = decide_shielded(world, ledger, queue, now);
        ledger.reservations.retain(|k, _| !k.starts_with(DRIFT_PREFIX));
        decided
    }

    /// Tells each released submission (preempted, cancelled, evicted back
    /// into the queue with its backoff, failed or finished) what became of
    /// it, and removes it from the members.
    async fn tell_released<'a>(
        &self,
        released: impl Iterator<Item = &'a (String, String)>,
        by_name: &HashMap<String, Arc<Submission>>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        for (name, why) in released {
            let Some(s) = by_name.get(name) else { continue };
            let ph = if why.starts_with("preempted") {
                Phase::Preempted
            } else if why == "cancelled" {
                Phase::Cancelled
            } else if evicted(why) {
                Phase::Queued
            } else if why == "failed" || why.starts_with("failed: evicted") {
                Phase::Failed
            } else {
                Phase::Succeeded
            };
            self.remove_from_members(s).await;
            let pods_ready = self.config.policy.pods_ready;
            self.set_status(name, |st| {
                let n = gang::evictions_in(why).unwrap_or_else(|| st.evictions.saturating_add(1));
                if ph == Phase::Queued {
                    // Back in the queue, as Kueue requeues an evicted
                    // workload: not before its backoff ends.
                    st.evictions = n;
                    st.retry_at = Some(admission::later(now, gang::backoff(&pods_ready, st.evictions)));
                    st.admitted_at = None;
                    st.placed_at = None;
                    st.pods_created_at = None;
                    st.placement = Vec::new();
                } else {
                    if why.starts_with("failed: evicted") {
                        st.evictions = n;
                    }
                    st.finished_at.get_or_insert(now);
                }
                st.phase = ph;
                st.message = Some(why.clone());
            })
            .await?;
        }
        Ok(())
    }

    /// Judges every placed gang whose pods have not yet all been seen
    /// ready and whose deadline has passed ([`gang::judge`]): its pods are
    /// asked of its member only then. A member that cannot be asked
    /// leaves the gang as it is (nothing is evicted on what was not seen).
    async fn judge_gangs(
        &self,
        by_name: &HashMap<String, Arc<Submission>>,
        now: DateTime<Utc>,
    ) -> Vec<(String, gang::Verdict)> {
        let policy = self.config.policy.pods_ready;
        let mut out = Vec::new();
        for (name, s) in by_name {
            let kind = s.spec.kind.as_str();
            let Some(st) = s.status.as_ref() else { continue };
            if !gang::is_gang(kind) || s.spec.cancel || !matches!(st.phase, Phase::Placed | Phase::Running) {
                continue;
            }
            let Some(placed_at) = st.placed_at.filter(|_| st.pods_ready_at.is_none()) else { continue };
            if admission::later(placed_at, policy.timeout) > now {
                continue;
            }
            let wname = s.spec.workload_name.as_str();
            let selector = format!("pinfleet.dev/kind={kind},pinfleet.dev/name={wname}");
            let mut pods = gang::Pods { expected: s.spec.demand.pods, ..Default::default() };
            let mut seen = true;
            let mut members = Vec::new();
            for part in &st.placement {
                let Some(m) = self.members.iter().find(|m| m.name == part.cluster) else { continue };
                members.push(m.name.clone());
                let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(m.client.clone(), &s.spec.team);
                let list = match tokio::time::timeout(
                    Duration::from_secs(5),
                    api.list(&ListParams::default().labels(&selector)),
                )
                .await
                {
                    Ok(Ok(l)) => l.items,
                    _ => {
                        seen = false;
                        break;
                    }
                };
                for p in &list {
                    match pod_readiness(p) {
                        Ok(()) => pods.ready = pods.ready.saturating_add(1),
                        Err(why) => {
                            if pods.problem.is_none() {
                                pods.problem = Some(why);
                            }
                        }
                    }
                }
            }
            if !seen {
                continue;
            }
            let member = if members.is_empty() { "its member".to_string() } else { members.join(", ") };
            out.push((name.clone(), gang::judge(&policy, &member, placed_at, st.evictions, &pods, now)));
        }
        out
    }

    async fn remove_from_members(&self, s: &Submission) {
        let kind = s.spec.kind.as_str();
        let name = s.spec.workload_name.as_str();
        for part in s.status.as_ref().map(|st| st.placement.clone()).unwrap_or_default() {
            if let Some(m) = self.members.iter().find(|m| m.name == part.cluster) {
                let api = workload_api(&m.client, kind, &s.spec.team);
                if let Err(e) = api.delete(name, &Default::default()).await {
                    if !matches!(&e, kube::Error::Api(a) if a.code == 404) {
                        tracing::warn!("removing {name} from {}: {e}", m.name);
                    }
                }
            }
        }
    }

    /// Measures, at most every [`DRIFT_EVERY`], what each team's namespace
    /// on each member runs (the requests of its pods that have not ended)
    /// against what the ledger holds for the team; the excess is its drift.
    /// A member that cannot be asked keeps the team's last measure.
    async fn measure_drift(&self, ledger: &crate::gateway::quota::Ledger) {
        {
            let mut last = self.drift_measured.lock().expect("drift clock");
            if last.is_some_and(|t| t.elapsed() < DRIFT_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let mut held: BTreeMap<String, Amount> = BTreeMap::new();
        for r in ledger.reservations.values() {
            let e = held.entry(r.team.clone()).or_default();
            *e = e.plus(r.amount);
        }
        let mut teams: Vec<String> = held.keys().cloned().collect();
        if let Ok((world, _)) = self.world().await {
            teams.extend(world.quotas.keys().cloned());
        }
        teams.sort();
        teams.dedup();
        let before = self.drift.read().await.clone();
        let views = self.member_views().await;
        let mut drift = BTreeMap::new();
        'teams: for team in teams {
            let mut running = Amount::default();
            for m in &self.members {
                let view = views.iter().find(|v| v.name == m.name);
                let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(m.client.clone(), &team);
                let list = match tokio::time::timeout(Duration::from_secs(5), pods.list(&Default::default())).await {
                    Ok(Ok(l)) => l,
                    Ok(Err(kube::Error::Api(a))) if a.code == 404 => continue,
                    _ => {
                        if let Some(d) = before.get(&team) {
                            drift.insert(team.clone(), *d);
                        }
                        continue 'teams;
                    }
                };
                for p in list.items {
                    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                    if matches!(phase, Some("Succeeded" | "Failed")) {
                        continue;
                    }
                    // All it takes, its devices by the flavor of the node
                    // it runs on (the quota's one reading of a pod; what
                    // cannot be counted is left out, the rest still is).
                    let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                    let flavor = on.and_then(|n| view.and_then(|v| v.flavor_of(n)));
                    let v = serde_json::to_value(&p).unwrap_or(Value::Null);
                    let (r, _) = crate::workloads::demand::pod_takes(&v, "pod", None, flavor);
                    let mut a = Amount::new(r.cpu, r.memory, 1);
                    for f in crate::workloads::demand::FLAVORS {
                        a.set(quota::Resource::of_flavor(f), r.accelerator(f));
                    }
                    running = running.plus(a);
                }
            }
            let excess = running.minus(held.get(&team).copied().unwrap_or_default());
            if !excess.is_zero() {
                drift.insert(team, excess);
            }
        }
        for (team, d) in &drift {
            if before.get(team) != Some(d) {
                tracing::warn!("team {team}: its namespaces on the members run {} beyond what the ledger holds; counted against it", d.show());
            }
        }
        *self.drift.write().await = drift;
    }

    /// Each team's drift (see [`Self::measure_drift`]).
    pub async fn drift(&self, team: &str) -> Amount {
        self.drift.read().await.get(team).copied().unwrap_or_default()
    }

    /// Publishes the queue's explanations for readers: positions each
    /// pass, estimates at most every 2 s (a new arrival's within a quarter
    /// second); only the teams whose waiting work reads differently hear of it.
    /// The leader's after each pass, a standby's after each of its own
    /// ([`Self::observe_once`]).
    pub(super) async fn publish_waiting(
        &self,
        world: &admission::World,
        ledger: &crate::gateway::quota::Ledger,
        queue: &[Pending],
        batch: &admission::Batch,
        now: DateTime<Utc>,
    ) {
        // Explanations for readers: positions each pass, estimates at most every 2 s.
        let waiting_names: std::collections::HashSet<&str> = batch.waiting.iter().map(|(n, _)| n.as_str()).collect();
        let mut view = self.queue.write().await;
        // New arrivals get their estimate within a quarter second.
        let arrived = waiting_names.iter().any(|n| !view.waiting.contains_key(*n));
        let age = view.computed.map(|c| c.elapsed());
        let stale = age.is_none_or(|a| a > Duration::from_secs(2) || (arrived && a > Duration::from_millis(250)));
        if stale
            || view.waiting.keys().any(|k| !waiting_names.contains(k.as_str()))
            || view.waiting.len() != batch.waiting.len()
        {
            let explained = if stale {
                admission::explain(&world, &ledger, &queue, &batch.waiting, now)
            } else {
                let mut w = admission::explain_positions(&queue, &batch.waiting);
                for (n, x) in w.iter_mut() {
                    x.estimate = view.waiting.get(n).and_then(|o| o.estimate);
                }
                w
            };
            // Only the teams whose waiting work reads differently hear of it.
            let mut moved: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
            for (n, w) in &explained {
                if view.waiting.get(n) != Some(w) {
                    moved.insert(team_of_record(n));
                }
            }
            for n in view.waiting.keys().filter(|n| !explained.contains_key(*n)) {
                moved.insert(team_of_record(n));
            }
            view.waiting = explained;
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
            if !moved.is_empty() {
                self.team_changes.send_modify(|m| {
                    for t in moved {
                        let n = m.entry(t).or_default();
                        *n = n.wrapping_add(1);
                    }
                });
            }
            if stale {
                view.computed = Some(Instant::now());
            }
        }
        view.queued = batch.waiting.len();
        drop(view);
    }

    /// Holds each team's drift in `ledger` as a reservation of its own, for
    /// one decision (taken out again before the ledger is written).
    pub(super) async fn hold_drift(&self, ledger: &mut crate::gateway::quota::Ledger, now: DateTime<Utc>) {
        self.measure_drift(ledger).await;
        let drift = self.drift.read().await.clone();
        for (team, amount) in drift.iter().filter(|(_, a)| !a.is_zero()) {
            ledger.reservations.insert(
                drift_key(team),
                crate::gateway::quota::Reservation {
                    team: team.clone(),
                    tier: crate::workloads::Tier::OnDemand,
                    priority: i32::MAX,
                    amount: *amount,
                    admitted_at: now,
                    expected_end: None,
                },
            );
        }
    }

    /// Deletes a cancelled workload from every member again and says what
    /// is still there (the workload, its pods that have not ended), member
    /// by member; None once every member answers that nothing is left. A
    /// member that cannot be asked counts as still holding it.
    async fn still_on_members(&self, s: &Submission) -> Option<String> {
        let kind = s.spec.kind.as_str();
        let name = s.spec.workload_name.as_str();
        let selector = format!("pinfleet.dev/kind={kind},pinfleet.dev/name={name}");
        let mut left = Vec::new();
        for m in &self.members {
            let api = workload_api(&m.client, kind, &s.spec.team);
            let workload = match api.delete(name, &Default::default()).await {
                Ok(_) => true,
                Err(kube::Error::Api(a)) if a.code == 404 => false,
                Err(e) => {
                    left.push(format!("{}: not reachable ({e})", m.name));
                    continue;
                }
            };
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(m.client.clone(), &s.spec.team);
            let running = match pods.list(&kube::api::ListParams::default().labels(&selector)).await {
                Ok(l) => l
                    .items
                    .iter()
                    .filter(|p| {
                        !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
                    })
                    .count(),
                Err(e) => {
                    left.push(format!("{}: its pods cannot be listed ({e})", m.name));
                    continue;
                }
            };
            match (workload, running) {
                (false, 0) => {}
                (true, 0) => left.push(format!("{}: the workload", m.name)),
                (w, n) => left.push(format!(
                    "{}: {}{n} pod{} still running",
                    m.name,
                    if w { "the workload and " } else { "" },
                    if n == 1 { "" } else { "s" }
                )),
            }
        }
        (!left.is_empty()).then(|| left.join("; "))
    }

    /// Migrates the records of the previous release's form (the workload
    /// in `spec.workload`, no body), before anything is admitted or placed:
    /// writes each one's SubmissionBody from it (owned by the record), then
    /// patches its spec (kind, workloadName, namespace, bodyBytes; the
    /// `workload` removed). Finished records are migrated the same way (so
    /// describe still shows what ran). A migration stopped between the two
    /// writes is finished by the next pass: a body already there is kept
    /// when it is the record's. A record whose digest is not its workload's
    /// (or whose body is not its own) fails, saying where, and is not
    /// placed; one already placed is removed from the members. Returns how
    /// many records were migrated.
    pub async fn migrate_once(&self) -> Result<usize> {
        let ns = &self.config.namespace;
        let bodies: Api<records::SubmissionBody> = Api::namespaced(self.host.clone(), ns);
        let mut migrated = 0usize;
        for s in self.all() {
            let Some(migration) = records::migration_of(&s) else { continue };
            let name = s.metadata.name.clone().unwrap_or_default();
            let refused = match migration {
                Err(why) => Some(why),
                Ok((body, patch)) => {
                    let refused = match bodies.create(&PostParams::default(), &body).await {
                        Ok(_) => None,
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            let there = bodies
                                .get(&name)
                                .await
                                .with_context(|| format!("reading SubmissionBody {ns}/{name}"))?;
                            // Judged as the migrated record will be (this release's digest).
                            let mut migrated = (*s).clone();
                            migrated.spec.digest.clone_from(&body.spec.digest);
                            records::body_refused(&migrated, &there)
                        }
                        Err(e) => return Err(e).with_context(|| format!("writing SubmissionBody {ns}/{name}")),
                    };
                    if refused.is_none() {
                        // The body is there: the record becomes the current form.
                        subs(&self.host, ns)
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                            .with_context(|| format!("migrating Submission {ns}/{name}"))?;
                        migrated = migrated.saturating_add(1);
                    }
                    refused
                }
            };
            if let Some(why) = refused {
                if phase(&s).done() {
                    continue;
                }
                tracing::warn!("migrating {name}: {why}");
                if phase(&s).holds() {
                    let mut placed = (*s).clone();
                    let w = s.spec.workload.clone().unwrap_or_default();
                    placed.spec.kind = w["kind"].as_str().unwrap_or_default().into();
                    placed.spec.workload_name = w["metadata"]["name"].as_str().unwrap_or_default().into();
                    self.remove_from_members(&placed).await;
                }
                let now = Utc::now();
                self.set_status(&name, |st| {
                    st.phase = Phase::Failed;
                    st.finished_at = Some(now);
                    st.message = Some(why);
                })
                .await?;
            }
        }
        Ok(migrated)
    }

    /// The admitted submissions to place (a record of the previous form
    /// waits for its migration).
    fn to_place(&self) -> Vec<Arc<Submission>> {
        self.all()
            .into_iter()
            .filter(|s| phase(s) == Phase::Admitted && !s.spec.cancel && s.spec.workload.is_none())
            .collect()
    }

    /// Places every admitted submission on the members and writes it there.
    /// What each member already holds of placed work, in all and on each
    /// node (its pods packed as placement packed them, each onto the
    /// nodes its terms reach).
    #[allow(clippy::type_complexity)]
    fn held_by_placed(
        &self,
        views: &[MemberView],
        metas: &HashMap<String, Vec<Value>>,
    ) -> (HashMap<String, Amount>, HashMap<String, Vec<packing::Node>>) {
        let mut used: HashMap<String, Amount> = HashMap::new();
        let mut nodes: HashMap<String, Vec<packing::Node>> =
            views.iter().map(|v| (v.name.clone(), v.nodes.iter().map(|(_, n)| *n).collect())).collect();
        let no_meta: Vec<Value> = Vec::new();
        for s in self.all() {
            let p = phase(&s);
            if !(p == Phase::Placed || p == Phase::Running) {
                continue;
            }
            let per = per_pod(&s.spec);
            let whole = s.spec.kind != "PinterestService";
            for part in s.status.as_ref().map(|st| st.placement.clone()).unwrap_or_default() {
                if let Some(n) = nodes.get_mut(&part.cluster) {
                    let held = if whole {
                        shapes(&s.spec)
                    } else {
                        vec![packing::Shape { pods: u64::from(part.replicas), per_pod: per }]
                    };
                    packing::occupy_where(n, &held, &reach(&s.spec, metas.get(&part.cluster).unwrap_or(&no_meta)));
                }
                let e = used.entry(part.cluster).or_default();
                *e = e.plus(per.times(u64::from(part.replicas)));
            }
        }
        (used, nodes)
    }

    pub async fn place_once(&self) -> Result<usize> {
        let views = self.member_views().await;
        let admitted = self.to_place();
        if admitted.is_empty() {
            return Ok(0);
        }
        // What each member already holds of placed work, in all and on
        // each node (its pods packed as placement packed them).
        let metas: HashMap<String, Vec<Value>> = views.iter().map(|v| (v.name.clone(), v.node_meta.clone())).collect();
        let no_meta: Vec<Value> = Vec::new();
        let meta_of = |m: &str| metas.get(m).unwrap_or(&no_meta);
        let (mut used, mut nodes) = self.held_by_placed(&views, &metas);
        let mut placed: usize = 0;
        for s in admitted {
            let name = s.metadata.name.clone().unwrap_or_default();
            let per = per_pod(&s.spec);
            let kind = s.spec.kind.clone();
            let divisible = kind == "PinterestService";
            let total = if divisible { s.spec.demand.pods as u32 } else { 1 };
            let unit = if divisible { per } else { s.spec.demand };
            let gang_shapes = shapes(&s.spec);
            let plain = !quota::RESOURCES.iter().any(|r| r.is_accelerator() && s.spec.demand.get(*r) > 0);
            let mut unfit: Vec<String> = Vec::new();
            let members: Vec<PlacementMember> = self
                .members
                .iter()
                .map(|m| {
                    let v = views.iter().find(|v| v.name == m.name);
                    // Work that asks for no accelerator has no room on
                    // tainted (GPU) nodes: their cpu and memory are not its.
                    let room = v.map(|v| if plain { v.allocatable.minus(v.tainted) } else { v.allocatable });
                    let free = room.unwrap_or_default().minus(used.get(&m.name).copied().unwrap_or_default());
                    let mut fits = quota::RESOURCES
                        .iter()
                        .filter(|r| unit.get(**r) > 0)
                        .map(|r| free.get(*r).checked_div(unit.get(*r)).unwrap_or(u64::MAX))
                        .min()
                        .unwrap_or(u64::from(u32::MAX));
                    // Each pod on one node, all it asks there (cpu and
                    // memory beside its devices): a member's total is not enough.
                    // Only onto the nodes its node selector and affinity reach.
                    let on_nodes = nodes.get(&m.name).cloned().unwrap_or_default();
                    let may = reach(&s.spec, meta_of(&m.name));
                    if divisible {
                        fits = fits.min(packing::count_where(&on_nodes, &per, &|n| may(0, n)));
                    } else if fits > 0 {
                        if let Err(u) = packing::pack_where(&mut on_nodes.clone(), &gang_shapes, &may) {
                            unfit.push(format!("{}: {}", m.name, u.message()));
                            fits = 0;
                        }
                    }
                    PlacementMember {
                        name: m.name.clone(),
                        weight: m.weight,
                        labels: m.labels.clone(),
                        taints: vec![],
                        max_share: None,
                        capacity: Some(fits.min(u64::from(u32::MAX)) as u32),
                        healthy: v.is_some_and(|v| v.reachable),
                        current: 0,
                    }
                })
                .collect();
            let policy = PlacementPolicy {
                division: if divisible { Division::Capacity } else { Division::Aggregated },
                ..Default::default()
            };
            let shares = match placement::place(&name, total, &policy, &members) {
                Ok(s) => s,
                Err(e) => {
                    let per_node = if unfit.is_empty() { String::new() } else { format!(" ({})", unfit.join("; ")) };
                    let message = format!("waiting for room on the members: {e}{per_node}");
                    if s.status.as_ref().and_then(|st| st.message.as_ref()) != Some(&message) {
                        self.set_status(&name, |st| st.message = Some(message.clone())).await?;
                    }
                    continue;
                }
            };
            // The workload itself, read only now, from its body.
            let Some(body) = self.body_or_wait(&s, &name).await? else { continue };
            let mut parts = Vec::new();
            let mut failed = None;
            for sh in shares.iter().filter(|s| s.replicas > 0) {
                let m = self.members.iter().find(|m| m.name == sh.cluster).expect("a member placement chose");
                let mut w = body.clone();
                if divisible {
                    w["spec"]["replicas"] = json!(sh.replicas);
                }
                if let Err(e) =
                    write_to_member(m, &s.spec.team, self.config.policy.pod_security.level(&s.spec.team), &name, &w)
                        .await
                {
                    failed = Some(format!("writing to {}: {e:#}", m.name));
                    break;
                }
                let e = used.entry(m.name.clone()).or_default();
                *e = e.plus(if divisible { per.times(u64::from(sh.replicas)) } else { s.spec.demand });
                if let Some(n) = nodes.get_mut(&m.name) {
                    let held = if divisible {
                        vec![packing::Shape { pods: u64::from(sh.replicas), per_pod: per }]
                    } else {
                        gang_shapes.clone()
                    };
                    packing::occupy_where(n, &held, &reach(&s.spec, meta_of(&m.name)));
                }
                parts.push(MemberPart {
                    cluster: sh.cluster.clone(),
                    replicas: if divisible { sh.replicas } else { s.spec.demand.pods as u32 },
                    reason: sh.reason.clone(),
                    ..Default::default()
                });
            }
            if let Some(f) = failed {
                self.set_status(&name, |st| st.message = Some(f)).await?;
                continue;
            }
            let now = Utc::now();
            let admitted_at = s.status.as_ref().and_then(|st| st.admitted_at);
            self.set_status(&name, |st| {
                st.phase = Phase::Placed;
                st.placed_at = Some(now);
                st.placement = parts;
                st.message = None;
            })
            .await?;
            if let Some(a) = admitted_at {
                self.metrics.stage("placed", now.signed_duration_since(a).num_milliseconds() as f64 / 1000.0);
            }
            publish_placement_decision(&self.host, &self.config.namespace, &s, &shares).await;
            placed = placed.saturating_add(1);
        }
        Ok(placed)
    }

    /// An admitted submission's workload, from its body. A body not there
    /// yet is waited for [`records::BODY_GRACE`] (it is written just after
    /// the record), then the submission fails; a body that may not be
    /// placed (changed after submit) fails it at once, saying where. None
    /// when it is not placed this pass.
    async fn body_or_wait(&self, s: &Submission, name: &str) -> Result<Option<Value>> {
        let now = Utc::now();
        let failed = |why: String| {
            tracing::warn!("placement: {name}: {why}");
            self.set_status(name, move |st| {
                st.phase = Phase::Failed;
                st.finished_at = Some(now);
                st.message = Some(why);
            })
        };
        match self.body(s).await {
            Ok(Some(w)) => Ok(Some(w)),
            Err(why) => {
                failed(why).await?;
                Ok(None)
            }
            Ok(None) => {
                let born = s.metadata.creation_timestamp.as_ref().map(ts).unwrap_or(now);
                let ns = &self.config.namespace;
                if now.signed_duration_since(born) > records::BODY_GRACE {
                    failed(format!(
                        "SubmissionBody {ns}/{name} is missing: the workload cannot be placed (submit it again with the same id)"
                    ))
                    .await?;
                } else {
                    let message = format!("waiting for its body (SubmissionBody {ns}/{name})");
                    if s.status.as_ref().and_then(|st| st.message.as_ref()) != Some(&message) {
                        self.set_status(name, |st| st.message = Some(message)).await?;
                    }
                }
                Ok(None)
            }
        }
    }

    /// Reads every placed submission's workload on its members and rolls
    /// their status up.
    pub async fn rollup_once(&self) -> Result<()> {
        let now = Utc::now();
        for s in self.all() {
            let p = phase(&s);
            // A record of the previous form is rolled up once migrated
            // (its kind and workload name are set from its workload).
            if !(p == Phase::Placed || p == Phase::Running) || s.spec.cancel || s.spec.workload.is_some() {
                continue;
            }
            let name = s.metadata.name.clone().unwrap_or_default();
            let kind = s.spec.kind.as_str();
            let wname = s.spec.workload_name.as_str();
            let mut parts = s.status.as_ref().map(|st| st.placement.clone()).unwrap_or_default();
            let mut pods_created = true;
            let mut all_ready = true;
            let mut all_succeeded = true;
            let mut any_failed = None;
            for part in parts.iter_mut() {
                let Some(m) = self.members.iter().find(|m| m.name == part.cluster) else { continue };
                let before = part.clone();
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    workload_api(&m.client, kind, &s.spec.team).get_opt(wname),
                )
                .await
                {
                    Ok(Ok(Some(o))) => {
                        part.runs = serde_json::to_value(&o).ok().and_then(|v| crate::delivery::members::delivered(&v));
                        let st = o.data.get("status").cloned().unwrap_or(Value::Null);
                        let cond = |t: &str| {
                            st.get("conditions")
                                .and_then(Value::as_array)
                                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                                .cloned()
                        };
                        let ready = cond("Ready").is_some_and(|c| c["status"] == "True");
                        let succeeded = cond("Succeeded");
                        let created = st.get("replicas").and_then(Value::as_i64).unwrap_or(0) > 0
                            || st.pointer("/shards/active").and_then(Value::as_i64).unwrap_or(0) > 0
                            || st.pointer("/shards/succeeded").and_then(Value::as_i64).unwrap_or(0) > 0
                            || ready
                            || succeeded.is_some();
                        pods_created &= created;
                        all_ready &= ready;
                        let succ = succeeded.as_ref().is_some_and(|c| c["status"] == "True");
                        all_succeeded &= succ;
                        if succeeded.as_ref().is_some_and(|c| c["status"] == "False" && c["reason"] == "Failed") {
                            any_failed = Some(format!(
                                "{}: {}",
                                part.cluster,
                                succeeded.as_ref().and_then(|c| c["message"].as_str()).unwrap_or("failed")
                            ));
                        }
                        part.state = Some(
                            if succ {
                                "Succeeded"
                            } else if ready {
                                "Ready"
                            } else if created {
                                "Progressing"
                            } else {
                                "Pending"
                            }
                            .into(),
                        );
                        part.ready_replicas = st.get("readyReplicas").and_then(Value::as_i64).map(|r| r as i32);
                        part.message =
                            cond("Ready").or(succeeded).and_then(|c| c["message"].as_str().map(str::to_string));
                        part.observed_at = Some(now);
                    }
                    Ok(Ok(None)) => {
                        pods_created = false;
                        all_ready = false;
                        all_succeeded = false;
                        part.state = Some("Missing".into());
                        part.message = Some("the workload is not on this member (deleted by hand?)".into());
                        part.observed_at = Some(now);
                    }
                    _ => {
                        all_ready = false;
                        all_succeeded = false;
                        pods_created = false;
                        // Stale since it was last seen, not empty.
                        let since = part.observed_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "never".into());
                        part.state = Some("Unreachable".into());
                        part.message = Some(format!("not reached; last seen {since}"));
                    }
                }
                // Observed again with nothing new: the record keeps its time
                // (a status written only when it changes: a team's live
                // stream hears of a change, not of every pass).
                let mut same = part.clone();
                same.observed_at = before.observed_at;
                if same == before {
                    part.observed_at = before.observed_at;
                }
            }
            let placed_at = s.status.as_ref().and_then(|st| st.placed_at);
            let had_pods = s.status.as_ref().and_then(|st| st.pods_created_at).is_some();
            let batch = kind != "PinterestService" && kind != "PinterestStatefulSet";
            self.set_status(&name, |st| {
                st.placement = parts;
                if pods_created && st.pods_created_at.is_none() {
                    st.pods_created_at = Some(now);
                }
                if let Some(f) = &any_failed {
                    st.phase = Phase::Failed;
                    st.message = Some(f.clone());
                    st.finished_at = Some(now);
                } else if batch && all_succeeded {
                    st.phase = Phase::Succeeded;
                    st.finished_at = Some(now);
                } else if pods_created && (all_ready || batch) {
                    st.phase = Phase::Running;
                }
            })
            .await?;
            if pods_created && !had_pods {
                if let Some(p) = placed_at {
                    self.metrics.stage("pods_created", now.signed_duration_since(p).num_milliseconds() as f64 / 1000.0);
                }
            }
        }
        Ok(())
    }

    /// Deletes the records of submissions finished longer ago than
    /// [`records::KEEP_FINISHED`]; how many.
    pub async fn collect_once(&self, now: DateTime<Utc>) -> Result<usize> {
        let api: Api<Submission> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let mut collected = 0usize;
        for s in self.all() {
            let st = s.status.as_ref();
            let Some(done_at) = st.and_then(|st| st.finished_at.or(st.accepted_at)) else { continue };
            if !phase(&s).done() || now.signed_duration_since(done_at) < records::KEEP_FINISHED {
                continue;
            }
            let name = s.metadata.name.clone().unwrap_or_default();
            api.delete(&name, &DeleteParams::default()).await.map(|_| ()).or_else(not_found_ok)?;
            collected = collected.saturating_add(1);
        }
        if collected > 0 {
            tracing::info!("gateway: collected {collected} finished submission record(s)");
        }
        Ok(collected)
    }

    /// The leader's loop: admit, place, roll up; woken by submissions or
    /// every interval. A pass that panics or overruns [`PASS_DEADLINE`]
    /// ends the loop: the replica says so on `/readyz` and the election
    /// gives up the Lease (a leader that cannot admit must not hold it).
    pub async fn lead(self: Arc<Self>) {
        use futures::FutureExt;
        let mut last_members = Instant::now();
        loop {
            let pass = async {
                if last_members.elapsed() > self.config.member_refresh {
                    self.refresh_members().await;
                    last_members = Instant::now();
                }
                match self.migrate_once().await {
                    Ok(0) => {}
                    Ok(n) => {
                        // Admitted once the cache holds their new form: soon.
                        tracing::info!("gateway: migrated {n} record(s) of the previous form");
                        self.wake.notify_one();
                    }
                    Err(e) => tracing::warn!("migrating records of the previous form: {e:#}"),
                }
                if let Err(e) = self.admit_once().await {
                    tracing::warn!("admission pass: {e:#}");
                }
                if let Err(e) = self.place_once().await {
                    tracing::warn!("placement pass: {e:#}");
                }
                if let Err(e) = self.rollup_once().await {
                    tracing::warn!("status roll-up: {e:#}");
                }
                if let Err(e) = self.collect_once(Utc::now()).await {
                    tracing::warn!("collecting finished records: {e:#}");
                }
            };
            let why = match tokio::time::timeout(PASS_DEADLINE, std::panic::AssertUnwindSafe(pass).catch_unwind()).await
            {
                Ok(Ok(())) => None,
                Ok(Err(panic)) => Some(format!("the leader's pass panicked: {}", panic_message(&*panic))),
                Err(_) => Some(format!("the leader's pass did not complete within {PASS_DEADLINE:?}")),
            };
            if let Some(why) = why {
                tracing::error!("{why}; giving up the Lease");
                if let Ok(mut u) = self.unready.lock() {
                    *u = Some(why);
                }
                return;
            }
            tokio::select! {
                _ = self.wake.notified() => {},
                _ = tokio::time::sleep(self.config.interval) => {},
            }
        }
    }

    /// Followers keep their member view fresh (every member refresh),
    /// their caches warm, and the views readers are answered with (the
    /// queue's reasons, each team's drift) computed as the leader computes
    /// them, every interval ([`Self::observe_once`]): a reader sent to a
    /// standby is answered as the leader would answer.
    pub async fn follow(self: Arc<Self>) {
        let mut members_read: Option<Instant> = None;
        loop {
            if !self.leading.load(Ordering::Relaxed) {
                if members_read.is_none_or(|t| t.elapsed() >= self.config.member_refresh) {
                    self.refresh_members().await;
                    members_read = Some(Instant::now());
                }
                if let Err(e) = self.observe_once().await {
                    tracing::warn!("standby views: {e:#}");
                }
            }
            tokio::time::sleep(self.config.interval).await;
        }
    }

    /// Runs until `stop` turns true: elected on a Lease in the gateway's
    /// namespace; stopping ends the leader's work and releases the Lease,
    /// so a standby takes over at once rather than when it expires.
    pub async fn run(self: Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        let lock = crate::controller::leader::LeaseLock {
            api: Api::namespaced(self.host.clone(), &self.config.namespace),
            name: "pinfleet-gateway".into(),
            identity: self.config.identity.clone(),
            lease_duration: self.config.lease_duration,
            renew_every: self.config.lease_duration.checked_div(3).unwrap_or_default(),
        };
        let me = self.clone();
        tokio::spawn(self.clone().follow());
        crate::controller::leader::run_elected(lock, self.leading.clone(), move || me.clone().lead(), stop).await;
    }
}

/// A release that sends a gang back to the queue ([`gang::Verdict::Evict`]).
fn evicted(why: &str) -> bool {
    why.starts_with("evicted")
}

/// Whether a pod is ready as a gang's pod must be (Running with its Ready
/// condition true, or Succeeded), or why not, from what the kubelet and
/// the scheduler wrote (`pod t-worker-1: Unschedulable: 0/2 nodes are
/// available: …`).
fn pod_readiness(p: &k8s_openapi::api::core::v1::Pod) -> std::result::Result<(), String> {
    let name = p.metadata.name.clone().unwrap_or_default();
    let st = p.status.clone().unwrap_or_default();
    let phase = st.phase.clone().unwrap_or_else(|| "Pending".into());
    let conditions = st.conditions.clone().unwrap_or_default();
    let ready = conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    if phase == "Succeeded" || (phase == "Running" && ready) {
        return Ok(());
    }
    if let Some(c) = conditions.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False") {
        return Err(format!(
            "pod {name}: {}: {}",
            c.reason.clone().unwrap_or_else(|| "NotScheduled".into()),
            c.message.clone().unwrap_or_default()
        ));
    }
    let waiting =
        st.container_statuses.unwrap_or_default().into_iter().find_map(|c| c.state.and_then(|s| s.waiting)).map(|w| {
            format!("{}{}", w.reason.unwrap_or_default(), w.message.map(|m| format!(": {m}")).unwrap_or_default())
        });
    Err(format!("pod {name}: {phase}{}", waiting.map(|w| format!(", {w}")).unwrap_or_default()))
}

/// Ledger keys of drift held for a decision (a record's name has no ':').
const DRIFT_PREFIX: &str = "drift:";

fn drift_key(team: &str) -> String {
    format!("{DRIFT_PREFIX}{team}")
}

/// How often the members are measured for drift: a list of pods per team
/// and member, so not on every pass.
pub const DRIFT_EVERY: Duration = Duration::from_secs(5);

/// How long one leader pass (admit, place, roll up) may take before the
/// leader gives up: many times a pass's worst seen at 3,000 records.
pub const PASS_DEADLINE: Duration = Duration::from_secs(120);

/// What a panic said.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// [`admission::decide`] that no one record can stop: when the decision
/// panics, each queued record is decided alone to find the ones that
/// cannot be evaluated; they are taken out of the queue and returned with
/// why, and the rest is decided without them.
pub(super) fn decide_shielded(
    world: &admission::World,
    ledger: &mut crate::gateway::quota::Ledger,
    queue: &mut Vec<Pending>,
    now: DateTime<Utc>,
) -> Result<(admission::Batch, Vec<(String, String)>)> {
    shielded(admission::decide, world, ledger, queue, now)
}

type Decide = fn(&admission::World, &mut crate::gateway::quota::Ledger, &[Pending], DateTime<Utc>) -> admission::Batch;

/// [`decide_shielded`] over any decision (the tests give one that panics).
fn shielded(
    decide: Decide,
    world: &admission::World,
    ledger: &mut crate::gateway::quota::Ledger,
    queue: &mut Vec<Pending>,
    now: DateTime<Utc>,
) -> Result<(admission::Batch, Vec<(String, String)>)> {
    let attempt = |queue: &[Pending], ledger: &crate::gateway::quota::Ledger| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut l = ledger.clone();
            let b = decide(world, &mut l, queue, now);
            (b, l)
        }))
    };
    let mut set_aside = Vec::new();
    for _ in 0..2 {
        match attempt(queue, ledger) {
            Ok((b, l)) => {
                *ledger = l;
                return Ok((b, set_aside));
            }
            Err(_) => {
                let mut culprits = Vec::new();
                for p in queue.iter() {
                    if let Err(panic) = attempt(std::slice::from_ref(p), ledger) {
                        culprits.push((p.name.clone(), panic_message(&*panic)));
                    }
                }
                queue.retain(|p| !culprits.iter().any(|(n, _)| n == &p.name));
                set_aside.extend(culprits);
            }
        }
    }
    anyhow::bail!("the admission pass cannot be decided even without the records set aside")
}

/// Whether pods of shape `si` of a submission may land on node `ni` of a
/// member whose nodes are `meta` (names and labels): the shape's node
/// selector and required node affinity, as the scheduler reads them. A
/// shape without terms (or a record from before they were kept) reaches
/// every node.
fn reach<'a>(spec: &'a SubmissionSpec, meta: &'a [Value]) -> impl Fn(usize, usize) -> bool + 'a {
    move |si, ni| match (spec.shapes.get(si).and_then(|s| s.scheduling.as_ref()), meta.get(ni)) {
        (Some(pod), Some(node)) => crate::kube::scheduling::affinity_ok(pod, node),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::quota::{Ledger, Limits, Quota};

    /// A gang's pod is ready when Running with its Ready condition, or
    /// done; otherwise the scheduler's or the kubelet's words say why.
    #[test]
    fn a_pods_readiness_is_read_as_the_scheduler_and_the_kubelet_wrote_it() {
        let pod = |status: Value| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(json!({"metadata": {"name": "t-worker-0"}, "status": status})).unwrap()
        };
        let cases = [
            (json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}), Ok(())),
            (json!({"phase": "Succeeded"}), Ok(())),
            (
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}),
                Err("pod t-worker-0: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
                    .to_string()),
            ),
            (
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}], "containerStatuses": [{"name": "train", "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]}),
                Err("pod t-worker-0: Pending, ImagePullBackOff: Back-off pulling image \"x\"".to_string()),
            ),
            (
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
                Err("pod t-worker-0: Running".to_string()),
            ),
            (json!({}), Err("pod t-worker-0: Pending".to_string())),
        ];
        for (status, want) in cases {
            assert_eq!(pod_readiness(&pod(status.clone())), want, "{status}");
        }
    }

    /// No record stops the pass: a decision that panics on one record
    /// sets that record aside (with what the panic said) and decides the
    /// rest; a decision that panics whatever it is given is an error, not
    /// a dead leader.
    #[test]
    fn a_record_that_cannot_be_evaluated_is_set_aside_and_the_rest_admitted() {
        let amount = |c: u64| Amount::new(c * 1000, c << 30, c);
        let q = Quota {
            team: "a".into(),
            cohort: "c".into(),
            tiers: [(
                crate::gateway::quota::tier_name(crate::workloads::Tier::OnDemand),
                Limits { guaranteed: amount(10), max: amount(10) },
            )]
            .into_iter()
            .collect(),
            max_workloads: None,
            pods_per_minute: None,
        };
        let world = admission::World::new([("a".to_string(), q)].into_iter().collect(), amount(100));
        let p = |name: &str| Pending {
            name: name.into(),
            team: "a".into(),
            tier: crate::workloads::Tier::OnDemand,
            priority: 0,
            created: Utc::now(),
            demand: amount(1),
            expected_duration: None,
            backoff: None,
        };
        fn poisoned(w: &admission::World, l: &mut Ledger, q: &[Pending], now: DateTime<Utc>) -> admission::Batch {
            if q.iter().any(|p| p.name == "poison") {
                panic!("overflow evaluating poison");
            }
            admission::decide(w, l, q, now)
        }
        let mut ledger = Ledger::default();
        let mut queue = vec![p("one"), p("poison"), p("two")];
        let (batch, aside) = shielded(poisoned, &world, &mut ledger, &mut queue, Utc::now()).unwrap();
        assert_eq!(aside, [("poison".to_string(), "overflow evaluating poison".to_string())]);
        let admitted: Vec<&str> = batch.admitted.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(admitted, ["one", "two"]);
        assert_eq!(ledger.reservations.len(), 2);
        fn always(_: &admission::World, _: &mut Ledger, _: &[Pending], _: DateTime<Utc>) -> admission::Batch {
            panic!("broken")
        }
        let mut queue = vec![p("one")];
        assert!(shielded(always, &world, &mut Ledger::default(), &mut queue, Utc::now()).is_err());
    }
}
