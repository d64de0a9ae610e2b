//! The gateway's records on the host cluster: its CRDs and namespace
//! (install), the team quotas read into admission's world, the admission
//! ledger (read, and written only over the version read), submission
//! statuses, cancel and priority marks, and the PlacementDecision
//! published beside a placed submission.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::Utc;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use serde_json::{json, Value};

use super::{expected, phase, subs, ts, Service, MANAGER};
use crate::federation::placement;
use crate::gateway::admission::{Pending, World};
use crate::gateway::intake;
use crate::gateway::quota::{self, Ledger};
use crate::gateway::records::{
    self, AdmissionLedger, AdmissionLedgerSpec, Phase, Submission, SubmissionStatus, TeamQuota,
};

/// Installs the gateway's CRDs and namespace on the host cluster (server-side apply).
pub async fn install(host: &kube::Client, namespace: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    let pp = PatchParams::apply(MANAGER).force();
    for crd in records::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &pp, &Patch::Apply(&crd)).await.with_context(|| format!("installing CRD {name}"))?;
    }
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host.clone());
    nss.patch(
        namespace,
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
    )
    .await
    .context("creating the gateway's namespace")?;
    // Established before anyone lists them.
    for _ in 0..50 {
        if subs(host, namespace).list(&ListParams::default().limit(1)).await.is_ok()
            && Api::<TeamQuota>::namespaced(host.clone(), namespace).list(&ListParams::default().limit(1)).await.is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the gateway's CRDs were not served by the host cluster within 5 s")
}

impl Service {
    /// Every team's quota against the fleet (a record that does not resolve is skipped and said).
    pub async fn world(&self) -> Result<(World, BTreeMap<String, Vec<String>>)> {
        let fleet = self.fleet().await;
        let list = Api::<TeamQuota>::namespaced(self.host.clone(), &self.config.namespace)
            .list(&ListParams::default())
            .await
            .context("listing team quotas")?;
        let mut quotas = BTreeMap::new();
        let mut broken = BTreeMap::new();
        for tq in list.items {
            let team = tq.metadata.name.clone().unwrap_or_default();
            let s = &tq.spec;
            match quota::resolve(&team, s.cohort.as_deref(), &s.tiers, s.max_workloads, s.pods_per_minute, &fleet) {
                Ok(q) => {
                    quotas.insert(team, q);
                }
                Err(e) => {
                    broken.insert(team, e);
                }
            }
        }
        Ok((World::new(quotas, fleet), broken))
    }

    pub(super) async fn read_ledger(&self) -> Result<(Ledger, Option<String>)> {
        let api: Api<AdmissionLedger> = Api::namespaced(self.host.clone(), &self.config.namespace);
        match api.get_opt(records::LEDGER).await.context("reading the admission ledger")? {
            None => Ok((Ledger::default(), None)),
            Some(l) => {
                let ledger: Ledger =
                    serde_json::from_value(l.spec.ledger.clone()).context("the admission ledger does not parse")?;
                Ok((ledger, l.metadata.resource_version.clone()))
            }
        }
    }

