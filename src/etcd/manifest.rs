//! What a backup is, as stored: `etcd/backups/<id>/snapshot.db` (the
//! snapshot exactly as etcd streamed it, its sha256 trailer included),
//! `manifest.json` written only after the snapshot's upload completed and
//! its checksum held, and `verdict.json` once a restore proved it (or did
//! not). Under Object Lock all three are locked alike. A snapshot without
//! its manifest (lost, or never written) is still a backup, its facts read
//! from the snapshot itself ([`MANIFEST_LOST`]). Deltas (what changed
//! after a snapshot, from a watch) live under `etcd/deltas/`, one object per
//! flush, named by the revisions they span so that a listing sorts them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub const BACKUPS: &str = "etcd/backups/";
pub const DELTAS: &str = "etcd/deltas/";
/// The agent's newest word on the live revision (one per member).
pub const SEEN: &str = "etcd/seen/";
/// What an agent that cannot do its job says (one per machine): why no
/// backup comes, for a change to the control plane and `etcd backups`.
pub const TROUBLE: &str = "etcd/trouble/";
/// A change to the control plane asking the agents for a backup now (one
/// object, overwritten by each asker: the agents answer the newest).
pub const REQUEST: &str = "etcd/requests/backup.json";

/// The agents' lock in etcd (etcd's lock API: one key per holder or
/// waiter under it, each bound to its agent's lease).
pub const AGENTS_LOCK: &str = "/pinfleet/etcd-backup-agent";

/// Revisions a restore abandoned (one object per restore): the old
/// timeline's writes after the point restored to, which no later restore
/// may replay.
pub const CUTS: &str = "etcd/cuts/";

pub fn cut_key(name: &str) -> String {
    format!("{CUTS}{name}.json")
}

/// The revisions after `after` and before `before` belong to a timeline a
/// restore abandoned (`after`: the revision it restored to; `before`: the
/// one it bumped to, past every revision the old timeline reached).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cut {
    pub after: i64,
    pub before: i64,
    pub at: DateTime<Utc>,
    pub backup: String,
}

impl Cut {
    pub fn drops(&self, rev: i64) -> bool {
        rev > self.after && rev < self.before
    }
}

/// What each restore's bump did (one object per bump, written once the
/// store is compacted): the revision the restored timeline begins at and
/// when, so that a later restore reckons the writes since from the end of
/// this bump rather than from its cut, recorded before the bump began.
pub const BUMPS: &str = "etcd/bumps/";

pub fn bump_key(name: &str) -> String {
    format!("{BUMPS}{name}.json")
}

/// A restore's bump, done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bumped {
    /// The backup restored.
    pub backup: String,
    /// When the store was compacted.
    pub at: DateTime<Utc>,
    /// The revision the store was compacted at: a watch from any revision
    /// before it is told it was compacted.
    pub revision: i64,
    /// The store's revision before the writes (after the replay, and past
    /// what etcdutl added).
    pub from: i64,
    /// What etcdutl's `--bump-revision` added as it restored the members
    /// (0: not used).
    #[serde(default)]
    pub etcdutl: i64,
    /// Writes of the throwaway key.
    pub writes: i64,
    /// The bump's time: the records read, the writes, the compaction.
    pub seconds: f64,
    /// Why no client can have seen a revision as high, in a sentence.
    pub why: String,
}

impl Bumped {
    /// The bump's size in words: the revisions it added, and how.
    pub fn size(&self) -> String {
        let added = self.revision.saturating_sub(self.from).saturating_add(self.etcdutl);
        match self.etcdutl {
            0 => format!("+{added} revisions: {} writes", self.writes),
            e => format!("+{added} revisions: {e} by etcdutl, {} writes", self.writes),
        }
    }
}

pub fn snapshot_key(id: &str) -> String {
    format!("{BACKUPS}{id}/snapshot.db")
}
pub fn manifest_key(id: &str) -> String {
    format!("{BACKUPS}{id}/manifest.json")
}
pub fn verdict_key(id: &str) -> String {
    format!("{BACKUPS}{id}/verdict.json")
}
pub fn delta_key(from: i64, to: i64) -> String {
    format!("{DELTAS}{from:020}-{to:020}.json")
}
pub fn seen_key(member: &str) -> String {
    format!("{SEEN}{member}.json")
}

pub fn trouble_key(host: &str) -> String {
    format!("{TROUBLE}{host}.json")
}

/// A backup's name: when and at which revision (sorts by time).
pub fn backup_id(taken_at: DateTime<Utc>, revision: i64) -> String {
    format!("{}-r{revision}", taken_at.format("%Y%m%dT%H%M%SZ"))
}

/// When and at which revision a backup's name says it was taken (the
/// facts a snapshot whose manifest is lost still has from its key).
pub fn parse_backup_id(id: &str) -> Option<(DateTime<Utc>, i64)> {
    let (at, rev) = id.rsplit_once("-r")?;
    let taken_at = chrono::NaiveDateTime::parse_from_str(at, "%Y%m%dT%H%M%SZ").ok()?.and_utc();
    Some((taken_at, rev.parse().ok()?))
}

/// The id in a key under [`BACKUPS`] (`etcd/backups/<id>/…`).
pub fn id_of(key: &str) -> Option<&str> {
    key.strip_prefix(BACKUPS)?.split('/').next().filter(|s| !s.is_empty())
}

