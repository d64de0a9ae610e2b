//! The interruption events' edge: observing the cluster's SQS queue and
//! EventBridge rules (by the names `cloud::events` gives them), running
//! the plan's operations on them, and the machine-health loop's reads of
//! the queue (receive, delete once handled).

use std::collections::HashMap;

use super::context::{call, call_ok_if, OpContext, R};
use super::Aws;
use crate::cloud::events::{self, KINDS};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::observed::{ObservedEventRule, ObservedQueue};
use crate::cloud::ops::Op;
use crate::cloud::tags;

const NO_QUEUE: [&str; 2] = ["AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"];
const NO_RULE: [&str; 1] = ["ResourceNotFoundException"];
/// The id of the queue among a rule's targets.
const TARGET_ID: &str = "pinfleet-interruptions";

/// The queue's URL and ARN, if it exists.
pub async fn queue(aws: &Aws, name: &str) -> anyhow::Result<Option<ObservedQueue>> {
    let url = match aws.sqs.get_queue_url().queue_name(name).send().await {
        Ok(o) => o.queue_url().unwrap_or_default().to_string(),
        Err(e) if super::error_code(&e).is_some_and(|c| NO_QUEUE.contains(&c)) => return Ok(None),
        Err(e) => anyhow::bail!("GetQueueUrl {name}: {}", super::client::describe_sdk_error(&e)),
    };
    let attrs = aws
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GetQueueAttributes {name}: {}", super::client::describe_sdk_error(&e)))?;
    let arn = attrs
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .cloned()
        .unwrap_or_default();
    Ok(Some(ObservedQueue { name: name.to_string(), url, arn }))
}

/// The cluster's queue and rules (looked up whether or not the spec still
/// wants them, so a plan can delete them and destroy finds them). The rules
/// are listed only when the queue exists: a rule's target is the queue, so
/// the plan creates the queue first and deletes it last, and a cluster
/// without interruption handling costs one call (GetQueueUrl), not two.
pub async fn observe(aws: &Aws, cluster: &str) -> anyhow::Result<(Option<ObservedQueue>, Vec<ObservedEventRule>)> {
    let name = events::queue_name(cluster);
    let q = queue(aws, &name).await?;
    if q.is_none() {
        return Ok((None, Vec::new()));
    }
    let rules = async {
        let prefix = format!("pinfleet-{cluster}-");
        let listed = aws
            .events
            .list_rules()
            .name_prefix(prefix.chars().take(64).collect::<String>())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("ListRules: {}", super::client::describe_sdk_error(&e)))?;
        let mut out = Vec::new();
        for r in listed.rules() {
            let Some(name) = r.name() else { continue };
            let Some(kind) = KINDS.iter().find(|k| events::rule_name(cluster, k) == name) else { continue };
            let targets =
                aws.events.list_targets_by_rule().rule(name).send().await.map_err(|e| {
                    anyhow::anyhow!("ListTargetsByRule {name}: {}", super::client::describe_sdk_error(&e))
                })?;
            out.push(ObservedEventRule {
                kind: kind.to_string(),
                name: name.to_string(),
                pattern: r.event_pattern().unwrap_or_default().to_string(),
                targets: targets.targets().iter().map(|t| t.arn().to_string()).collect(),
            });
        }
        anyhow::Ok(out)
    };
    Ok((q, rules.await?))
}

fn queue_tags(ctx: &OpContext, key: &K) -> HashMap<String, String> {
    let mut t: HashMap<String, String> = ctx.base_tags.clone().into_iter().collect();
    t.insert(tags::RESOURCE.into(), key.to_string());
    t
}

async fn queue_arn(ctx: &OpContext, name: &str) -> R<(String, String)> {
    match queue(&ctx.aws, name).await {
        Ok(Some(q)) => Ok((q.url, q.arn)),
        // Just made: SQS may not list it yet.
        Ok(None) => Err(crate::cloud::ops::OpError {
            retriable: true,
            error: anyhow::anyhow!("queue {name} is not visible yet"),
        }),
        Err(e) => Err(crate::cloud::ops::OpError { retriable: false, error: e }),
    }
}

