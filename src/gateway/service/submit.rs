//! A submission's way in: the intake's checks, the priority class, the
//! images (`images`), a retry answered by the first record, the dry run on
//! the members (`dry_run`), whether the fleet and the team's quota can
//! ever hold it and the team's open submissions; then what admission would
//! answer (a dry run) or the record, queued, and the leader woken.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};
use chrono::Utc;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::{json, Value};

use super::members::common_overheads;
use super::{expected, phase, subs, MemberView, Service};
use crate::gateway::admission::{self, Pending, Waiting, World};
use crate::gateway::intake::{self, Caller, Problem};
use crate::gateway::records::{self, Phase, Submission, SubmissionSpec};

/// The answer to a submission.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub id: String,
    pub name: String,
    pub team: String,
    pub dry_run: bool,
    /// accepted (queued), admitted, rejected; for a retry, the first answer's.
    pub outcome: String,
    pub phase: Phase,
    pub demand: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// What admission would do now (dry run) or did: admitted, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// A retry of an earlier submission with the same id.
    pub retry: bool,
}

impl Service {
    /// Checks a submission through every layer and, unless a dry run,
    /// records it. A retried id returns the first answer.
    pub async fn submit(
        &self,
        caller: &Caller,
        id: &str,
        workload: &Value,
        priority_class: Option<&str>,
        dry_run: bool,
    ) -> Result<(u16, Decision)> {
        let started = Instant::now();
        let bad = |problems: Vec<Problem>, team: &str, name: String| rejected(id, dry_run, problems, team, name);
        if let Err(p) = intake::check_id(id) {
            let team = workload.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default();
            self.audit(caller, "submit", team, "", 422, &p.message).await;
            return Ok((422, bad(vec![p], team, String::new())));
        }
        let views = self.member_views().await;
        let reachable: Vec<&MemberView> = views.iter().filter(|v| v.reachable).collect();
        let profiles: Vec<BTreeMap<String, String>> = reachable.iter().filter_map(|v| v.profiles.clone()).collect();
        let minors: Vec<u32> = reachable.iter().filter_map(|v| v.minor).collect();
        let overheads = common_overheads(&reachable);
        let team = workload.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default();
        let gpu_products = self.gpu_products_of(team).await;
        let members = intake::Members {
            profiles: &profiles,
            minors: &minors,
            overheads: overheads.as_ref(),
            gpu_products: &gpu_products,
        };
        let intake = match intake::check(workload, caller, &self.config.policy, &members) {
            Ok(i) => i,
            Err(p) => {
                let team = workload.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default();
                self.audit(caller, "submit", &format!("{team}/{id}"), "", 422, &problems_text(&p)).await;
                return Ok((422, bad(p, team, String::new())));
            }
        };
        let class = match self.config.policy.class(priority_class, &intake.team, intake.tier, caller) {
            Ok(c) => c,
            Err(p) => {
                self.audit(caller, "submit", &format!("{}/{id}", intake.team), &intake.artifact, 422, &p.message).await;
                return Ok((422, bad(vec![p], &intake.team, String::new())));
            }
        };
        let priority = class.value;
        let mut intake = intake;
        let verdicts = match self.provenance(caller, id, &mut intake).await {
            Ok(v) => v,
            Err(p) => {
                self.audit(
                    caller,
                    "submit",
                    &format!("{}/{id}", intake.team),
                    &intake.artifact,
                    422,
                    &problems_text(&p),
                )
                .await;
                return Ok((422, bad(p, &intake.team, String::new())));
            }
        };
        if let Err((code, p)) = self.not_marked_bad(&intake).await {
            self.audit(caller, "submit", &format!("{}/{id}", intake.team), &intake.artifact, code, &problems_text(&p))
                .await;
            return Ok((code, bad(p, &intake.team, String::new())));
        }
        let name = records::submission_name(&intake.team, id);
        let digest = records::digest(&intake.workload);
        // A retry: the record the first attempt made answers.
        if let Some(existing) = subs(&self.host, &self.config.namespace).get_opt(&name).await? {
            if existing.spec.digest != digest {
                let p = Problem::new(
                    "request",
                    "id",
                    format!("id {id:?} was used for another workload of team {}: choose a new id", intake.team),
                );
                return Ok((409, bad(vec![p], &intake.team, name)));
            }
            if !dry_run {
                // The first attempt may have stopped before its body was written.
                self.write_body(&existing, &intake.workload).await?;
            }
            let mut d = self.decision_of(&existing, dry_run).await;
            d.retry = true;
            return Ok((200, d));
        }
        let mut problems = Vec::new();
        // Layer 3: a server-side dry run where it could land.
        problems.extend(self.dry_run(&intake.workload, &views).await);
        // Layer 4: can the fleet (and the team's quota) ever hold it.
        let world = self.ever_held(&intake, &views, &mut problems).await?;
        if !problems.is_empty() {
            self.audit(caller, "submit", &name, &intake.artifact, 422, &problems_text(&problems)).await;
            return Ok((422, bad(problems, &intake.team, name)));
        }
        let spec = spec_of(id, caller, &intake, priority, &class.name, digest, verdicts);
        // The record every status change rewrites stays small: what makes
        // it large (many images, long names) is refused here.
        if let Some(why) = too_large(&spec) {
            self.audit(caller, "submit", &name, &intake.artifact, 422, &why).await;
            return Ok((422, bad(vec![Problem::new("request", "workload", why)], &intake.team, name)));
        }
        if dry_run {
            return Ok((200, self.would(&world, id, name, spec).await?));
        }
        let bytes =
            spec.body_bytes.saturating_add((records::SUBMISSION_SPEC_MAX + records::SUBMISSION_STATUS_MAX) as u64);
        let workload = format!("{}/{}", spec.kind, spec.workload_name);
        let collect = match self.open_one(&intake.team, &name, bytes, &workload) {
            Ok(collect) => collect,
            Err((code, why)) => {
                self.audit(caller, "submit", &name, &intake.artifact, code, &why).await;
                return Ok((code, bad(vec![Problem::new("request", "", why)], &intake.team, name)));
            }
        };
        // The team's oldest finished records go before their week is out:
        // what a team keeps on the host is capped in bytes, finished included.
        if !collect.is_empty() {
            let api: kube::Api<records::Submission> = kube::Api::namespaced(self.host.clone(), &self.config.namespace);
            for old in &collect {
                match api.delete(old, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        self.give_back(&intake.team, &name);
                        return Err(e).context("collecting the team's oldest finished submissions");
                    }
                }
            }
            tracing::info!(
                team = intake.team,
                "gateway: collected {} finished submission(s) early: the team's records are at their most bytes",
                collect.len()
            );
        }
        let recorded = self.record(caller, name.clone(), spec, &intake.workload, &intake.artifact, started).await;
        if !matches!(recorded, Ok((201, _))) {
            self.give_back(&intake.team, &name);
        }
        recorded
    }

    /// Takes a place among the team's open submissions for `name`, or
    /// answers how many it has when they are at the policy's most:
    /// the cache's open records and those this replica is writing (or wrote,
    /// not shown by the cache yet), under one lock, so concurrent
    /// submissions cannot pass the cap together.
    fn open_one(&self, team: &str, name: &str, bytes: u64, workload: &str) -> Result<Vec<String>, (u16, String)> {
        let all = self.all();
        let mine_cached: Vec<&Submission> = all.iter().map(|s| s.as_ref()).filter(|s| s.spec.team == team).collect();
        let cached: std::collections::HashSet<String> =
            mine_cached.iter().filter(|s| !phase(s).done()).filter_map(|s| s.metadata.name.clone()).collect();
        let mut opening = self.opening.lock().expect("opening");
        let mine = opening.entry(team.to_string()).or_default();
        // Shown by the cache now, or never will be (a minute on).
        let known: std::collections::HashSet<&str> =
            mine_cached.iter().filter_map(|s| s.metadata.name.as_deref()).collect();
        mine.retain(|n, (since, _, _)| {
            !known.contains(n.as_str()) && since.elapsed() < std::time::Duration::from_secs(60)
        });
        let open = cached.len().saturating_add(mine.len());
        if open >= self.config.policy.max_open() {
            return Err((
                429,
                format!(
                    "team {team} has {open} submissions not finished (at most {}): wait for some to finish, or cancel some",
                    self.config.policy.max_open()
                ),
            ));
        }
        // One open submission per workload of the team: two would share one
        // member object (cancelling one would remove the other's pods).
        let same = mine_cached
            .iter()
            .filter(|s| !phase(s).done() && s.metadata.name.as_deref() != Some(name))
            .find(|s| format!("{}/{}", s.spec.kind, s.spec.workload_name) == workload)
            .map(|s| s.spec.id.clone())
            .or_else(|| mine.iter().find(|(n, (_, _, w))| n.as_str() != name && w == workload).map(|(n, _)| n.clone()));
        if let Some(other) = same {
            return Err((
                409,
                format!(
                    "{workload} is already submitted by team {team} ({other}), not finished: cancel it, or wait for it to finish"
                ),
            ));
        }
        // What the team keeps on the host, in bytes, finished records included.
        let mut held: Vec<(String, u64, bool, Option<chrono::DateTime<chrono::Utc>>)> = mine_cached
            .iter()
            .map(|s| {
                let st = s.status.as_ref();
                let done_at = st.and_then(|st| st.finished_at.or(st.accepted_at));
                (s.metadata.name.clone().unwrap_or_default(), records::kept_bytes(s), !phase(s).done(), done_at)
            })
            .collect();
        held.extend(mine.iter().map(|(n, (_, b, _))| (n.clone(), *b, true, None)));
        let cap = self.config.policy.max_kept_bytes();
        let Some(collect) = records::make_room(&held, bytes, cap) else {
            let open_bytes: u64 = held.iter().filter(|h| h.2).map(|h| h.1).sum();
            return Err((
                429,
                format!(
                    "team {team}'s open submissions keep {} MiB on the gateway (at most {} MiB, finished ones included): wait for some to finish, or cancel some",
                    open_bytes >> 20,
                    cap >> 20
                ),
            ));
        };
        mine.insert(name.to_string(), (Instant::now(), bytes, workload.to_string()));
        Ok(collect)
    }

    /// Gives back a place [`Self::open_one`] took when nothing was written.
    fn give_back(&self, team: &str, name: &str) {
        if let Some(mine) = self.opening.lock().expect("opening").get_mut(team) {
            mine.remove(name);
        }
    }

    /// Layer 4 of the intake: whether the fleet and the team's quota can
    /// ever hold the workload (a quota that does not resolve, more than the
    /// quota's most, more of a flavor than any node or member has); what
    /// cannot is added to `problems`. Answers the world it judged against.
    async fn ever_held(
        &self,
        intake: &intake::Intake,
        views: &[MemberView],
        problems: &mut Vec<Problem>,
    ) -> Result<World> {
        let (world, broken) = self.world().await?;
        if let Some(errs) = broken.get(&intake.team) {
            problems.push(Problem::new(
                "capacity",
                "",
                format!("team {}'s quota does not resolve: {}", intake.team, errs.join("; ")),
            ));
        } else if let Some(why) = admission::never(&world, &intake.team, intake.tier, &intake.demand) {
            // An accelerator the team's quota does not hold is refused at
            // the field that asks for it; anything else past the team's
            // maximum, or past the whole fleet, at the count that asks too
            // much (the replicas, shards or parallelism of its pods).
            let over_max = intake.demand.over(
                &world.quotas.get(&intake.team).and_then(|q| q.limits(intake.tier)).map(|l| l.max).unwrap_or_default(),
            );
            let field = match over_max {
                Some(r) if r.is_accelerator() => {
                    intake::accelerator_field(intake, r).unwrap_or_else(|| intake::count_field(intake, r))
                }
                Some(r) => intake::count_field(intake, r),
                None => intake.demand.over(&world.fleet).map(|r| intake::count_field(intake, r)).unwrap_or_default(),
            };
            problems.push(Problem::new("capacity", field, why));
        } else if let Some(never) = crate::gateway::packing::never(
            &views.iter().map(MemberView::packing).collect::<Vec<_>>(),
            &shapes_of(intake)
                .iter()
                .map(|s| crate::gateway::packing::Shape { pods: s.pods, per_pod: s.per_pod })
                .collect::<Vec<_>>(),
            intake.kind != "PinterestService",
        ) {
            // More of a flavor than any node or any member holds, or a pod
            // that fits no node with its devices: never placed, so refused
            // now rather than queued for ever — at the field that asks (its
            // devices, or the pod template that asks the rest beside them).
            let field = match never.shape.and_then(|i| intake.sets.get(i)) {
                Some(set) => set.field.clone(),
                None => intake::accelerator_field(intake, never.resource).unwrap_or_default(),
            };
            problems.push(Problem::new("capacity", field, never.message));
        } else if let Some((set, carried)) = unreached(intake, views) {
            // Devices held to nodes no member has (a product's other
            // model, a zone without GPUs): admitted, it would hold its
            // quota for ever, Pending.
            problems.push(Problem::new(
                "capacity",
                set.field.clone(),
                format!(
                    "its nodeSelector and required node affinity match no node of the fleet it may run on (a pod without devices stays off GPU nodes; GPU products the nodes carry: {}): it can never be scheduled",
                    if carried.is_empty() { "none".to_string() } else { carried.join(", ") }
                ),
            ));
        }
        Ok(world)
    }

    /// The GPU products the team's quota holds (a training job that names
    /// none gets the first).
    async fn gpu_products_of(&self, team: &str) -> Vec<crate::workloads::demand::Flavor> {
        match self.world().await {
            Ok((world, _)) => {
                world.quotas.get(team).map(crate::gateway::quota::Quota::gpu_products).unwrap_or_default()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Exactly what admission would answer now, for a dry run.
    async fn would(&self, world: &admission::World, id: &str, name: String, spec: SubmissionSpec) -> Result<Decision> {
        let priority = spec.priority;
        // Exactly what admission would answer now.
        let (mut ledger, _) = self.read_ledger().await?;
        let mut queue: Vec<Pending> = self.queued().iter().map(|s| Self::pending_of(s)).collect();
        let me = Pending {
            name: name.clone(),
            team: spec.team.clone(),
            tier: spec.tier,
            priority,
            created: Utc::now(),
            demand: spec.demand,
            expected_duration: spec.expected_seconds.map(expected),
            backoff: None,
        };
        queue.push(me);
        admission::order(&mut queue);
        let now = Utc::now();
        // What the members run around the gateway is held, as the leader
        // holds it when it decides: a dry run answers as admission will.
        self.hold_drift(&mut ledger, now).await;
        let before = ledger.clone();
        let batch = admission::decide(&world, &mut ledger, &queue, now);
        let admitted = batch.admitted.iter().any(|(n, _)| *n == name);
        let waiting = if admitted {
            None
        } else {
            admission::explain(&world, &before, &queue, &batch.waiting, now).remove(&name)
        };
        Ok(Decision {
            id: id.to_string(),
            name,
            team: spec.team,
            dry_run: true,
            outcome: if admitted { "would be admitted" } else { "would wait" }.into(),
            phase: if admitted { Phase::Admitted } else { Phase::Queued },
            demand: spec.demand.show(),
            problems: vec![],
            waiting,
            retry: false,
        })
    }

    /// Records an accepted submission (a concurrent retry's record answers
    /// as a retry) and wakes the leader.
    async fn record(
        &self,
        caller: &Caller,
        name: String,
        spec: SubmissionSpec,
        workload: &Value,
        artifact: &str,
        started: Instant,
    ) -> Result<(u16, Decision)> {
        let team = spec.team.clone();
        let created_digest = spec.digest.clone();
        let mut obj = Submission::new(&name, spec);
        obj.metadata.namespace = Some(self.config.namespace.clone());
        obj.metadata.labels = Some([(records::TEAM_LABEL.to_string(), team)].into());
        let created = match subs(&self.host, &self.config.namespace).create(&PostParams::default(), &obj).await {
            Ok(c) => c,
            // A concurrent retry made it first: answer as a retry. Another
            // workload under the same id made it first: 409, as when the
            // two come one after the other.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = subs(&self.host, &self.config.namespace).get(&name).await?;
                if existing.spec.digest != created_digest {
                    let p = Problem::new(
                        "request",
                        "id",
                        format!(
                            "id {:?} was used for another workload of team {}: choose a new id",
                            existing.spec.id, existing.spec.team
                        ),
                    );
                    self.audit(caller, "submit", &name, artifact, 409, &problems_text(std::slice::from_ref(&p))).await;
                    return Ok((409, rejected(&existing.spec.id, false, vec![p], &existing.spec.team, name)));
                }
                self.write_body(&existing, workload).await?;
                let mut d = self.decision_of(&existing, false).await;
                d.retry = true;
                return Ok((200, d));
            }
            Err(e) => return Err(e).context("recording the submission"),
        };
        // The body, once, owned by the record: written before the record is
        // Queued (the leader waits [`records::BODY_GRACE`] for one it lacks).
        self.write_body(&created, workload).await?;
        let now = Utc::now();
        subs(&self.host, &self.config.namespace)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Queued", "acceptedAt": now}})),
            )
            .await
            .context("recording the submission's acceptance")?;
        self.audit(caller, "submit", &name, artifact, 201, "accepted").await;
        self.metrics.submit_latency(started.elapsed().as_secs_f64());
        self.wake.notify_one();
        let mut d = self.decision_of(&created, false).await;
        d.outcome = "accepted".into();
        Ok((201, d))
    }

    /// Writes a submission's body unless it is there already (a body
    /// is never rewritten: one that differs is refused when placed).
    async fn write_body(&self, s: &Submission, workload: &Value) -> Result<()> {
        let api: kube::Api<records::SubmissionBody> = kube::Api::namespaced(self.host.clone(), &self.config.namespace);
        match api.create(&PostParams::default(), &records::body_of(s, workload.clone())).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e).context("recording the submission's body"),
        }
    }

    async fn decision_of(&self, s: &Submission, dry_run: bool) -> Decision {
        let name = s.metadata.name.clone().unwrap_or_default();
        let waiting = self.queue.read().await.waiting.get(&name).cloned();
        Decision {
            id: s.spec.id.clone(),
            name,
            team: s.spec.team.clone(),
            dry_run,
            outcome: match phase(s) {
                Phase::Queued => "accepted",
                p if p.holds() || p == Phase::Succeeded => "admitted",
                _ => "ended",
            }
            .into(),
            phase: phase(s),
            demand: s.spec.demand.show(),
            problems: vec![],
            waiting,
            retry: false,
        }
    }
}

