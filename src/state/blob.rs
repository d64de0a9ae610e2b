//! Large objects in the state store, streamed: an etcd snapshot goes up in
//! parts (S3 multipart, server-side encrypted; a `.partial` file renamed
//! on completion for `file://`) and comes down into a file, so memory holds
//! one part at a time whatever the object's size. An upload that is not
//! completed is aborted (or its partial file removed) and never appears
//! under its key: a reader listing keys never sees half an object.
//!
//! Retention (S3 Object Lock) is set per object when asked; a locked
//! object's versions cannot be deleted before the date, by anyone holding
//! the lock's mode (COMPLIANCE: no one).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, ObjectLockMode};
use chrono::{DateTime, Utc};

use super::{Backend, Store};
use crate::sdk_error::describe_sdk_error;

/// S3's smallest part but the last; one part is what memory holds.
pub const PART_BYTES: usize = 8 * 1024 * 1024;

/// An Object Lock retention for what is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// `GOVERNANCE` or `COMPLIANCE`.
    pub mode: String,
    pub until: DateTime<Utc>,
}

enum Sink {
    S3 {
        client: aws_sdk_s3::Client,
        bucket: String,
        key: String,
        upload_id: String,
        parts: Vec<CompletedPart>,
        retention: Option<Retention>,
    },
    File {
        partial: PathBuf,
        path: PathBuf,
        file: std::fs::File,
    },
}

/// An object being written part by part.
pub struct Upload {
    sink: Option<Sink>,
    buf: Vec<u8>,
    written: u64,
    what: String,
}

