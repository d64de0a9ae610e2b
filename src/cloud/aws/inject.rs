//! Capacity faults EC2 gives and moto never does, injected at the SDK's
//! own edge (an `Intercept` on the EC2 client; the request never reaches
//! moto): chosen offerings (market, instance type, zone) are answered with
//! a capacity code and EC2's wording. RunInstances answers the error;
//! CreateFleet `instant` answers HTTP 200 with an error per refused
//! override (moto launches the rest; when none is left, the answer is an
//! empty fleet with its `errorSet`), as EC2 does — a launcher that reads
//! only the status sees success.
//!
//! Also here: the retry classifier that stops the SDK from retrying a
//! capacity refusal (EC2 answers some with HTTP 500, which the standard
//! policy retries eight times): the next offering is tried at once instead.

use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut, InterceptorContext,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::retries::classifiers::{ClassifyRetry, RetryAction, RetryClassifierPriority};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};

use crate::capacity::{Market, Offering};

/// One injected refusal: offerings that match answer `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub market: Option<Market>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub code: String,
}

impl Rule {
    fn matches(&self, o: &Offering) -> bool {
        self.market.is_none_or(|m| m == o.market)
            && self.instance_type.as_ref().is_none_or(|t| *t == o.instance_type)
            && self.zone.as_ref().is_none_or(|z| *z == o.zone)
    }

    /// `CODE@MARKET/TYPE/ZONE`, each part `*` for any (`InsufficientInstanceCapacity@*/m6i.large/us-east-1a`).
    pub fn parse(s: &str) -> anyhow::Result<Rule> {
        let (code, offering) =
            s.split_once('@').ok_or_else(|| anyhow::anyhow!("`{s}`: expected CODE@MARKET/TYPE/ZONE"))?;
        let parts: Vec<&str> = offering.split('/').collect();
        anyhow::ensure!(parts.len() == 3, "`{s}`: expected CODE@MARKET/TYPE/ZONE");
        let any = |p: &str| (p != "*").then(|| p.to_string());
        let market = match parts[0] {
            "*" => None,
            "spot" => Some(Market::Spot),
            "on-demand" => Some(Market::OnDemand),
            other => anyhow::bail!("`{other}`: a market is spot, on-demand or *"),
        };
        Ok(Rule { market, instance_type: any(parts[1]), zone: any(parts[2]), code: code.to_string() })
    }
}

/// The rules in force, changeable while clients use them (a test lifts a
/// zone's refusal to show the ledger's expiry tries it again), and every
/// refusal answered.
#[derive(Debug, Default)]
pub struct CapacityFaults {
    rules: Mutex<Vec<Rule>>,
    answered: Mutex<Vec<(Offering, String)>>,
}

impl CapacityFaults {
    pub fn new(rules: Vec<Rule>) -> Arc<CapacityFaults> {
        Arc::new(CapacityFaults { rules: Mutex::new(rules), answered: Mutex::default() })
    }

    /// From `PINFLEET_CAPACITY_FAULTS` (rules separated by `;`).
    pub fn from_env() -> anyhow::Result<Option<Arc<CapacityFaults>>> {
        match std::env::var("PINFLEET_CAPACITY_FAULTS") {
            Ok(s) if !s.trim().is_empty() => {
                let rules = s
                    .split(';')
                    .filter(|r| !r.trim().is_empty())
                    .map(|r| Rule::parse(r.trim()))
                    .collect::<anyhow::Result<_>>()?;
                Ok(Some(CapacityFaults::new(rules)))
            }
            _ => Ok(None),
        }
    }

    pub fn set(&self, rules: Vec<Rule>) {
        *self.rules.lock().expect("rules") = rules;
    }

    /// Every refusal injected so far: (offering, code).
    pub fn answered(&self) -> Vec<(Offering, String)> {
        self.answered.lock().expect("answered").clone()
    }

    fn refusal(&self, o: &Offering) -> Option<String> {
        let code = self.rules.lock().expect("rules").iter().find(|r| r.matches(o)).map(|r| r.code.clone())?;
        self.answered.lock().expect("answered").push((o.clone(), code.clone()));
        Some(code)
    }
}

