//! The launch of a group's new machines: the facts it needs (placement,
//! sequence numbers, the ledger), then the capacity launcher's steps
//! (`capacity::launcher`, pure) carried out against EC2 and the ledger's
//! store.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{LaunchTemplateSpecification, ResourceType};
use base64::Engine;

use super::{call, OpContext, OpError, R};
use crate::capacity::{launcher::Request, Launcher, Market, Offering, Step};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::ops::with_api_host;
use crate::cloud::tags;
use crate::spec::Role;

/// Client token for a RunInstances call: the same (cluster, group,
/// revision, sequence) always gives the same token, so a retried call after
/// a lost response returns the first call's instances instead of new ones.
pub fn client_token(cluster: &str, group: &str, revision: u64, seq: usize) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(format!("{cluster}/{group}/{revision}/{seq}")));
    format!("pf-{}", &h[..40])
}

/// Which subnets new machines go to: each to the subnet with the fewest of
/// the group's machines so far (ties by the spec's order).
pub fn spread(existing: &BTreeMap<String, usize>, subnets: &[String], count: u32) -> Vec<String> {
    let mut counts: Vec<(String, usize)> =
        subnets.iter().map(|s| (s.clone(), existing.get(s).copied().unwrap_or(0))).collect();
    let mut out = Vec::new();
    for _ in 0..count {
        if let Some(min) = counts.iter_mut().min_by_key(|(_, n)| *n) {
            min.1 += 1;
            out.push(min.0.clone());
        }
    }
    out
}

/// Launches `count` machines of `group`: the facts from observation, then
/// the launcher's steps, each carried out against EC2 or the ledger.
pub(super) async fn launch(ctx: &OpContext, group: &str, role: Role, count: u32, subnets: &[String]) -> R<String> {
    let (request, subnet_ids) = request(ctx, group, role, count, subnets).await?;
    let edge = Edge::new(ctx, group, subnet_ids, &request.zone_of).await?;
    // Kept current through the launch: what one batch was refused, the
    // next batch does not ask again (the ledger's answer after each write).
    let ledger = match (&request.capacity, &ctx.ledger) {
        (Some(_), Some(store)) => store
            .load()
            .await
            .map_err(|e| OpError { retriable: true, error: e.context("reading the capacity ledger") })?,
        _ => Default::default(),
    };
    let mut launcher = Launcher::new(request, ledger, chrono::Utc::now());
    let mut ids: Vec<String> = Vec::new();
    loop {
        let now = chrono::Utc::now();
        match launcher.next(now) {
            Step::Done => break,
            Step::Blocked(blocked) => return Err(partly(ctx, &ids, blocked).await),
            Step::Record { refusals, launches } => {
                let written =
                    match &ctx.ledger {
                        Some(store) => Some(store.record(&refusals, &launches, now).await.map_err(|e| OpError {
                            retriable: true,
                            error: e.context("writing the capacity ledger"),
                        })?),
                        None => None,
                    };
                launcher.recorded(written, now);
            }
            Step::Fleet { offerings, count, seq } => {
                let (got, refused, errors) = edge.fleet(&offerings, count, seq).await?;
                launcher.fleet_answered(got.len(), &refused, errors);
                ids.extend(got);
            }
            Step::Run { offering, subnet, count, init, seq } => {
                match edge.run(offering.as_ref(), &subnet, count, init, seq).await? {
                    Ran::Launched(got) => {
                        ids.extend(got);
                        launcher.run_launched();
                    }
                    Ran::Refused(code) => launcher.run_refused(&code),
                }
            }
        }
    }
    ctx.launched.lock().await.extend(ids.iter().cloned());
    const SHOWN: usize = 4;
    if ids.len() > SHOWN {
        return Ok(format!("{} launched: {}, … (+{} more)", ids.len(), ids[..SHOWN].join(","), ids.len() - SHOWN));
    }
    Ok(ids.join(","))
}

