//! A standby's views (effects: reads only). The replica that does not lead
//! answers the API and the console as the leader would: every interval it
//! takes the snapshot the leader's pass takes (the team quotas and the
//! admission ledger on the host, the submissions its own cache watches,
//! each team's drift measured on the members), runs the same decision
//! over it and publishes the queue's explanations as the leader's pass
//! does. Nothing is written and nothing is asked of the leader, so the
//! views do not depend on which replica leads, or whether one does.
//!
//! ```text
//! TeamQuota, AdmissionLedger (host) + Submission cache + drift (members)
//!     │ admission_queue, decide_holding_drift (the leader's, leader.rs)
//!     ▼
//! admission::decide (pure), on a copy of the ledger ─► applied to nothing
//!     ▼ publish_waiting (the leader's)
//! waiting (position, estimate, why), the queue's count, drift ─► views, console
//! ```
//!
//! Admission is a pure decision over a snapshot (Kueue's scheduler): the
//! same snapshot decided on another replica gives the same reasons. What
//! a standby shows of a submission the leader is about to admit (its pass
//! not yet written) is what the leader's next pass shows.

use std::sync::atomic::Ordering;

use anyhow::Result;
use chrono::Utc;

use super::Service;

impl Service {
    /// One standby pass: the admission decision the leader would take now
    /// over what is stored, published for readers and applied to nothing.
    /// How many wait. A replica that leads publishes its own passes: one
    /// that came to lead meanwhile publishes nothing here.
    pub async fn observe_once(&self) -> Result<usize> {
        let (world, _) = self.world().await?;
        let (mut ledger, _) = self.read_ledger().await?;
        let now = Utc::now();
        let mut queue = Self::admission_queue(&self.all(), &ledger);
        // Records the decision cannot evaluate are set aside (and failed)
        // by the leader's pass; here they are only left out.
        let (batch, _) = self.decide_holding_drift(&world, &mut ledger, &mut queue, now).await?;
        if !self.leading.load(Ordering::Relaxed) {
            self.publish_waiting(&world, &ledger, &queue, &batch, now).await;
        }
        Ok(batch.waiting.len())
    }
}
