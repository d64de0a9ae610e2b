//! A snapshot's own facts, read without changing anything: etcd's
//! checksum (the sha256 of every byte before it, appended to what the
//! Maintenance API streams) checked as bytes pass or over a file, and the
//! keys per resource prefix at a revision. The agent and the verifier both
//! read through here; a listing that finds a snapshot whose manifest is
//! lost reads its facts from the file itself ([`read_facts`]: etcd's bbolt
//! database, read as etcd reads it on start).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

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

/// What a snapshot file says of the store it holds, without etcd: what a
/// listing needs of a backup whose manifest is lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The store's revision, as etcd computes it when it starts on the
    /// file: the newest revision in its key bucket, or the compaction's if
    /// later.
    pub revision: i64,
    /// Keys per resource prefix at that revision.
    pub keys: BTreeMap<String, u64>,
    /// The members, as the snapshot's member bucket holds them (a member
    /// that never started has no name yet and is left out, as the agent's
    /// manifest leaves it out).
    pub members: Vec<manifest::Peer>,
    /// The cluster's version (`3.5.0`), where etcd recorded it.
    pub cluster_version: Option<String>,
    /// The encryption-at-rest keys the stored values were written with
    /// (`k8s:enc:<provider>:v1:<key>:…`, as the API server prefixes them),
    /// sorted: the keys a restore needs.
    pub encryption_keys: Vec<String>,
}

/// Reads a snapshot file's [`Facts`] (the database as etcd streamed it; its
/// checksum trailer, after the last page, is not read here).
pub fn read_facts(path: &Path) -> Result<Facts> {
    let db = bolt::Db::open(path).with_context(|| format!("reading {} as etcd's database", path.display()))?;
    let mut buckets: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    db.each_in_root(&mut |k, v, flags| {
        if flags & bolt::BUCKET_LEAF != 0 {
            buckets.insert(k.to_vec(), v.to_vec());
        }
        Ok(())
    })?;
    let mut facts = Facts::default();
    // As etcd's mvcc restore: the current revision is at least the compaction's.
    let mut compacted = 0i64;
    if let Some(b) = buckets.get(b"meta".as_slice()) {
        db.each_in(b, &mut |k, v, _| {
            if k == b"finishedCompactRev" || k == b"scheduledCompactRev" {
                if let Some(r) = revision_of(v) {
                    compacted = compacted.max(r);
                }
            }
            Ok(())
        })?;
    }
    let keys = buckets.get(b"key".as_slice()).context("the file has no key bucket: not an etcd v3 snapshot")?;
    // Every revision in order; a key's newest decides whether it is there
    // (a delete is a tombstone: the revision's bytes with a `t` after).
    let mut newest = 0i64;
    let mut live: HashMap<Vec<u8>, Option<String>> = HashMap::new();
    db.each_in(keys, &mut |k, v, _| {
        let Some(rev) = revision_of(k) else { return Ok(()) };
        newest = newest.max(rev);
        let Some((key, value)) = key_value(v) else { return Ok(()) };
        if k.len() == 18 && k[17] == b't' {
            live.remove(key);
        } else {
            live.insert(key.to_vec(), encryption_key_of(value));
        }
        Ok(())
    })?;
    facts.revision = newest.max(compacted);
    let mut names = BTreeSet::new();
    for (key, enc) in &live {
        *facts.keys.entry(manifest::prefix_of(key)).or_insert(0u64) += 1;
        if let Some(n) = enc {
            names.insert(n.clone());
        }
    }
    facts.encryption_keys = names.into_iter().collect();
    if let Some(b) = buckets.get(b"members".as_slice()) {
        let members = &mut facts.members;
        db.each_in(b, &mut |_, v, _| {
            let Ok(m) = serde_json::from_slice::<serde_json::Value>(v) else { return Ok(()) };
            let name = m["name"].as_str().filter(|n| !n.is_empty());
            let url = m["peerURLs"].as_array().and_then(|u| u.first()).and_then(|u| u.as_str());
            if let (Some(name), Some(url)) = (name, url) {
                members.push(manifest::Peer { name: name.to_string(), peer_url: url.to_string() });
            }
            Ok(())
        })?;
    }
    if let Some(b) = buckets.get(b"cluster".as_slice()) {
        let version = &mut facts.cluster_version;
        db.each_in(b, &mut |k, v, _| {
            if k == b"clusterVersion" {
                *version = std::str::from_utf8(v).ok().map(str::to_string);
            }
            Ok(())
        })?;
    }
    Ok(facts)
}

