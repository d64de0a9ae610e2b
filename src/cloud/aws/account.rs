//! The account a cluster lives in: exactly one role assumed per target
//! account from the caller's identity (STS AssumeRole), checked with
//! GetCallerIdentity before anything is written, its credentials cached per
//! (role, external id, region) and refreshed before they expire.
//!
//! Sits under [`super::client`]: `Aws::connect` asks [`Sessions`] for the
//! cluster's [`AssumedRole`] and hands it to every service client as their
//! credentials provider, so the SDK's own identity cache asks it again when
//! the credentials near their expiry (a rollout longer than a session goes
//! on). Cluster API's AWS provider once reused one cached session for
//! another identity and created resources in the wrong account; here the
//! cache key is the whole (role, external id, region) and a session is
//! never handed to another key.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{future, ProvideCredentials};
use aws_credential_types::Credentials;
use aws_smithy_async::time::{SharedTimeSource, SystemTimeSource};

use crate::spec::Account;

/// What a session is asked for: one account's role, for one cluster and
/// command (the session's name and tags say both, so CloudTrail in the
/// target account attributes every call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleFor {
    pub account: Account,
    /// The cluster (or, for a fleet's shared session, `fleet`).
    pub cluster: String,
    /// The pinfleet command, e.g. `plan`, `fleet-roll`.
    pub command: String,
}

/// AssumeRole's DurationSeconds: STS takes 900 s to 43,200 s (and at most
/// the role's MaxSessionDuration, one hour unless raised). An hour is what
/// every role allows; longer commands refresh.
pub const SESSION: Duration = Duration::from_secs(3600);

/// Credentials this close to their expiry are replaced before use: a call
/// signed now must still be valid when it arrives and while the SDK retries
/// it (eight attempts with backoff), and a 15-minute session then refreshes
/// at 10 minutes.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The cache key: credentials are never reused across it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub role_arn: String,
    pub external_id: Option<String>,
    pub region: String,
}

/// STS's RoleSessionName: 2–64 characters of `[\w+=,.@-]`.
pub fn session_name_ok(s: &str) -> bool {
    (2..=64).contains(&s.chars().count()) && s.chars().all(session_char)
}

fn session_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_+=,.@-".contains(c)
}

/// `pinfleet-<cluster>-<command>`, every other character replaced by `-`
/// and cut to STS's 64 characters (the cluster keeps its head: names are
/// DNS labels of up to 63, the command is the tail that goes first).
pub fn session_name(cluster: &str, command: &str) -> String {
    let clean = |s: &str| s.chars().map(|c| if session_char(c) { c } else { '-' }).collect::<String>();
    let mut name = format!("pinfleet-{}-{}", clean(cluster), clean(command));
    name.truncate(64);
    name
}

/// The caller's identity as SourceIdentity (the same charset and 2–64
/// characters; STS refuses a value starting `aws:`): the last part of the
/// caller's ARN, a user's or a session's name.
pub fn source_identity(caller_arn: &str) -> Option<String> {
    let last = caller_arn.rsplit(['/', ':']).next().unwrap_or_default();
    let mut s: String = last.chars().map(|c| if session_char(c) { c } else { '-' }).collect();
    s.truncate(64);
    (s.len() >= 2 && !s.starts_with("aws:")).then_some(s)
}

/// The account named in an STS or IAM ARN (`arn:aws:sts::<account>:…`).
pub fn arn_account(arn: &str) -> Option<&str> {
    arn.split(':').nth(4).filter(|a| a.len() == 12)
}

/// The session tags: the cluster and the command (STS: at most 50 tags,
/// keys up to 128 characters, values up to 256).
pub fn session_tags(r: &RoleFor) -> Vec<(String, String)> {
    let cut = |s: &str| s.chars().take(256).collect::<String>();
    vec![("pinfleet:cluster".into(), cut(&r.cluster)), ("pinfleet:command".into(), cut(&r.command))]
}