/// What the launcher is asked, from the observed machines and the model:
/// where each new machine goes, whether the first is the cluster's first
/// control plane, the live machines by market, the first sequence number.
/// Also each subnet's id by name.
async fn request(
    ctx: &OpContext,
    group: &str,
    role: Role,
    count: u32,
    subnets: &[String],
) -> R<(Request, BTreeMap<String, String>)> {
    // Instances this revision already started (a re-run after a crash) keep
    // their sequence numbers, so tokens never repeat for new machines.
    let seq = ctx
        .observed_instances
        .iter()
        .filter(|i| i.group.as_deref() == Some(group) && i.revision == Some(ctx.revision))
        .count();
    let mut subnet_ids = BTreeMap::new();
    for s in subnets {
        subnet_ids.insert(ctx.id(&K::Subnet(s.to_string())).await?, s.clone());
    }
    let live = || ctx.observed_instances.iter().filter(|i| i.is_live() && i.group.as_deref() == Some(group));
    let mut existing: BTreeMap<String, usize> = BTreeMap::new();
    for i in live() {
        if let Some(name) = i.subnet_id.as_ref().and_then(|s| subnet_ids.get(s)) {
            *existing.entry(name.clone()).or_default() += 1;
        }
    }
    // The first control-plane machine of a new cluster runs `kubeadm init`
    // (its own call, with user-data that carries the CA).
    let cluster_has_control_plane = ctx.observed_instances.iter().any(|i| {
        i.is_live()
            && ctx
                .desired
                .groups
                .iter()
                .any(|g| g.role == Role::ControlPlane && i.group.as_deref() == Some(g.name.as_str()))
    });
    let first_is_init =
        role == Role::ControlPlane && !cluster_has_control_plane && seq == 0 && ctx.init_user_data.is_some();
    let request = Request {
        group: group.to_string(),
        by: format!("{}/{group}", ctx.desired.cluster),
        capacity: ctx.desired.groups.iter().find(|g| g.name == group).and_then(|g| g.capacity.clone()),
        subnets: subnets.to_vec(),
        zone_of: ctx.desired.subnets.iter().map(|s| (s.name.clone(), s.zone.clone())).collect(),
        placement: spread(&existing, subnets, count),
        first_is_init,
        live_on_demand: u32::try_from(live().filter(|i| !i.spot).count()).unwrap_or(u32::MAX),
        live_spot: u32::try_from(live().filter(|i| i.spot).count()).unwrap_or(u32::MAX),
        seq,
    };
    Ok((request, subnet_ids.into_iter().map(|(id, name)| (name, id)).collect()))
}

/// What a RunInstances did: launched these machines, or EC2 could not
/// serve its offering now (the code).
enum Ran {
    Launched(Vec<String>),
    Refused(String),
}

/// The EC2 side of one launch: the group's launch template and the tags
/// every machine carries.
struct Edge<'a> {
    ctx: &'a OpContext,
    group: &'a str,
    by: String,
    lt_id: String,
    version: i64,
    subnet_ids: BTreeMap<String, String>,
    zone_by_subnet_id: BTreeMap<String, String>,
    instance_tags: aws_sdk_ec2::types::TagSpecification,
}

