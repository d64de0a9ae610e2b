//! A snapshot's own facts, read without changing anything: etcd's
//! checksum (the sha256 of every byte before it, appended to what the
//! Maintenance API streams) checked as bytes pass or over a file, and the
//! keys per resource prefix at a revision. The agent and the verifier both
//! read through here.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use etcd_client::{Client, GetOptions};
use sha2::{Digest, Sha256};

use super::manifest;

/// etcd appends the sha256 of the snapshot to what it streams.
const TRAILER: usize = 32;

/// The snapshot's checksum, checked as it streams: etcd's trailer is the
/// sha256 of every byte before it.
pub struct Trailer {
    body: Sha256,
    whole: Sha256,
    tail: Vec<u8>,
}

impl Trailer {
    pub fn new() -> Self {
        Trailer { body: Sha256::new(), whole: Sha256::new(), tail: Vec::with_capacity(2 * TRAILER) }
    }
    pub fn feed(&mut self, bytes: &[u8]) {
        self.whole.update(bytes);
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > TRAILER {
            let cut = self.tail.len() - TRAILER;
            self.body.update(&self.tail[..cut]);
            self.tail.drain(..cut);
        }
    }
    /// (the trailer held, sha256 of everything).
    pub fn finish(self) -> (bool, String) {
        let ok = self.tail.len() == TRAILER && self.body.finalize().as_slice() == self.tail.as_slice();
        (ok, hex::encode(self.whole.finalize()))
    }
}

/// Checks a snapshot file's trailer (the verifier's first step).
pub fn trailer_holds(path: &std::path::Path) -> Result<(bool, String)> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut t = Trailer::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        t.feed(&buf[..n]);
    }
    Ok(t.finish())
}

/// Keys per resource prefix at `revision` (keys only, in pages).
pub async fn keys_per_prefix(client: &mut Client, revision: i64) -> Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    let mut from: Vec<u8> = vec![0];
    loop {
        let opts = GetOptions::new().with_range(vec![0]).with_keys_only().with_limit(5_000).with_revision(revision);
        // `with_range([0])` from `from`: every key at or after it.
        let resp = client
            .get(from.clone(), Some(opts))
            .await
            .with_context(|| format!("listing keys at revision {revision}"))?;
        let kvs = resp.kvs();
        for kv in kvs {
            *counts.entry(manifest::prefix_of(kv.key())).or_insert(0u64) += 1;
        }
        match kvs.last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_catches_one_flipped_byte() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut whole = body.clone();
        whole.extend_from_slice(&Sha256::digest(&body));
        let mut t = Trailer::new();
        for chunk in whole.chunks(777) {
            t.feed(chunk);
        }
        assert!(t.finish().0);
        whole[5_000] ^= 1;
        let mut t = Trailer::new();
        t.feed(&whole);
        assert!(!t.finish().0);
        let mut t = Trailer::new();
        t.feed(&whole[..20]);
        assert!(!t.finish().0, "too short to hold a trailer");
    }
}