/// EC2's own wording for each code.
pub fn message(code: &str, o: &Offering) -> String {
    match code {
        "InsufficientInstanceCapacity" => format!(
            "We currently do not have sufficient {t} capacity in the Availability Zone you requested ({z}). Our system will be working on provisioning additional capacity. You can currently get {t} capacity by not specifying an Availability Zone in your request or choosing other Availability Zones.",
            t = o.instance_type,
            z = o.zone
        ),
        "Unsupported" => format!(
            "Your requested instance type ({}) is not supported in your requested Availability Zone ({}).",
            o.instance_type, o.zone
        ),
        "MaxSpotInstanceCountExceeded" => "Max spot instance count exceeded".into(),
        "SpotMaxPriceTooLow" => "Your Spot request price is lower than the minimum required Spot request fulfillment price.".into(),
        "InsufficientFreeAddressesInSubnet" => "There are not enough free addresses in subnet to satisfy the requested number of instances.".into(),
        "InsufficientHostCapacity" => format!("Insufficient capacity on Dedicated Hosts for {} in {}.", o.instance_type, o.zone),
        "InsufficientReservedInstanceCapacity" => "Insufficient capacity in the Capacity Reservation.".into(),
        "VcpuLimitExceeded" => "You have requested more vCPU capacity than your current vCPU limit allows.".into(),
        other => format!("{other} (injected)"),
    }
}

/// EC2 answers the capacity codes as server errors (5xx), the others as 400.
fn status(code: &str) -> u16 {
    if code.starts_with("Insufficient") && code != "InsufficientFreeAddressesInSubnet" {
        500
    } else {
        400
    }
}

/// What the request phase decided, for the response phase.
#[derive(Debug, Clone)]
enum Planned {
    /// Answer this error instead of the harmless call that went out.
    Error { status: u16, code: String, message: String },
    /// CreateFleet: add these refused overrides to moto's answer (or, when
    /// none was left to launch, answer an empty fleet with them).
    Fleet { errors: Vec<(Offering, String)>, empty: bool },
}

impl Storable for Planned {
    type Storer = StoreReplace<Planned>;
}

