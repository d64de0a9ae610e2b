//! A fleet over many accounts on one moto: moto puts a call made with an
//! assumed role's credentials in the role's account (its access key says
//! which), so three accounts × two regions are three real tenants here.
//! What moto does not enforce of STS (ExternalId, durations, a denied
//! account, a role landing elsewhere) comes from the STS injector.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_smithy_async::time::{SharedTimeSource, TimeSource};
use pinfleet::cloud::aws::account::{RoleFor, Sessions};
use pinfleet::cloud::aws::client::CallLog;
use pinfleet::cloud::aws::sts_inject::StsRules;
use pinfleet::cloud::aws::{Aws, AwsOptions};
use pinfleet::spec::Account;
use proptest::prelude::*;

const REGIONS: [&str; 2] = ["us-east-1", "eu-west-1"];

fn aws_env() {
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_ENDPOINT_URL", support::moto_url());
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
}

fn account(id: &str, external_id: Option<&str>) -> Account {
    Account {
        id: id.into(),
        role_arn: format!("arn:aws:iam::{id}:role/pinfleet"),
        external_id: external_id.map(str::to_string),
    }
}

/// Options for acting as `caller` (the tools account the human is in) on a
/// cluster in `account`.
fn options(caller: &str, region: &str, role: Option<RoleFor>, sessions: &Arc<Sessions>) -> AwsOptions {
    AwsOptions {
        region: Some(region.into()),
        moto_account: Some(caller.into()),
        role,
        sessions: Some(sessions.clone()),
        ..Default::default()
    }
}

fn role_for(a: &Account, cluster: &str) -> RoleFor {
    RoleFor { account: a.clone(), cluster: cluster.into(), command: "test".into() }
}

/// What an account sees in a region, asked with moto's account header (no
/// role): the VPCs tagged with a cluster name.
async fn vpcs_seen_by(account: &str, region: &str) -> Vec<String> {
    let aws = Aws::connect(&AwsOptions {
        region: Some(region.into()),
        moto_account: Some(account.into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let out = aws
        .ec2
        .describe_vpcs()
        .filters(aws_sdk_ec2::types::Filter::builder().name("tag-key").values("test-cluster").build())
        .send()
        .await
        .unwrap();
    let mut names: Vec<String> = out
        .vpcs()
        .iter()
        .flat_map(|v| v.tags())
        .filter(|t| t.key() == Some("test-cluster"))
        .filter_map(|t| t.value().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn three_accounts_by_two_regions_each_cluster_lands_in_its_own() {
    aws_env();
    let caller = support::fresh_account();
    let accounts: Vec<Account> = (0..3).map(|_| account(&support::fresh_account(), None)).collect();
    let sessions = Arc::new(Sessions::default());
    for (i, a) in accounts.iter().enumerate() {
        for region in REGIONS {
            let cluster = format!("c{i}-{region}");
            let aws = Aws::connect(&options(&caller, region, Some(role_for(a, &cluster)), &sessions)).await.unwrap();
            assert_eq!(aws.account(), Some(a.id.as_str()));
            let who = aws.sts.get_caller_identity().send().await.unwrap();
            assert_eq!(who.account(), Some(a.id.as_str()));
            assert_eq!(
                who.arn(),
                Some(format!("arn:aws:sts::{}:assumed-role/pinfleet/pinfleet-{cluster}-test", a.id).as_str())
            );
            let vpc = aws.ec2.create_vpc().cidr_block("10.20.0.0/16").send().await.unwrap();
            let id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap();
            assert_eq!(vpc.vpc().and_then(|v| v.owner_id()), Some(a.id.as_str()));
            aws.ec2
                .create_tags()
                .resources(id)
                .tags(aws_sdk_ec2::types::Tag::builder().key("test-cluster").value(&cluster).build())
                .send()
                .await
                .unwrap();
        }
    }
    // Each account sees its own clusters, in each region only that region's.
    for (i, a) in accounts.iter().enumerate() {
        for region in REGIONS {
            assert_eq!(vpcs_seen_by(&a.id, region).await, vec![format!("c{i}-{region}")]);
        }
    }
    assert!(vpcs_seen_by(&caller, "us-east-1").await.is_empty(), "nothing lands in the caller's account");
    // One role per (role, external id, region): six sessions, one AssumeRole each.
    let roles = sessions.roles();
    assert_eq!(roles.len(), 6);
    assert!(roles.iter().all(|r| r.assumed() == 1), "{:?}", roles.iter().map(|r| r.assumed()).collect::<Vec<_>>());
}

/// A clock the test moves: real time plus an offset (moto's expirations
/// are real time).
#[derive(Debug, Clone, Default)]
struct Clock(Arc<AtomicU64>);

impl Clock {
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_secs(), Ordering::SeqCst);
    }
}

impl TimeSource for Clock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_secs(self.0.load(Ordering::SeqCst))
    }
}

#[tokio::test]
async fn a_session_of_fifteen_minutes_is_refreshed_before_it_expires_and_work_goes_on() {
    aws_env();
    let caller = support::fresh_account();
    let a = account(&support::fresh_account(), None);
    let sessions = Arc::new(Sessions::default());
    let clock = Clock::default();
    let mut opts = options(&caller, "us-east-1", Some(role_for(&a, "long-roll")), &sessions);
    opts.session = Some(Duration::from_secs(900));
    opts.time_source = Some(SharedTimeSource::new(clock.clone()));
    let log = CallLog::default();
    opts.call_log = Some(log.clone());
    let rules = Arc::new(StsRules::default());
    opts.sts_faults = Some(rules.clone());
    let aws = Aws::connect(&opts).await.unwrap();
    let role = aws.role.clone().unwrap();
    let mut keys = Vec::new();
    // A roll of 40 minutes, a call every 5: each signed with a session that
    // has more than REFRESH_BEFORE left.
    for step in 0..=8 {
        aws.ec2.describe_vpcs().send().await.unwrap_or_else(|e| panic!("minute {}: {e:?}", step * 5));
        let akid = log.entries().last().unwrap().1.clone();
        if keys.last() != Some(&akid) {
            keys.push(akid);
        }
        clock.advance(Duration::from_secs(300));
    }
    // 15-minute sessions refreshed at 10 minutes: at 0, 10, 20, 30 and 40.
    assert_eq!(role.assumed(), 5, "sessions: {keys:?}");
    assert_eq!(keys.len(), 5);
    assert!(keys.iter().all(|k| sessions.account_of(k).as_deref() == Some(a.id.as_str())));

    // Each refresh lands where the first did, or the work stops: the role
    // now lands in another account (its trust changed mid-roll); the next
    // refreshed session is checked, refused, and never signs a call.
    rules.lands_elsewhere(&a.role_arn, "999999999999");
    let signed = log.entries().len();
    clock.advance(Duration::from_secs(600));
    let err = aws.ec2.describe_vpcs().send().await.unwrap_err();
    let text = format!("{:#}", anyhow::Error::from(err));
    assert!(
        text.contains("landed in account 999999999999") && text.contains(&format!("not in account {}", a.id)),
        "{text}"
    );
    let after: Vec<String> = log.entries()[signed..].iter().map(|(op, _)| op.clone()).collect();
    assert!(
        after.iter().all(|op| op == "sts:AssumeRole" || op == "sts:GetCallerIdentity"),
        "nothing but the new session and its check was signed: {after:?}"
    );
}

#[tokio::test]
async fn sts_refusals_stop_before_the_first_write_with_sts_wording() {
    aws_env();
    let caller = support::fresh_account();
    let rules = StsRules::new();
    let sessions = Arc::new(Sessions::default());
    // The trust policy asks for an external id the file does not give.
    let a = account(&support::fresh_account(), Some("not-the-one"));
    rules.require_external_id(&a.role_arn, "sesame");
    let log = CallLog::default();
    let mut opts = options(&caller, "us-east-1", Some(role_for(&a, "c1")), &sessions);
    opts.sts_faults = Some(rules.clone());
    opts.call_log = Some(log.clone());
    let e = Aws::connect(&opts).await.unwrap_err();
    let text = format!("{e:#}");
    // Said as the AssumeRole it is (the role, its account, STS's code and
    // message), not as the GetCallerIdentity that would have carried it.
    assert_eq!(
        text,
        format!(
            "STS refused AssumeRole of {} for account {}: AccessDenied: User: arn:aws:iam::{caller}:user/moto is not authorized to perform: sts:AssumeRole on resource: {}",
            a.role_arn, a.id, a.role_arn
        )
    );
    assert!(!text.contains("GetCallerIdentity") && !text.contains("testing"), "{text}");
    assert!(pinfleet::cloud::aws::account::is_refusal(&e), "{text}");
    assert!(log.entries().iter().all(|(op, _)| op.starts_with("sts:")), "{:?}", log.entries());

    // A role whose session lands in another account than the file names.
    let b = account(&support::fresh_account(), None);
    rules.lands_elsewhere(&b.role_arn, "999999999999");
    let log = CallLog::default();
    let mut opts = options(&caller, "us-east-1", Some(role_for(&b, "c2")), &sessions);
    opts.sts_faults = Some(rules.clone());
    opts.call_log = Some(log.clone());
    let e = Aws::connect(&opts).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "assuming {} landed in account 999999999999 (arn:aws:sts::999999999999:assumed-role/pinfleet/pinfleet-c2-test), not in account {} as cluster c2's file says: refusing to act",
            b.role_arn, b.id
        )
    );
    assert!(
        log.entries().iter().all(|(op, _)| op.starts_with("sts:")),
        "nothing but STS before the check: {:?}",
        log.entries()
    );

    // DurationSeconds outside STS's range.
    let c = account(&support::fresh_account(), None);
    let mut opts = options(&caller, "us-east-1", Some(role_for(&c, "c3")), &sessions);
    opts.sts_faults = Some(rules.clone());
    opts.session = Some(Duration::from_secs(600));
    let e = Aws::connect(&opts).await.unwrap_err();
    assert_eq!(
        format!("{e:#}"),
        format!("STS refused AssumeRole of {} for account {}: ValidationError: 1 validation error detected: Value '600' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900", c.role_arn, c.id),
    );
}