impl Store {
    /// Starts a streamed write of `key` (nothing appears under `key` until
    /// [`Upload::complete`]).
    pub async fn upload(&self, key: &str, retention: Option<&Retention>) -> Result<Upload> {
        let what = self.describe(key);
        let sink = match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                let mut req = client
                    .create_multipart_upload()
                    .bucket(bucket)
                    .key(&k)
                    // Encrypted as the bucket's default says (SSE-KMS in a bucket pinfleet made).
                    .content_type("application/octet-stream");
                if let Some(r) = retention {
                    req = req
                        .object_lock_mode(ObjectLockMode::from(r.mode.as_str()))
                        .object_lock_retain_until_date(aws_smithy_types::DateTime::from_secs(r.until.timestamp()));
                }
                let out = req
                    .send()
                    .await
                    .map_err(|e| anyhow!("starting the upload of {what}: {}", describe_sdk_error(&e)))?;
                let upload_id = out.upload_id().context("S3 gave no upload id")?.to_string();
                Sink::S3 {
                    client: client.clone(),
                    bucket: bucket.clone(),
                    key: k,
                    upload_id,
                    parts: Vec::new(),
                    retention: retention.cloned(),
                }
            }
            Backend::File { root } => {
                let path = root.join(&self.cluster).join(key);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                }
                let partial = path.with_extension(format!("tmp-{}-{}", std::process::id(), rand::random::<u32>()));
                let file = std::fs::File::create(&partial).with_context(|| format!("writing {}", partial.display()))?;
                Sink::File { partial, path, file }
            }
        };
        Ok(Upload { sink: Some(sink), buf: Vec::with_capacity(PART_BYTES), written: 0, what })
    }

    /// Streams `key` into the file at `path` (created or truncated); its size.
    pub async fn download(&self, key: &str, path: &Path) -> Result<u64> {
        let mut out = std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
        match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                // A delete marker on top hides a kept version: read that one.
                let obj = match client.get_object().bucket(bucket).key(&k).send().await {
                    Ok(o) => o,
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                        let Some(id) = self.newest_kept_version(key).await? else {
                            bail!("reading {}: {}", self.describe(key), describe_sdk_error(&e));
                        };
                        client.get_object().bucket(bucket).key(&k).version_id(&id).send().await.map_err(|e| {
                            anyhow!("reading {} (version {id}): {}", self.describe(key), describe_sdk_error(&e))
                        })?
                    }
                    Err(e) => bail!("reading {}: {}", self.describe(key), describe_sdk_error(&e)),
                };
                let mut body = obj.body;
                let mut n = 0u64;
                while let Some(chunk) =
                    body.try_next().await.with_context(|| format!("reading {}", self.describe(key)))?
                {
                    out.write_all(&chunk)?;
                    n = n.saturating_add(chunk.len() as u64);
                }
                out.sync_all()?;
                Ok(n)
            }
            Backend::File { root } => {
                let from = root.join(&self.cluster).join(key);
                let mut src = std::fs::File::open(&from).with_context(|| format!("reading {}", from.display()))?;
                let n = std::io::copy(&mut src, &mut out)?;
                out.sync_all()?;
                Ok(n)
            }
        }
    }

    /// Aborts multipart uploads under `prefix` begun more than `older_than`
    /// ago (a writer killed mid-upload leaves its parts behind: never an
    /// object, but stored and billed); removes `file://` partial files as
    /// old. Returns how many were given up.
    pub async fn abort_stale_uploads(&self, prefix: &str, older_than: std::time::Duration) -> Result<usize> {
        let cutoff = std::time::SystemTime::now().checked_sub(older_than).unwrap_or(std::time::UNIX_EPOCH);
        match &self.backend {
            Backend::S3 { client, bucket, prefix: p } => {
                let full = Self::s3_key(p, &self.cluster, prefix);
                let out = client.list_multipart_uploads().bucket(bucket).prefix(&full).send().await.map_err(|e| {
                    anyhow!("listing uploads under {}: {}", self.describe(prefix), describe_sdk_error(&e))
                })?;
                let mut n = 0usize;
                for u in out.uploads() {
                    let begun = u.initiated().and_then(|t| std::time::SystemTime::try_from(*t).ok());
                    if begun.is_some_and(|b| b > cutoff) {
                        continue;
                    }
                    let (Some(key), Some(id)) = (u.key(), u.upload_id()) else { continue };
                    client
                        .abort_multipart_upload()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(id)
                        .send()
                        .await
                        .map_err(|e| anyhow!("aborting the upload of {key}: {}", describe_sdk_error(&e)))?;
                    n = n.saturating_add(1);
                }
                Ok(n)
            }
            Backend::File { root } => {
                let dir = root.join(&self.cluster).join(prefix);
                let mut n = 0usize;
                let mut stack = vec![dir];
                while let Some(d) = stack.pop() {
                    let Ok(entries) = std::fs::read_dir(&d) else { continue };
                    for e in entries.flatten() {
                        let p = e.path();
                        if p.is_dir() {
                            stack.push(p);
                        } else if p.to_string_lossy().contains(".tmp-")
                            && e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t <= cutoff)
                            && std::fs::remove_file(&p).is_ok()
                        {
                            n = n.saturating_add(1);
                        }
                    }
                }
                Ok(n)
            }
        }
    }

    /// Deletes every version of `key` (S3: each version by id, so a locked
    /// one refuses with S3's own AccessDenied); what could not be deleted
    /// is the error.
    pub async fn delete_all_versions(&self, key: &str) -> Result<()> {
        match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                let out =
                    client.list_object_versions().bucket(bucket).prefix(&k).send().await.map_err(|e| {
                        anyhow!("listing versions of {}: {}", self.describe(key), describe_sdk_error(&e))
                    })?;
                let ids: Vec<String> = out
                    .versions()
                    .iter()
                    .filter(|v| v.key() == Some(k.as_str()))
                    .filter_map(|v| v.version_id().map(str::to_string))
                    .chain(
                        out.delete_markers()
                            .iter()
                            .filter(|v| v.key() == Some(k.as_str()))
                            .filter_map(|v| v.version_id().map(str::to_string)),
                    )
                    .collect();
                for id in ids {
                    client.delete_object().bucket(bucket).key(&k).version_id(&id).send().await.map_err(|e| {
                        anyhow!("deleting {} (version {id}): {}", self.describe(key), describe_sdk_error(&e))
                    })?;
                }
                Ok(())
            }
            Backend::File { .. } => self.delete(key).await,
        }
    }

    /// Writes a small object under `key`, locked from its first byte when
    /// `retention` is given (S3 takes the lock with the write: no moment
    /// exists when the new version can be deleted). A `file://` store has
    /// no locks: a plain write.
    pub async fn put_locked(&self, key: &str, bytes: Vec<u8>, retention: Option<&Retention>) -> Result<()> {
        let (Some(r), Backend::S3 { client, bucket, prefix }) = (retention, &self.backend) else {
            self.put(key, bytes, super::Condition::None).await?;
            return Ok(());
        };
        let k = Self::s3_key(prefix, &self.cluster, key);
        client
            .put_object()
            .bucket(bucket)
            .key(&k)
            .content_type("application/json")
            // S3 takes a write with Object Lock only with a checksum of
            // its body (Content-MD5 or a flexible checksum).
            .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
            .object_lock_mode(ObjectLockMode::from(r.mode.as_str()))
            .object_lock_retain_until_date(aws_smithy_types::DateTime::from_secs(r.until.timestamp()))
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| {
                anyhow!("writing {} locked until {}: {}", self.describe(key), r.until, describe_sdk_error(&e))
            })?;
        Ok(())
    }

    /// [`Store::put_locked`] of `value` as JSON (as [`Store::put_json`] writes it).
    pub async fn put_json_locked<T: serde::Serialize>(
        &self,
        key: &str,
        value: &T,
        retention: Option<&Retention>,
    ) -> Result<()> {
        self.put_locked(key, serde_json::to_vec_pretty(value)?, retention).await
    }

    /// Locks the version of `key` stored now (later writes make new,
    /// unlocked versions; this one stays). `Ok(false)`: nothing is stored
    /// under `key`, or the store has no locks (`file://`). A lock is only
    /// ever lengthened: one already holding longer is left as it is.
    pub async fn lock(&self, key: &str, r: &Retention) -> Result<bool> {
        let Backend::S3 { client, bucket, prefix } = &self.backend else { return Ok(false) };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let head = match client.head_object().bucket(bucket).key(&k).send().await {
            Ok(h) => h,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => return Ok(false),
            Err(e) => bail!("reading {}: {}", self.describe(key), describe_sdk_error(&e)),
        };
        if head.object_lock_retain_until_date().and_then(to_utc).is_some_and(|until| until >= r.until) {
            return Ok(true);
        }
        let lock = aws_sdk_s3::types::ObjectLockRetention::builder()
            .mode(aws_sdk_s3::types::ObjectLockRetentionMode::from(r.mode.as_str()))
            .retain_until_date(aws_smithy_types::DateTime::from_secs(r.until.timestamp()))
            .build();
        let mut req = client.put_object_retention().bucket(bucket).key(&k).retention(lock);
        // That version, even if another write lands in between.
        if let Some(v) = head.version_id() {
            req = req.version_id(v);
        }
        req.send()
            .await
            .map_err(|e| anyhow!("locking {} until {}: {}", self.describe(key), r.until, describe_sdk_error(&e)))?;
        Ok(true)
    }

    /// The Object Lock on the version of `key` stored now, if any (S3 says
    /// it to a caller allowed `s3:GetObjectRetention`; `file://`: none).
    pub async fn retention_of(&self, key: &str) -> Result<Option<Retention>> {
        let Backend::S3 { client, bucket, prefix } = &self.backend else { return Ok(None) };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let head =
            match client.head_object().bucket(bucket).key(&k).send().await {
                Ok(h) => h,
                // Under a delete marker: the version kept beneath it.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => {
                    let Some(id) = self.newest_kept_version(key).await? else { return Ok(None) };
                    client.head_object().bucket(bucket).key(&k).version_id(&id).send().await.map_err(|e| {
                        anyhow!("reading {} (version {id}): {}", self.describe(key), describe_sdk_error(&e))
                    })?
                }
                Err(e) => bail!("reading {}: {}", self.describe(key), describe_sdk_error(&e)),
            };
        Ok(match (head.object_lock_mode(), head.object_lock_retain_until_date().and_then(to_utc)) {
            (Some(mode), Some(until)) => Some(Retention { mode: mode.as_str().to_string(), until }),
            _ => None,
        })
    }

    /// Until when some version of `key` is locked, if one still is after
    /// `now` (every version counts: deleting the object deletes them all).
    /// `file://` has no locks.
    pub async fn locked_until(&self, key: &str, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
        let Backend::S3 { client, bucket, prefix } = &self.backend else { return Ok(None) };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let out = client
            .list_object_versions()
            .bucket(bucket)
            .prefix(&k)
            .send()
            .await
            .map_err(|e| anyhow!("listing versions of {}: {}", self.describe(key), describe_sdk_error(&e)))?;
        let mut latest: Option<DateTime<Utc>> = None;
        for id in out.versions().iter().filter(|v| v.key() == Some(k.as_str())).filter_map(|v| v.version_id()) {
            let head = client.head_object().bucket(bucket).key(&k).version_id(id).send().await.map_err(|e| {
                anyhow!("reading the lock of {} (version {id}): {}", self.describe(key), describe_sdk_error(&e))
            })?;
            if let Some(until) = head.object_lock_retain_until_date().and_then(to_utc).filter(|u| *u > now) {
                latest = Some(latest.map_or(until, |l| l.max(until)));
            }
        }
        Ok(latest)
    }
}