/// The record of a submission that passed every layer: what the queue,
/// the views and the leader need (the workload itself goes to its body).
fn spec_of(
    id: &str,
    caller: &Caller,
    intake: &intake::Intake,
    priority: i32,
    class: &str,
    digest: String,
    provenance: Vec<crate::provenance::Verdict>,
) -> SubmissionSpec {
    let meta = |field: &str| intake.workload.pointer(&format!("/metadata/{field}")).and_then(Value::as_str);
    SubmissionSpec {
        id: id.to_string(),
        team: intake.team.clone(),
        tier: intake.tier,
        priority,
        priority_class: Some(class.to_string()),
        submitted_by: caller.user.clone(),
        authenticated_by: caller.via.clone(),
        kind: intake.kind.clone(),
        workload_name: meta("name").unwrap_or_default().into(),
        namespace: meta("namespace").unwrap_or(&intake.team).into(),
        body_bytes: serde_json::to_vec(&intake.workload).map_or(0, |b| b.len() as u64),
        artifact: intake.artifact.clone(),
        demand: intake.demand,
        shapes: shapes_of(intake),
        expected_seconds: intake.expected_seconds,
        digest,
        cancel: false,
        provenance,
        workload: None,
    }
}

/// Why a record would be past [`records::SUBMISSION_SPEC_MAX`], if it would.
fn too_large(spec: &SubmissionSpec) -> Option<String> {
    let bytes = serde_json::to_vec(spec).map_or(usize::MAX, |b| b.len());
    (bytes > records::SUBMISSION_SPEC_MAX).then(|| {
        format!(
            "the submission's record would take {bytes} bytes (at most {}): fewer images or shorter names",
            records::SUBMISSION_SPEC_MAX
        )
    })
}

