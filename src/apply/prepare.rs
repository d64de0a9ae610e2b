//! Gathering what a plan needs: the cluster's images, rendered user-data,
//! and an observation of what exists — then the pure diff.

use crate::cloud::key::ResourceKey as K;
use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use chrono::Utc;
use tokio::sync::Mutex;

use crate::ami::ImageInfo;
use crate::cloud::aws::ops::OpContext;
use crate::cloud::aws::{images, observe, Aws};
use crate::cloud::model::{self, Desired, Inputs};
use crate::cloud::observed::Observed;
use crate::plan::{self, Plan, API_HOST_PLACEHOLDER};
use crate::render::{BootstrapMode, BootstrapParams, Renderer};
use crate::spec::{Cluster, Role};

pub struct Prepared {
    pub desired: Desired,
    pub observed: Observed,
    pub plan: Plan,
    pub images: BTreeMap<String, ImageInfo>,
    pub warnings: Vec<String>,
    /// User-data for the first control-plane machine (carries the CA).
    pub init_user_data: Option<String>,
}

impl Prepared {
    /// The executor's context for applying this plan as `revision`.
    pub fn context(&self, aws: &Aws, cluster: &Cluster, revision: u64) -> Arc<OpContext> {
        context(aws, cluster, self.desired.clone(), &self.observed, self.init_user_data.clone(), revision)
    }
}

fn params(cluster: &Cluster) -> BootstrapParams {
    let mut p = BootstrapParams::for_cluster(cluster);
    p.api_endpoint = format!("{API_HOST_PLACEHOLDER}:{}", cluster.spec.api.port);
    p
}

/// Observes the cluster, resolves images, renders user-data and diffs.
pub async fn prepare(aws: &Aws, cluster: &Cluster) -> Result<Prepared> {
    prepare_with(aws, cluster, false).await
}

/// [`prepare`], for a step of a Kubernetes version upgrade when
/// `version_step` (launch templates may change minor version).
pub async fn prepare_with(aws: &Aws, cluster: &Cluster, version_step: bool) -> Result<Prepared> {
    let lb_name = model::load_balancer_name(&cluster.metadata.name);
    let needs_lb = cluster.spec.api.load_balancer.uses_elbv2();
    let (observed, (images, warnings)) = futures::try_join!(
        observe::observe(aws, &cluster.metadata.name, needs_lb.then_some(lb_name.as_str())),
        images::resolve(aws, cluster, Utc::now())
    )?;
    if let Some(said) = &observed.elbv2_unavailable {
        return Err(elbv2_refusal(cluster, said));
    }
    // A cluster taken over keeps API servers whose certificates name its
    // own API name, not pinfleet's load balancer: machines join by it.
    if let (Some(adopted), None) = (&observed.adopted, &cluster.spec.api.dns_name) {
        anyhow::bail!(
            "{}: spec.api.dnsName is needed: the cluster was taken over ({}), its API servers' certificates name its own API name (kubeadm's controlPlaneEndpoint, kops's masterPublicName), and the machines pinfleet launches join by it, not by a load balancer's DNS name. Nothing was changed",
            cluster.metadata.name,
            adopted.from
        );
    }
    let renderer = Renderer::new();
    let mut p = params(cluster);
    let mut inputs = Inputs::default();
    // Taken over from kops: its etcd-manager runs on the control plane.
    if observed.adopted.as_ref().is_some_and(|a| a.from.starts_with("kops:")) {
        p.etcd_manager = true;
        inputs.etcd_manager =
            Some(cluster.metadata.annotations.get("pinfleet.dev/imported-from").cloned().unwrap_or_default());
    }
    let mut init_user_data = None;
    for g in &cluster.spec.instance_groups {
        let image = &images[&g.name];
        inputs.images.insert(g.name.clone(), (image.id.clone(), image.root_device.clone()));
        inputs.user_data.insert(g.name.clone(), renderer.user_data(cluster, g, BootstrapMode::for_role(g.role), &p)?);
        if g.role == Role::ControlPlane && init_user_data.is_none() {
            init_user_data = Some(renderer.user_data(cluster, g, BootstrapMode::Init, &p)?);
        }
    }
    let mut desired = model::desired(cluster, &inputs)?;
    desired.version_step = version_step;
    let mut plan = plan::diff(&desired, &observed);
    plan.aws_calls = aws.calls.snapshot();
    Ok(Prepared { desired, observed, plan, images, warnings, init_user_data })
}