impl<'a> Edge<'a> {
    async fn new(
        ctx: &'a OpContext,
        group: &'a str,
        subnet_ids: BTreeMap<String, String>,
        zone_of: &BTreeMap<String, String>,
    ) -> R<Edge<'a>> {
        let cluster = &ctx.desired.cluster;
        let lt_id = ctx.id(&K::LaunchTemplate(group.to_string())).await?;
        let version = ctx
            .versions
            .lock()
            .await
            .get(group)
            .copied()
            .ok_or_else(|| OpError::fatal(anyhow::anyhow!("no launch-template version known for {group}")))?;
        let kubernetes_version = ctx
            .desired
            .launch_templates
            .iter()
            .find(|t| t.group == group)
            .and_then(|t| t.data.tags.get(tags::KUBERNETES_VERSION))
            .map(String::as_str)
            .unwrap_or_default();
        // The tags every machine of this launch carries, by RunInstances or CreateFleet.
        let instance_tags = ctx.spec(
            ResourceType::Instance,
            &K::Instance(group.to_string()),
            &[
                (tags::INSTANCE_GROUP, group),
                (tags::KUBERNETES_VERSION, kubernetes_version),
                (tags::LT_VERSION, &version.to_string()),
                (tags::REVISION, &ctx.revision.to_string()),
                (tags::NAME, &format!("{cluster}-{group}")),
            ],
        );
        let zone_by_subnet_id =
            subnet_ids.iter().filter_map(|(name, id)| zone_of.get(name).map(|z| (id.clone(), z.clone()))).collect();
        Ok(Edge {
            ctx,
            group,
            by: format!("{cluster}/{group}"),
            lt_id,
            version,
            subnet_ids,
            zone_by_subnet_id,
            instance_tags,
        })
    }

    fn subnet_id(&self, subnet: &str) -> R<String> {
        self.subnet_ids.get(subnet).cloned().ok_or_else(|| OpError::fatal(anyhow::anyhow!("no subnet {subnet}")))
    }

    /// One instant Spot fleet (price-capacity-optimized) over `offerings`:
    /// the machines it launched, the offerings it could not serve now (a
    /// 200 may carry an error per override and no instance), and how many
    /// errors it carried.
    async fn fleet(
        &self,
        offerings: &[(Offering, String)],
        n: i32,
        seq: usize,
    ) -> R<(Vec<String>, Vec<(Offering, String)>, usize)> {
        use aws_sdk_ec2::types as t;
        let mut overrides = Vec::new();
        for (o, s) in offerings {
            overrides.push(
                t::FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(t::InstanceType::from(o.instance_type.as_str()))
                    .subnet_id(self.subnet_id(s)?)
                    .availability_zone(&o.zone)
                    .build(),
            );
        }
        let cluster = &self.ctx.desired.cluster;
        let out = call(
            "CreateFleet",
            self.ctx
                .aws
                .ec2
                .create_fleet()
                .r#type(t::FleetType::Instant)
                .client_token(client_token(cluster, &format!("{}/spot-fleet", self.group), self.ctx.revision, seq))
                .launch_template_configs(
                    t::FleetLaunchTemplateConfigRequest::builder()
                        .launch_template_specification(
                            t::FleetLaunchTemplateSpecificationRequest::builder()
                                .launch_template_id(&self.lt_id)
                                .version(self.version.to_string())
                                .build(),
                        )
                        .set_overrides(Some(overrides))
                        .build(),
                )
                .target_capacity_specification(
                    t::TargetCapacitySpecificationRequest::builder()
                        .total_target_capacity(n)
                        .spot_target_capacity(n)
                        .default_target_capacity_type(t::DefaultTargetCapacityType::Spot)
                        .build(),
                )
                .spot_options(
                    t::SpotOptionsRequest::builder()
                        .allocation_strategy(t::SpotAllocationStrategy::PriceCapacityOptimized)
                        .build(),
                )
                .tag_specifications(self.instance_tags.clone())
                .send()
                .await,
        )?;
        let by = &self.by;
        let mut refused = Vec::new();
        for e in out.errors() {
            let Some(code) = e.error_code().filter(|c| crate::capacity::unfulfillable(c)) else {
                tracing::warn!(
                    "{by}: CreateFleet: {}: {}",
                    e.error_code().unwrap_or("?"),
                    e.error_message().unwrap_or_default()
                );
                continue;
            };
            let ov = e.launch_template_and_overrides().and_then(|l| l.overrides());
            let o = Offering {
                market: Market::Spot,
                instance_type: ov.and_then(|o| o.instance_type()).map(|t| t.as_str().to_string()).unwrap_or_default(),
                zone: ov
                    .and_then(|o| o.availability_zone().map(str::to_string))
                    .or_else(|| ov.and_then(|o| o.subnet_id()).and_then(|s| self.zone_by_subnet_id.get(s).cloned()))
                    .unwrap_or_default(),
            };
            tracing::warn!("{by}: {o}: {code}; the next offering is tried");
            refused.push((o, code.to_string()));
        }
        let got: Vec<String> = out.instances().iter().flat_map(|i| i.instance_ids().iter().cloned()).collect();
        Ok((got, refused, out.errors().len()))
    }

    /// One RunInstances of `n` machines, all or nothing (moto launches
    /// MinCount, AWS up to MaxCount: a failed batch is retried or
    /// re-planned by the next run).
    async fn run(&self, offering: Option<&Offering>, subnet: &str, n: i32, init: bool, seq: usize) -> R<Ran> {
        let ctx = self.ctx;
        let group = self.group;
        let key = K::Instance(group.to_string());
        // Each offering has its own token: a retried call of the same
        // offering returns its instances, another offering is a new call.
        let token_group = match offering {
            Some(o) => format!("{group}/{o}"),
            None => group.to_string(),
        };
        let mut req = ctx
            .aws
            .ec2
            .run_instances()
            .min_count(n)
            .max_count(n)
            .client_token(client_token(&ctx.desired.cluster, &token_group, ctx.revision, seq))
            .launch_template(
                LaunchTemplateSpecification::builder()
                    .launch_template_id(&self.lt_id)
                    .version(self.version.to_string())
                    .build(),
            )
            .subnet_id(self.subnet_id(subnet)?)
            .tag_specifications(self.instance_tags.clone())
            .tag_specifications(ctx.spec(ResourceType::Volume, &key, &[(tags::INSTANCE_GROUP, group)]));
        if let Some(o) = offering {
            req = req
                .instance_type(aws_sdk_ec2::types::InstanceType::from(o.instance_type.as_str()))
                .placement(aws_sdk_ec2::types::Placement::builder().availability_zone(&o.zone).build());
            if o.market == Market::Spot {
                req = req.instance_market_options(
                    aws_sdk_ec2::types::InstanceMarketOptionsRequest::builder()
                        .market_type(aws_sdk_ec2::types::MarketType::Spot)
                        .build(),
                );
            }
        }
        if init {
            if let Some(user_data) = &ctx.init_user_data {
                let host = ctx.lb_dns.lock().await.clone().unwrap_or_default();
                req = req.user_data(base64::engine::general_purpose::STANDARD.encode(with_api_host(user_data, &host)));
            }
        }
        let sent = req.send().await;
        if let (Err(e), Some(o)) = (&sent, offering) {
            if let Some(code) = crate::cloud::aws::error_code(e).filter(|c| crate::capacity::unfulfillable(c)) {
                tracing::warn!("{}: {o}: {code}; trying the next offering", self.by);
                return Ok(Ran::Refused(code.to_string()));
            }
        }
        // A profile IAM made seconds ago is not yet visible to EC2: retry.
        let out = call("RunInstances", sent).map_err(|mut e| {
            e.retriable |= format!("{:#}", e.error).contains("Invalid IAM Instance Profile");
            e
        })?;
        Ok(Ran::Launched(out.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect()))
    }
}