fn form(body: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn encode(pairs: &[(String, String)]) -> String {
    url::form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
}

/// A call that changes nothing, sent instead of a refused launch.
pub(super) const HARMLESS: &str = "Action=DescribeRegions&Version=2016-11-15";

// What every injector here does at the SDK's edge, once.

/// The operation a call is (`RunInstances`), empty where none is named.
pub(super) fn operation(cfg: &ConfigBag) -> String {
    cfg.load::<Metadata>().map(|m| m.name().to_string()).unwrap_or_default()
}

/// Sends `body` instead of the request's own: a call that changes nothing
/// goes, and its answer is replaced ([`answer`]).
pub(super) fn send_instead(ctx: &mut BeforeTransmitInterceptorContextMut<'_>, body: impl Into<String>) {
    let body = body.into();
    let req = ctx.request_mut();
    req.headers_mut().insert("content-length", body.len().to_string());
    *req.body_mut() = SdkBody::from(body);
}

/// Answers `status` with `body` instead of what came back.
pub(super) fn answer(
    ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
    status: u16,
    body: impl Into<String>,
) -> Result<(), BoxError> {
    let body = body.into();
    let resp = ctx.response_mut();
    *resp.status_mut() = status.try_into()?;
    resp.headers_mut().insert("content-length", body.len().to_string());
    *resp.body_mut() = SdkBody::from(body);
    Ok(())
}

/// [`answer`] as S3 answers an error: an XML document.
pub(super) fn answer_s3(
    ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
    status: u16,
    code: &str,
    message: &str,
) -> Result<(), BoxError> {
    ctx.response_mut().headers_mut().insert("content-type", "application/xml");
    answer(
        ctx,
        status,
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><RequestId>INJECTED</RequestId></Error>"),
    )
}

#[derive(Debug)]
pub struct Injector(pub Arc<CapacityFaults>);

impl Intercept for Injector {
    fn name(&self) -> &'static str {
        "pinfleet-capacity-faults"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation(cfg);
        if op != "RunInstances" && op != "CreateFleet" {
            return Ok(());
        }
        let Some(bytes) = ctx.request().body().bytes() else { return Ok(()) };
        let pairs = form(bytes);
        let get = |k: &str| pairs.iter().find(|(p, _)| p == k).map(|(_, v)| v.clone());
        let mut new_body: Option<String> = None;
        if op == "RunInstances" {
            let market = if get("InstanceMarketOptions.MarketType").as_deref() == Some("spot") {
                Market::Spot
            } else {
                Market::OnDemand
            };
            let o = Offering {
                market,
                instance_type: get("InstanceType").unwrap_or_default(),
                zone: get("Placement.AvailabilityZone").unwrap_or_default(),
            };
            if let Some(code) = self.0.refusal(&o) {
                let message = message(&code, &o);
                cfg.interceptor_state().store_put(Planned::Error { status: status(&code), code, message });
                new_body = Some(HARMLESS.to_string());
            }
        } else {
            // CreateFleet: LaunchTemplateConfigs.1.Overrides.N.{InstanceType,AvailabilityZone,…}.
            let market = if get("TargetCapacitySpecification.DefaultTargetCapacityType").as_deref() == Some("spot") {
                Market::Spot
            } else {
                Market::OnDemand
            };
            let prefix = "LaunchTemplateConfigs.1.Overrides.";
            let mut indexes: Vec<u32> = pairs
                .iter()
                .filter_map(|(k, _)| {
                    k.strip_prefix(prefix).and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok())
                })
                .collect();
            indexes.sort_unstable();
            indexes.dedup();
            let mut refused: Vec<u32> = Vec::new();
            let mut errors = Vec::new();
            for n in &indexes {
                let o = Offering {
                    market,
                    instance_type: get(&format!("{prefix}{n}.InstanceType")).unwrap_or_default(),
                    zone: get(&format!("{prefix}{n}.AvailabilityZone")).unwrap_or_default(),
                };
                if let Some(code) = self.0.refusal(&o) {
                    refused.push(*n);
                    errors.push((o, code));
                }
            }
            if !errors.is_empty() {
                let empty = refused.len() == indexes.len();
                if empty {
                    new_body = Some(HARMLESS.to_string());
                } else {
                    // The rest, renumbered from 1, go to moto.
                    let kept: Vec<u32> = indexes.iter().copied().filter(|n| !refused.contains(n)).collect();
                    let mut out = Vec::new();
                    for (k, v) in &pairs {
                        match k.strip_prefix(prefix).and_then(|r| r.split_once('.')) {
                            Some((n, field)) => {
                                let n: u32 = n.parse().unwrap_or(0);
                                if let Some(pos) = kept.iter().position(|x| *x == n) {
                                    out.push((format!("{prefix}{}.{field}", pos + 1), v.clone()));
                                }
                            }
                            None => out.push((k.clone(), v.clone())),
                        }
                    }
                    new_body = Some(encode(&out));
                }
                cfg.interceptor_state().store_put(Planned::Fleet { errors, empty });
            }
        }
        if let Some(b) = new_body {
            send_instead(ctx, b);
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(planned) = cfg.load::<Planned>().cloned() else { return Ok(()) };
        match planned {
            Planned::Error { status, code, message } => answer(ctx, status, ec2_error_body(&code, &message))?,
            Planned::Fleet { errors, empty } => {
                let items: String = errors
                    .iter()
                    .map(|(o, code)| {
                        format!(
                            "<item><launchTemplateAndOverrides><overrides><instanceType>{}</instanceType><availabilityZone>{}</availabilityZone></overrides></launchTemplateAndOverrides><lifecycle>{}</lifecycle><errorCode>{code}</errorCode><errorMessage>{}</errorMessage></item>",
                            o.instance_type,
                            o.zone,
                            if o.market == Market::Spot { "spot" } else { "on-demand" },
                            xml_escape(&message(code, o))
                        )
                    })
                    .collect();
                // Moto's own answer (some overrides launched) is still a
                // stream here: its errors are added to the parsed output
                // instead (modify_before_attempt_completion).
                if empty {
                    let body = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>injected</requestId><fleetId>fleet-injected</fleetId><errorSet>{items}</errorSet><fleetInstanceSet/></CreateFleetResponse>"
                    );
                    answer(ctx, 200, body)?;
                }
            }
        }
        Ok(())
    }

    fn modify_before_attempt_completion(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.add_fleet_errors(ctx, cfg);
        Ok(())
    }
}