/// Stops a run that needs ELBv2 on an endpoint without it, before its first
/// write: one read (DescribeLoadBalancers) says whether the endpoint has it.
/// A cluster with an Elastic IP endpoint makes no call.
pub async fn preflight(aws: &Aws, cluster: &Cluster) -> Result<()> {
    if !cluster.spec.api.load_balancer.uses_elbv2() {
        return Ok(());
    }
    let name = model::load_balancer_name(&cluster.metadata.name);
    match aws.elb.describe_load_balancers().names(&name).send().await {
        Err(e) if crate::cloud::aws::service_unavailable(&e) => Err(elbv2_refusal(
            cluster,
            &format!("DescribeLoadBalancers: {}", crate::cloud::aws::client::describe_sdk_error(&e)),
        )),
        // Found, not found, or another failure the run reports where it meets it.
        _ => Ok(()),
    }
}

/// What is missing, why the cluster needs it, and the ways out.
pub fn elbv2_refusal(cluster: &Cluster, said: &str) -> anyhow::Error {
    let name = &cluster.metadata.name;
    anyhow::anyhow!(
        "this AWS endpoint has no Elastic Load Balancing v2 ({said}).\n\
         {name} needs it: its API endpoint is a network load balancer (spec.api.loadBalancer.type: network, the default).\n\
         Nothing was changed. Ways out:\n\
         \x20 - serve the API from an Elastic IP instead: `spec.api.loadBalancer.type: elastic-ip` (one control-plane machine, in a public subnet; see clusters/localstack-dev.yaml);\n\
         \x20 - use an endpoint that emulates ELBv2: LocalStack Pro, or moto (scripts/demo);\n\
         \x20 - or run against AWS itself."
    )
}

/// The executor's context for applying a prepared plan.
pub fn context(
    aws: &Aws,
    cluster: &Cluster,
    desired: Desired,
    o: &Observed,
    init_user_data: Option<String>,
    revision: u64,
) -> Arc<OpContext> {
    let mut ids = BTreeMap::new();
    if let Some(v) = &o.vpc {
        ids.insert(K::Vpc, v.id.clone());
    }
    for s in &o.subnets {
        ids.insert(K::Subnet(s.name.to_string()), s.id.clone());
    }
    if let Some(g) = &o.internet_gateway {
        ids.insert(K::Igw, g.id.clone());
    }
    for a in &o.addresses {
        ids.insert(K::Eip(a.zone.to_string()), a.allocation_id.clone());
    }
    for n in &o.nat_gateways {
        ids.insert(K::Nat(n.zone.to_string()), n.id.clone());
    }
    for r in &o.route_tables {
        ids.insert(K::RouteTable(r.name.to_string()), r.id.clone());
    }
    for s in &o.security_groups {
        ids.insert(K::SecurityGroup(s.name.to_string()), s.id.clone());
    }
    if let Some(lb) = &o.load_balancer {
        ids.insert(K::LoadBalancer, lb.arn.clone());
    }
    if let Some(tg) = &o.target_group {
        ids.insert(K::TargetGroup, tg.arn.clone());
    }
    if let Some(l) = &o.listener {
        ids.insert(K::Listener, l.clone());
    }
    let desired_api_address = desired.api_address;
    let join_host = desired.join_host(o.adopted.is_some()).map(str::to_string);
    let mut versions = BTreeMap::new();
    for t in &o.launch_templates {
        ids.insert(K::LaunchTemplate(t.group.to_string()), t.id.clone());
        versions.insert(t.group.clone(), t.latest_version);
    }
    Arc::new(OpContext {
        aws: aws.clone(),
        desired,
        base_tags: model::base_tags(cluster),
        revision,
        init_user_data,
        observed_instances: o.instances.clone(),
        ids: Mutex::new(ids),
        versions: Mutex::new(versions),
        join_host,
        lb_dns: Mutex::new(match (desired_api_address, o.api_address()) {
            (true, Some(a)) => a.public_ip.clone(),
            (true, None) => None,
            (false, _) => o.load_balancer.as_ref().map(|l| l.dns_name.clone()),
        }),
        launched: Mutex::new(Vec::new()),
        ledger: Some(Arc::new(crate::cloud::aws::ledger::StoreLedger::new(&cluster.spec.state_store, aws))),
    })
}