impl Store {
    /// Keys under `prefix` that have a stored version, whether or not a
    /// delete marker hides it (S3: ListObjectVersions; `file://`: as
    /// [`Store::list`]). For what must outlive a plain delete: a locked
    /// backup is still a backup when someone put a delete marker on top.
    pub async fn list_kept(&self, prefix: &str) -> Result<Vec<String>> {
        let Backend::S3 { client, bucket, prefix: p } = &self.backend else { return self.list(prefix).await };
        let base = Self::s3_key(p, &self.cluster, "");
        let full = format!("{base}{prefix}");
        let mut keys = std::collections::BTreeSet::new();
        let (mut key_marker, mut version_marker) = (None::<String>, None::<String>);
        loop {
            let out = client
                .list_object_versions()
                .bucket(bucket)
                .prefix(&full)
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await
                .map_err(|e| {
                    anyhow!("listing the versions under {}: {}", self.describe(prefix), describe_sdk_error(&e))
                })?;
            keys.extend(
                out.versions().iter().filter_map(|v| v.key()).filter_map(|k| k.get(base.len()..)).map(str::to_string),
            );
            if out.is_truncated() != Some(true) {
                break;
            }
            key_marker = out.next_key_marker().map(str::to_string);
            version_marker = out.next_version_id_marker().map(str::to_string);
            if key_marker.is_none() {
                break;
            }
        }
        Ok(keys.into_iter().collect())
    }

