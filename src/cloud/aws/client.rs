//! SDK clients for EC2, ELBv2, S3, IAM, STS and SSM, configured the standard way
//! (profiles, credential chain, `AWS_ENDPOINT_URL`, region) so one command
//! runs against AWS, LocalStack or moto.
//!
//! Interceptors at this edge: every HTTP attempt is counted by operation
//! (`-v` and JSON output show the counts); tests isolate themselves on one
//! shared moto with the `x-moto-account-id` header; and throttling or 5xx
//! responses can be injected to prove that retries converge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use aws_config::retry::RetryConfig;
use aws_config::BehaviorVersion;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
    BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;

/// Where the AWS APIs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Target {
    /// AWS itself, or whatever `AWS_ENDPOINT_URL` names.
    #[default]
    Aws,
    /// LocalStack's default endpoint with dummy credentials.
    Localstack,
}

pub const LOCALSTACK_ENDPOINT: &str = "http://localhost:4566";

/// Attempts per call before giving up. The SDK backs off exponentially with
/// jitter between attempts; 8 rides out several seconds of throttling.
const MAX_ATTEMPTS: u32 = 8;

/// Injected failures, for tests: the first `throttle` attempts answer
/// `RequestLimitExceeded` and the next `server_errors` answer 503;
/// `copy_limit` names a region whose every `CopyImage` answers
/// `ResourceLimitExceeded` (EC2's limit on concurrent copies), so a bake
/// stops mid-copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    pub throttle: u32,
    pub server_errors: u32,
    pub copy_limit: Option<String>,
}

impl Faults {
    /// Parses `throttle=3,5xx=2` (the `PINFLEET_FAULTS` variable).
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        let mut f = Faults::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| anyhow::anyhow!("fault `{part}` is not key=value"))?;
            if k == "copy-limit" {
                f.copy_limit = Some(v.to_string());
                continue;
            }
            let n: u32 = v.parse()?;
            match k {
                "throttle" => f.throttle = n,
                "5xx" => f.server_errors = n,
                _ => anyhow::bail!("unknown fault `{k}` (known: throttle, 5xx, copy-limit)"),
            }
        }
        Ok(f)
    }
}

#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    pub target: Target,
    /// Region; the cluster's region when talking about a cluster.
    pub region: Option<String>,
    /// Sent as `x-moto-account-id` (isolates tests sharing one moto server).
    pub moto_account: Option<String>,
    pub faults: Option<Faults>,
    /// Capacity refusals to inject on EC2 launches ([`super::inject`]).
    pub capacity_faults: Option<Arc<super::inject::CapacityFaults>>,
}

impl AwsOptions {
    /// Options from the environment: `PINFLEET_MOTO_ACCOUNT_ID`, `PINFLEET_FAULTS`.
    pub fn from_env(target: Target, region: Option<String>) -> anyhow::Result<Self> {
        let faults = match std::env::var("PINFLEET_FAULTS") {
            Ok(s) if !s.is_empty() => Some(Faults::parse(&s)?),
            _ => None,
        };
        Ok(AwsOptions {
            target,
            region,
            moto_account: std::env::var("PINFLEET_MOTO_ACCOUNT_ID").ok(),
            faults,
            capacity_faults: super::inject::CapacityFaults::from_env()?,
        })
    }
}

/// AWS API calls made, by `service:Operation`.
#[derive(Debug, Clone, Default)]
pub struct CallCounter(Arc<Mutex<BTreeMap<String, u64>>>);

impl CallCounter {
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().expect("counter lock").clone()
    }
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
    pub fn reset(&self) {
        self.0.lock().expect("counter lock").clear();
    }
}

/// The fault decided for this attempt (None: the call goes through).
#[derive(Debug, Clone)]
struct Injected(Option<(u16, &'static str, &'static str)>);

impl aws_smithy_types::config_bag::Storable for Injected {
    type Storer = aws_smithy_types::config_bag::StoreReplace<Injected>;
}

#[derive(Debug)]
struct Interceptor {
    counter: CallCounter,
    moto_account: Option<String>,
    throttle_left: AtomicU32,
    server_errors_left: AtomicU32,
    refuse_copies: bool,
}