/// The main revision in etcd's revision bytes (8 bytes big-endian, `_`,
/// the sub-revision's 8).
fn revision_of(b: &[u8]) -> Option<i64> {
    let main: [u8; 8] = b.get(..8)?.try_into().ok()?;
    i64::try_from(u64::from_be_bytes(main)).ok()
}

/// The key and value of an `mvccpb.KeyValue` (fields 1 and 5; the rest
/// skipped by their wire type).
fn key_value(mut b: &[u8]) -> Option<(&[u8], &[u8])> {
    let (mut key, mut value): (Option<&[u8]>, &[u8]) = (None, &[]);
    while !b.is_empty() {
        let (tag, rest) = varint(b)?;
        b = rest;
        match tag & 7 {
            0 => b = varint(b)?.1,
            1 => b = b.get(8..)?,
            2 => {
                let (n, rest) = varint(b)?;
                let n = usize::try_from(n).ok()?;
                let field = rest.get(..n)?;
                b = rest.get(n..)?;
                match tag >> 3 {
                    1 => key = Some(field),
                    5 => value = field,
                    _ => {}
                }
            }
            5 => b = b.get(4..)?,
            _ => return None,
        }
    }
    Some((key?, value))
}

fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, b.get(i + 1..)?));
        }
    }
    None
}

/// The key an encrypted value names: the API server writes
/// `k8s:enc:<provider>:v1:<key name>:<ciphertext>` (KMS names its plugin
/// there, not a key the PKI holds, and is left out).
fn encryption_key_of(value: &[u8]) -> Option<String> {
    let rest = value.strip_prefix(b"k8s:enc:")?;
    let mut parts = rest.splitn(4, |c| *c == b':');
    let provider = parts.next()?;
    let _version = parts.next()?;
    let name = parts.next()?;
    parts.next()?;
    if provider == b"kms" || name.is_empty() {
        return None;
    }
    String::from_utf8(name.to_vec()).ok()
}

/// etcd's backend file, read-only, a page at a time (bbolt's format: two
/// meta pages, then B+tree pages; buckets nest, a small one inline in its
/// parent's value). Every offset is checked: a damaged file is an error,
/// never a panic.
mod bolt {
    use std::fs::File;
    use std::os::unix::fs::FileExt as _;
    use std::path::Path;

    use anyhow::{bail, Context as _, Result};

    const MAGIC: u32 = 0xED0C_DAED;
    const VERSION: u32 = 2;
    const PAGE_HEADER: usize = 16;
    const ELEMENT: usize = 16;
    const BRANCH: u16 = 0x01;
    const LEAF: u16 = 0x02;
    const META: u16 = 0x04;
    pub const BUCKET_LEAF: u32 = 0x01;
    /// Deeper than the B+tree of any file etcd can write.
    const MAX_DEPTH: usize = 64;

    pub struct Db {
        file: File,
        page_size: u64,
        pages: u64,
        root: u64,
        /// Pages read so far: a tree reads each of its pages once, so more
        /// reads than the file has pages is a damaged file's loop.
        reads: std::cell::Cell<u64>,
    }