    /// The stored versions of exactly `key` (not of longer keys it prefixes),
    /// delete markers left out; S3 only (`None` for `file://`).
    async fn versions_of(&self, key: &str) -> Result<Option<Vec<aws_sdk_s3::types::ObjectVersion>>> {
        let Backend::S3 { client, bucket, prefix } = &self.backend else { return Ok(None) };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let out = client
            .list_object_versions()
            .bucket(bucket)
            .prefix(&k)
            .send()
            .await
            .map_err(|e| anyhow!("listing versions of {}: {}", self.describe(key), describe_sdk_error(&e)))?;
        Ok(Some(out.versions().iter().filter(|v| v.key() == Some(k.as_str())).cloned().collect()))
    }

    /// The newest stored version of `key` that is not a delete marker, when
    /// the key's current version is one (or is gone); `None` otherwise.
    async fn newest_kept_version(&self, key: &str) -> Result<Option<String>> {
        let Some(versions) = self.versions_of(key).await? else { return Ok(None) };
        Ok(versions
            .iter()
            .max_by_key(|v| v.last_modified().map(|t| (t.secs(), t.subsec_nanos())))
            .and_then(|v| v.version_id())
            .map(str::to_string))
    }

    /// [`Store::get`], reading past a delete marker to the newest version
    /// kept beneath it.
    pub async fn get_kept(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        if let Some(hit) = self.get(key).await? {
            return Ok(Some(hit));
        }
        let Backend::S3 { client, bucket, prefix } = &self.backend else { return Ok(None) };
        let Some(id) = self.newest_kept_version(key).await? else { return Ok(None) };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let out = client
            .get_object()
            .bucket(bucket)
            .key(&k)
            .version_id(&id)
            .send()
            .await
            .map_err(|e| anyhow!("reading {} (version {id}): {}", self.describe(key), describe_sdk_error(&e)))?;
        let etag = out.e_tag().unwrap_or_default().to_string();
        let bytes = out.body.collect().await.with_context(|| format!("reading {}", self.describe(key)))?;
        Ok(Some((bytes.to_vec(), etag)))
    }

    /// Every stored version of `key`, parsed, newest first (S3: each
    /// version by id; `file://`: the one there is). For write-once records
    /// that only add (cuts): a version put over a locked one adds to it,
    /// it never takes it away.
    pub async fn get_json_versions<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Vec<T>> {
        let Backend::S3 { client, bucket, prefix } = &self.backend else {
            return Ok(self.get_json_kept::<T>(key).await?.into_iter().collect());
        };
        let k = Self::s3_key(prefix, &self.cluster, key);
        let mut versions = self.versions_of(key).await?.unwrap_or_default();
        versions.sort_by_key(|v| std::cmp::Reverse(v.last_modified().map(|t| (t.secs(), t.subsec_nanos()))));
        let mut all = Vec::new();
        for id in versions.iter().filter_map(|v| v.version_id()) {
            let obj =
                client.get_object().bucket(bucket).key(&k).version_id(id).send().await.map_err(|e| {
                    anyhow!("reading {} (version {id}): {}", self.describe(key), describe_sdk_error(&e))
                })?;
            let bytes = obj.body.collect().await.with_context(|| format!("reading {}", self.describe(key)))?;
            all.push(
                serde_json::from_slice(&bytes.to_vec())
                    .with_context(|| format!("parsing {} (version {id})", self.describe(key)))?,
            );
        }
        Ok(all)
    }