impl Intercept for Interceptor {
    fn name(&self) -> &'static str {
        "pinfleet"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(account) = &self.moto_account {
            ctx.request_mut().headers_mut().insert("x-moto-account-id", account.clone());
        }
        // Faults are injected into EC2 calls only (the answer is EC2's error
        // document, which its retry classifier reads), decided per attempt
        // here; a refused call never reaches the endpoint: a harmless one
        // goes instead, and its answer is replaced.
        let Some(meta) = cfg.load::<Metadata>() else { return Ok(()) };
        if meta.service().to_lowercase() != "ec2" {
            return Ok(());
        }
        let copying = meta.name() == "CopyImage";
        let take = |n: &AtomicU32| n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1)).is_ok();
        let injected = if copying && self.refuse_copies {
            Some((
                400,
                "ResourceLimitExceeded",
                "You have reached the maximum number of concurrent copy operations (injected)",
            ))
        } else if take(&self.throttle_left) {
            Some((400, "RequestLimitExceeded", "Request limit exceeded (injected)"))
        } else if take(&self.server_errors_left) {
            Some((503, "ServiceUnavailable", "Service unavailable (injected)"))
        } else {
            None
        };
        if injected.is_some() {
            let body = super::inject::HARMLESS;
            let req = ctx.request_mut();
            *req.body_mut() = SdkBody::from(body);
            req.headers_mut().insert("content-length", body.len().to_string());
        }
        cfg.interceptor_state().store_put(Injected(injected));
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(meta) = cfg.load::<Metadata>() {
            let service = match meta.service().to_lowercase().replace(' ', "").as_str() {
                "elasticloadbalancingv2" => "elbv2".to_string(),
                other => other.to_string(),
            };
            let key = format!("{service}:{}", meta.name());
            *self.counter.0.lock().expect("counter lock").entry(key).or_default() += 1;
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Injected(Some((status, code, message)))) = cfg.load::<Injected>().cloned() else { return Ok(()) };
        let resp = ctx.response_mut();
        *resp.status_mut() = status.try_into()?;
        *resp.body_mut() = SdkBody::from(super::inject::ec2_error_body(code, message));
        Ok(())
    }
}

/// The clients pinfleet uses, sharing one configuration and call counter.
#[derive(Debug, Clone)]
pub struct Aws {
    pub ec2: aws_sdk_ec2::Client,
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    pub s3: aws_sdk_s3::Client,
    pub sts: aws_sdk_sts::Client,
    pub iam: aws_sdk_iam::Client,
    pub ssm: aws_sdk_ssm::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub calls: CallCounter,
    pub region: String,
    identity: tokio::sync::OnceCell<Option<String>>,
}

impl Aws {
    pub async fn connect(opts: &AwsOptions) -> anyhow::Result<Self> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS));
        if let Some(r) = &opts.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        if opts.target == Target::Localstack {
            if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
                loader = loader.endpoint_url(LOCALSTACK_ENDPOINT);
            }
            if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() && std::env::var_os("AWS_PROFILE").is_none() {
                loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                    "test",
                    "test",
                    None,
                    None,
                    "localstack",
                ));
            }
        }
        let shared = loader.load().await;
        let region = shared
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| anyhow::anyhow!("no AWS region: set one in the cluster file, AWS_REGION or your profile"))?;
        let calls = CallCounter::default();
        let faults = opts.faults.clone().unwrap_or_default();
        let interceptor = Arc::new(Interceptor {
            counter: calls.clone(),
            moto_account: opts.moto_account.clone(),
            throttle_left: AtomicU32::new(faults.throttle),
            server_errors_left: AtomicU32::new(faults.server_errors),
            refuse_copies: faults.copy_limit.as_deref() == Some(region.as_str()),
        });
        let shared_interceptor = SharedInterceptorHandle(interceptor);
        let mut ec2_config = aws_sdk_ec2::config::Builder::from(&shared)
            .interceptor(shared_interceptor.clone())
            .retry_classifier(super::inject::CapacityIsFinal);
        if let Some(f) = &opts.capacity_faults {
            ec2_config = ec2_config.interceptor(super::inject::Injector(f.clone()));
        }
        let ec2 = aws_sdk_ec2::Client::from_conf(ec2_config.build());
        let elb = aws_sdk_elasticloadbalancingv2::Client::from_conf(
            aws_sdk_elasticloadbalancingv2::config::Builder::from(&shared)
                .interceptor(shared_interceptor.clone())
                .build(),
        );
        let sts = aws_sdk_sts::Client::from_conf(
            aws_sdk_sts::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        let iam = aws_sdk_iam::Client::from_conf(
            aws_sdk_iam::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        let ssm = aws_sdk_ssm::Client::from_conf(
            aws_sdk_ssm::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        let sqs = aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        let events = aws_sdk_eventbridge::Client::from_conf(
            aws_sdk_eventbridge::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        // Path-style addressing works against AWS and is needed for IP endpoints.
        let path_style = shared.endpoint_url().is_some();
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&shared)
                .force_path_style(path_style)
                .interceptor(shared_interceptor)
                .build(),
        );
        Ok(Aws { ec2, elb, s3, sts, iam, ssm, sqs, events, calls, region, identity: tokio::sync::OnceCell::new() })
    }

    /// Who the credentials are (STS GetCallerIdentity's ARN), for history;
    /// asked once per run. None when STS cannot say: history still records
    /// the local user and host.
    pub async fn caller_identity(&self) -> Option<String> {
        self.identity
            .get_or_init(|| async {
                match self.sts.get_caller_identity().send().await {
                    Ok(out) => out.arn().map(str::to_string),
                    Err(e) => {
                        tracing::debug!("GetCallerIdentity: {}", describe_sdk_error(&e));
                        None
                    }
                }
            })
            .await
            .clone()
    }
}