/// One account's assumed role in one region: a credentials provider the
/// SDK calls whenever its cache is empty or near expiry.
#[derive(Debug)]
pub struct AssumedRole {
    /// STS under the caller's own identity.
    sts: aws_sdk_sts::Client,
    key: Key,
    account: String,
    session: String,
    tags: Vec<(String, String)>,
    source_identity: Option<String>,
    duration: Duration,
    time: SharedTimeSource,
    cached: tokio::sync::Mutex<Option<Credentials>>,
    assumed: AtomicU32,
    /// Access key ids this role handed out (a test maps every signed call
    /// back to its account with them).
    issued: Mutex<Vec<String>>,
    /// Where the session landed (GetCallerIdentity's ARN and account),
    /// asked once per key.
    landed: tokio::sync::OnceCell<(Option<String>, Option<String>)>,
    /// The caller's ARN.
    caller: Option<String>,
    /// The role's own STS configuration (its account's interceptors): each
    /// refreshed session is checked with it, as the first was, before any
    /// call is signed with it.
    probe: std::sync::OnceLock<aws_sdk_sts::Config>,
}

impl AssumedRole {
    /// How many times STS was asked (refreshes included).
    pub fn assumed(&self) -> u32 {
        self.assumed.load(Ordering::SeqCst)
    }

    pub fn key(&self) -> &Key {
        &self.key
    }

    pub fn account(&self) -> &str {
        &self.account
    }

    pub fn session_name(&self) -> &str {
        &self.session
    }

    /// The caller whose identity assumed this role.
    pub fn caller(&self) -> Option<&str> {
        self.caller.as_deref()
    }

    /// Checks once per key, with `sts` under this role's credentials, that
    /// the session landed in the account the file names.
    pub async fn check(&self, sts: &aws_sdk_sts::Client, role: &RoleFor) -> anyhow::Result<()> {
        // The session first: left to the SDK, AssumeRole runs inside the
        // signing of GetCallerIdentity, and STS's refusal of the one reads
        // as a failure of the other.
        if let Err(e) = self.credentials().await {
            return Err(match assume_role_error(&e) {
                Some(refused) => anyhow::Error::new(refused.clone()),
                None => anyhow::Error::new(e)
                    .context(format!("the session of {} for account {}", self.key.role_arn, self.account)),
            });
        }
        let (arn, account) = self
            .landed
            .get_or_try_init(|| async {
                let out = sts.get_caller_identity().send().await.map_err(|e| {
                    anyhow::anyhow!(
                        "checking where {} landed (GetCallerIdentity): {}",
                        role.account.role_arn,
                        crate::sdk_error::describe_sdk_error(&e)
                    )
                })?;
                Ok::<_, anyhow::Error>((out.arn().map(str::to_string), out.account().map(str::to_string)))
            })
            .await?;
        check_landed(role, arn.as_deref(), account.as_deref())
    }

    pub fn issued(&self) -> Vec<String> {
        self.issued.lock().expect("issued").clone()
    }

    /// The cached credentials while they have more than [`REFRESH_BEFORE`]
    /// left, else a new session.
    pub async fn credentials(&self) -> Result<Credentials, CredentialsError> {
        let mut cached = self.cached.lock().await;
        let now = self.time.now();
        if let Some(c) = cached.as_ref() {
            if c.expiry().is_some_and(|e| e > now + REFRESH_BEFORE) {
                return Ok(early(c));
            }
        }
        let refresh = cached.is_some();
        let fresh = self.assume().await?;
        if refresh {
            if let Some(cfg) = self.probe.get() {
                self.relanded(cfg, &fresh).await?;
            }
        }
        *cached = Some(fresh.clone());
        Ok(early(&fresh))
    }

    /// Where this role's STS calls go and through which interceptors (set
    /// once, by the connection that uses the role).
    pub fn set_probe(&self, cfg: aws_sdk_sts::Config) {
        let _ = self.probe.set(cfg);
    }