    /// Writes the ledger if nobody else did since `rv`: false when another writer won.
    pub(super) async fn write_ledger(&self, ledger: &Ledger, rv: Option<String>) -> Result<bool> {
        let api: Api<AdmissionLedger> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let mut obj =
            AdmissionLedger::new(records::LEDGER, AdmissionLedgerSpec { ledger: serde_json::to_value(ledger)? });
        obj.metadata.namespace = Some(self.config.namespace.clone());
        let r = match rv {
            None => api.create(&PostParams::default(), &obj).await.map(|_| ()),
            Some(rv) => {
                obj.metadata.resource_version = Some(rv);
                api.replace(records::LEDGER, &PostParams::default(), &obj).await.map(|_| ())
            }
        };
        match r {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e).context("writing the admission ledger"),
        }
    }

    /// The admission ledger as the host holds it now.
    pub async fn ledger(&self) -> Result<Ledger> {
        Ok(self.read_ledger().await?.0)
    }

    pub(super) async fn set_status(&self, name: &str, f: impl FnOnce(&mut SubmissionStatus)) -> Result<()> {
        let cur = match self.submissions.get(&reflector::ObjectRef::new(name).within(&self.config.namespace)) {
            Some(s) => s.status.clone().unwrap_or_default(),
            None => subs(&self.host, &self.config.namespace).get(name).await?.status.unwrap_or_default(),
        };
        let mut st = cur.clone();
        f(&mut st);
        // The record stays small: messages are cut (a member's, its own).
        st.message = st.message.as_deref().map(records::cut);
        for p in &mut st.placement {
            p.message = p.message.as_deref().map(records::cut);
            p.reason = records::cut(&p.reason);
        }
        if st == cur {
            return Ok(());
        }
        // A field the change left out is cleared (null in a merge patch),
        // not kept as it was.
        let mut patch = serde_json::to_value(&st)?;
        if let (Some(p), Ok(Value::Object(before))) = (patch.as_object_mut(), serde_json::to_value(&cur)) {
            for k in before.keys() {
                if !p.contains_key(k) {
                    p.insert(k.clone(), Value::Null);
                }
            }
        }
        subs(&self.host, &self.config.namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": patch})))
            .await
            .with_context(|| format!("writing {name}'s status"))?;
        Ok(())
    }

    /// A submission's workload as submitted, from its body: Ok(None) when
    /// the body is not there (yet), Err with why when it may not be
    /// placed (its digest is not the record's, another owner).
    pub async fn body(&self, s: &Submission) -> Result<Option<Value>, String> {
        let api: Api<records::SubmissionBody> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let name = s.metadata.name.as_deref().unwrap_or_default();
        match api.get_opt(name).await {
            Ok(Some(b)) => match records::body_refused(s, &b) {
                Some(why) => Err(why),
                None => Ok(Some(b.spec.workload)),
            },
            Ok(None) => Ok(None),
            Err(e) => Err(format!("reading SubmissionBody {}/{name}: {e}", self.config.namespace)),
        }
    }

    pub(super) fn pending_of(s: &Submission) -> Pending {
        Pending {
            name: s.metadata.name.clone().unwrap_or_default(),
            team: s.spec.team.clone(),
            tier: s.spec.tier,
            priority: s.spec.priority,
            // An evicted gang goes to the back of its priority: ordered by
            // when it may be tried again, as Kueue's requeuing strategy
            // orders by the eviction.
            created: s
                .status
                .as_ref()
                .and_then(|st| st.retry_at)
                .or_else(|| s.metadata.creation_timestamp.as_ref().map(ts))
                .unwrap_or_else(Utc::now),
            demand: s.spec.demand,
            expected_duration: s.spec.expected_seconds.map(expected),
            backoff: s.status.as_ref().and_then(|st| {
                st.retry_at.map(|until| crate::gateway::admission::Backoff { evictions: st.evictions, until })
            }),
        }
    }

    pub(super) fn queued(&self) -> Vec<Arc<Submission>> {
        self.all().into_iter().filter(|s| phase(s) == Phase::Queued && !s.spec.cancel).collect()
    }

    /// The submission of `team` with client id `id`.
    pub async fn find(&self, team: &str, id: &str) -> Result<Option<Submission>> {
        Ok(subs(&self.host, &self.config.namespace).get_opt(&records::submission_name(team, id)).await?)
    }

    /// Marks a submission for cancelling; the leader releases it and removes it from the members.
    pub async fn cancel(&self, name: &str) -> Result<()> {
        subs(&self.host, &self.config.namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"cancel": true}})))
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    pub async fn set_priority(&self, name: &str, class: &intake::PriorityClass) -> Result<()> {
        subs(&self.host, &self.config.namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"priority": class.value, "priorityClass": class.name}})),
            )
            .await?;
        self.wake.notify_one();
        Ok(())
    }
}

/// Publishes a placement as a SIG-Multicluster `PlacementDecision` on the
/// host (when its CRD is installed there), so other tools can read it.
pub(super) async fn publish_placement_decision(
    host: &kube::Client,
    ns: &str,
    s: &Submission,
    shares: &[placement::Share],
) {
    let gvk = kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "PlacementDecision");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "placementdecisions");
    let api: Api<DynamicObject> = Api::namespaced_with(host.clone(), ns, &ar);
    let name = s.metadata.name.clone().unwrap_or_default();
    let decisions: Vec<Value> = shares
        .iter()
        .filter(|s| s.replicas > 0)
        .map(|sh| json!({"clusterName": sh.cluster, "reason": format!("{} replicas: {}", sh.replicas, sh.reason)}))
        .collect();
    let obj = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "PlacementDecision",
        "metadata": {"name": name, "namespace": ns, "labels": {records::SUBMISSION_LABEL: name}},
        "decisions": decisions});
    if let Err(e) = api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj)).await {
        tracing::debug!("PlacementDecision for {name} not published: {e}");
    }
}

/// TeamQuota documents from a YAML file (for local work and the demo).
pub async fn seed_quotas(host: &kube::Client, namespace: &str, path: &std::path::Path) -> Result<usize> {
    use kube::api::{Api, Patch, PatchParams};
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs = crate::spec::yaml::parse_documents(&text, path)?;
    let api: Api<crate::gateway::records::TeamQuota> = Api::namespaced(host.clone(), namespace);
    let mut n: usize = 0;
    for d in docs {
        let mut v = d.to_json();
        v["metadata"]["namespace"] = serde_json::json!(namespace);
        let tq: crate::gateway::records::TeamQuota = serde_path_to_error::deserialize(v.clone()).map_err(|e| {
            let p = e.path().to_string();
            anyhow::anyhow!("{}: {p}: {}", d.locate(&p), e.into_inner())
        })?;
        let name = tq
            .metadata
            .name
            .clone()
            .context(format!("{}: a TeamQuota needs metadata.name (the team)", path.display()))?;
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&v))
            .await
            .with_context(|| format!("writing team {name}'s quota"))?;
        n = n.saturating_add(1);
    }
    Ok(n)
}