pub async fn run(ctx: &OpContext, key: &K, op: &Op) -> R<String> {
    let sqs = &ctx.aws.sqs;
    let eb = &ctx.aws.events;
    match op {
        Op::CreateEventQueue { name, rules } => {
            let out = call(
                "CreateQueue",
                sqs.create_queue()
                    .queue_name(name)
                    // Two minutes' notice: a warning older than that is history.
                    .attributes(aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod, "300")
                    .set_tags(Some(queue_tags(ctx, key)))
                    .send()
                    .await,
            )?;
            let url = out.queue_url().unwrap_or_default().to_string();
            let (_, arn) = queue_arn(ctx, name).await?;
            let rule_arns: Vec<String> = rules.iter().filter_map(|r| events::rule_arn(&arn, r)).collect();
            call(
                "SetQueueAttributes",
                sqs.set_queue_attributes()
                    .queue_url(&url)
                    .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, events::queue_policy(&arn, &rule_arns))
                    .send()
                    .await,
            )?;
            ctx.set(key, &url).await;
            Ok(url)
        }
        Op::PutEventRule { name, pattern, queue } => {
            let tags: Vec<aws_sdk_eventbridge::types::Tag> = queue_tags(ctx, key)
                .into_iter()
                .filter_map(|(k, v)| aws_sdk_eventbridge::types::Tag::builder().key(k).value(v).build().ok())
                .collect();
            let out = call(
                "PutRule",
                eb.put_rule()
                    .name(name)
                    .event_pattern(pattern)
                    .state(aws_sdk_eventbridge::types::RuleState::Enabled)
                    .description(format!("pinfleet: interruption events of cluster {}", ctx.desired.cluster))
                    .set_tags(Some(tags))
                    .send()
                    .await,
            )?;
            let (_, arn) = queue_arn(ctx, queue).await?;
            let target = aws_sdk_eventbridge::types::Target::builder()
                .id(TARGET_ID)
                .arn(&arn)
                .build()
                .map_err(|e| crate::cloud::ops::OpError::fatal(anyhow::anyhow!("{e}")))?;
            let put = call("PutTargets", eb.put_targets().rule(name).targets(target).send().await)?;
            if put.failed_entry_count() > 0 {
                let why: Vec<String> = put
                    .failed_entries()
                    .iter()
                    .map(|f| format!("{}: {}", f.error_code().unwrap_or("?"), f.error_message().unwrap_or("")))
                    .collect();
                return Err(crate::cloud::ops::OpError::fatal(anyhow::anyhow!(
                    "PutTargets {name}: {}",
                    why.join("; ")
                )));
            }
            Ok(out.rule_arn().unwrap_or(name).to_string())
        }
        Op::DeleteEventRule { name } => {
            if let Some(t) =
                call_ok_if("ListTargetsByRule", &NO_RULE, eb.list_targets_by_rule().rule(name).send().await)?
            {
                let ids: Vec<String> = t.targets().iter().map(|t| t.id().to_string()).collect();
                if !ids.is_empty() {
                    call_ok_if(
                        "RemoveTargets",
                        &NO_RULE,
                        eb.remove_targets().rule(name).set_ids(Some(ids)).send().await,
                    )?;
                }
            }
            call_ok_if("DeleteRule", &NO_RULE, eb.delete_rule().name(name).send().await)?;
            Ok(name.clone())
        }
        Op::DeleteEventQueue { url } => {
            call_ok_if("DeleteQueue", &NO_QUEUE, sqs.delete_queue().queue_url(url).send().await)?;
            Ok(url.clone())
        }
        other => Err(crate::cloud::ops::OpError::fatal(anyhow::anyhow!("not an events operation: {other:?}"))),
    }
}

/// A message from the queue: its body (the EventBridge event) and the
/// handle that deletes it.
#[derive(Debug, Clone)]
pub struct Message {
    pub body: String,
    pub receipt: String,
}

/// Up to ten messages, waiting at most `wait` for the first (long polling).
pub async fn receive(aws: &Aws, url: &str, wait: std::time::Duration) -> anyhow::Result<Vec<Message>> {
    let out = aws
        .sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait.as_secs().min(20) as i32)
        // Unhandled (the loop died mid-way): back in a minute for the next pass.
        .visibility_timeout(60)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("ReceiveMessage: {}", super::client::describe_sdk_error(&e)))?;
    Ok(out
        .messages()
        .iter()
        .map(|m| Message {
            body: m.body().unwrap_or_default().to_string(),
            receipt: m.receipt_handle().unwrap_or_default().to_string(),
        })
        .collect())
}

/// Deletes a handled message.
pub async fn delete(aws: &Aws, url: &str, receipt: &str) -> anyhow::Result<()> {
    aws.sqs
        .delete_message()
        .queue_url(url)
        .receipt_handle(receipt)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("DeleteMessage: {}", super::client::describe_sdk_error(&e)))
}