/// A launch that stopped on capacity after some of its batches launched:
/// the machines it started are recorded as launched (the rollout waits for
/// them) and the error says how many, so the apply's summary counts them.
async fn partly(ctx: &OpContext, ids: &[String], blocked: crate::capacity::Blocked) -> OpError {
    if ids.is_empty() {
        return OpError { retriable: false, error: blocked.into() };
    }
    ctx.launched.lock().await.extend(ids.iter().cloned());
    let error = anyhow::Error::new(blocked).context(crate::capacity::PartlyLaunched { ids: ids.to_vec() });
    OpError { retriable: false, error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_fills_the_emptiest_subnets_first() {
        let subnets = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let existing = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 0)]);
        assert_eq!(spread(&existing, &subnets, 4), ["b", "c", "b", "c"]);
        assert_eq!(spread(&BTreeMap::new(), &subnets, 2), ["a", "b"]);
    }

    #[test]
    fn client_tokens_are_stable_and_distinct() {
        assert_eq!(client_token("c", "g", 3, 0), client_token("c", "g", 3, 0));
        assert_ne!(client_token("c", "g", 3, 0), client_token("c", "g", 3, 1));
        assert_ne!(client_token("c", "g", 3, 0), client_token("c", "g", 4, 0));
        assert!(client_token("c", "g", 3, 0).len() <= 64);
    }
}
