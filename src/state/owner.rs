//! The state store's account made explicit: an `s3://` state store URL may
//! name the account that owns its bucket
//! (`s3://pinfleet-state/clusters?expectedBucketOwner=111122223333`). The
//! store's S3 client then carries S3's ExpectedBucketOwner (the
//! `x-amz-expected-bucket-owner` header) on every call it makes — an
//! interceptor on that client, so no call can forget it — and a bucket of
//! that name in another account answers 403 AccessDenied instead of being
//! written to. Sits between [`super::Store::open`] and the SDK.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// S3's header for the ExpectedBucketOwner parameter.
pub const HEADER: &str = "x-amz-expected-bucket-owner";

/// S3 operations without an ExpectedBucketOwner parameter (a bucket being
/// created has no owner yet; ListBuckets names no bucket).
const WITHOUT: &[&str] = &["CreateBucket", "ListBuckets"];

/// Puts the owner's account on every call of the client it is added to.
#[derive(Debug, Clone)]
pub struct ExpectedOwner(pub String);

impl Intercept for ExpectedOwner {
    fn name(&self) -> &'static str {
        "pinfleet-expected-bucket-owner"
    }

    fn modify_before_signing(
        &self,
        ctx: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map(|m| m.name().to_string()).unwrap_or_default();
        if !WITHOUT.contains(&op.as_str()) {
            ctx.request_mut().headers_mut().insert(HEADER, self.0.clone());
        }
        Ok(())
    }
}

/// `client` with every call stating `owner` as the bucket's owner.
pub fn client(client: &aws_sdk_s3::Client, owner: &str) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(client.config().to_builder().interceptor(ExpectedOwner(owner.to_string())).build())
}

/// What the command says when S3 refuses the stated owner.
pub fn refused(bucket: &str, owner: &str) -> String {
    format!(
        "state store bucket {bucket} is not in account {owner} (S3 answered 403 AccessDenied to ExpectedBucketOwner {owner}): \
         a bucket of that name in another account is never written to; check the state store URL's expectedBucketOwner, or the bucket"
    )
}

/// What the command says when the bucket it just made is not the expected
/// owner's (the credentials act in another account).
pub fn made_elsewhere(bucket: &str, owner: &str, removed: bool) -> String {
    let after = if removed { "it was deleted again" } else { "deleting it again failed: delete it by hand" };
    format!(
        "state store bucket {bucket} did not exist, and made with these credentials it is not in account {owner} \
         (S3 answered 403 AccessDenied to ExpectedBucketOwner {owner}): {after}; make the bucket in account {owner}"
    )
}
