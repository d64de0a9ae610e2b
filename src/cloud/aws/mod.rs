//! The AWS edge: SDK clients ([`client`]), observation ([`observe`]),
//! images — resolution ([`images`]), baking ([`bake`]), channels
//! ([`channels`]) and collection ([`imagegc`]) — and the operations the executor runs
//! ([`ops`]). Everything above this module speaks the domain, not the SDK.

pub mod account;
pub mod autoscaling;
pub mod bake;
pub mod channels;
pub mod client;
pub mod context;
pub mod events;
pub mod iam;
pub mod imagegc;
pub mod images;
pub mod inject;
pub mod ledger;
pub mod observe;
pub mod ops;
pub mod sharing;
pub mod sts_inject;

pub use client::{Aws, AwsOptions, CallCounter, Faults, Target};

/// Turns an SDK error into an `anyhow::Error` with the service's code and
/// message and what was being done.
pub fn sdk<T, E>(
    what: &str,
    r: Result<T, aws_sdk_ec2::error::SdkError<E, aws_smithy_runtime_api::http::Response>>,
) -> anyhow::Result<T>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    r.map_err(|e| anyhow::anyhow!("{what}: {}", client::describe_sdk_error(&e)))
}

/// The service error code of a failed call, if it got that far.
pub fn error_code<E, R>(e: &aws_sdk_ec2::error::SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata,
{
    match e {
        aws_sdk_ec2::error::SdkError::ServiceError(s) => s.err().code(),
        _ => None,
    }
}

/// True when the endpoint says it does not offer the service at all, as
/// LocalStack Community answers for ELBv2 (HTTP 501, "not included in your
/// current license plan" / "not yet been emulated"): a fact about the
/// endpoint, not a failed call to retry.
pub fn service_unavailable<E>(e: &aws_sdk_ec2::error::SdkError<E, aws_smithy_runtime_api::http::Response>) -> bool
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = e.raw_response().map(|r| r.status().as_u16());
    let text = client::describe_sdk_error(e);
    status == Some(501)
        || text.contains("not included in your current license plan")
        || text.contains("not yet been emulated")
}
