//! The state store: `s3://bucket/prefix/<cluster>/…` or `file://dir/<cluster>/…`.
//!
//! Holds, per cluster: the last applied spec (fully defaulted), one history
//! record per applied revision, the generated PKI (server-side encrypted,
//! never printed), rollout progress, and the lock that keeps two runs from
//! changing one cluster at once (a conditional write: `If-None-Match: *`).

pub mod blob;
pub mod capacity;
pub mod join;
pub mod lock;
pub mod owner;
pub mod pki;

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ServerSideEncryption;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// A write's precondition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    None,
    /// Only if nothing is stored under the key.
    IfAbsent,
    /// Only if what is stored still has this ETag.
    IfMatch(String),
}

/// A conditional write lost: someone else wrote first.
#[derive(Debug, thiserror::Error)]
#[error("the object changed or already exists (precondition failed)")]
pub struct PreconditionFailed;

#[derive(Debug, Clone)]
enum Backend {
    S3 { client: aws_sdk_s3::Client, bucket: String, prefix: String },
    File { root: PathBuf },
}

/// One cluster's folder in the state store.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    cluster: String,
    url: String,
}

fn etag_of(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("\"{}\"", hex::encode(sha2::Sha256::digest(bytes)))
}

/// What an `s3://` store needs of AWS: an S3 client and its region
/// (the cloud's clients give them: `cloud::aws::Aws`).
pub trait S3Access: Send + Sync {
    fn s3(&self) -> &aws_sdk_s3::Client;
    fn region(&self) -> &str;
}

