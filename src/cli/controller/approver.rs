//! The kubelet serving-certificate approver `pinfleet controller` runs
//! beside the workload controllers: which addresses it checks (EC2, the
//! Nodes, or off) and the loop.

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServingAddresses {
    Ec2,
    Node,
    Off,
}

/// Where the approver reads machine addresses, decided before anything runs.
pub(super) enum Approval {
    Off,
    Node,
    Ec2(crate::cloud::aws::Aws),
}

/// How long the probe of AWS access may take (credentials from the
/// environment answer at once; an instance role through IMDS within a
/// second or two; outside AWS, IMDS does not answer at all).
const AWS_PROBE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether EC2 can be asked: a region and credentials that STS accepts.
pub(super) async fn aws_access() -> Result<crate::cloud::aws::Aws> {
    let probe = async {
        let opts = crate::cloud::aws::AwsOptions::from_env(crate::cloud::aws::Target::Aws, None)?;
        let aws = crate::cloud::aws::Aws::connect(&opts).await?;
        match aws.sts.get_caller_identity().send().await {
            Ok(_) => Ok(aws),
            Err(e) => anyhow::bail!("{}", crate::cloud::aws::client::describe_sdk_error(&e)),
        }
    };
    match tokio::time::timeout(AWS_PROBE, probe).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!("no answer from AWS within {}", humantime::format_duration(AWS_PROBE)),
    }
}

/// The approver's address source: as asked, or (unset) EC2 when AWS can be
/// reached and otherwise off, said in one line. `ec2` asked for explicitly
/// without AWS access stops the start: the operator wanted approval.
pub(super) async fn approval(asked: Option<ServingAddresses>) -> Result<Approval> {
    match asked {
        Some(ServingAddresses::Off) => Ok(Approval::Off),
        Some(ServingAddresses::Node) => Ok(Approval::Node),
        Some(ServingAddresses::Ec2) => aws_access().await.map(Approval::Ec2).map_err(|e| {
            anyhow::anyhow!(
                "--serving-addresses ec2 needs AWS access, and there is none: {e:#} (on a local cluster, use --serving-addresses node)"
            )
        }),
        None => match aws_access().await {
            Ok(aws) => Ok(Approval::Ec2(aws)),
            Err(e) => {
                let why = format!("{e:#}").lines().next().unwrap_or_default().to_string();
                tracing::warn!(
                    "kubelet serving certificates are not approved: no AWS access ({why}); on a local cluster pass --serving-addresses node, or off to say so"
                );
                Ok(Approval::Off)
            }
        },
    }
}

/// The approver with its address source (it runs on every replica: a
/// decision is one conditional write, and a decided CSR is skipped).
pub(super) async fn approver(client: kube::Client, approval: Approval) {
    use crate::controller::serving;
    match approval {
        Approval::Off => {}
        Approval::Node => serving::run(client, serving::FromNode).await,
        Approval::Ec2(aws) => serving::run(client, serving::FromEc2(aws)).await,
    }
    std::future::pending::<()>().await
}