    /// A refreshed session, checked as the first was: GetCallerIdentity
    /// under the new credentials must name the file's account. A session
    /// that landed elsewhere is never used, and the work stops.
    async fn relanded(&self, cfg: &aws_sdk_sts::Config, fresh: &Credentials) -> Result<(), CredentialsError> {
        let sts = aws_sdk_sts::Client::from_conf(
            cfg.to_builder()
                .credentials_provider(aws_credential_types::provider::SharedCredentialsProvider::new(fresh.clone()))
                .build(),
        );
        let out = sts.get_caller_identity().send().await.map_err(|e| {
            CredentialsError::provider_error(anyhow::anyhow!(
                "checking where the refreshed session of {} landed (GetCallerIdentity): {}",
                self.key.role_arn,
                crate::sdk_error::describe_sdk_error(&e)
            ))
        })?;
        match out.account() {
            Some(a) if a == self.account => Ok(()),
            other => Err(CredentialsError::provider_error(anyhow::anyhow!(
                "the refreshed session of {} landed in account {} ({}), not in account {} as the cluster's file says: refusing to go on",
                self.key.role_arn,
                other.unwrap_or("?"),
                out.arn().unwrap_or("?"),
                self.account
            ))),
        }
    }

    async fn assume(&self) -> Result<Credentials, CredentialsError> {
        self.assumed.fetch_add(1, Ordering::SeqCst);
        let mut req = self
            .sts
            .assume_role()
            .role_arn(&self.key.role_arn)
            .role_session_name(&self.session)
            .duration_seconds(i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX))
            .set_external_id(self.key.external_id.clone())
            .set_source_identity(self.source_identity.clone());
        for (k, v) in &self.tags {
            let tag = aws_sdk_sts::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| CredentialsError::invalid_configuration(e.to_string()))?;
            req = req.tags(tag);
        }
        let out = req.send().await.map_err(|e| {
            CredentialsError::provider_error(AssumeRoleError {
                role_arn: self.key.role_arn.clone(),
                account: self.account.clone(),
                refused: e.as_service_error().is_some(),
                sts: crate::sdk_error::describe_sdk_error(&e),
            })
        })?;
        let c =
            out.credentials().ok_or_else(|| CredentialsError::unhandled("AssumeRole answered without credentials"))?;
        let expiry = SystemTime::try_from(*c.expiration())
            .map_err(|e| CredentialsError::unhandled(format!("AssumeRole's expiration: {e}")))?;
        // The lifetime STS gave, on the clock the SDK signs and caches by
        // (the system's, or a test's that it moves forward).
        let lifetime = expiry.duration_since(SystemTime::now()).unwrap_or_default();
        let expiry = self.time.now() + lifetime;
        self.issued.lock().expect("issued").push(c.access_key_id().to_string());
        Ok(Credentials::new(
            c.access_key_id(),
            c.secret_access_key(),
            Some(c.session_token().to_string()),
            Some(expiry),
            "pinfleet-assume-role",
        ))
    }
}

/// AssumeRole that gave no session: the role, the account it is for, and
/// STS's own code and message (or, when STS never answered, why). Says
/// nothing of the credentials that asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRoleError {
    pub role_arn: String,
    pub account: String,
    /// STS answered with an error (rather than the call failing on the way).
    pub refused: bool,
    /// STS's `Code: message`, or what kept the call from STS.
    pub sts: String,
}

impl std::fmt::Display for AssumeRoleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.refused { "STS refused" } else { "no answer to" };
        write!(f, "{what} AssumeRole of {} for account {}: {}", self.role_arn, self.account, self.sts)
    }
}

impl std::error::Error for AssumeRoleError {}

/// The [`AssumeRoleError`] behind a credentials error, if AssumeRole is
/// what failed.
pub fn assume_role_error(e: &CredentialsError) -> Option<&AssumeRoleError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(a) = err.downcast_ref::<AssumeRoleError>() {
            return Some(a);
        }
        cur = err.source();
    }
    None
}

/// The SDK's handle on a shared role.
#[derive(Debug)]
pub struct Provider(pub Arc<AssumedRole>);

impl ProvideCredentials for Provider {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.0.credentials())
    }
}