impl Injector {
    /// CreateFleet with some overrides launched by moto: the refused ones
    /// join its answer's `errors`, as EC2 lists them.
    fn add_fleet_errors(
        &self,
        ctx: &mut aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextMut<'_>,
        cfg: &ConfigBag,
    ) {
        let Some(Planned::Fleet { errors, empty: false }) = cfg.load::<Planned>().cloned() else { return };
        let Some(Ok(output)) = ctx.output_or_error_mut() else { return };
        let Some(out) = output.downcast_mut::<aws_sdk_ec2::operation::create_fleet::CreateFleetOutput>() else {
            return;
        };
        use aws_sdk_ec2::types::{
            CreateFleetError, FleetLaunchTemplateOverrides, InstanceLifecycle, InstanceType,
            LaunchTemplateAndOverridesResponse,
        };
        let list = out.errors.get_or_insert_with(Vec::new);
        for (o, code) in errors {
            let overrides = FleetLaunchTemplateOverrides::builder()
                .instance_type(InstanceType::from(o.instance_type.as_str()))
                .availability_zone(&o.zone)
                .build();
            list.push(
                CreateFleetError::builder()
                    .launch_template_and_overrides(
                        LaunchTemplateAndOverridesResponse::builder().overrides(overrides).build(),
                    )
                    .lifecycle(if o.market == Market::Spot {
                        InstanceLifecycle::Spot
                    } else {
                        InstanceLifecycle::OnDemand
                    })
                    .error_code(&code)
                    .error_message(message(&code, &o))
                    .build(),
            );
        }
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Tells the SDK not to retry a capacity refusal: the caller moves to the
/// next offering at once (EC2 answers `InsufficientInstanceCapacity` with a
/// 500, which the standard policy would retry eight times).
#[derive(Debug, Default)]
pub struct CapacityIsFinal;

impl ClassifyRetry for CapacityIsFinal {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        let Some(body) = ctx.response().and_then(|r| r.body().bytes()) else { return RetryAction::NoActionIndicated };
        let text = String::from_utf8_lossy(body);
        let refused =
            crate::capacity::UNFULFILLABLE.iter().any(|(code, _)| text.contains(&format!("<Code>{code}</Code>")));
        if refused {
            RetryAction::RetryForbidden
        } else {
            RetryAction::NoActionIndicated
        }
    }

    fn name(&self) -> &'static str {
        "capacity refusals are final"
    }

    fn priority(&self) -> RetryClassifierPriority {
        RetryClassifierPriority::run_after(RetryClassifierPriority::transient_error_classifier())
    }
}

/// EC2's error document (what its error parser and retry classifier read),
/// for faults injected at this edge.
pub(super) fn ec2_error_body(code: &str, message: &str) -> String {
    let message = message.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>injected</RequestID></Response>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_from_their_text_and_match_offerings() {
        let r = Rule::parse("InsufficientInstanceCapacity@*/m6i.large/us-east-1a").unwrap();
        let o = |m, t: &str, z: &str| Offering { market: m, instance_type: t.into(), zone: z.into() };
        assert!(r.matches(&o(Market::Spot, "m6i.large", "us-east-1a")));
        assert!(!r.matches(&o(Market::OnDemand, "m6i.large", "us-east-1b")));
        assert!(Rule::parse("x@cheap/*/*").is_err());
        assert_eq!(status("InsufficientInstanceCapacity"), 500);
        assert_eq!(status("Unsupported"), 400);
        assert!(message("InsufficientInstanceCapacity", &o(Market::OnDemand, "m6i.large", "us-east-1a"))
            .starts_with("We currently do not have sufficient m6i.large capacity in the Availability Zone you requested (us-east-1a)."));
    }
}

/// S3 refusing mid-upload, which moto never does: `PINFLEET_S3_FAULTS`
/// names an operation and the call that fails (`UploadPart@2`: the second
/// part). The call reaches moto; its answer is replaced by S3's own
/// `AccessDenied` document (a 403, which the SDK does not retry).
#[derive(Debug)]
pub struct S3Faults {
    operation: String,
    nth: u32,
    seen: std::sync::atomic::AtomicU32,
}

#[derive(Debug, Clone)]
struct S3Refused;

impl Storable for S3Refused {
    type Storer = StoreReplace<S3Refused>;
}

impl S3Faults {
    /// From `PINFLEET_S3_FAULTS` (`Operation@N`), if set.
    pub fn from_env() -> anyhow::Result<Option<S3Faults>> {
        let Ok(s) = std::env::var("PINFLEET_S3_FAULTS") else { return Ok(None) };
        if s.trim().is_empty() {
            return Ok(None);
        }
        let (op, n) = s
            .trim()
            .split_once('@')
            .ok_or_else(|| anyhow::anyhow!("PINFLEET_S3_FAULTS `{s}`: expected Operation@N (e.g. UploadPart@2)"))?;
        let nth: u32 = n.parse().map_err(|_| anyhow::anyhow!("PINFLEET_S3_FAULTS `{s}`: N is a whole number"))?;
        Ok(Some(S3Faults { operation: op.to_string(), nth, seen: Default::default() }))
    }
}