/// The revisions a delta object spans, from its key.
pub fn delta_span(key: &str) -> Option<(i64, i64)> {
    let name = key.strip_prefix(DELTAS)?.strip_suffix(".json")?;
    let (a, b) = name.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// One full backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub id: String,
    pub cluster: String,
    pub taken_at: DateTime<Utc>,
    /// The store's revision as the member reported it with the snapshot
    /// (the verifier reads the exact one from the restored data).
    pub revision: i64,
    /// The member it was streamed from, and that member's etcd version.
    pub member: String,
    pub etcd_version: String,
    pub kubernetes_version: String,
    pub size: u64,
    /// sha256 of the whole object as stored.
    pub sha256: String,
    /// Keys per resource prefix (`/registry/secrets`, …) at `revision`.
    pub keys: BTreeMap<String, u64>,
    /// Object Lock: no one deletes the backup before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retain_until: Option<DateTime<Utc>>,
    /// The encryption-at-rest keys (by name) its Secrets were written with;
    /// a restore needs them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encryption_keys: Vec<String>,
    /// Who took it (`pinfleet etcd agent` on a machine, or a command).
    pub taken_by: String,
    /// The members at the time (name and peer URL): whom a restore through
    /// the agents brings back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Peer>,
}

/// A member of the cluster: its name and peer URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    pub name: String,
    pub peer_url: String,
}

/// What restoring a backup showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub verified_at: DateTime<Utc>,
    pub ok: bool,
    /// The revision the restored data is at.
    #[serde(default)]
    pub revision: i64,
    /// What was compared, and how it came out.
    pub checks: Vec<String>,
    pub problems: Vec<String>,
    /// The scratch restore's time, seconds.
    pub restore_seconds: f64,
    /// The etcd the scratch restore ran.
    pub etcd_version: String,
}

/// What a listing says of a snapshot whose manifest is gone (an intruder
/// deleted its versions, or the agent died between the two writes): the
/// backup is still there, its facts read from the snapshot itself.
pub const MANIFEST_LOST: &str = "manifest lost: facts read from the snapshot";

/// A backup with its verdict, as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    pub manifest: Manifest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// Set when the manifest is not the one the agent wrote but rebuilt
    /// from the snapshot ([`MANIFEST_LOST`], and what could not be read):
    /// who took it, from which member and under which Kubernetes are not
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<String>,
}

impl Backup {
    /// Judged whole by the verifier, and still the backup it judged: a
    /// backup whose manifest is lost is never verified (its checksum was
    /// the manifest's; nothing ties a surviving verdict to the bytes now
    /// stored), so a restore of it needs `--force`.
    pub fn verified(&self) -> bool {
        self.recovered.is_none() && self.verdict.as_ref().is_some_and(|v| v.ok)
    }
    /// The revision the snapshot holds: the verifier's exact reading, else
    /// the manifest's (the revision before the stream began, a lower bound).
    pub fn restored_revision(&self) -> i64 {
        self.verdict.as_ref().map(|v| v.revision).filter(|r| *r > 0).unwrap_or(self.manifest.revision)
    }
}

/// A key's resource prefix: Kubernetes keeps `/registry/<resource>/…` (and
/// `/registry/<group>/<resource>/…` for some groups); anything else counts
/// under its first segment.
pub fn prefix_of(key: &[u8]) -> String {
    let key = String::from_utf8_lossy(key);
    let parts: Vec<&str> = key.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        ["registry", group, resource, _, ..] if group.contains('.') => format!("/registry/{group}/{resource}"),
        ["registry", resource, _, ..] => format!("/registry/{resource}"),
        [first, ..] => format!("/{first}"),
        [] => "/".to_string(),
    }
}

/// One change, as a delta stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// base64 of the key.
    pub k: String,
    /// base64 of the value; absent for a delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v: Option<String>,
}

/// One revision's changes (one transaction).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub rev: i64,
    pub ops: Vec<Change>,
}

/// What changed between two revisions, flushed by the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delta {
    pub from: i64,
    pub to: i64,
    pub flushed_at: DateTime<Utc>,
    pub txns: Vec<Txn>,
}

/// The agent's newest word on the live store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    pub member: String,
    pub revision: i64,
    pub at: DateTime<Utc>,
    /// Revisions a second over the last flush, to size the bump.
    pub rate: f64,
}

/// An agent's last failure (etcd unreachable, a backup or its upload
/// refused): written when it fails; past once a backup is taken after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trouble {
    /// The machine the agent runs on.
    pub host: String,
    pub at: DateTime<Utc>,
    /// Failures in a row.
    pub failures: u32,
    pub error: String,
}

/// A backup asked for before a change to the control plane: the agent
/// holding the lock takes (and verifies) one as soon as it reads a request
/// newer than its last backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub at: DateTime<Utc>,
    /// Who asks, and for what change.
    pub by: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_follow_kubernetes_keys() {
        assert_eq!(prefix_of(b"/registry/secrets/default/db"), "/registry/secrets");
        assert_eq!(
            prefix_of(b"/registry/apiregistration.k8s.io/apiservices/v1.apps"),
            "/registry/apiregistration.k8s.io/apiservices"
        );
        assert_eq!(prefix_of(b"/registry/namespaces/kube-system"), "/registry/namespaces");
        assert_eq!(prefix_of(b"/other/x"), "/other");
        assert_eq!(prefix_of(b"plain"), "/plain");
    }

    #[test]
    fn keys_sort_and_parse_back() {
        let t = DateTime::parse_from_rfc3339("2026-11-27T16:00:05Z").unwrap().with_timezone(&Utc);
        let id = backup_id(t, 42);
        assert_eq!(id, "20261127T160005Z-r42");
        assert_eq!(id_of(&manifest_key(&id)), Some(id.as_str()));
        assert_eq!(delta_span(&delta_key(7, 1200)), Some((7, 1200)));
        assert!(delta_key(9, 10) < delta_key(10, 11), "deltas sort by revision");
        assert_eq!(parse_backup_id(&id), Some((t, 42)));
        assert_eq!(parse_backup_id("20261127T160005Z-rx"), None);
        assert_eq!(parse_backup_id("not-a-backup"), None);
    }
}