#[tokio::test]
async fn an_account_denied_mid_roll_stops_its_own_calls_only() {
    aws_env();
    let caller = support::fresh_account();
    let rules = StsRules::new();
    let sessions = Arc::new(Sessions::default());
    let (a, b) = (account(&support::fresh_account(), None), account(&support::fresh_account(), None));
    let connect = |acc: &Account, cluster: &str| {
        let mut o = options(&caller, "us-east-1", Some(role_for(acc, cluster)), &sessions);
        o.sts_faults = Some(rules.clone());
        o
    };
    let aws_a = Aws::connect(&connect(&a, "prod-a")).await.unwrap();
    let aws_b = Aws::connect(&connect(&b, "prod-b")).await.unwrap();
    aws_a.ec2.describe_vpcs().send().await.unwrap();
    rules.deny(&a.id);
    let e = aws_a.ec2.describe_vpcs().send().await.unwrap_err();
    let text = pinfleet::cloud::aws::client::describe_sdk_error(&e);
    assert!(text.contains("UnauthorizedOperation: You are not authorized to perform this operation."), "{text}");
    assert!(pinfleet::cloud::aws::account::is_refusal(&anyhow::anyhow!("{text}")));
    // The other account goes on.
    aws_b.ec2.describe_vpcs().send().await.unwrap();
    // A new session in the denied account is refused by STS itself.
    let sessions2 = Arc::new(Sessions::default());
    let mut o = options(&caller, "eu-west-1", Some(role_for(&a, "prod-a")), &sessions2);
    o.sts_faults = Some(rules.clone());
    let e = Aws::connect(&o).await.unwrap_err();
    assert!(format!("{e:#}").contains("is not authorized to perform: sts:AssumeRole"), "{e:#}");
}

/// A generated fleet: each cluster's account (of three, with or without an
/// external id) and region (of two).
fn fleets() -> impl Strategy<Value = Vec<(usize, bool, usize)>> {
    prop::collection::vec((0usize..3, any::<bool>(), 0usize..2), 1..7)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Every call a cluster's connection makes is signed with credentials
    /// of that cluster's account (the caller's own keys sign only STS's
    /// AssumeRole and GetCallerIdentity); one session per key, never shared.
    #[test]
    fn every_call_goes_to_its_clusters_account(fleet in fleets()) {
        aws_env();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let caller = support::fresh_account();
            let ids: Vec<String> = (0..3).map(|_| support::fresh_account()).collect();
            let sessions = Arc::new(Sessions::default());
            let mut keys = std::collections::BTreeSet::new();
            for (n, (acc, with_external_id, region)) in fleet.iter().enumerate() {
                let a = account(&ids[*acc], with_external_id.then_some("sesame"));
                keys.insert((a.role_arn.clone(), a.external_id.clone(), REGIONS[*region]));
                let log = CallLog::default();
                let mut opts = options(&caller, REGIONS[*region], Some(role_for(&a, &format!("c{n}"))), &sessions);
                opts.call_log = Some(log.clone());
                let aws = Aws::connect(&opts).await.unwrap();
                aws.ec2.describe_vpcs().send().await.unwrap();
                let who = aws.sts.get_caller_identity().send().await.unwrap();
                prop_assert_eq!(who.account(), Some(a.id.as_str()));
                for (op, akid) in log.entries() {
                    if akid == "testing" {
                        prop_assert!(op == "sts:AssumeRole" || op == "sts:GetCallerIdentity", "{} signed by the caller", op);
                    } else {
                        prop_assert_eq!(sessions.account_of(&akid), Some(a.id.clone()), "{} of cluster c{}", op, n);
                    }
                }
            }
            let roles = sessions.roles();
            prop_assert_eq!(roles.len(), keys.len());
            let mut issued = std::collections::BTreeSet::new();
            for r in &roles {
                prop_assert_eq!(r.assumed(), 1);
                for k in r.issued() {
                    prop_assert!(issued.insert(k), "an access key handed to two keys");
                }
            }
            Ok(())
        })?;
    }
}

/// A clusters folder of three accounts × two regions (the account from a
/// base per account, as a platform team would write it), the caller in a
/// tools account of its own.
fn fleet_world() -> (support::World, Vec<String>) {
    let w = support::World::new("seed", 1);
    std::fs::remove_file(w.cluster_file()).unwrap();
    let ids: Vec<String> = (0..3).map(|_| support::fresh_account()).collect();
    for (i, id) in ids.iter().enumerate() {
        // A base per account: the standard base with the account's role.
        std::fs::write(
            w.clusters_dir().join(format!("bases/account-{i}.yaml")),
            format!(
                "extends: aws-standard.yaml\nspec:\n  cloud:\n    account:\n      id: \"{id}\"\n      roleArn: arn:aws:iam::{id}:role/pinfleet\n"
            ),
        )
        .unwrap();
        for region in REGIONS {
            let name = format!("a{i}-{region}");
            let yaml = w
                .cluster_yaml(1, "t3.large")
                .replace("name: seed", &format!("name: {name}"))
                .replace("extends: bases/aws-standard.yaml", &format!("extends: bases/account-{i}.yaml"))
                .replace("us-east-1", region)
                .replace(&format!("pf-test-{}-seed", w.account), &format!("pf-test-{}-{name}", w.account));
            std::fs::write(w.clusters_dir().join(format!("{name}.yaml")), yaml).unwrap();
        }
    }
    (w, ids)
}