impl Intercept for S3Faults {
    fn name(&self) -> &'static str {
        "pinfleet-s3-faults"
    }

    fn read_before_transmit(
        &self,
        _ctx: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = operation(cfg);
        if op == self.operation {
            let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst).saturating_add(1);
            if n == self.nth {
                cfg.interceptor_state().store_put(S3Refused);
            }
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<S3Refused>().is_none() {
            return Ok(());
        }
        answer_s3(ctx, 403, "AccessDenied", "Access Denied")
    }
}

/// S3's ExpectedBucketOwner as S3 enforces it and moto does not (moto
/// 5.2.5 accepts any owner): a call stating an owner other than the
/// bucket's is answered 403 AccessDenied (`Access Denied`, S3's answer),
/// or 404 NoSuchBucket while the bucket does not exist, and never
/// reaches the bucket. Which account owns which bucket is
/// declared (`PINFLEET_S3_OWNERS`: `bucket=account;…`), as a bucket name
/// taken over in another account would be.
#[derive(Debug, Clone, Default)]
pub struct S3Owners {
    owners: std::collections::BTreeMap<String, String>,
    /// Every call seen: (operation, the owner it stated).
    seen: Arc<Mutex<Vec<(String, Option<String>)>>>,
}

#[derive(Debug, Clone)]
struct WrongOwner;

impl Storable for WrongOwner {
    type Storer = StoreReplace<WrongOwner>;
}

impl S3Owners {
    /// `bucket=account;…`.
    pub fn parse(s: &str) -> anyhow::Result<S3Owners> {
        let mut owners = std::collections::BTreeMap::new();
        for pair in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (bucket, account) = pair
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("PINFLEET_S3_OWNERS `{pair}`: expected bucket=account"))?;
            owners.insert(bucket.to_string(), account.to_string());
        }
        Ok(S3Owners { owners, seen: Arc::default() })
    }

    /// From `PINFLEET_S3_OWNERS`, if set.
    pub fn from_env() -> anyhow::Result<Option<S3Owners>> {
        match std::env::var("PINFLEET_S3_OWNERS") {
            Ok(s) if !s.trim().is_empty() => Ok(Some(S3Owners::parse(&s)?)),
            _ => Ok(None),
        }
    }

    /// Every call made through this client so far: (operation, the owner
    /// it stated, if any).
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().expect("seen").clone()
    }

    /// Whether a call on `uri` (path-style) stating `expected` is refused.
    fn refuses(&self, uri: &str, expected: &str) -> bool {
        let Ok(u) = url::Url::parse(uri) else { return false };
        let bucket = u.path_segments().and_then(|mut s| s.next()).unwrap_or_default();
        self.owners.get(bucket).is_some_and(|owner| owner != expected)
    }
}

impl Intercept for S3Owners {
    fn name(&self) -> &'static str {
        "pinfleet-s3-owners"
    }

    // After signing: every interceptor has put its headers on by now.
    fn modify_before_transmit(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let req = ctx.request_mut();
        let stated = req.headers().get(crate::state::owner::HEADER).map(str::to_string);
        let op = operation(cfg);
        self.seen.lock().expect("seen").push((op, stated.clone()));
        let Some(expected) = stated else {
            return Ok(());
        };
        if !self.refuses(req.uri(), &expected) {
            return Ok(());
        }
        // The refused call never reaches the bucket: HeadBucket goes instead,
        // to tell a bucket that does not exist (S3 answers 404 NoSuchBucket
        // whatever owner is stated) from one of another account (403).
        let u = url::Url::parse(req.uri())?;
        let bucket = u.path_segments().and_then(|mut s| s.next()).unwrap_or_default().to_string();
        let head = u.join(&format!("/{bucket}"))?.to_string();
        req.set_uri(head.as_str())?;
        req.set_method("HEAD")?;
        *req.body_mut() = SdkBody::empty();
        req.headers_mut().remove("content-length");
        req.headers_mut().remove("content-md5");
        cfg.interceptor_state().store_put(WrongOwner);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<WrongOwner>().is_none() {
            return Ok(());
        }
        if ctx.response().status().as_u16() == 404 {
            answer_s3(ctx, 404, "NoSuchBucket", "The specified bucket does not exist")
        } else {
            answer_s3(ctx, 403, "AccessDenied", "Access Denied")
        }
    }
}
