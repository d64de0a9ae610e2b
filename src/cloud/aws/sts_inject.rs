//! What STS refuses and moto accepts, enforced at the SDK's edge (an
//! `Intercept` on STS clients, as [`super::inject`] does for EC2 capacity):
//! a refused AssumeRole never reaches moto (a harmless GetCallerIdentity
//! goes instead) and is answered with STS's own error document and wording.
//!
//! Mirrored from STS's AssumeRole: RoleSessionName is 2–64 characters of
//! `[\w+=,.@-]*`; DurationSeconds 900–43200 and at most the role's
//! MaxSessionDuration (an hour by default), and at most an hour when the
//! caller is itself an assumed role (role chaining); at most 50 session
//! tags, keys up to 128 characters and values up to 256; a trust policy's
//! `sts:ExternalId` condition that the request does not meet is AccessDenied
//! naming the caller and the role. Also here, as faults: an account whose
//! every call is refused (AccessDenied mid-rollout), and a role whose
//! GetCallerIdentity names another account than the role's own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

/// STS's own bounds on DurationSeconds.
pub const MIN_DURATION: u64 = 900;
pub const MAX_DURATION: u64 = 43_200;
/// A role's MaxSessionDuration unless raised, and the limit on chained
/// sessions.
pub const DEFAULT_MAX_SESSION: u64 = 3600;
pub const MAX_TAGS: usize = 50;
pub const MAX_TAG_KEY: usize = 128;
pub const MAX_TAG_VALUE: usize = 256;

/// The trust policies and faults in force; changeable while clients use
/// them (a test denies an account mid-rollout).
#[derive(Debug, Default)]
pub struct StsRules {
    /// Roles whose trust policy requires this ExternalId.
    pub external_ids: Mutex<BTreeMap<String, String>>,
    /// Roles whose MaxSessionDuration was raised (or lowered) from an hour.
    pub max_session: Mutex<BTreeMap<String, u64>>,
    /// Accounts that answer AccessDenied to everything (their roles cannot
    /// be assumed, and sessions already held are refused).
    pub denied: Mutex<BTreeSet<String>>,
    /// Roles behind which GetCallerIdentity names another account.
    pub wrong_account: Mutex<BTreeMap<String, String>>,
    /// The caller is itself an assumed role (role chaining: an hour at most).
    pub chained: std::sync::atomic::AtomicBool,
    /// Every refusal answered: (operation, code, message).
    answered: Mutex<Vec<(String, String, String)>>,
}

impl StsRules {
    pub fn new() -> Arc<StsRules> {
        Arc::new(StsRules::default())
    }

    /// From `PINFLEET_STS_FAULTS`: rules separated by `;` —
    /// `deny=ACCOUNT`, `external-id=ROLE_ARN=ID`, `elsewhere=ROLE_ARN=ACCOUNT`,
    /// `max-session=ROLE_ARN=SECONDS`, `chained`.
    pub fn parse(text: &str) -> anyhow::Result<Arc<StsRules>> {
        let rules = StsRules::new();
        for rule in text.split(';').map(str::trim).filter(|r| !r.is_empty()) {
            let (kind, rest) = rule.split_once('=').unwrap_or((rule, ""));
            // A role ARN has no `=`; the value after the last one is the setting.
            let pair =
                || rest.rsplit_once('=').ok_or_else(|| anyhow::anyhow!("`{rule}`: expected {kind}=ROLE_ARN=VALUE"));
            match kind {
                "deny" => rules.deny(rest),
                "external-id" => {
                    let (role, id) = pair()?;
                    rules.require_external_id(role, id);
                }
                "elsewhere" => {
                    let (role, account) = pair()?;
                    rules.lands_elsewhere(role, account);
                }
                "max-session" => {
                    let (role, secs) = pair()?;
                    let secs: u64 = secs.parse().map_err(|e| anyhow::anyhow!("`{rule}`: {e}"))?;
                    rules.max_session.lock().expect("rules").insert(role.into(), secs);
                }
                "chained" => rules.chained.store(true, std::sync::atomic::Ordering::SeqCst),
                other => anyhow::bail!(
                    "unknown STS fault `{other}` (known: deny, external-id, elsewhere, max-session, chained)"
                ),
            }
        }
        Ok(rules)
    }