impl Store {
    /// Opens the store named by `url` for `cluster`; an S3 bucket that does
    /// not exist yet is created with versioning, public access blocked and
    /// default encryption.
    /// With `?expectedBucketOwner=ACCOUNT` on the URL every S3 call
    /// states the bucket's owner ([`owner`]), and a bucket of that name in
    /// another account stops the command before its first write.
    pub async fn open(url: &str, cluster: &str, aws: Option<&dyn S3Access>) -> Result<Store> {
        let (url, expected) = crate::spec::validate::split_state_store(url).map_err(anyhow::Error::msg)?;
        let backend = if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let aws = aws.context("an s3:// state store needs AWS access")?;
            let client = match expected {
                Some(id) => owner::client(aws.s3(), id),
                None => aws.s3().clone(),
            };
            ensure_bucket(&client, aws.s3(), bucket, aws.region(), expected).await?;
            Backend::S3 { client, bucket: bucket.to_string(), prefix: prefix.trim_matches('/').to_string() }
        } else if let Some(dir) = url.strip_prefix("file://") {
            Backend::File { root: PathBuf::from(dir) }
        } else {
            bail!("`{url}` is not a state store URL (s3://bucket/prefix or file://dir)");
        };
        Ok(Store { backend, cluster: cluster.to_string(), url: url.to_string() })
    }

    /// The same store's folder for another name (no call: the bucket is this one's).
    pub fn sibling(&self, cluster: &str) -> Store {
        Store { backend: self.backend.clone(), cluster: cluster.to_string(), url: self.url.clone() }
    }

    /// [`Store::open`] for reading only: an S3 bucket that does not exist
    /// is no store (None), and is not created.
    pub async fn open_existing(url: &str, cluster: &str, aws: Option<&dyn S3Access>) -> Result<Option<Store>> {
        let (base, expected) = crate::spec::validate::split_state_store(url).map_err(anyhow::Error::msg)?;
        if let (Some(rest), Some(aws)) = (base.strip_prefix("s3://"), aws) {
            let bucket = rest.split('/').next().unwrap_or_default();
            let client = match expected {
                Some(id) => owner::client(aws.s3(), id),
                None => aws.s3().clone(),
            };
            match client.head_bucket().bucket(bucket).send().await {
                Ok(_) => {}
                Err(e) if expected.is_some() && e.raw_response().map(|r| r.status().as_u16()) == Some(403) => {
                    bail!("{}", owner::refused(bucket, expected.unwrap_or_default()))
                }
                Err(_) => return Ok(None),
            }
        }
        Store::open(url, cluster, aws).await.map(Some)
    }

    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Where `key` lives, for messages.
    pub fn describe(&self, key: &str) -> String {
        format!("{}/{}/{}", self.url.trim_end_matches('/'), self.cluster, key)
    }

    fn s3_key(prefix: &str, cluster: &str, key: &str) -> String {
        if prefix.is_empty() {
            format!("{cluster}/{key}")
        } else {
            format!("{prefix}/{cluster}/{key}")
        }
    }

    /// The object and its ETag, or `None` when absent.
    pub async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                match client.get_object().bucket(bucket).key(&k).send().await {
                    Ok(out) => {
                        let etag = out.e_tag().unwrap_or_default().to_string();
                        let bytes =
                            out.body.collect().await.with_context(|| format!("reading {}", self.describe(key)))?;
                        Ok(Some((bytes.to_vec(), etag)))
                    }
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
                    Err(e) => Err(anyhow::anyhow!(
                        "reading {}: {}",
                        self.describe(key),
                        crate::sdk_error::describe_sdk_error(&e)
                    )),
                }
            }
            Backend::File { root } => {
                let path = root.join(&self.cluster).join(key);
                match std::fs::read(&path) {
                    Ok(b) => {
                        let etag = etag_of(&b);
                        Ok(Some((b, etag)))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
                }
            }
        }
    }

    /// Writes `bytes` under `key` if `cond` holds; returns the new ETag, or
    /// [`PreconditionFailed`] (inside the error) when someone else won.
    pub async fn put(&self, key: &str, bytes: Vec<u8>, cond: Condition) -> Result<String> {
        match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                let mut req = client
                    .put_object()
                    .bucket(bucket)
                    .key(&k)
                    // The bucket's default encryption (SSE-KMS in a bucket
                    // pinfleet made; a customer-managed key set there is used).
                    .content_type("application/json")
                    .body(ByteStream::from(bytes));
                req = match &cond {
                    Condition::None => req,
                    Condition::IfAbsent => req.if_none_match("*"),
                    Condition::IfMatch(etag) => req.if_match(etag),
                };
                match req.send().await {
                    Ok(out) => Ok(out.e_tag().unwrap_or_default().to_string()),
                    Err(e) if matches!(e.raw_response().map(|r| r.status().as_u16()), Some(412 | 409)) => {
                        Err(PreconditionFailed.into())
                    }
                    Err(e) => Err(anyhow::anyhow!(
                        "writing {}: {}",
                        self.describe(key),
                        crate::sdk_error::describe_sdk_error(&e)
                    )),
                }
            }
            Backend::File { root } => {
                let path = root.join(&self.cluster).join(key);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                }
                let etag = etag_of(&bytes);
                match cond {
                    Condition::IfAbsent => {
                        use std::io::Write;
                        let mut f = match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                            Ok(f) => f,
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                                return Err(PreconditionFailed.into())
                            }
                            Err(e) => return Err(e).with_context(|| format!("writing {}", path.display())),
                        };
                        f.write_all(&bytes)?;
                        f.sync_all()?;
                    }
                    other => {
                        if let Condition::IfMatch(want) = other {
                            let have = std::fs::read(&path).ok().map(|b| etag_of(&b));
                            if have.as_deref() != Some(want.as_str()) {
                                return Err(PreconditionFailed.into());
                            }
                        }
                        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
                        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
                        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
                    }
                }
                Ok(etag)
            }
        }
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        match &self.backend {
            Backend::S3 { client, bucket, prefix } => {
                let k = Self::s3_key(prefix, &self.cluster, key);
                client.delete_object().bucket(bucket).key(&k).send().await.map_err(|e| {
                    anyhow::anyhow!("deleting {}: {}", self.describe(key), crate::sdk_error::describe_sdk_error(&e))
                })?;
                Ok(())
            }
            Backend::File { root } => match std::fs::remove_file(root.join(&self.cluster).join(key)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            },
        }
    }

    /// Keys under `prefix` (relative to the cluster's folder), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let mut keys = match &self.backend {
            Backend::S3 { client, bucket, prefix: p } => {
                let base = Self::s3_key(p, &self.cluster, "");
                let full = format!("{base}{prefix}");
                let mut keys = Vec::new();
                let mut pages = client.list_objects_v2().bucket(bucket).prefix(&full).into_paginator().send();
                while let Some(page) = pages.next().await {
                    let page = page.map_err(|e| {
                        anyhow::anyhow!(
                            "listing {}: {}",
                            self.describe(prefix),
                            crate::sdk_error::describe_sdk_error(&e)
                        )
                    })?;
                    keys.extend(page.contents().iter().filter_map(|o| o.key()).map(|k| k[base.len()..].to_string()));
                }
                keys
            }
            Backend::File { root } => {
                let dir = root.join(&self.cluster);
                let mut keys = Vec::new();
                let mut stack = vec![dir.clone()];
                while let Some(d) = stack.pop() {
                    let Ok(entries) = std::fs::read_dir(&d) else { continue };
                    for e in entries.flatten() {
                        let p = e.path();
                        if p.is_dir() {
                            stack.push(p);
                        } else if let Ok(rel) = p.strip_prefix(&dir) {
                            let rel = rel.to_string_lossy().replace('\\', "/");
                            if rel.starts_with(prefix) && !rel.contains(".tmp-") {
                                keys.push(rel);
                            }
                        }
                    }
                }
                keys
            }
        };
        keys.sort();
        Ok(keys)
    }

    pub async fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        match self.get(key).await? {
            None => Ok(None),
            Some((bytes, _)) => {
                serde_json::from_slice(&bytes).map(Some).with_context(|| format!("parsing {}", self.describe(key)))
            }
        }
    }

    pub async fn put_json<T: Serialize>(&self, key: &str, value: &T) -> Result<String> {
        self.put(key, serde_json::to_vec_pretty(value)?, Condition::None).await
    }

    /// Names of the clusters this store holds (its top-level folders).
    pub async fn clusters(url: &str, aws: Option<&dyn S3Access>) -> Result<Vec<String>> {
        let store = Store::open(url, "", aws).await?;
        let keys = store.list("").await?;
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|k| k.trim_start_matches('/').split('/').next().map(str::to_string))
            // `.fleet` and the like are the fleet's, not clusters.
            .filter(|s| !s.is_empty() && !s.starts_with('.'))
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// `client` states the `expected` owner, if any; `plain` does not (it
/// removes a bucket just made in an account other than the expected one).
async fn ensure_bucket(
    client: &aws_sdk_s3::Client,
    plain: &aws_sdk_s3::Client,
    bucket: &str,
    region: &str,
    expected: Option<&str>,
) -> Result<()> {
    use aws_sdk_s3::types::{
        BucketLocationConstraint, BucketVersioningStatus, CreateBucketConfiguration, PublicAccessBlockConfiguration,
        ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
        VersioningConfiguration,
    };
    match client.head_bucket().bucket(bucket).send().await {
        Ok(_) => return Ok(()),
        Err(e) if e.raw_response().map(|r| r.status().as_u16()) == Some(404) => {}
        Err(e) if e.raw_response().map(|r| r.status().as_u16()) == Some(403) && expected.is_some() => {
            bail!("{}", owner::refused(bucket, expected.unwrap_or_default()))
        }
        Err(e) => bail!("checking state bucket {bucket}: {}", crate::sdk_error::describe_sdk_error(&e)),
    }
    let mut create = client.create_bucket().bucket(bucket);
    if region != "us-east-1" {
        create = create.create_bucket_configuration(
            CreateBucketConfiguration::builder().location_constraint(BucketLocationConstraint::from(region)).build(),
        );
    }
    let created = match create.send().await {
        Ok(_) => true,
        Err(e) if e.as_service_error().is_some_and(|s| s.is_bucket_already_owned_by_you()) => false,
        Err(e) => bail!("creating state bucket {bucket}: {}", crate::sdk_error::describe_sdk_error(&e)),
    };
    let versioning = VersioningConfiguration::builder().status(BucketVersioningStatus::Enabled).build();
    if let Err(e) = client.put_bucket_versioning().bucket(bucket).versioning_configuration(versioning).send().await {
        // CreateBucket states no owner: made with credentials of another
        // account, the bucket is that account's. Taken back before a write.
        if let (true, Some(owner), Some(403)) = (created, expected, e.raw_response().map(|r| r.status().as_u16())) {
            let removed = plain.delete_bucket().bucket(bucket).send().await.is_ok();
            bail!("{}", owner::made_elsewhere(bucket, owner, removed));
        }
        bail!("enabling versioning on {bucket}: {}", crate::sdk_error::describe_sdk_error(&e));
    }
    let block = PublicAccessBlockConfiguration::builder()
        .block_public_acls(true)
        .block_public_policy(true)
        .ignore_public_acls(true)
        .restrict_public_buckets(true)
        .build();
    client.put_public_access_block().bucket(bucket).public_access_block_configuration(block).send().await.map_err(
        |e| anyhow::anyhow!("blocking public access on {bucket}: {}", crate::sdk_error::describe_sdk_error(&e)),
    )?;
    let rule = ServerSideEncryptionRule::builder()
        .apply_server_side_encryption_by_default(
            // SSE-KMS under the account's AWS-managed key (aws/s3): the PKI,
            // the Secrets' encryption keys and the etcd backups kept here are
            // encrypted by KMS; an operator may set a customer-managed key as
            // the bucket's default instead, and every write follows it.
            ServerSideEncryptionByDefault::builder().sse_algorithm(ServerSideEncryption::AwsKms).build()?,
        )
        .bucket_key_enabled(true)
        .build();
    client
        .put_bucket_encryption()
        .bucket(bucket)
        .server_side_encryption_configuration(ServerSideEncryptionConfiguration::builder().rules(rule).build()?)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!("enabling encryption on {bucket}: {}", crate::sdk_error::describe_sdk_error(&e))
        })?;
    tracing::info!(bucket, "created state bucket (versioned, private, encrypted with KMS)");
    Ok(())
}