    /// [`Store::get_json`] through [`Store::get_kept`].
    pub async fn get_json_kept<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.get_kept(key).await? {
            None => Ok(None),
            Some((bytes, _)) => {
                serde_json::from_slice(&bytes).map(Some).with_context(|| format!("parsing {}", self.describe(key)))
            }
        }
    }
}

/// S3's date as chrono's.
fn to_utc(t: &aws_smithy_types::DateTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

impl Upload {
    /// Appends bytes; a full part goes up before this returns.
    pub async fn write(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let room = PART_BYTES.saturating_sub(self.buf.len());
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.buf.extend_from_slice(now);
            bytes = rest;
            if self.buf.len() >= PART_BYTES {
                self.flush().await?;
            }
        }
        Ok(())
    }

    pub fn written(&self) -> u64 {
        self.written.saturating_add(self.buf.len() as u64)
    }

    async fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let part = std::mem::replace(&mut self.buf, Vec::with_capacity(PART_BYTES));
        let n = part.len() as u64;
        match self.sink.as_mut().context("the upload has ended")? {
            Sink::S3 { client, bucket, key, upload_id, parts, .. } => {
                let number = i32::try_from(parts.len().saturating_add(1)).context("too many parts")?;
                let out = client
                    .upload_part()
                    .bucket(bucket.as_str())
                    .key(key.as_str())
                    .upload_id(upload_id.as_str())
                    .part_number(number)
                    .body(ByteStream::from(part))
                    .send()
                    .await
                    .map_err(|e| anyhow!("uploading part {number} of {}: {}", self.what, describe_sdk_error(&e)))?;
                parts.push(
                    CompletedPart::builder().part_number(number).set_e_tag(out.e_tag().map(str::to_string)).build(),
                );
            }
            Sink::File { file, partial, .. } => {
                file.write_all(&part).with_context(|| format!("writing {}", partial.display()))?;
            }
        }
        self.written = self.written.saturating_add(n);
        Ok(())
    }

    /// Finishes the object: only now does it appear under its key.
    pub async fn complete(mut self) -> Result<u64> {
        if let Err(e) = self.flush().await {
            self.abort().await;
            return Err(e);
        }
        let size = self.written;
        match self.sink.take().context("the upload has ended")? {
            Sink::S3 { client, bucket, key, upload_id, parts, retention } => {
                if parts.is_empty() {
                    let _ =
                        client.abort_multipart_upload().bucket(&bucket).key(&key).upload_id(&upload_id).send().await;
                    bail!("nothing was written to {}", self.what);
                }
                let done = CompletedMultipartUpload::builder().set_parts(Some(parts)).build();
                if let Err(e) = client
                    .complete_multipart_upload()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&upload_id)
                    .multipart_upload(done)
                    .send()
                    .await
                {
                    let _ =
                        client.abort_multipart_upload().bucket(&bucket).key(&key).upload_id(&upload_id).send().await;
                    bail!("completing the upload of {}: {}", self.what, describe_sdk_error(&e));
                }
                // The retention again on the completed object, explicitly
                // (not every S3 keeps the one given when the upload began).
                if let Some(r) = retention {
                    let lock = aws_sdk_s3::types::ObjectLockRetention::builder()
                        .mode(aws_sdk_s3::types::ObjectLockRetentionMode::from(r.mode.as_str()))
                        .retain_until_date(aws_smithy_types::DateTime::from_secs(r.until.timestamp()))
                        .build();
                    client
                        .put_object_retention()
                        .bucket(&bucket)
                        .key(&key)
                        .retention(lock)
                        .send()
                        .await
                        .map_err(|e| anyhow!("locking {} until {}: {}", self.what, r.until, describe_sdk_error(&e)))?;
                }
            }
            Sink::File { partial, path, file } => {
                file.sync_all().with_context(|| format!("writing {}", partial.display()))?;
                std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Ok(size)
    }

    /// Gives the upload up: S3 drops its parts, a partial file is removed.
    pub async fn abort(mut self) {
        match self.sink.take() {
            Some(Sink::S3 { client, bucket, key, upload_id, .. }) => {
                let _ = client.abort_multipart_upload().bucket(bucket).key(key).upload_id(upload_id).send().await;
            }
            Some(Sink::File { partial, .. }) => {
                let _ = std::fs::remove_file(partial);
            }
            None => {}
        }
    }
}

impl Drop for Upload {
    /// An upload dropped without completing (a panic, a cancelled task)
    /// leaves no partial file; S3's parts are dropped by the bucket's
    /// lifecycle rule (they are never listed as an object either way).
    fn drop(&mut self) {
        if let Some(Sink::File { partial, .. }) = &self.sink {
            let _ = std::fs::remove_file(partial);
        }
    }
}