    pub fn require_external_id(&self, role_arn: &str, id: &str) {
        self.external_ids.lock().expect("rules").insert(role_arn.into(), id.into());
    }

    pub fn deny(&self, account: &str) {
        self.denied.lock().expect("rules").insert(account.into());
    }

    pub fn allow(&self, account: &str) {
        self.denied.lock().expect("rules").remove(account);
    }

    pub fn lands_elsewhere(&self, role_arn: &str, account: &str) {
        self.wrong_account.lock().expect("rules").insert(role_arn.into(), account.into());
    }

    pub fn is_denied(&self, account: &str) -> bool {
        self.denied.lock().expect("rules").contains(account)
    }

    /// Every refusal so far: (operation, code, message).
    pub fn answered(&self) -> Vec<(String, String, String)> {
        self.answered.lock().expect("answered").clone()
    }

    /// STS's answer to an AssumeRole with these parameters (form fields),
    /// by `caller`: None lets it through.
    pub fn assume_role(&self, caller: &str, form: &[(String, String)]) -> Option<Refusal> {
        let get = |k: &str| form.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
        let role = get("RoleArn").unwrap_or_default();
        let mut problems = Vec::new();
        let session = get("RoleSessionName").unwrap_or_default();
        let session_chars = session.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c));
        if !session_chars {
            problems.push(format!(
                "Value '{session}' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*"
            ));
        }
        let n = session.chars().count();
        if n < 2 {
            problems.push(format!(
                "Value '{session}' at 'roleSessionName' failed to satisfy constraint: Member must have length greater than or equal to 2"
            ));
        } else if n > 64 {
            problems.push(format!(
                "Value '{session}' at 'roleSessionName' failed to satisfy constraint: Member must have length less than or equal to 64"
            ));
        }
        let duration: Option<i64> = get("DurationSeconds").and_then(|d| d.parse().ok());
        if let Some(d) = duration {
            if d < MIN_DURATION as i64 {
                problems.push(format!(
                    "Value '{d}' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to {MIN_DURATION}"
                ));
            } else if d > MAX_DURATION as i64 {
                problems.push(format!(
                    "Value '{d}' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to {MAX_DURATION}"
                ));
            }
        }
        let tags: Vec<(String, String)> = (1..)
            .map_while(|i| {
                get(&format!("Tags.member.{i}.Key"))
                    .map(|k| (k.to_string(), get(&format!("Tags.member.{i}.Value")).unwrap_or_default().to_string()))
            })
            .collect();
        if tags.len() > MAX_TAGS {
            problems.push(format!(
                "Value '[{}]' at 'tags' failed to satisfy constraint: Member must have length less than or equal to {MAX_TAGS}",
                tags.iter().map(|(k, v)| format!("Tag(key={k}, value={v})")).collect::<Vec<_>>().join(", ")
            ));
        }
        for (i, (k, v)) in tags.iter().enumerate() {
            if k.chars().count() > MAX_TAG_KEY {
                problems.push(format!(
                    "Value '{k}' at 'tags.{}.member.key' failed to satisfy constraint: Member must have length less than or equal to {MAX_TAG_KEY}",
                    i + 1
                ));
            }
            if v.chars().count() > MAX_TAG_VALUE {
                problems.push(format!(
                    "Value '{v}' at 'tags.{}.member.value' failed to satisfy constraint: Member must have length less than or equal to {MAX_TAG_VALUE}",
                    i + 1
                ));
            }
        }
        if !problems.is_empty() {
            let s = if problems.len() == 1 { "" } else { "s" };
            return Some(Refusal::validation(format!(
                "{} validation error{s} detected: {}",
                problems.len(),
                problems.join("; ")
            )));
        }
        // Past the syntax: the role's own limits, then its trust policy.
        if let Some(d) = duration {
            let chained = self.chained.load(std::sync::atomic::Ordering::SeqCst);
            if chained && d > DEFAULT_MAX_SESSION as i64 {
                return Some(Refusal::validation(
                    "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining."
                        .into(),
                ));
            }
            let max = self.max_session.lock().expect("rules").get(role).copied().unwrap_or(DEFAULT_MAX_SESSION);
            if d > max as i64 {
                return Some(Refusal::validation(
                    "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.".into(),
                ));
            }
        }
        let denied_account = super::account::arn_account(role).is_some_and(|a| self.is_denied(a));
        let wrong_external_id = self
            .external_ids
            .lock()
            .expect("rules")
            .get(role)
            .is_some_and(|want| get("ExternalId") != Some(want.as_str()));
        if denied_account || wrong_external_id {
            return Some(Refusal::access_denied(format!(
                "User: {caller} is not authorized to perform: sts:AssumeRole on resource: {role}"
            )));
        }
        None
    }

    fn record(&self, op: &str, r: &Refusal) {
        self.answered.lock().expect("answered").push((op.into(), r.code.into(), r.message.clone()));
    }
}