#[test]
fn a_fleet_over_three_accounts_plans_diffs_and_lists_per_account_and_a_refusing_one_stops_alone() {
    let (mut w, ids) = fleet_world();
    let allowed: String = ids
        .iter()
        .enumerate()
        .map(|(i, id)| format!("  - {{id: \"{id}\", name: account-{i}, teams: [cloud-platform]}}\n"))
        .collect();
    std::fs::write(
        w.clusters_dir().join("fleet.yaml"),
        format!("stages:\n  - {{name: dev, selector: env=dev, soak: 1m, maxFailures: 2}}\naccounts:\n{allowed}"),
    )
    .unwrap();
    w.ok(&["validate"]);

    // A cluster's plan is made in its own account (its VPC is to be created there).
    let plan = w.json(&["plan", "a1-eu-west-1"]);
    assert!(plan.to_string().contains("vpc"), "{plan}");

    // The third account refuses everything: its clusters alone stop.
    let denied = &ids[2];
    w.extra_env.push(("PINFLEET_STS_FAULTS".into(), format!("deny={denied}")));
    let out = w.run(&["fleet", "rollout", "plan", "--kubernetes-version", pinfleet::spec::versions::DEFAULT]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for region in REGIONS {
        let line = stdout.lines().find(|l| l.contains(&format!("a2-{region}"))).unwrap_or_else(|| panic!("{stdout}"));
        assert!(line.contains("account refused"), "{line}");
        for i in 0..2 {
            let line = stdout.lines().find(|l| l.contains(&format!("a{i}-{region}"))).unwrap();
            assert!(!line.contains("refused"), "{line}");
        }
    }

    // Drift per account: the refusing account's clusters unreachable, the
    // others read (and drifted: nothing exists yet).
    let out = w.run(&["diff", "--all", "--layer", "aws", "-o", "json"]);
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for r in reports.as_array().unwrap() {
        let name = r["cluster"].as_str().unwrap();
        let state = r["layers"]["aws"].to_string();
        if name.starts_with("a2-") {
            assert!(state.contains("nreachable") && state.contains("AccessDenied"), "{name}: {state}");
        } else {
            assert!(!state.contains("nreachable"), "{name}: {state}");
        }
    }

    // Instances of every account and region; the refusing one named.
    let out = w.run(&["get", "instances"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for region in REGIONS {
        assert!(stderr.contains(&format!("not listed: account {denied} in {region}: ")), "{stderr}");
    }
    assert_eq!(stderr.matches("not listed").count(), 2, "{stderr}");
}

#[test]
fn a_cluster_in_an_account_off_the_fleets_list_is_refused_at_its_line() {
    let (w, ids) = fleet_world();
    // Only the first two accounts are on the list; the second takes another team.
    std::fs::write(
        w.clusters_dir().join("fleet.yaml"),
        format!(
            "accounts:\n  - {{id: \"{}\", name: production}}\n  - {{id: \"{}\", name: staging, teams: [data]}}\n",
            ids[0], ids[1]
        ),
    )
    .unwrap();
    let out = w.run(&["validate"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let dir = w.clusters_dir();
    for region in REGIONS {
        let f = dir.join("bases/account-2.yaml");
        let line = line_of(&f, "      id: ");
        assert!(
            text.contains(&format!(
                "{}:{line}:7: spec.cloud.account.id: cluster a2-{region}: account {} is not on fleet.yaml's accounts ({} production, {} staging)",
                f.display(),
                ids[2],
                ids[0],
                ids[1]
            )),
            "{text}"
        );
        let f = dir.join(format!("a1-{region}.yaml"));
        let line = line_of(&f, "  owner: ");
        assert!(
            text.contains(&format!(
                "{}:{line}:3: spec.owner: cluster a1-{region}: team cloud-platform may not have clusters in account {} (staging) (its teams: data)",
                f.display(),
                ids[1]
            )),
            "{text}"
        );
        assert!(!text.contains(&format!("a0-{region}.yaml:")), "{text}");
    }
    // The fleet refuses to act on such a folder at all.
    let out = w.run(&["fleet", "rollout", "plan", "--kubernetes-version", pinfleet::spec::versions::DEFAULT]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not on fleet.yaml's accounts"));
}

/// The 1-based line of the first line of `file` starting with `prefix`.
fn line_of(file: &std::path::Path, prefix: &str) -> usize {
    std::fs::read_to_string(file).unwrap().lines().position(|l| l.starts_with(prefix)).unwrap() + 1
}

#[tokio::test]
async fn the_capacity_ledger_is_per_account_a_refusal_in_one_holds_no_other() {
    use pinfleet::capacity::{LedgerStore, Market, Offering};
    use pinfleet::cloud::aws::ledger::StoreLedger;
    aws_env();
    let caller = support::fresh_account();
    let sessions = Arc::new(Sessions::default());
    let (a, b) = (account(&support::fresh_account(), None), account(&support::fresh_account(), None));
    let aws_a = Aws::connect(&options(&caller, "us-east-1", Some(role_for(&a, "prod-a")), &sessions)).await.unwrap();
    let aws_b = Aws::connect(&options(&caller, "us-east-1", Some(role_for(&b, "prod-b")), &sessions)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let o = Offering { market: Market::Spot, instance_type: "m6i.large".into(), zone: "us-east-1a".into() };
    let now = chrono::Utc::now();
    let written = StoreLedger::new(&url, &aws_a)
        .record(&[(o.clone(), "InsufficientInstanceCapacity".into(), "prod-a/general".into())], &[], now)
        .await
        .unwrap();
    assert_eq!(written.account, a.id);
    assert!(written.out(&o, now).is_some());
    let other = StoreLedger::new(&url, &aws_b).load().await.unwrap();
    assert_eq!(other.account, b.id);
    assert!(other.out(&o, now).is_none(), "account {}'s refusal holds account {}: {other:?}", a.id, b.id);
    // The same account's next launch (another cluster there) reads it.
    let again = StoreLedger::new(&url, &aws_a).load().await.unwrap();
    assert!(again.out(&o, now).is_some());
}

/// Figures for the closing note (printed, never timed in an assertion):
/// AWS calls and time for observe + plan of the same six clusters, in one
/// account and over three accounts × two regions, each connected as the
/// fleet connects (one connection per region and account). What accounts
/// add is STS's, per (account, region): the caller's identity,
/// AssumeRole and the landing check; EC2's calls are the same.
#[tokio::test]
async fn figures_observe_and_plan_over_three_accounts_against_one() {
    aws_env();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml");
    let src = std::fs::read_to_string(&root).unwrap();
    let ids: Vec<String> = (0..3).map(|_| support::fresh_account()).collect();
    let clusters = |with_accounts: bool| {
        let mut out = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            for region in REGIONS {
                let mut yaml = src.replace("name: dev-local", &format!("name: f{i}-{region}"));
                if with_accounts {
                    yaml = yaml.replace(
                        "    zones: [us-east-1a, us-east-1b]\n",
                        &format!("    zones: [us-east-1a, us-east-1b]\n    account: {{id: \"{id}\", roleArn: \"arn:aws:iam::{id}:role/pinfleet\"}}\n"),
                    );
                }
                let yaml = yaml.replace("us-east-1", region);
                out.push(pinfleet::spec::load_source(&root, &yaml, &Default::default()).unwrap().cluster);
            }
        }
        out
    };
    let mut figures = Vec::new();
    // A warm-up round of each first (moto builds a region's state on first use).
    for with_accounts in [false, true, false, true] {
        let caller = support::fresh_account();
        let sessions = Arc::new(Sessions::default());
        let started = std::time::Instant::now();
        let mut places: std::collections::BTreeMap<(String, Option<String>), Aws> = Default::default();
        let mut calls: std::collections::BTreeMap<String, u64> = Default::default();
        for c in clusters(with_accounts) {
            let place = (c.spec.cloud.region.clone(), c.spec.cloud.account.as_ref().map(|a| a.id.clone()));
            if !places.contains_key(&place) {
                let mut o = AwsOptions::for_cluster(Default::default(), &c, "figures").unwrap();
                o.moto_account = Some(caller.clone());
                o.sessions = Some(sessions.clone());
                places.insert(place.clone(), Aws::connect(&o).await.unwrap());
            }
            let aws = &places[&place];
            let prepared = pinfleet::apply::prepare::prepare(aws, &c).await.unwrap();
            assert!(!prepared.plan.changes.is_empty(), "nothing exists yet: everything is to be created");
        }
        let elapsed = started.elapsed();
        for aws in places.values() {
            for (k, v) in aws.calls.snapshot() {
                *calls.entry(k).or_default() += v;
            }
        }
        figures.push((with_accounts, places.len(), calls, elapsed));
    }
    let figures = &figures[2..];
    let sts = |c: &std::collections::BTreeMap<String, u64>| {
        c.iter().filter(|(k, _)| k.starts_with("sts:")).map(|(_, v)| v).sum::<u64>()
    };
    let others = |c: &std::collections::BTreeMap<String, u64>| {
        c.iter().filter(|(k, _)| !k.starts_with("sts:")).map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>()
    };
    for (with_accounts, places, calls, elapsed) in figures {
        eprintln!(
            "observe + plan, 6 clusters, {}: {places} connections, {} AWS calls ({} STS), {elapsed:.2?}",
            if *with_accounts { "3 accounts × 2 regions" } else { "1 account × 2 regions" },
            calls.values().sum::<u64>(),
            sts(calls)
        );
    }
    let (one, many) = (&figures[0].2, &figures[1].2);
    assert_eq!(others(one), others(many), "accounts change nothing but STS");
    assert_eq!(sts(one), 0);
    assert_eq!(sts(many), 3 * 6, "caller identity, AssumeRole and the landing check per (account, region)");
}

#[tokio::test]
async fn a_promoted_image_is_shared_with_the_accounts_its_channel_serves_and_gc_takes_back_only_its_shares() {
    use aws_sdk_ec2::error::ProvideErrorMetadata;
    use pinfleet::cloud::aws::sharing;
    aws_env();
    let build = support::fresh_account();
    let (b, c, other) = (support::fresh_account(), support::fresh_account(), support::fresh_account());
    let home = Aws::connect(&AwsOptions {
        region: Some("us-east-1".into()),
        moto_account: Some(build.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    // An image baked in the build account: one of moto's, run and imaged.
    let image = support::made_image(&home, "pinfleet-node-1").await;

    // The channel serves clusters in accounts b and c (and one in the
    // build account itself, which needs no share; one in another region).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml");
    let src = std::fs::read_to_string(&root).unwrap().replace(
        "      desired: 3\n",
        "      desired: 3\n      image: {\"$patch\": replace, channel: stable, recipe: node}\n",
    );
    let cluster = |name: &str, id: &str, region: &str| {
        let yaml = src
            .replace("name: dev-local", &format!("name: {name}"))
            .replace(
                "    zones: [us-east-1a, us-east-1b]\n",
                &format!("    zones: [us-east-1a, us-east-1b]\n    account: {{id: \"{id}\", roleArn: \"arn:aws:iam::{id}:role/pinfleet\"}}\n"),
            )
            .replace("us-east-1", region);
        pinfleet::spec::load_source(&root, &yaml, &Default::default()).unwrap().cluster
    };
    let clusters = vec![
        cluster("b1", &b, "us-east-1"),
        cluster("c1", &c, "us-east-1"),
        cluster("build1", &build, "us-east-1"),
        cluster("other-region", &other, "eu-west-1"),
    ];
    let served = sharing::served_accounts(&clusters, "node", "stable", "us-east-1", Some(&build));
    assert_eq!(served, [b.clone(), c.clone()].into_iter().collect());
    assert!(sharing::served_accounts(&clusters, "node", "candidate", "us-east-1", Some(&build)).is_empty());

    let shared = sharing::share(&home, &image, &served).await.unwrap();
    assert_eq!(
        shared,
        vec![b.clone(), c.clone()]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert_eq!(sharing::launch_permissions(&home, &image).await.unwrap(), served);
    let img = home.ec2.describe_images().image_ids(&image).send().await.unwrap();
    let snapshots: Vec<String> = img.images()[0]
        .block_device_mappings()
        .iter()
        .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()).map(str::to_string))
        .collect();
    assert!(!snapshots.is_empty(), "the image has its snapshots");
    for s in &snapshots {
        assert_eq!(sharing::volume_permissions(&home, s).await.unwrap(), served, "snapshot {s}");
    }
    // Again: nothing new.
    assert!(sharing::share(&home, &image, &served).await.unwrap().is_empty());

    // Launched where it runs: both member accounts, through their roles,
    // see the build account's image (without its tags, which EC2 keeps per
    // account) and boot machines from it; an account it is not shared
    // with cannot.
    let sessions = Arc::new(Sessions::default());
    let in_b =
        Aws::connect(&options(&build, "us-east-1", Some(role_for(&account(&b, None), "b1")), &sessions)).await.unwrap();
    let in_c =
        Aws::connect(&options(&build, "us-east-1", Some(role_for(&account(&c, None), "c1")), &sessions)).await.unwrap();
    let in_other = Aws::connect(&options(&build, "us-east-1", Some(role_for(&account(&other, None), "o1")), &sessions))
        .await
        .unwrap();
    for (member, aws) in [(&b, &in_b), (&c, &in_c)] {
        let seen = aws.ec2.describe_images().image_ids(&image).send().await.unwrap();
        let seen = &seen.images()[0];
        assert_eq!((seen.owner_id(), seen.tags().len()), (Some(build.as_str()), 0), "as account {member} sees it");
        let run = support::launch(aws, &image).await.unwrap();
        let id = run.instances()[0].instance_id().unwrap().to_string();
        assert_eq!(run.instances()[0].image_id(), Some(image.as_str()));
        let there = aws.ec2.describe_instances().instance_ids(&id).send().await.unwrap();
        assert_eq!(there.reservations()[0].owner_id(), Some(member.as_str()), "the machine is account {member}'s");
        aws.ec2.terminate_instances().instance_ids(&id).send().await.unwrap();
    }
    let refused = support::launch(&in_other, &image).await.unwrap_err();
    assert_eq!(refused.code(), Some("InvalidAMIID.NotFound"), "{refused:?}");

    // Someone shares it by hand with another account: gc leaves that share.
    home.ec2
        .modify_image_attribute()
        .image_id(&image)
        .launch_permission(
            aws_sdk_ec2::types::LaunchPermissionModifications::builder()
                .add(aws_sdk_ec2::types::LaunchPermission::builder().user_id(&other).build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    let gone = sharing::unshare(&home, &image).await.unwrap();
    assert_eq!(gone, vec![b.clone(), c.clone()]);
    assert_eq!(sharing::launch_permissions(&home, &image).await.unwrap(), [other.clone()].into_iter().collect());
    for s in &snapshots {
        assert!(sharing::volume_permissions(&home, s).await.unwrap().is_empty(), "snapshot {s}");
    }

    // An account still launching the image holds it back from collection.
    let launched = support::launch(&home, &image).await.unwrap();
    assert_eq!(launched.instances().len(), 1);
    assert_eq!(sharing::launched_elsewhere(&image, &[&home]).await.unwrap(), vec!["the caller's account".to_string()]);
    assert!(sharing::launched_elsewhere(&image, &[&in_b]).await.unwrap().is_empty());
    let refused = support::launch(&in_b, &image).await.unwrap_err();
    assert_eq!(refused.code(), Some("InvalidAMIID.NotFound"), "no longer shared with {b}: {refused:?}");

    // The channel written into a member account (as promote does, through
    // its role) is what that account's clusters read where they run.
    use pinfleet::cloud::aws::channels;
    let w = channels::Write {
        region: "us-east-1".into(),
        parameter: pinfleet::ami::channel::parameter("node", "stable"),
        from: None,
        to: image.clone(),
        note: "promoted".into(),
    };
    channels::write_all(&[&in_b], std::slice::from_ref(&w)).await.unwrap();
    assert_eq!(channels::current(&in_b, "node", "stable").await.unwrap(), Some(image.clone()));
    assert_eq!(channels::current(&home, "node", "stable").await.unwrap(), None, "written in b only");

    // Collection: kept while an account launches it; else its shares go,
    // then the image.
    sharing::share(&home, &image, &served).await.unwrap();
    let plan = pinfleet::ami::gc::Plan {
        decisions: vec![pinfleet::ami::gc::Decision {
            image: pinfleet::ami::gc::Baked {
                id: image.clone(),
                region: "us-east-1".into(),
                name: "pinfleet-node-1".into(),
                recipe: "node".into(),
                state: "available".into(),
                created: None,
                deprecated_at: None,
                snapshots: vec![],
            },
            actions: vec![pinfleet::ami::gc::Action::Deregister { snapshots: vec![], reason: "old".into() }],
        }],
        warnings: vec![],
    };
    let done = pinfleet::cloud::aws::imagegc::carry_out(&[&home], &[&home, &in_b], &plan).await.unwrap();
    let outcomes: Vec<(String, String)> = done.iter().map(|d| (d.action.clone(), d.outcome.clone())).collect();
    assert_eq!(
        outcomes,
        vec![("deregister".to_string(), "kept: account the caller's account still launches it".to_string())]
    );
    assert_eq!(sharing::launch_permissions(&home, &image).await.unwrap().len(), 3, "nothing taken back while kept");
    let done = pinfleet::cloud::aws::imagegc::carry_out(&[&home], &[&in_b], &plan).await.unwrap();
    let outcomes: Vec<(String, String)> = done.iter().map(|d| (d.action.clone(), d.outcome.clone())).collect();
    assert_eq!(
        outcomes,
        vec![
            ("unshare".to_string(), format!("no longer shared with {b}, {c}")),
            ("deregister".to_string(), "deregistered".to_string())
        ]
    );
}

#[test]
fn the_binary_refuses_a_cluster_whose_role_wants_another_external_id_or_lands_elsewhere() {
    let (mut w, ids) = fleet_world();
    let role = format!("arn:aws:iam::{}:role/pinfleet", ids[0]);
    w.extra_env.push(("PINFLEET_STS_FAULTS".into(), format!("external-id={role}=sesame")));
    let out = w.run(&["plan", "a0-us-east-1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "AccessDenied: User: arn:aws:iam::{}:user/moto is not authorized to perform: sts:AssumeRole on resource: {role}",
            w.account
        )),
        "{stderr}"
    );
    let role = format!("arn:aws:iam::{}:role/pinfleet", ids[1]);
    w.extra_env = vec![("PINFLEET_STS_FAULTS".into(), format!("elsewhere={role}=999999999999"))];
    let out = w.run(&["plan", "a1-us-east-1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "landed in account 999999999999 (arn:aws:sts::999999999999:assumed-role/pinfleet/pinfleet-a1-us-east-1-plan), not in account {} as cluster a1-us-east-1's file says: refusing to act",
            ids[1]
        )),
        "{stderr}"
    );
}

/// A recipe of one region for the image pipeline's commands.
const NODE_RECIPE: &str = r#"base:
  owners: ["099720109477"]
  name: "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*"
kubernetesVersion: "1.36.2"
components:
  containerd: "2.1.4"
packages: [conntrack]
script: |
  echo baked > /etc/motd
regions: [us-east-1]
encrypted: false
builder:
  instanceType: t3.large
"#;

/// An image of recipe `node` in `aws`'s account as a passed bake leaves it
/// (moto boots nothing: an instance of moto's Ubuntu, imaged and tagged).
async fn passed_image(aws: &Aws, build: &str) -> String {
    use pinfleet::ami::bake::{TAG_BUILD, TAG_CHECKS, TAG_RECIPE};
    let image = support::made_image(aws, &format!("pinfleet/node/{build}")).await;
    let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
    aws.ec2
        .create_tags()
        .resources(&image)
        .tags(tag(TAG_RECIPE, "node"))
        .tags(tag(TAG_BUILD, build))
        .tags(tag(TAG_CHECKS, "passed"))
        .send()
        .await
        .unwrap();
    image
}

/// A world whose one cluster lives in account `member` and follows
/// `node`'s `stable` channel; the caller's account is the build account.
fn member_world(name: &str) -> (support::World, String) {
    let w = support::World::new(name, 1);
    let member = support::fresh_account();
    let dir = w.clusters_dir();
    let standard = dir.join("bases/aws-standard.yaml");
    let text = std::fs::read_to_string(&standard).unwrap().replace(
        "        selector:\n          owners: [\"099720109477\"]\n          name: \"ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*\"\n          architecture: x86_64\n",
        "        channel: stable\n        recipe: node\n",
    );
    assert!(text.contains("channel: stable"));
    std::fs::write(&standard, text).unwrap();
    std::fs::write(
        dir.join("bases/member.yaml"),
        format!("extends: aws-standard.yaml\nspec:\n  cloud:\n    account:\n      id: \"{member}\"\n      roleArn: arn:aws:iam::{member}:role/pinfleet\n"),
    )
    .unwrap();
    let yaml = std::fs::read_to_string(w.cluster_file())
        .unwrap()
        .replace("extends: bases/aws-standard.yaml", "extends: bases/member.yaml");
    w.write_cluster(&yaml);
    let images = w.dir.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(images.join("node.yaml"), NODE_RECIPE).unwrap();
    (w, member)
}

#[test]
fn promote_and_rollback_write_the_channel_into_the_member_account_too() {
    let (mut w, member) = member_world("chm");
    w.extra_env.push(("PINFLEET_IMAGES_DIR".into(), w.dir.path().join("images").display().to_string()));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = rt.block_on(w.aws());
    let (x, y) = rt.block_on(async { (passed_image(&home, "b1").await, passed_image(&home, "b2").await) });
    let sessions = Arc::new(Sessions::default());
    let in_member = rt
        .block_on(Aws::connect(&options(
            &w.account,
            "us-east-1",
            Some(role_for(&account(&member, None), "m")),
            &sessions,
        )))
        .unwrap();
    let read = |aws: &Aws| rt.block_on(pinfleet::cloud::aws::channels::current(aws, "node", "stable")).unwrap();

    let out = w.ok(&["ami", "promote", "node", "--image", &x, "--to", "stable", "--yes"]);
    assert!(out.contains(&format!("shared {x} in us-east-1 with {member}")), "{out}");
    assert_eq!(read(&in_member), Some(x.clone()));
    w.ok(&["ami", "promote", "node", "--image", &y, "--to", "stable", "--yes"]);
    assert_eq!((read(&home), read(&in_member)), (Some(y.clone()), Some(y.clone())));

    // Rolled back in the build account: the member account reads the
    // rolled-back channel where its cluster runs, and the image is shared.
    let out = w.ok(&["ami", "rollback", "node", "stable", "--reason", "bad kernel", "--yes"]);
    assert!(out.contains(&x), "{out}");
    assert_eq!((read(&home), read(&in_member)), (Some(x.clone()), Some(x.clone())));
    let history = rt.block_on(pinfleet::cloud::aws::channels::read(&in_member, "node", "stable")).unwrap();
    assert!(history.current().unwrap().note.contains("bad kernel"), "{history:?}");
    let shared = rt.block_on(pinfleet::cloud::aws::sharing::launch_permissions(&home, &x)).unwrap();
    assert!(shared.contains(&member), "{shared:?}");
    // (moto keeps images per account: a shared image is not seen from the
    // member account, so resolving it there is not shown on moto.)
}

/// A VPC pinfleet made for cluster `cluster`, as `aws` finds it.
async fn tagged_vpc(aws: &Aws, cluster: &str, cidr: &str) -> String {
    use pinfleet::cloud::tags;
    let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
    let vpc = aws.ec2.create_vpc().cidr_block(cidr).send().await.unwrap();
    let id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    aws.ec2
        .create_tags()
        .resources(&id)
        .tags(tag(tags::MANAGED_BY, tags::MANAGED_BY_VALUE))
        .tags(tag(tags::CLUSTER, cluster))
        .tags(tag(tags::OWNER, "team-gone"))
        .send()
        .await
        .unwrap();
    id
}

#[test]
fn orphans_are_looked_for_in_each_clusters_account_and_a_refusing_one_is_named() {
    let (mut w, member) = member_world("orph");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let home = rt.block_on(w.aws());
    let sessions = Arc::new(Sessions::default());
    let in_member = rt
        .block_on(Aws::connect(&options(
            &w.account,
            "us-east-1",
            Some(role_for(&account(&member, None), "m")),
            &sessions,
        )))
        .unwrap();
    // Left behind by a destroyed cluster in the member account, and one in the caller's.
    let there = rt.block_on(tagged_vpc(&in_member, "gone-member", "10.40.0.0/16"));
    let here = rt.block_on(tagged_vpc(&home, "gone-home", "10.41.0.0/16"));

    let report = w.json(&["orphans"]);
    let ids: Vec<&str> = report.as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&there.as_str()) && ids.contains(&here.as_str()), "{report:#}");
    let row = report.as_array().unwrap().iter().find(|r| r["id"] == there.as_str()).unwrap();
    assert_eq!(row["cluster"], "gone-member");
    assert!(row["why"].as_str().unwrap().contains("no cluster `gone-member`"), "{row}");
    // Each row names the account it is in: the member's, and the caller's own.
    assert_eq!(row["account"], member.as_str(), "{row}");
    let row = report.as_array().unwrap().iter().find(|r| r["id"] == here.as_str()).unwrap();
    assert_eq!(row["account"], w.account.as_str(), "{row}");
    let table = w.ok(&["orphans"]);
    assert!(table.starts_with("ACCOUNT  "), "{table}");
    for (id, account) in [(&there, &member), (&here, &w.account)] {
        let line = table.lines().find(|l| l.contains(id.as_str())).unwrap_or_else(|| panic!("{id}: {table}"));
        assert!(line.starts_with(&format!("{account}  us-east-1  vpc  ")), "{line}");
    }

    // The member account refuses: its scan alone stops, said; the caller's goes on.
    w.extra_env.push(("PINFLEET_STS_FAULTS".into(), format!("deny={member}")));
    let out = w.run(&["orphans"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains(&format!("not scanned: account {member} in us-east-1: ")), "{stderr}");
    assert!(stdout.contains(&here) && !stdout.contains(&there), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with(&w.account) && l.contains(&here)), "{stdout}");
}

/// A client whose S3 calls go through `owners` (S3's ExpectedBucketOwner
/// as S3 enforces it).
struct Owned {
    s3: aws_sdk_s3::Client,
}

impl pinfleet::state::S3Access for Owned {
    fn s3(&self) -> &aws_sdk_s3::Client {
        &self.s3
    }

    fn region(&self) -> &str {
        "us-east-1"
    }
}

#[tokio::test]
async fn a_state_store_whose_bucket_is_in_another_account_is_refused_before_the_first_write() {
    use pinfleet::cloud::aws::inject::S3Owners;
    use pinfleet::state::Store;
    aws_env();
    let (ours, thief) = (support::fresh_account(), support::fresh_account());
    let connect = |id: &str| AwsOptions {
        region: Some("us-east-1".into()),
        moto_account: Some(id.to_string()),
        ..Default::default()
    };
    let (home, elsewhere) =
        (Aws::connect(&connect(&ours)).await.unwrap(), Aws::connect(&connect(&thief)).await.unwrap());
    let (taken, own) = (format!("pf-taken-{ours}"), format!("pf-own-{ours}"));
    // The name was taken in another account before the fleet made it.
    elsewhere.s3.create_bucket().bucket(&taken).send().await.unwrap();
    let owners = S3Owners::parse(&format!("{taken}={thief};{own}={ours}")).unwrap();
    let client =
        Owned { s3: aws_sdk_s3::Client::from_conf(home.s3.config().to_builder().interceptor(owners.clone()).build()) };

    let url = format!("s3://{taken}/clusters?expectedBucketOwner={ours}");
    let e = Store::open(&url, "c1", Some(&client)).await.unwrap_err();
    assert!(
        format!("{e:#}").contains(&format!(
            "state store bucket {taken} is not in account {ours} (S3 answered 403 AccessDenied to ExpectedBucketOwner {ours})"
        )),
        "{e:#}"
    );
    let e = Store::open_existing(&url, "c1", Some(&client)).await.unwrap_err();
    assert!(format!("{e:#}").contains("is not in account"), "{e:#}");
    let written = elsewhere.s3.list_objects_v2().bucket(&taken).send().await.unwrap();
    assert_eq!(written.key_count(), Some(0), "nothing written into the taken bucket");
    let calls = owners.seen();
    assert!(calls.iter().all(|(op, _)| op == "HeadBucket"), "stopped at the first call: {calls:?}");

    // The state store's own bucket: created, then every call states its owner.
    let url = format!("s3://{own}/clusters?expectedBucketOwner={ours}");
    let store = Store::open(&url, "c1", Some(&client)).await.unwrap();
    store.put("spec.json", b"{}".to_vec(), pinfleet::state::Condition::IfAbsent).await.unwrap();
    assert_eq!(store.get("spec.json").await.unwrap().unwrap().0, b"{}");
    assert_eq!(store.list("").await.unwrap().len(), 1);
    pinfleet::state::lock::Lock::with(&store, "test", async { anyhow::Ok(()) }).await.unwrap();
    store.delete("spec.json").await.unwrap();
    assert_eq!(store.describe("spec.json"), format!("s3://{own}/clusters/c1/spec.json"));
    let calls = owners.seen();
    let after: Vec<_> = calls.iter().skip_while(|(op, _)| op != "CreateBucket").collect();
    assert!(after.len() > 5, "{calls:?}");
    for (op, stated) in &after {
        if *op == "CreateBucket" {
            assert_eq!(*stated, None, "CreateBucket has no ExpectedBucketOwner");
        } else {
            assert_eq!(stated.as_deref(), Some(ours.as_str()), "{op} stated no owner");
        }
    }
    for op in ["PutBucketVersioning", "PutObject", "GetObject", "ListObjectsV2", "DeleteObject"] {
        assert!(after.iter().any(|(o, _)| o == op), "{op} in {calls:?}");
    }

    // A bucket that does not exist yet, made with another account's
    // credentials: it would be that account's, so it is taken back.
    let fresh = format!("pf-fresh-{ours}");
    let owners = S3Owners::parse(&format!("{fresh}={thief}")).unwrap();
    let theirs =
        Owned { s3: aws_sdk_s3::Client::from_conf(elsewhere.s3.config().to_builder().interceptor(owners).build()) };
    let url = format!("s3://{fresh}/clusters?expectedBucketOwner={ours}");
    let e = Store::open(&url, "c1", Some(&theirs)).await.unwrap_err();
    assert!(
        format!("{e:#}").contains(&format!(
            "state store bucket {fresh} did not exist, and made with these credentials it is not in account {ours}"
        )) && format!("{e:#}").contains("it was deleted again"),
        "{e:#}"
    );
    assert!(elsewhere.s3.head_bucket().bucket(&fresh).send().await.is_err(), "no bucket left behind");

    // A URL whose owner is not an account id is refused, located at the setting.
    let e = Store::open(&format!("s3://{own}/c?expectedBucketOwner=12"), "c1", Some(&client)).await.unwrap_err();
    assert!(format!("{e}").contains("expectedBucketOwner `12` is not a 12-digit AWS account id"), "{e}");
}

/// What a builder reports when its script and checks passed.
const REPORT: &str = "kernel=6.8.0-1015-aws;osImage=Ubuntu 24.04.1 LTS;kubelet=v1.36.2;containerd=2.1.4;cgroup=v2;machineId=0;sshHostKeys=0;freeGiB=11;failedUnits=";

/// Plays the builder's last step in `account` (moto boots nothing): tags
/// each running builder there with a passed report, until `stop`.
fn builder_stand_in(account: String, stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    aws_env();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let aws = Aws::connect(&AwsOptions {
                region: Some("us-east-1".into()),
                moto_account: Some(account),
                ..Default::default()
            })
            .await
            .unwrap();
            let filter = |k: &str, v: &str| aws_sdk_ec2::types::Filter::builder().name(k).values(v).build();
            let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
            while !stop.load(Ordering::SeqCst) {
                let out = aws
                    .ec2
                    .describe_instances()
                    .filters(filter("tag:pinfleet:role", "builder"))
                    .filters(filter("instance-state-name", "running"))
                    .send()
                    .await
                    .unwrap();
                for i in out.reservations().iter().flat_map(|r| r.instances()) {
                    if i.tags().iter().any(|t| t.key() == Some("pinfleet:bake-status")) {
                        continue;
                    }
                    aws.ec2
                        .create_tags()
                        .resources(i.instance_id().unwrap())
                        .tags(tag("pinfleet:bake-status", "done"))
                        .tags(tag("pinfleet:bake-report", REPORT))
                        .send()
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    })
}

/// The images of recipe `node` an account holds, and its builders.
async fn bakes_in(aws: &Aws) -> (Vec<String>, usize) {
    let filter = |k: &str, v: &str| aws_sdk_ec2::types::Filter::builder().name(k).values(v).build();
    let images = aws.ec2.describe_images().owners("self").filters(filter("tag:pinfleet:recipe", "node")).send().await;
    let images = images.unwrap().images().iter().filter_map(|i| i.image_id().map(str::to_string)).collect();
    let builders = aws.ec2.describe_instances().filters(filter("tag:pinfleet:role", "builder")).send().await.unwrap();
    (images, builders.reservations().iter().map(|r| r.instances().len()).sum())
}

#[test]
fn a_recipe_with_a_build_account_is_baked_there_checked_first_and_shared_with_a_member() {
    let (mut w, member) = member_world("bld");
    let build = support::fresh_account();
    let role = format!("arn:aws:iam::{build}:role/pinfleet");
    let images = w.dir.path().join("images");
    std::fs::write(
        images.join("node.yaml"),
        format!("{NODE_RECIPE}buildAccount: {{id: \"{build}\", roleArn: \"{role}\"}}\n"),
    )
    .unwrap();
    w.extra_env.push(("PINFLEET_IMAGES_DIR".into(), images.display().to_string()));
    // A second cluster, without an account of its own (it runs in the
    // caller's), follows the same channel.
    let home = std::fs::read_to_string(w.cluster_file())
        .unwrap()
        .replace("extends: bases/member.yaml", "extends: bases/aws-standard.yaml")
        .replace("name: bld", "name: home")
        .replace(&format!("pf-test-{}-bld", w.account), &format!("pf-test-{}-home", w.account));
    assert!(home.contains("name: home"), "{home}");
    std::fs::write(w.clusters_dir().join("home.yaml"), home).unwrap();
    w.ok(&["validate", w.clusters_dir().join("home.yaml").to_str().unwrap()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let caller = rt.block_on(w.aws());
    let in_build = rt
        .block_on(Aws::connect(&AwsOptions {
            region: Some("us-east-1".into()),
            moto_account: Some(build.clone()),
            ..Default::default()
        }))
        .unwrap();

    // The role lands elsewhere: refused before a builder is launched anywhere.
    w.extra_env.push(("PINFLEET_STS_FAULTS".into(), format!("elsewhere={role}=999999999999")));
    let out = w.run(&["ami", "bake", "node", "--poll", "200ms"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("build account {build}")) && stderr.contains("landed in account 999999999999"),
        "{stderr}"
    );
    assert_eq!(rt.block_on(bakes_in(&in_build)), (vec![], 0));
    assert_eq!(rt.block_on(bakes_in(&caller)), (vec![], 0));
    w.extra_env.pop();

    // Baked in the build account, nothing in the caller's.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stand_in = builder_stand_in(build.clone(), stop.clone());
    let out = w.run(&["ami", "bake", "node", "--poll", "200ms", "-o", "json"]);
    stop.store(true, Ordering::SeqCst);
    stand_in.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let baked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let image = baked["images"]["us-east-1"].as_str().unwrap().to_string();
    let (held, builders) = rt.block_on(bakes_in(&in_build));
    assert_eq!((held, builders), (vec![image.clone()], 1), "the image and its builder are the build account's");
    assert_eq!(rt.block_on(bakes_in(&caller)), (vec![], 0), "nothing in the caller's account");

    // Promoted there, shared with the member account, its channel written there.
    let out = w.ok(&["ami", "promote", "node", "--image", &image, "--to", "stable", "--yes"]);
    assert!(out.contains(&format!("shared {image} in us-east-1 with ")) && out.contains(&member), "{out}");
    let shared = rt.block_on(pinfleet::cloud::aws::sharing::launch_permissions(&in_build, &image)).unwrap();
    assert_eq!(shared, [member.clone(), w.account.clone()].into_iter().collect(), "the member's and the caller's");
    let sessions = Arc::new(Sessions::default());
    let in_member = rt
        .block_on(Aws::connect(&options(
            &w.account,
            "us-east-1",
            Some(role_for(&account(&member, None), "m")),
            &sessions,
        )))
        .unwrap();
    let read = |aws: &Aws| rt.block_on(pinfleet::cloud::aws::channels::current(aws, "node", "stable")).unwrap();
    assert_eq!(
        (read(&in_build), read(&in_member), read(&caller)),
        (Some(image.clone()), Some(image.clone()), Some(image.clone())),
        "the channel is written where each cluster following it reads it"
    );

    // The member's cluster, bootstrapped, boots the build account's image
    // in its own account (its channel read there, the image shared).
    let out = w.run(&["bootstrap", "bld", "--yes", "--skip-addons"]);
    assert!(out.status.success(), "{}\n{}", support::stdout(&out), support::stderr(&out));
    let running = rt.block_on(in_member.ec2.describe_instances().send()).unwrap();
    let images: Vec<&str> = running
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
        .filter_map(|i| i.image_id())
        .collect();
    assert!(!images.is_empty() && images.iter().all(|i| *i == image), "the member's machines run {image}: {images:?}");
    let none = rt.block_on(in_build.ec2.describe_instances().send()).unwrap();
    assert_eq!(
        none.reservations().iter().flat_map(|r| r.instances()).filter(|i| i.image_id() == Some(image.as_str())).count(),
        0,
        "no machine of the member's cluster is in the build account"
    );

    // Its machines, emulated by the node sim in the member account, report
    // what the image was baked with (the machine knows what it booted,
    // though EC2 shows the member none of the build account's tags).
    let kc = w.dir.path().join("bld-kubeconfig.yaml");
    let _sim = Killed(w.node_sim("bld", &kc));
    let runtime = rt.block_on(async {
        for _ in 0..600 {
            if let Ok(client) = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Never).await {
                let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client).list(&Default::default()).await;
                if let Some(info) =
                    nodes.ok().and_then(|l| l.items.into_iter().next()).and_then(|n| n.status?.node_info)
                {
                    return Some((info.container_runtime_version, info.kernel_version));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    });
    assert_eq!(
        runtime,
        Some(("containerd://2.1.4".to_string(), "6.8.0-1015-aws".to_string())),
        "the member's nodes report the bake's facts"
    );
}

/// Nodes of the cluster behind `kubeconfig` that are Ready (0 while its
/// API is not up yet).
async fn ready_nodes(kubeconfig: &std::path::Path) -> usize {
    let Ok(client) = pinfleet::kube::client_from_kubeconfig(kubeconfig, pinfleet::kube::Retry::Never).await else {
        return 0;
    };
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client).list(&Default::default()).await;
    nodes.map_or(0, |l| {
        l.items
            .iter()
            .filter(|n| {
                let conditions = n.status.as_ref().and_then(|s| s.conditions.as_ref());
                conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count()
    })
}

/// One `fleet rollout apply` across three accounts: each cluster is
/// bootstrapped in its own account (through its role), its nodes follow
/// its machines there (the sim reads them through the same role), and the
/// rollout replaces every machine of every account with the new image,
/// each in its own account; the caller's account holds none.
#[test]
fn a_fleet_rollout_replaces_the_machines_of_clusters_in_three_accounts() {
    let w = support::World::new("seed", 1);
    std::fs::remove_file(w.cluster_file()).unwrap();
    let ids: Vec<String> = (0..3).map(|_| support::fresh_account()).collect();
    let mut allowed = String::new();
    let mut names = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        std::fs::write(
            w.clusters_dir().join(format!("bases/account-{i}.yaml")),
            format!("extends: aws-standard.yaml\nspec:\n  cloud:\n    account:\n      id: \"{id}\"\n      roleArn: arn:aws:iam::{id}:role/pinfleet\n"),
        )
        .unwrap();
        allowed.push_str(&format!("  - {{id: \"{id}\", name: account-{i}, teams: [cloud-platform]}}\n"));
        let name = format!("roll{i}");
        let yaml = w
            .cluster_yaml(1, "t3.large")
            .replace("name: seed", &format!("name: {name}"))
            .replace("extends: bases/aws-standard.yaml", &format!("extends: bases/account-{i}.yaml"))
            .replace(&format!("pf-test-{}-seed", w.account), &format!("pf-test-{}-{name}", w.account));
        std::fs::write(w.clusters_dir().join(format!("{name}.yaml")), yaml).unwrap();
        names.push(name);
    }
    std::fs::write(
        w.clusters_dir().join("fleet.yaml"),
        format!(
            "stages:\n  - {{name: dev, selector: env=dev, soak: 0s, approval: true}}\nstateStore: s3://pf-test-{}-fleet/fleet\naccounts:\n{allowed}",
            w.account
        ),
    )
    .unwrap();
    let kubeconfigs = w.dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&kubeconfigs).unwrap();
    let mut sims = Vec::new();
    for name in &names {
        w.ok(&["bootstrap", name, "--yes"]);
        let kc = kubeconfigs.join(format!("{name}.yaml"));
        sims.push(Killed(w.node_sim(name, &kc)));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    for name in &names {
        let kc = kubeconfigs.join(format!("{name}.yaml"));
        let ready = rt.block_on(async {
            for _ in 0..600 {
                if ready_nodes(&kc).await >= 2 {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        });
        assert!(ready, "{name}: its two nodes never became Ready (the sim reads its machines in its account)");
    }
    let images_of = |name: &str| -> Vec<String> {
        w.json(&["get", "instances", name])
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] == "running" || i["state"] == "pending")
            .map(|i| i["image"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let before = images_of(&names[0]);
    assert_eq!(before.len(), 2, "{before:?}");
    // Another of Canonical's images, which every account sees.
    let home = rt.block_on(w.aws());
    let images = rt.block_on(home.ec2.describe_images().owners("099720109477").send()).unwrap();
    let next = images
        .images()
        .iter()
        .filter(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64"))
        .filter_map(|i| i.image_id())
        .find(|id| !before.iter().any(|b| b == id))
        .unwrap()
        .to_string();
    let apply = || {
        w.run(&[
            "fleet",
            "rollout",
            "apply",
            "--ami",
            &next,
            "--yes",
            "--kubeconfig-dir",
            kubeconfigs.to_str().unwrap(),
            "--validate-interval",
            "200ms",
        ])
    };
    // The stage waits for its approval: every cluster pending.
    let out = apply();
    assert!(out.status.success(), "{}\n{}", support::stdout(&out), support::stderr(&out));
    assert!(support::stderr(&out).contains("waits (until an approval)"), "{}", support::stderr(&out));
    // Mid-rollout, the status reads each pending cluster's lock from its
    // own state store, in its own account (as its role): the caller's
    // credentials may not read another account's bucket.
    let status = w.json(&["fleet", "rollout", "status"]);
    let rows: Vec<&serde_json::Value> =
        status["stages"].as_array().unwrap().iter().flat_map(|s| s["clusters"].as_array().unwrap()).collect();
    assert_eq!(rows.len(), 3, "{status}");
    assert!(rows.iter().all(|c| c["state"] == "pending"), "{status}");
    w.ok(&["fleet", "rollout", "approve", "dev"]);
    let out = apply();
    assert!(out.status.success(), "{}\n{}", support::stdout(&out), support::stderr(&out));
    for (name, id) in names.iter().zip(&ids) {
        let now = images_of(name);
        assert_eq!(now.len(), 2, "{name}: {now:?}");
        assert!(now.iter().all(|i| *i == next), "{name} (account {id}) rolled to {next}: {now:?}");
        // Asked of the account itself: the machines are there.
        let there = rt.block_on(async {
            let aws = Aws::connect(&AwsOptions {
                region: Some("us-east-1".into()),
                moto_account: Some(id.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            let out = aws.ec2.describe_instances().send().await.unwrap();
            out.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
                .filter_map(|i| i.image_id().map(str::to_string))
                .collect::<Vec<_>>()
        });
        assert_eq!(there, [next.clone(), next.clone()], "{name}'s machines are in its own account {id}");
    }
    let status = w.json(&["fleet", "rollout", "status"]);
    assert_eq!(status["state"], "done", "{status}");
    let running = rt.block_on(home.ec2.describe_instances().send()).unwrap();
    let mine = running.reservations().iter().flat_map(|r| r.instances()).count();
    assert_eq!(mine, 0, "the caller's own account holds no machine");
    drop(sims);
}

/// A child process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