/// One applied revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    pub revision: u64,
    pub applied_at: String,
    pub by: String,
    pub host: String,
    /// The AWS caller (STS GetCallerIdentity's ARN) the run acted as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    pub command: String,
    pub created: usize,
    pub updated: usize,
    pub replaced: usize,
    pub deleted: usize,
    pub changes: Vec<String>,
}

impl HistoryRecord {
    /// The record of actions that are not a plan (the machine-health loop,
    /// the autoscaler, a roll's skipped gates): what was done, in words.
    pub fn of_actions(revision: u64, command: &str, changes: Vec<String>) -> Self {
        let (by, host) = whoami();
        HistoryRecord {
            revision,
            applied_at: chrono::Utc::now().to_rfc3339(),
            by,
            host,
            identity: None,
            command: command.to_string(),
            created: 0,
            updated: 0,
            replaced: 0,
            deleted: 0,
            changes,
        }
    }

    /// The same record, naming the AWS caller the run acted as.
    pub fn acting_as(mut self, identity: Option<String>) -> Self {
        self.identity = identity;
        self
    }
}

pub const SPEC_KEY: &str = "spec.json";
pub const HISTORY_PREFIX: &str = "history/";

impl Store {
    pub async fn history(&self) -> Result<Vec<HistoryRecord>> {
        let mut out = Vec::new();
        for k in self.list(HISTORY_PREFIX).await? {
            if let Some(r) = self.get_json::<HistoryRecord>(&k).await? {
                out.push(r);
            }
        }
        out.sort_by_key(|r| r.revision);
        Ok(out)
    }