/// An STS error as STS answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    fn validation(message: String) -> Refusal {
        Refusal { status: 400, code: "ValidationError", message }
    }
    fn access_denied(message: String) -> Refusal {
        Refusal { status: 403, code: "AccessDenied", message }
    }
}

impl Storable for Refusal {
    type Storer = StoreReplace<Refusal>;
}

/// GetCallerIdentity's answer to rewrite: the account it is to name.
#[derive(Debug, Clone)]
struct Elsewhere(String);

impl Storable for Elsewhere {
    type Storer = StoreReplace<Elsewhere>;
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// STS's (and every awsQuery service's) error document.
pub fn query_error_body(code: &str, message: &str) -> String {
    format!(
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type><Code>{code}</Code><Message>{}</Message></Error><RequestId>injected</RequestId></ErrorResponse>",
        xml_escape(message)
    )
}

/// The caller moto answers for: `x-moto-account-id`'s account (or moto's
/// default) as its user `moto`.
fn caller_of(ctx: &BeforeTransmitInterceptorContextMut<'_>) -> String {
    let account = ctx.request().headers().get("x-moto-account-id").unwrap_or("123456789012");
    format!("arn:aws:iam::{account}:user/moto")
}

const HARMLESS: &str = "Action=GetCallerIdentity&Version=2011-06-15";

/// On STS clients: AssumeRole checked against [`StsRules`].
#[derive(Debug)]
pub struct StsInjector(pub Arc<StsRules>);

impl Intercept for StsInjector {
    fn name(&self) -> &'static str {
        "pinfleet-sts-rules"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = super::inject::operation(cfg);
        if op != "AssumeRole" {
            return Ok(());
        }
        let Some(bytes) = ctx.request().body().bytes() else { return Ok(()) };
        let form: Vec<(String, String)> =
            url::form_urlencoded::parse(bytes).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let caller = caller_of(ctx);
        if let Some(r) = self.0.assume_role(&caller, &form) {
            self.0.record(&op, &r);
            super::inject::send_instead(ctx, HARMLESS);
            cfg.interceptor_state().store_put(r);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(r) = cfg.load::<Refusal>().cloned() else { return Ok(()) };
        super::inject::answer(ctx, r.status, query_error_body(r.code, &r.message))
    }
}

/// On every client acting in an assumed role's account: a denied account
/// refuses the call (as an SCP or a revoked trust policy does, mid-session),
/// and a role set to land elsewhere has GetCallerIdentity name that account.
#[derive(Debug)]
pub struct AccountGate {
    pub rules: Arc<StsRules>,
    pub account: String,
    pub role_arn: String,
}

impl Intercept for AccountGate {
    fn name(&self) -> &'static str {
        "pinfleet-account-gate"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(meta) = cfg.load::<Metadata>() else { return Ok(()) };
        let (service, op) = (meta.service().to_lowercase(), meta.name().to_string());
        if op == "GetCallerIdentity" {
            if let Some(other) = self.rules.wrong_account.lock().expect("rules").get(&self.role_arn) {
                cfg.interceptor_state().store_put(Elsewhere(other.clone()));
            }
        }
        if !self.rules.is_denied(&self.account) {
            return Ok(());
        }
        let r = if service == "ec2" {
            Refusal {
                status: 403,
                code: "UnauthorizedOperation",
                message: "You are not authorized to perform this operation.".into(),
            }
        } else if service == "s3" {
            Refusal { status: 403, code: "AccessDenied", message: "Access Denied".into() }
        } else {
            Refusal::access_denied(format!(
                "User: arn:aws:sts::{}:assumed-role/{} is not authorized to perform: {}:{op}",
                self.account,
                self.role_arn.rsplit('/').next().unwrap_or_default(),
                service.replace(' ', "")
            ))
        };
        self.rules.record(&op, &r);
        // A harmless request of the same service goes instead: its answer
        // is replaced.
        let harmless = match service.as_str() {
            "ec2" => Some(super::inject::HARMLESS),
            "sts" => Some(HARMLESS),
            _ => None,
        };
        if let Some(h) = harmless {
            super::inject::send_instead(ctx, h);
        } else {
            // No harmless twin at hand: refuse before anything is sent.
            return Err(format!("{}: {}", r.code, r.message).into());
        }
        cfg.interceptor_state().store_put(r);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(r) = cfg.load::<Refusal>().cloned() else { return Ok(()) };
        let body = if r.code == "UnauthorizedOperation" {
            super::inject::ec2_error_body(r.code, &r.message)
        } else {
            query_error_body(r.code, &r.message)
        };
        super::inject::answer(ctx, r.status, body)
    }