/// Problems as one audit reason: `field: message; …`.
/// A submission refused, and why.
fn rejected(id: &str, dry_run: bool, problems: Vec<Problem>, team: &str, name: String) -> Decision {
    Decision {
        id: id.to_string(),
        name,
        team: team.to_string(),
        dry_run,
        outcome: "rejected".into(),
        phase: Phase::Queued,
        demand: String::new(),
        problems,
        waiting: None,
        retry: false,
    }
}

fn problems_text(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("{}: {}", p.field, p.message)).collect::<Vec<_>>().join("; ")
}

/// The submission's pods by shape: each pod template's requests (its
/// accelerators by flavor) and how many run at once.
/// A pod set that asks for devices and whose terms reach no node of any
/// member ([`crate::kube::scheduling::affinity_ok`]), with the GPU product
/// labels the fleet's nodes carry; None when every set reaches one (or
/// no member's nodes are known).
fn unreached<'a>(
    intake: &'a intake::Intake,
    views: &[MemberView],
) -> Option<(&'a crate::workloads::demand::PodSet, Vec<String>)> {
    // Each node's labels beside whether it is tainted (a GPU group's).
    let nodes: Vec<(&serde_json::Value, bool)> =
        views.iter().flat_map(|v| v.node_meta.iter().zip(v.nodes.iter().map(|(_, n)| n.tainted))).collect();
    if nodes.is_empty() {
        return None;
    }
    let set = intake.sets.iter().find(|s| {
        let devices = crate::workloads::demand::FLAVORS.iter().any(|f| s.per_pod.accelerator(*f) > 0);
        // A pod without devices does not tolerate a tainted node.
        s.pods > 0
            && !s.scheduling.is_null()
            && !nodes
                .iter()
                .any(|(n, tainted)| (devices || !tainted) && crate::kube::scheduling::affinity_ok(&s.scheduling, n))
    })?;
    let mut carried: Vec<String> = nodes
        .iter()
        .filter_map(|(n, _)| n.pointer("/metadata/labels").and_then(|l| l.get(crate::workloads::demand::PRODUCT_LABEL)))
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    carried.sort();
    carried.dedup();
    Some((set, carried))
}

fn shapes_of(intake: &intake::Intake) -> Vec<records::PodShape> {
    use crate::gateway::quota::{Amount, Resource};
    intake
        .sets
        .iter()
        .map(|set| {
            let mut a = Amount::new(set.per_pod.cpu, set.per_pod.memory, 1);
            for f in crate::workloads::demand::FLAVORS {
                a.set(Resource::of_flavor(f), set.per_pod.accelerator(f));
            }
            records::PodShape {
                pods: set.pods,
                per_pod: a,
                scheduling: Some(set.scheduling.clone()).filter(|s| !s.is_null()),
            }
        })
        .collect()
}
