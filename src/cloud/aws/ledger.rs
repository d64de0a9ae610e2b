//! The capacity ledger a launch reads and writes: the state store's
//! ledger (`state::capacity`) of the account the client acts in (the
//! cluster's assumed role, else the caller's from STS) in the client's
//! region, behind `capacity::LedgerStore`.

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::Aws;
use crate::capacity::{Ledger, Offering};

/// The ledger of the caller's account in the client's region, in the state
/// store at `url`: what launches read and write (see [`crate::capacity::LedgerStore`]).
pub struct StoreLedger {
    url: String,
    aws: Aws,
    account: tokio::sync::OnceCell<String>,
}

impl StoreLedger {
    pub fn new(url: &str, aws: &Aws) -> StoreLedger {
        StoreLedger { url: url.to_string(), aws: aws.clone(), account: tokio::sync::OnceCell::new() }
    }

    /// The account from STS (`unknown` when it cannot say: moto and
    /// LocalStack answer, a misconfigured profile may not).
    async fn account(&self) -> String {
        self.account
            .get_or_init(|| async {
                // Under an assumed role the account acted in, not the
                // caller's: offerings are per account and zone, and one
                // account's refusals must not hold back another's launches.
                if let Some(a) = self.aws.account() {
                    return a.to_string();
                }
                self.aws
                    .caller_identity()
                    .await
                    .and_then(|arn| arn.split(':').nth(4).map(str::to_string))
                    .unwrap_or_else(|| "unknown".into())
            })
            .await
            .clone()
    }
}

impl crate::capacity::LedgerStore for StoreLedger {
    fn load(&self) -> futures::future::BoxFuture<'_, Result<Ledger>> {
        Box::pin(async move {
            let account = self.account().await;
            crate::state::capacity::load(&self.url, Some(&self.aws), &account, &self.aws.region).await
        })
    }

    fn record<'a>(
        &'a self,
        refusals: &'a [(Offering, String, String)],
        launches: &'a [crate::capacity::Launch],
        now: DateTime<Utc>,
    ) -> futures::future::BoxFuture<'a, Result<Ledger>> {
        Box::pin(async move {
            let account = self.account().await;
            crate::state::capacity::record(
                &self.url,
                Some(&self.aws),
                &account,
                &self.aws.region,
                refusals,
                launches,
                now,
            )
            .await
        })
    }
}