    /// The revision the next apply records (history length + 1). A run that
    /// died before recording reuses its number, which keeps launches idempotent.
    pub async fn next_revision(&self) -> Result<u64> {
        Ok(self.list(HISTORY_PREFIX).await?.len() as u64 + 1)
    }

    pub async fn record(&self, rec: &HistoryRecord, spec: &crate::spec::Cluster) -> Result<()> {
        self.put_json(&format!("{HISTORY_PREFIX}{:08}.json", rec.revision), rec).await?;
        self.put_json(SPEC_KEY, spec).await?;
        Ok(())
    }
}

/// The local folder for kubeconfigs and other per-user files
/// (`PINFLEET_HOME`, default `.pinfleet`).
pub fn home() -> std::path::PathBuf {
    std::env::var_os("PINFLEET_HOME").map(Into::into).unwrap_or_else(|| ".pinfleet".into())
}

/// Who is running this (for locks and history): the login name (from the
/// environment, else the process's uid in /etc/passwd, as `id -un` does)
/// and the host name (the kernel's, as `hostname` prints it).
pub fn whoami() -> (String, String) {
    let nonempty = |s: String| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    let user = std::env::var("USER")
        .ok()
        .and_then(nonempty)
        .or_else(|| std::env::var("LOGNAME").ok().and_then(nonempty))
        .or_else(user_of_uid)
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(nonempty)
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok().and_then(nonempty))
        .or_else(|| std::env::var("HOSTNAME").ok().and_then(nonempty))
        .unwrap_or_else(|| "unknown".into());
    (user, host)
}

fn user_of_uid() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid).then(|| f[0].to_string())
    })
}