/// The credentials as the SDK is to see them: expiring [`REFRESH_BEFORE`]
/// early, so that its identity cache asks again in time (it refreshes only
/// seconds before the expiry it is given).
fn early(c: &Credentials) -> Credentials {
    let mut c = c.clone();
    if let Some(e) = c.expiry() {
        *c.expiry_mut() = Some(e.checked_sub(REFRESH_BEFORE).unwrap_or(e));
    }
    c
}

impl ProvideCredentials for AssumedRole {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.credentials())
    }
}

/// Every assumed role of a process, by key: asked twice for one key, the
/// same session; for another key, never.
#[derive(Debug, Default)]
pub struct Sessions {
    roles: Mutex<BTreeMap<Key, Arc<AssumedRole>>>,
}

/// How a session is made.
pub struct SessionOptions {
    pub duration: Duration,
    pub time: Option<SharedTimeSource>,
    /// The caller's ARN, for SourceIdentity.
    pub caller: Option<String>,
}

impl Sessions {
    /// The process's sessions (what `Aws::connect` uses).
    pub fn global() -> &'static Sessions {
        static GLOBAL: std::sync::OnceLock<Sessions> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Sessions::default)
    }

    /// The role for `r` in `region`: the cached one for the key, else a new
    /// one that assumes with `sts` (the caller's identity, asked once per
    /// key for SourceIdentity).
    pub async fn role(
        &self,
        sts: &aws_sdk_sts::Client,
        r: &RoleFor,
        region: &str,
        mut o: SessionOptions,
    ) -> Arc<AssumedRole> {
        let key = Key {
            role_arn: r.account.role_arn.clone(),
            external_id: r.account.external_id.clone(),
            region: region.to_string(),
        };
        if let Some(known) = self.roles.lock().expect("sessions").get(&key) {
            return known.clone();
        }
        if o.caller.is_none() {
            o.caller = match sts.get_caller_identity().send().await {
                Ok(out) => out.arn().map(str::to_string),
                Err(e) => {
                    tracing::debug!("GetCallerIdentity (the caller): {}", crate::sdk_error::describe_sdk_error(&e));
                    None
                }
            };
        }
        let mut roles = self.roles.lock().expect("sessions");
        roles
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(AssumedRole {
                    sts: sts.clone(),
                    key,
                    account: r.account.id.clone(),
                    session: session_name(&r.cluster, &r.command),
                    tags: session_tags(r),
                    source_identity: o.caller.as_deref().and_then(source_identity),
                    duration: o.duration,
                    time: o.time.unwrap_or_else(|| SharedTimeSource::new(SystemTimeSource::new())),
                    cached: tokio::sync::Mutex::new(None),
                    assumed: AtomicU32::new(0),
                    issued: Mutex::new(Vec::new()),
                    landed: tokio::sync::OnceCell::new(),
                    caller: o.caller.clone(),
                    probe: std::sync::OnceLock::new(),
                })
            })
            .clone()
    }

    /// Every role assumed so far.
    pub fn roles(&self) -> Vec<Arc<AssumedRole>> {
        self.roles.lock().expect("sessions").values().cloned().collect()
    }

    /// The account an access key was issued for, if one of these roles
    /// issued it.
    pub fn account_of(&self, access_key: &str) -> Option<String> {
        self.roles().iter().find(|r| r.issued().iter().any(|k| k == access_key)).map(|r| r.account.clone())
    }
}

/// Codes with which an account refuses a caller (rather than a request
/// being wrong): the account's clusters stop, others go on.
pub const REFUSALS: &[&str] = &["AccessDenied", "UnauthorizedOperation", "AccessDeniedException", "ExpiredToken"];

/// True when `e` (any layer of it) is an account refusing the caller, or a
/// session that landed elsewhere.
pub fn is_refusal(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    REFUSALS.iter().any(|c| text.contains(c))
        || text.contains("refusing to act")
        || text.contains("assuming arn:")
        || text.contains("AssumeRole of arn:")
}