    fn le<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
        b.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        le::<2>(b, at).map(u16::from_le_bytes)
    }
    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        le::<4>(b, at).map(u32::from_le_bytes)
    }
    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        le::<8>(b, at).map(u64::from_le_bytes)
    }

    /// bbolt's meta checksum: FNV-1a (64 bits) of the meta before it.
    fn fnv64a(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| (h ^ u64::from(*x)).wrapping_mul(0x0000_0100_0000_01b3))
    }

    /// (page size, root bucket's page, transaction id) of a valid meta page.
    fn meta(page: &[u8]) -> Option<(u64, u64, u64)> {
        if u16_at(page, 8)? & META == 0 {
            return None;
        }
        let m = page.get(PAGE_HEADER..PAGE_HEADER + 64)?;
        if u32_at(m, 0)? != MAGIC || u32_at(m, 4)? != VERSION || fnv64a(m.get(..56)?) != u64_at(m, 56)? {
            return None;
        }
        Some((u64::from(u32_at(m, 8)?), u64_at(m, 16)?, u64_at(m, 48)?))
    }

    impl Db {
        pub fn open(path: &Path) -> Result<Db> {
            let file = File::open(path)?;
            let len = file.metadata()?.len();
            let read = |at: u64, n: u64| -> Result<Vec<u8>> {
                let mut buf = vec![0u8; usize::try_from(n.min(len.saturating_sub(at)))?];
                file.read_exact_at(&mut buf, at)?;
                Ok(buf)
            };
            let first = meta(&read(0, 4096)?);
            // As bbolt does: the first meta page's size, else the usual one.
            let page_size = first.map_or(4096, |m| m.0);
            if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
                bail!("its page size ({page_size}) is not one bbolt writes");
            }
            let second = meta(&read(page_size, page_size)?);
            let (_, root, _) = [first, second]
                .into_iter()
                .flatten()
                .filter(|m| m.0 == page_size)
                .max_by_key(|m| m.2)
                .context("neither meta page is valid (magic, version or checksum)")?;
            let db = Db { file, page_size, pages: len / page_size, root, reads: std::cell::Cell::new(0) };
            Ok(db)
        }

        /// Page `id` with its overflow pages.
        fn page(&self, id: u64) -> Result<Vec<u8>> {
            if id < 2 || id >= self.pages {
                bail!("page {id} is outside the file ({} pages)", self.pages);
            }
            self.reads.set(self.reads.get().saturating_add(1));
            if self.reads.get() > self.pages {
                bail!("the trees read more pages than the file has ({}): they loop", self.pages);
            }
            let at = id * self.page_size;
            let mut head = [0u8; PAGE_HEADER];
            self.file.read_exact_at(&mut head, at)?;
            let overflow = u64::from(u32_at(&head, 12).unwrap_or_default());
            let n = overflow.saturating_add(1).saturating_mul(self.page_size);
            if id.saturating_add(overflow) >= self.pages {
                bail!("page {id} runs past the end of the file");
            }
            let mut buf = vec![0u8; usize::try_from(n)?];
            self.file.read_exact_at(&mut buf, at)?;
            Ok(buf)
        }

        /// Every (key, value, flags) of the tree under `page`, in key order.
        fn walk(&self, page: &[u8], depth: usize, each: &mut dyn FnMut(&[u8], &[u8], u32) -> Result<()>) -> Result<()> {
            if depth > MAX_DEPTH {
                bail!("the tree is deeper than {MAX_DEPTH} pages");
            }
            let bad = || anyhow::anyhow!("a page's elements run past its end");
            let flags = u16_at(page, 8).ok_or_else(bad)?;
            let count = usize::from(u16_at(page, 10).ok_or_else(bad)?);
            for i in 0..count {
                let e = PAGE_HEADER + i * ELEMENT;
                if flags & BRANCH != 0 {
                    let child = self.page(u64_at(page, e + 8).ok_or_else(bad)?)?;
                    self.walk(&child, depth + 1, each)?;
                } else if flags & LEAF != 0 {
                    let f = u32_at(page, e).ok_or_else(bad)?;
                    let pos = u32_at(page, e + 4).ok_or_else(bad)? as usize;
                    let ksize = u32_at(page, e + 8).ok_or_else(bad)? as usize;
                    let vsize = u32_at(page, e + 12).ok_or_else(bad)? as usize;
                    let k = e.checked_add(pos).ok_or_else(bad)?;
                    let v = k.checked_add(ksize).ok_or_else(bad)?;
                    let key = page.get(k..v).ok_or_else(bad)?;
                    let value = page.get(v..v.checked_add(vsize).ok_or_else(bad)?).ok_or_else(bad)?;
                    each(key, value, f)?;
                } else {
                    bail!("a page of unknown kind ({flags:#x}) in a tree");
                }
            }
            Ok(())
        }

        /// The top-level buckets (their names and values).
        pub fn each_in_root(&self, each: &mut dyn FnMut(&[u8], &[u8], u32) -> Result<()>) -> Result<()> {
            let page = self.page(self.root)?;
            self.walk(&page, 0, each)
        }

        /// Every entry of the bucket whose value (as its parent holds it)
        /// is `bucket`: its root page, or the page inline after the header.
        pub fn each_in(&self, bucket: &[u8], each: &mut dyn FnMut(&[u8], &[u8], u32) -> Result<()>) -> Result<()> {
            let root = u64_at(bucket, 0).context("a bucket's header is cut short")?;
            if root == 0 {
                self.walk(bucket.get(16..).unwrap_or_default(), 0, each)
            } else {
                let page = self.page(root)?;
                self.walk(&page, 0, each)
            }
        }
    }
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

    /// A bbolt leaf page holding `entries` (key, value, flags), as bbolt
    /// lays one out: the header, the elements, then each key and value.
    fn leaf(entries: &[(Vec<u8>, Vec<u8>, u32)]) -> Vec<u8> {
        let n = entries.len();
        let mut page = vec![0u8; 16];
        page[8..10].copy_from_slice(&2u16.to_le_bytes());
        page[10..12].copy_from_slice(&(n as u16).to_le_bytes());
        let (mut elements, mut data) = (Vec::new(), Vec::new());
        for (i, (k, v, flags)) in entries.iter().enumerate() {
            let pos = 16 + n * 16 + data.len() - (16 + i * 16);
            for x in [*flags, pos as u32, k.len() as u32, v.len() as u32] {
                elements.extend_from_slice(&x.to_le_bytes());
            }
            data.extend_from_slice(k);
            data.extend_from_slice(v);
        }
        page.extend(elements);
        page.extend(data);
        page
    }

    /// A bucket small enough to sit inline in its parent: a header with no
    /// root page, the page after it.
    fn inline(entries: &[(Vec<u8>, Vec<u8>, u32)]) -> (Vec<u8>, u32) {
        let mut v = vec![0u8; 16];
        v.extend(leaf(entries));
        (v, 1)
    }

    fn rev(main: u64, tombstone: bool) -> Vec<u8> {
        let mut b = main.to_be_bytes().to_vec();
        b.push(b'_');
        b.extend(0u64.to_be_bytes());
        if tombstone {
            b.push(b't');
        }
        b
    }

    /// An `mvccpb.KeyValue`: the key (1), revisions (2, 3), version (4), value (5).
    fn kv(key: &str, rev: u8, value: &str) -> Vec<u8> {
        let mut b = vec![0x0a, key.len() as u8];
        b.extend(key.as_bytes());
        b.extend([0x10, rev, 0x18, rev, 0x20, 1]);
        if !value.is_empty() {
            b.extend([0x2a, value.len() as u8]);
            b.extend(value.as_bytes());
        }
        b
    }

    /// A snapshot file: two meta pages, a freelist page, the root bucket's
    /// leaf (every bucket inline), etcd's trailer.
    fn snapshot(txid: u64) -> Vec<u8> {
        const PAGE: usize = 4096;
        let bucket = |name: &str, e: &[(Vec<u8>, Vec<u8>, u32)]| {
            let (v, f) = inline(e);
            (name.as_bytes().to_vec(), v, f)
        };
        let member = |id: u8, json: &str| (vec![b'0' + id], json.as_bytes().to_vec(), 0u32);
        let root = leaf(&[
            bucket("cluster", &[(b"clusterVersion".to_vec(), b"3.5.0".to_vec(), 0)]),
            bucket(
                "key",
                &[
                    (rev(2, false), kv("/registry/configmaps/ns/a", 2, "one"), 0),
                    (rev(3, false), kv("/registry/secrets/ns/b", 3, "k8s:enc:secretbox:v1:key-1:zz"), 0),
                    (rev(4, true), kv("/registry/configmaps/ns/a", 4, ""), 0),
                    (rev(5, false), kv("/registry/configmaps/ns/c", 5, "three"), 0),
                ],
            ),
            bucket(
                "members",
                &[
                    member(1, r#"{"id":1,"peerURLs":["http://10.0.0.1:2380"],"name":"cp-a"}"#),
                    member(2, r#"{"id":2,"peerURLs":["http://10.0.0.2:2380"]}"#),
                ],
            ),
            bucket("meta", &[(b"finishedCompactRev".to_vec(), rev(3, false), 0)]),
        ]);
        assert!(root.len() <= PAGE);
        let mut file = vec![0u8; 4 * PAGE];
        for (id, tx) in [(0u64, txid), (1, txid.saturating_sub(1))] {
            let p = &mut file[id as usize * PAGE..];
            p[..8].copy_from_slice(&id.to_le_bytes());
            p[8..10].copy_from_slice(&4u16.to_le_bytes());
            let mut m = Vec::new();
            m.extend(0xED0C_DAEDu32.to_le_bytes());
            m.extend(2u32.to_le_bytes());
            m.extend((PAGE as u32).to_le_bytes());
            m.extend(0u32.to_le_bytes());
            m.extend(3u64.to_le_bytes()); // the root bucket's page
            m.extend(0u64.to_le_bytes());
            m.extend(2u64.to_le_bytes()); // the freelist's page
            m.extend(4u64.to_le_bytes()); // pages in use
            m.extend(tx.to_le_bytes());
            let sum =
                m.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| (h ^ u64::from(*x)).wrapping_mul(0x0000_0100_0000_01b3));
            m.extend(sum.to_le_bytes());
            p[16..16 + m.len()].copy_from_slice(&m);
        }
        file[2 * PAGE + 8..2 * PAGE + 10].copy_from_slice(&0x10u16.to_le_bytes());
        file[3 * PAGE..3 * PAGE + root.len()].copy_from_slice(&root);
        file[3 * PAGE..3 * PAGE + 8].copy_from_slice(&3u64.to_le_bytes());
        let sum = Sha256::digest(&file);
        file.extend_from_slice(&sum);
        file
    }

    #[test]
    fn a_snapshots_facts_are_read_from_its_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.db");
        std::fs::write(&path, snapshot(7)).unwrap();
        assert!(trailer_holds(&path).unwrap().0);
        let f = read_facts(&path).unwrap();
        assert_eq!(f.revision, 5, "the newest revision in the key bucket");
        let keys: Vec<(&str, u64)> = f.keys.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(keys, [("/registry/configmaps", 1), ("/registry/secrets", 1)], "a's delete counts");
        assert_eq!(f.encryption_keys, ["key-1"]);
        assert_eq!(
            f.members,
            [manifest::Peer { name: "cp-a".into(), peer_url: "http://10.0.0.1:2380".into() }],
            "a member that never started (no name) is left out"
        );
        assert_eq!(f.cluster_version.as_deref(), Some("3.5.0"));
    }

    #[test]
    fn a_damaged_database_is_an_error_never_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.db");
        // Both meta pages' checksums broken.
        let mut bad = snapshot(7);
        bad[16 + 60] ^= 1;
        bad[4096 + 16 + 60] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(format!("{:#}", read_facts(&path).unwrap_err()).contains("meta page"));
        // One meta page broken: the other is read, as bbolt does.
        let mut one = snapshot(7);
        one[16 + 60] ^= 1;
        std::fs::write(&path, &one).unwrap();
        assert_eq!(read_facts(&path).unwrap().revision, 5);
        // Every byte of the root page flipped in turn: an answer or an error.
        let good = snapshot(7);
        for at in 3 * 4096..3 * 4096 + 400 {
            let mut b = good.clone();
            b[at] ^= 0xff;
            std::fs::write(&path, &b).unwrap();
            let _ = read_facts(&path);
        }
        std::fs::write(&path, b"not a database").unwrap();
        assert!(read_facts(&path).is_err());
    }
}