    fn modify_before_attempt_completion(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Elsewhere(account)) = cfg.load::<Elsewhere>().cloned() else { return Ok(()) };
        let Some(Ok(output)) = ctx.output_or_error_mut() else { return Ok(()) };
        if let Some(out) = output.downcast_mut::<aws_sdk_sts::operation::get_caller_identity::GetCallerIdentityOutput>()
        {
            if let Some(arn) = &out.arn {
                let parts: Vec<&str> = arn.splitn(6, ':').collect();
                if parts.len() == 6 {
                    out.arn =
                        Some(format!("{}:{}:{}:{}:{account}:{}", parts[0], parts[1], parts[2], parts[3], parts[5]));
                }
            }
            out.account = Some(account);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    const ROLE: &str = "arn:aws:iam::222222222222:role/pinfleet";
    const CALLER: &str = "arn:aws:iam::111111111111:user/alice";

    /// Each rule and STS's answer (or none).
    #[test]
    fn sts_refuses_what_sts_refuses() {
        let rules = StsRules::new();
        rules.require_external_id(ROLE, "sesame");
        let long_key = "k".repeat(129);
        let long_value = "v".repeat(257);
        let cases: Vec<(Vec<(&str, &str)>, Option<(&str, String)>)> = vec![
            (vec![("RoleArn", ROLE), ("RoleSessionName", "pinfleet-a-plan"), ("ExternalId", "sesame")], None),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "pinfleet-a-plan"), ("ExternalId", "wrong")],
                Some(("AccessDenied", format!("User: {CALLER} is not authorized to perform: sts:AssumeRole on resource: {ROLE}"))),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "pinfleet-a-plan")],
                Some(("AccessDenied", format!("User: {CALLER} is not authorized to perform: sts:AssumeRole on resource: {ROLE}"))),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "a b"), ("ExternalId", "sesame")],
                Some(("ValidationError", "1 validation error detected: Value 'a b' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*".into())),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "s"), ("ExternalId", "sesame")],
                Some(("ValidationError", "1 validation error detected: Value 's' at 'roleSessionName' failed to satisfy constraint: Member must have length greater than or equal to 2".into())),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "ok"), ("DurationSeconds", "899"), ("ExternalId", "sesame")],
                Some(("ValidationError", "1 validation error detected: Value '899' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900".into())),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "ok"), ("DurationSeconds", "43201"), ("ExternalId", "sesame")],
                Some(("ValidationError", "1 validation error detected: Value '43201' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to 43200".into())),
            ),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "ok"), ("DurationSeconds", "7200"), ("ExternalId", "sesame")],
                Some(("ValidationError", "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.".into())),
            ),
            (vec![("RoleArn", ROLE), ("RoleSessionName", "ok"), ("DurationSeconds", "900"), ("ExternalId", "sesame")], None),
            (
                vec![("RoleArn", ROLE), ("RoleSessionName", "ok"), ("Tags.member.1.Key", &long_key), ("Tags.member.1.Value", &long_value), ("ExternalId", "sesame")],
                Some(("ValidationError", format!("2 validation errors detected: Value '{long_key}' at 'tags.1.member.key' failed to satisfy constraint: Member must have length less than or equal to 128; Value '{long_value}' at 'tags.1.member.value' failed to satisfy constraint: Member must have length less than or equal to 256"))),
            ),
        ];
        for (i, (f, want)) in cases.into_iter().enumerate() {
            let got = rules.assume_role(CALLER, &form(&f)).map(|r| (r.code, r.message));
            assert_eq!(got, want.map(|(c, m)| (c, m)), "case {i}");
        }
    }

    #[test]
    fn more_than_fifty_tags_and_chained_sessions_are_refused() {
        let rules = StsRules::new();
        let keys: Vec<(String, String)> = (1..=51)
            .flat_map(|i| {
                [(format!("Tags.member.{i}.Key"), format!("k{i}")), (format!("Tags.member.{i}.Value"), "v".into())]
            })
            .collect();
        let mut f = form(&[("RoleArn", ROLE), ("RoleSessionName", "ok")]);
        f.extend(keys);
        let r = rules.assume_role(CALLER, &f).expect("refused");
        assert_eq!(r.code, "ValidationError");
        assert!(r.message.starts_with("1 validation error detected: Value '[Tag(key=k1, value=v), "), "{}", r.message);
        assert!(r
            .message
            .ends_with("at 'tags' failed to satisfy constraint: Member must have length less than or equal to 50"));

        rules.chained.store(true, std::sync::atomic::Ordering::SeqCst);
        rules.max_session.lock().unwrap().insert(ROLE.into(), 43_200);
        let r = rules
            .assume_role(CALLER, &form(&[("RoleArn", ROLE), ("RoleSessionName", "ok"), ("DurationSeconds", "7200")]))
            .expect("refused");
        assert_eq!(
            r.message,
            "The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining."
        );
    }

    #[test]
    fn rules_read_from_their_text() {
        let r = StsRules::parse(&format!(
            "deny=333333333333; external-id={ROLE}=sesame;elsewhere={ROLE}=444444444444;chained"
        ))
        .unwrap();
        assert!(r.is_denied("333333333333"));
        assert_eq!(r.external_ids.lock().unwrap().get(ROLE).map(String::as_str), Some("sesame"));
        assert_eq!(r.wrong_account.lock().unwrap().get(ROLE).map(String::as_str), Some("444444444444"));
        assert!(r.chained.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            StsRules::parse("nonsense=1").unwrap_err().to_string(),
            "unknown STS fault `nonsense` (known: deny, external-id, elsewhere, max-session, chained)"
        );
    }

    #[test]
    fn a_denied_account_refuses_its_roles() {
        let rules = StsRules::new();
        rules.deny("222222222222");
        let r = rules.assume_role(CALLER, &form(&[("RoleArn", ROLE), ("RoleSessionName", "ok")])).expect("refused");
        assert_eq!((r.status, r.code), (403, "AccessDenied"));
        rules.allow("222222222222");
        assert_eq!(rules.assume_role(CALLER, &form(&[("RoleArn", ROLE), ("RoleSessionName", "ok")])), None);
    }
}
