//! The fleet-wide capacity ledger in the state store (effects): one
//! object per account and region under the store's `.capacity/` folder
//! (beside the clusters, never taken for one), read before a launch and
//! written after EC2 refuses an offering. Writes are conditional on the
//! ETag read and merge a concurrent writer's refusals (the later of each
//! offering's), so two clusters refused at once both land.

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::S3Access;
use super::{Condition, PreconditionFailed, Store};
use crate::capacity::{Ledger, Offering};

/// The pseudo-cluster folder the ledgers live in.
pub const FOLDER: &str = ".capacity";

fn key(account: &str, region: &str) -> String {
    format!("{account}-{region}.json")
}

/// The ledger of `account` in `region` (empty when none was written).
pub async fn load(url: &str, aws: Option<&dyn S3Access>, account: &str, region: &str) -> Result<Ledger> {
    let store = Store::open(url, FOLDER, aws).await?;
    Ok(read(&store, account, region).await?.0)
}

async fn read(store: &Store, account: &str, region: &str) -> Result<(Ledger, Option<String>)> {
    match store.get(&key(account, region)).await? {
        Some((bytes, etag)) => {
            let ledger: Ledger = serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", store.describe(&key(account, region))))?;
            Ok((ledger, Some(etag)))
        }
        None => Ok((Ledger { account: account.into(), region: region.into(), ..Default::default() }, None)),
    }
}

/// Records refusals `(offering, code, by)` at `now`; returns the ledger as written.
pub async fn record(
    url: &str,
    aws: Option<&dyn S3Access>,
    account: &str,
    region: &str,
    refusals: &[(Offering, String, String)],
    launches: &[crate::capacity::Launch],
    now: DateTime<Utc>,
) -> Result<Ledger> {
    let store = Store::open(url, FOLDER, aws).await?;
    for _ in 0..8 {
        let (mut ledger, etag) = read(&store, account, region).await?;
        for (o, code, by) in refusals {
            ledger.mark(o, code, by, now);
        }
        ledger.launches.extend(launches.iter().cloned());
        ledger.prune(now);
        let cond = match etag {
            Some(e) => Condition::IfMatch(e),
            None => Condition::IfAbsent,
        };
        match store.put(&key(account, region), serde_json::to_vec_pretty(&ledger)?, cond).await {
            Ok(_) => return Ok(ledger),
            Err(e) if e.downcast_ref::<PreconditionFailed>().is_some() => continue,
            Err(e) => return Err(e),
        }
    }
    anyhow::bail!("the capacity ledger {} kept changing under eight writes", store.describe(&key(account, region)))
}

/// Every ledger in the store (for `pinfleet capacity`).
pub async fn all(url: &str, aws: Option<&dyn S3Access>) -> Result<Vec<Ledger>> {
    let store = Store::open(url, FOLDER, aws).await?;
    let mut out = Vec::new();
    for k in store.list("").await? {
        let name = k.rsplit('/').next().unwrap_or_default().to_string();
        if let Some((bytes, _)) = store.get(&name).await? {
            if let Ok(l) = serde_json::from_slice::<Ledger>(&bytes) {
                out.push(l);
            }
        }
    }
    Ok(out)
}