/// Refuses a session that landed elsewhere than the cluster file says
/// (GetCallerIdentity's account), before the first write.
pub fn check_landed(role: &RoleFor, caller_arn: Option<&str>, landed: Option<&str>) -> anyhow::Result<()> {
    match landed {
        Some(a) if a == role.account.id => Ok(()),
        Some(a) => anyhow::bail!(
            "assuming {} landed in account {a} ({}), not in account {} as cluster {}'s file says: refusing to act",
            role.account.role_arn,
            caller_arn.unwrap_or("?"),
            role.account.id,
            role.cluster
        ),
        None => anyhow::bail!(
            "GetCallerIdentity did not name an account after assuming {}: refusing to act on cluster {}",
            role.account.role_arn,
            role.cluster
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_fit_sts() {
        let (long, cut) = ("x".repeat(63), format!("pinfleet-{}", "x".repeat(55)));
        let cases = [
            ("prod-use1", "plan", "pinfleet-prod-use1-plan"),
            ("a", "fleet roll", "pinfleet-a-fleet-roll"),
            (long.as_str(), "apply", cut.as_str()),
            ("c", "ami/rollout:now", "pinfleet-c-ami-rollout-now"),
        ];
        for (cluster, command, want) in cases {
            let got = session_name(cluster, command);
            assert_eq!(got, want);
            assert!(session_name_ok(&got), "{got}");
        }
    }

    #[test]
    fn source_identity_is_the_callers_name() {
        assert_eq!(source_identity("arn:aws:iam::123456789012:user/alice").as_deref(), Some("alice"));
        assert_eq!(
            source_identity("arn:aws:sts::123456789012:assumed-role/Admin/bob@example.com").as_deref(),
            Some("bob@example.com")
        );
        assert_eq!(source_identity("arn:aws:iam::123456789012:root").as_deref(), Some("root"));
        assert_eq!(source_identity("x"), None);
    }

    #[test]
    fn a_refused_assume_role_is_said_as_assume_role_through_the_sdks_error() {
        let role = "arn:aws:iam::111111111111:role/pinfleet";
        let refused = AssumeRoleError {
            role_arn: role.into(),
            account: "111111111111".into(),
            refused: true,
            sts: format!(
                "AccessDenied: User: arn:aws:iam::222222222222:user/alice is not authorized to perform: sts:AssumeRole on resource: {role}"
            ),
        };
        // As the SDK hands it back: a credentials error around it.
        let e = CredentialsError::provider_error(refused.clone());
        assert_eq!(assume_role_error(&e), Some(&refused));
        assert_eq!(assume_role_error(&CredentialsError::not_loaded_no_source()), None);
        assert_eq!(
            refused.to_string(),
            format!("STS refused AssumeRole of {role} for account 111111111111: AccessDenied: User: arn:aws:iam::222222222222:user/alice is not authorized to perform: sts:AssumeRole on resource: {role}")
        );
        assert!(is_refusal(&anyhow::Error::new(refused.clone())));
        let unanswered = AssumeRoleError { refused: false, sts: "the AWS call timed out".into(), ..refused };
        assert_eq!(
            unanswered.to_string(),
            format!("no answer to AssumeRole of {role} for account 111111111111: the AWS call timed out")
        );
        assert!(is_refusal(&anyhow::Error::new(unanswered)));
    }

    #[test]
    fn a_session_elsewhere_is_refused() {
        let r = RoleFor {
            account: Account {
                id: "111111111111".into(),
                role_arn: "arn:aws:iam::111111111111:role/pinfleet".into(),
                external_id: None,
            },
            cluster: "prod".into(),
            command: "apply".into(),
        };
        assert!(check_landed(&r, None, Some("111111111111")).is_ok());
        let e = check_landed(&r, Some("arn:aws:sts::222222222222:assumed-role/pinfleet/s"), Some("222222222222"))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "assuming arn:aws:iam::111111111111:role/pinfleet landed in account 222222222222 (arn:aws:sts::222222222222:assumed-role/pinfleet/s), not in account 111111111111 as cluster prod's file says: refusing to act"
        );
    }
}
