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
    /// The account and role to act in ([`super::account`]); None: the
    /// caller's own credentials.
    pub role: Option<super::account::RoleFor>,
    /// AssumeRole's DurationSeconds (default [`super::account::SESSION`]).
    pub session: Option<std::time::Duration>,
    /// The clock credentials expire by (tests advance one).
    pub time_source: Option<aws_smithy_async::time::SharedTimeSource>,
    /// Where assumed roles are cached (default: the process's).
    pub sessions: Option<Arc<super::account::Sessions>>,
    /// STS refusals moto does not make ([`super::sts_inject`]).
    pub sts_faults: Option<Arc<super::sts_inject::StsRules>>,
    /// Every call's operation and signing key, for tests that check which
    /// account each call went to.
    pub call_log: Option<CallLog>,
}

/// Each signed call: (`service:Operation`, access key id).
#[derive(Debug, Clone, Default)]
pub struct CallLog(Arc<Mutex<Vec<(String, String)>>>);

impl CallLog {
    pub fn entries(&self) -> Vec<(String, String)> {
        self.0.lock().expect("call log").clone()
    }
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
            sts_faults: match std::env::var("PINFLEET_STS_FAULTS") {
                Ok(s) if !s.trim().is_empty() => Some(super::sts_inject::StsRules::parse(&s)?),
                _ => None,
            },
            role: None,
            // AssumeRole's DurationSeconds, when a role is assumed.
            session: match std::env::var("PINFLEET_SESSION_SECONDS") {
                Ok(s) if !s.trim().is_empty() => Some(std::time::Duration::from_secs(
                    s.trim().parse().map_err(|e| anyhow::anyhow!("PINFLEET_SESSION_SECONDS `{s}`: {e}"))?,
                )),
                _ => None,
            },
            time_source: None,
            sessions: None,
            call_log: None,
        })
    }

    /// Options for acting on `cluster` with `command`: its region, and its
    /// account's role when the file names one.
    pub fn for_cluster(target: Target, cluster: &crate::spec::Cluster, command: &str) -> anyhow::Result<Self> {
        let mut o = Self::from_env(target, Some(cluster.spec.cloud.region.clone()))?;
        o.role = cluster.spec.cloud.account.clone().map(|account| super::account::RoleFor {
            account,
            cluster: cluster.metadata.name.clone(),
            command: command.to_string(),
        });
        Ok(o)
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
    log: Option<CallLog>,
    /// Faults of the account an assumed role acts in.
    gate: Option<super::sts_inject::AccountGate>,
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
        if let Some(gate) = &self.gate {
            gate.modify_before_signing(ctx, _rc, cfg)?;
            if cfg.load::<super::sts_inject::Refusal>().is_some() {
                return Ok(());
            }
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
            super::inject::send_instead(ctx, super::inject::HARMLESS);
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
            if let Some(log) = &self.log {
                let akid = _ctx
                    .request()
                    .headers()
                    .get("authorization")
                    .and_then(|h| h.split("Credential=").nth(1))
                    .and_then(|c| c.split('/').next())
                    .unwrap_or_default()
                    .to_string();
                log.0.lock().expect("call log").push((key.clone(), akid));
            }
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
        if let Some(gate) = &self.gate {
            gate.modify_before_deserialization(ctx, _rc, cfg)?;
        }
        let Some(Injected(Some((status, code, message)))) = cfg.load::<Injected>().cloned() else { return Ok(()) };
        super::inject::answer(ctx, status, super::inject::ec2_error_body(code, message))
    }

    fn modify_before_attempt_completion(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        match &self.gate {
            Some(gate) => gate.modify_before_attempt_completion(ctx, rc, cfg),
            None => Ok(()),
        }
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
    /// Only to adopt and roll away kops's Auto Scaling groups (pinfleet
    /// runs none of its own).
    pub autoscaling: aws_sdk_autoscaling::Client,
    pub calls: CallCounter,
    pub region: String,
    /// The role assumed for this connection's account (None: the caller's
    /// own credentials).
    pub role: Option<Arc<super::account::AssumedRole>>,
    identity: tokio::sync::OnceCell<Option<String>>,
}

impl crate::state::S3Access for Aws {
    fn s3(&self) -> &aws_sdk_s3::Client {
        &self.s3
    }

    fn region(&self) -> &str {
        &self.region
    }
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
        if let Some(t) = &opts.time_source {
            loader = loader.time_source(t.clone());
        }
        let mut shared = loader.load().await;
        let region = shared
            .region()
            .map(|r| r.to_string())
            .ok_or_else(|| anyhow::anyhow!("no AWS region: set one in the cluster file, AWS_REGION or your profile"))?;
        let calls = CallCounter::default();
        let faults = opts.faults.clone().unwrap_or_default();
        // Calls under an assumed role land in the role's account: moto
        // reads it from the session's access key, which its header would
        // override, so the header goes only with the caller's own calls.
        let mut role = None;
        let mut identity = tokio::sync::OnceCell::new();
        if let Some(r) = &opts.role {
            let caller = SharedInterceptorHandle(Arc::new(Interceptor {
                counter: calls.clone(),
                log: opts.call_log.clone(),
                gate: None,
                moto_account: opts.moto_account.clone(),
                throttle_left: AtomicU32::new(0),
                server_errors_left: AtomicU32::new(0),
                refuse_copies: false,
            }));
            let mut caller_sts = aws_sdk_sts::config::Builder::from(&shared).interceptor(caller);
            if let Some(f) = &opts.sts_faults {
                caller_sts = caller_sts.interceptor(super::sts_inject::StsInjector(f.clone()));
            }
            let caller_sts = aws_sdk_sts::Client::from_conf(caller_sts.build());
            let sessions: &super::account::Sessions = match &opts.sessions {
                Some(s) => s,
                None => super::account::Sessions::global(),
            };
            let assumed = sessions
                .role(
                    &caller_sts,
                    r,
                    &region,
                    super::account::SessionOptions {
                        duration: opts.session.unwrap_or(super::account::SESSION),
                        time: opts.time_source.clone(),
                        caller: None,
                    },
                )
                .await;
            identity = tokio::sync::OnceCell::new_with(Some(assumed.caller().map(str::to_string)));
            shared = shared
                .into_builder()
                .credentials_provider(aws_credential_types::provider::SharedCredentialsProvider::new(
                    super::account::Provider(assumed.clone()),
                ))
                .build();
            role = Some(assumed);
        }
        let interceptor = Arc::new(Interceptor {
            counter: calls.clone(),
            log: opts.call_log.clone(),
            gate: match (&opts.sts_faults, &opts.role) {
                (Some(rules), Some(r)) => Some(super::sts_inject::AccountGate {
                    rules: rules.clone(),
                    account: r.account.id.clone(),
                    role_arn: r.account.role_arn.clone(),
                }),
                _ => None,
            },
            moto_account: if opts.role.is_some() { None } else { opts.moto_account.clone() },
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
        let mut sts_config = aws_sdk_sts::config::Builder::from(&shared).interceptor(shared_interceptor.clone());
        if let Some(f) = &opts.sts_faults {
            sts_config = sts_config.interceptor(super::sts_inject::StsInjector(f.clone()));
        }
        let sts = aws_sdk_sts::Client::from_conf(sts_config.build());
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
        let autoscaling = aws_sdk_autoscaling::Client::from_conf(
            aws_sdk_autoscaling::config::Builder::from(&shared).interceptor(shared_interceptor.clone()).build(),
        );
        // Path-style addressing works against AWS and is needed for IP endpoints.
        let path_style = shared.endpoint_url().is_some();
        let mut s3_config =
            aws_sdk_s3::config::Builder::from(&shared).force_path_style(path_style).interceptor(shared_interceptor);
        if let Some(f) = super::inject::S3Faults::from_env()? {
            s3_config = s3_config.interceptor(f);
        }
        if let Some(o) = super::inject::S3Owners::from_env()? {
            s3_config = s3_config.interceptor(o);
        }
        let s3 = aws_sdk_s3::Client::from_conf(s3_config.build());
        // Nothing is written before the session is known to be in the
        // account the file names.
        if let (Some(r), Some(assumed)) = (&opts.role, &role) {
            assumed.check(&sts, r).await?;
            assumed.set_probe(sts.config().clone());
        }
        Ok(Aws { ec2, elb, s3, sts, iam, ssm, sqs, events, autoscaling, calls, region, role, identity })
    }

    /// The account this connection acts in, when a role was assumed.
    pub fn account(&self) -> Option<&str> {
        self.role.as_deref().map(super::account::AssumedRole::account)
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
    fn modify_before_attempt_completion(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_attempt_completion(ctx, rc, cfg)
    }
}

pub use crate::sdk_error::{describe_sdk_error, one_line};
