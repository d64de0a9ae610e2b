//! The images a submission names, checked on its way in: provenance where
//! the team has a trust policy (resolved, verified, pinned by digest), and
//! none of them a version a delivery marked bad.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Service;
use crate::gateway::intake::{self, Caller, Problem};

impl Service {
    /// Provenance, where the team has a trust policy: every image resolved
    /// to its digest and verified (cached by digest); trusted images are
    /// pinned in the workload (what the members run), an untrusted one is
    /// refused at its field (enforce) or admitted and audited (warn).
    pub(super) async fn provenance(
        &self,
        caller: &Caller,
        id: &str,
        intake: &mut intake::Intake,
    ) -> Result<Vec<crate::provenance::Verdict>, Vec<Problem>> {
        let Some(policy) = self.config.policy.trust.get(&intake.team) else { return Ok(Vec::new()) };
        let mut verdicts = Vec::new();
        let mut pinned = BTreeMap::new();
        let mut problems = Vec::new();
        for (at, image) in intake::image_fields(&intake.kind, &intake.workload) {
            if pinned.contains_key(&image) {
                continue;
            }
            let checked = self.registries.check_for(&intake.team, &image, policy).await;
            match (&checked.verdict.refused, checked.verdict.admits(policy.mode)) {
                (Some(why), false) => problems.push(Problem::new("provenance", at, why.clone())),
                (Some(why), true) => {
                    let what = format!("{}/{id}", intake.team);
                    self.audit(caller, "provenance", &what, &image, 200, &format!("admitted in warn mode: {why}"))
                        .await;
                }
                (None, _) => {}
            }
            if let (Some(p), true) = (&checked.pinned, checked.verdict.admits(policy.mode)) {
                pinned.insert(image.clone(), p.clone());
            }
            verdicts.push(checked.verdict);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        intake::pin_images(&mut intake.workload, &pinned);
        if let Some(p) = pinned.get(&intake.artifact) {
            intake.artifact = p.clone();
        }
        Ok(verdicts)
    }

    /// Refuses images a delivery marked bad (by digest: a pinned image, or
    /// one submitted by digest), each at its field ([`intake::marked_bad`]:
    /// the delivery and its reason named only to its own team). The list
    /// is read at most every 5 s; when it cannot be read, the last list
    /// read answers, and with none a 503 says why.
    pub(super) async fn not_marked_bad(&self, intake: &intake::Intake) -> Result<(), (u16, Vec<Problem>)> {
        let Some(line) = self.delivery_line.get() else { return Ok(()) };
        let mut cache = self.bad_versions.lock().await;
        if cache.0.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
            match line.bad().await {
                Ok(b) => *cache = (Some(Instant::now()), b),
                Err(e) if cache.0.is_none() => {
                    tracing::warn!("reading the versions marked bad: {e:#}");
                    let p =
                        Problem::new("delivery", "", "the versions marked bad cannot be read now; try again shortly");
                    return Err((503, vec![p]));
                }
                Err(e) => tracing::warn!("reading the versions marked bad (the last list answers): {e:#}"),
            }
        }
        let problems = intake::marked_bad(intake, &cache.1);
        if problems.is_empty() {
            Ok(())
        } else {
            Err((422, problems))
        }
    }
}