/// One interceptor instance shared by the three clients (one counter, one
/// fault budget).
#[derive(Debug, Clone)]
struct SharedInterceptorHandle(Arc<Interceptor>);

impl Intercept for SharedInterceptorHandle {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_signing(ctx, rc, cfg)
    }
    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.read_before_transmit(ctx, rc, cfg)
    }
    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_deserialization(ctx, rc, cfg)
    }
}

/// The innermost causes of an error, by their Display, without repeats.
fn source_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = e.source();
    }
    parts.last().cloned().unwrap_or_else(|| err.to_string())
}

/// A readable message for an SDK error: the service's code and message when
/// there is one, and a hint for the usual causes (no credentials, nothing
/// listening at the endpoint).
/// The longest error message shown inside a line.
const MESSAGE_MAX: usize = 200;

/// An error message as one short line: an HTML page (a proxy's or an
/// emulator's 500) gives its title or first heading, tags are dropped,
/// whitespace and control characters collapse, and the rest is cut.
pub fn one_line(message: &str) -> String {
    let lower = message.to_ascii_lowercase();
    let html = lower.contains("<html") || lower.contains("<!doctype") || lower.contains("<body");
    let text = if html {
        let inner = |tag: &str| -> Option<&str> {
            let open = lower.find(&format!("<{tag}"))?;
            let start = open + lower[open..].find('>')? + 1;
            let end = start + lower[start..].find(&format!("</{tag}"))?;
            Some(&message[start..end])
        };
        ["title", "h1", "p"].iter().find_map(|t| inner(t).filter(|s| !s.trim().is_empty())).unwrap_or(message)
    } else {
        message
    };
    // Drop whatever tags are left, then collapse whitespace and controls.
    let mut plain = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' if html => in_tag = true,
            '>' if html && in_tag => in_tag = false,
            _ if in_tag => {}
            c if c.is_control() || c.is_whitespace() => plain.push(' '),
            c => plain.push(c),
        }
    }
    let words: Vec<&str> = plain.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= MESSAGE_MAX {
        return line;
    }
    let cut: String = line.chars().take(MESSAGE_MAX).collect();
    format!("{cut}…")
}

pub fn describe_sdk_error<E>(err: &aws_sdk_ec2::error::SdkError<E, aws_smithy_runtime_api::http::Response>) -> String
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    use aws_sdk_ec2::error::SdkError;
    match err {
        SdkError::ServiceError(e) => {
            let m = e.err();
            match m.code() {
                Some(code) => format!("{code}: {}", one_line(m.message().unwrap_or("(no message)"))),
                // An error body the SDK could not parse: the HTTP status says
                // what happened.
                None => {
                    let status = e.raw().status().as_u16();
                    let meaning = match status {
                        401 | 403 => " (the credentials are not valid or not allowed)",
                        _ => "",
                    };
                    let body = e.raw().body().bytes().map(String::from_utf8_lossy).unwrap_or_default();
                    let body = one_line(&body);
                    format!("HTTP {status}{meaning}: {}", if body.is_empty() { "(no message)" } else { &body })
                }
            }
        }
        SdkError::DispatchFailure(d) => {
            let debug = format!("{err:?}");
            if debug.contains("CredentialsNotLoaded") || debug.contains("ProviderChainError") {
                return "no AWS credentials found (tried the environment, profiles, web identity, ECS and instance metadata): \
                        set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
                    .to_string();
            }
            let endpoint = std::env::var("AWS_ENDPOINT_URL").map(|e| format!(" {e}")).unwrap_or_default();
            let cause = source_chain(err);
            if d.is_io() || d.is_timeout() {
                format!(
                    "cannot reach the AWS endpoint{endpoint} (is it running, and is AWS_ENDPOINT_URL right?): {cause}"
                )
            } else {
                format!("request failed before reaching AWS{endpoint}: {cause}")
            }
        }
        SdkError::ConstructionFailure(_) => {
            format!("could not build the request (are AWS credentials and region configured?): {}", source_chain(err))
        }
        SdkError::TimeoutError(_) => "the AWS call timed out".to_string(),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn an_error_page_is_kept_to_its_title_and_a_message_to_one_short_line() {
        let moto_500 = "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>\n<p>The server encountered an internal error and was unable to complete your request.</p>\n";
        assert_eq!(one_line(moto_500), "500 Internal Server Error");
        let untitled = "<html><body><h1>Bad  Gateway</h1><p>nginx</p></body></html>";
        assert_eq!(one_line(untitled), "Bad Gateway");
        assert_eq!(
            one_line("The image id '[ami-1]'\ndoes not exist\u{1b}[31m"),
            "The image id '[ami-1]' does not exist [31m"
        );
        // A comparison in a plain message is not a tag.
        assert_eq!(one_line("count < 5 and > 2"), "count < 5 and > 2");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), 201);
        assert!(one_line(&long).ends_with('…'));
    }
}
