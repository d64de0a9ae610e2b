//! The console in a real browser (headless Chromium through chromedriver):
//! a gateway with three member clusters (sims with nodes and the workload
//! controller), an OIDC issuer, a host cluster for the records (the sim, or
//! the one PINFLEET_TEST_KUBECONFIG names). Each page shows what the API
//! says, updates arrive live without a reload, a member that stops
//! answering is marked stale, links lead to reasons, another team's page
//! is refused, the pages pass axe-core with no serious or critical
//! violation, read on a phone's width without the page scrolling sideways,
//! and are kept as screenshots.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/gateway.rs"]
mod gateway_support;
#[path = "support/kube.rs"]
mod kube_support;

use std::sync::Arc;
use std::time::Duration;

use browser::Browser;
use fantoccini::Locator;
use gateway_support::{issuer, member};
use kube::api::{Api, Patch, PatchParams};
use kube_support::KubeEnv;
use pinfleet::gateway::client::{Client, Credentials};
use pinfleet::gateway::identity::{Identity, OidcSettings, Settings};
use pinfleet::gateway::intake::Policy;
use pinfleet::gateway::records::TeamQuota;
use pinfleet::gateway::service::{self, MemberCluster, Service};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// Runtime support off: a pod asks what its container asks, so the
/// figures the pages show stay the test's own.
fn no_sidecars() -> Value {
    json!({"identity": {"enabled": false}, "traffic": {"enabled": false}, "logging": {"enabled": false}, "metrics": {"enabled": false}})
}

fn service_of(team: &str, name: &str, replicas: u32, cpu: &str) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": name},
        "spec": {"owner": {"team": team, "project": name}, "replicas": replicas, "runtime": no_sidecars(),
        "template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}}})
}

fn jobset_of(team: &str, name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestJobSet",
        "metadata": {"name": name, "annotations": {"gateway.pinfleet.dev/expected-duration": "20m"}},
        "spec": {"owner": {"team": team, "project": name}, "shards": 1, "runtime": no_sidecars(),
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}}})
}

/// No text of the page is drawn over other text, at a desktop's width and
/// at a phone's (the page is left at the desktop's).
async fn assert_no_text_overlap(b: &Browser, page: &str) {
    for (w, h) in [(1280, 900), (390, 844)] {
        b.client.set_window_size(w, h).await.unwrap();
        let found = b.text_overlaps().await;
        assert!(found.is_empty(), "{page} at {w}px: text drawn over text: {found:#?}");
    }
    b.client.set_window_size(1280, 900).await.unwrap();
}

fn assert_accessible(page: &str, violations: &[(String, String, String, u64)]) {
    let bad: Vec<_> = violations.iter().filter(|v| v.1 == "serious" || v.1 == "critical").collect();
    assert!(bad.is_empty(), "{page}: axe-core found serious or critical violations: {bad:#?}");
    if !violations.is_empty() {
        eprintln!("{page}: minor or moderate axe findings: {violations:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_shows_the_fleet_down_to_a_workload_live_and_accessibly() {
    let host = KubeEnv::start();
    let members = [member("east", 2, "1", true), member("west", 2, "1", true), member("north", 1, "1", true)];
    let oidc = issuer().await;
    let client = host.client().await;
    let namespace = host.unique("console");
    service::install(&client, &namespace).await.unwrap();
    let quotas = json!({
        "search": {"tiers": {"OnDemand": {"guaranteed": {"cpu": "1", "memory": "4Gi", "pods": 10}}}},
        "ads": {"tiers": {"OnDemand": {"guaranteed": {"cpu": "1", "memory": "4Gi", "pods": 10}}}},
    });
    let api: Api<TeamQuota> = Api::namespaced(client.clone(), &namespace);
    for (team, spec) in quotas.as_object().unwrap() {
        let obj = json!({"apiVersion": "gateway.pinfleet.dev/v1alpha1", "kind": "TeamQuota", "metadata": {"name": team, "namespace": namespace}, "spec": spec});
        api.patch(team, &PatchParams::apply("test").force(), &Patch::Apply(&obj)).await.unwrap();
    }
    let mut ms = Vec::new();
    for m in &members {
        ms.push(MemberCluster {
            name: m.name.clone(),
            client: pinfleet::kube::apply::connect(&m.kubeconfig).await.unwrap(),
            labels: [("region".to_string(), "us-east-1".to_string())].into(),
            weight: 1,
        });
    }
    let settings = Settings {
        oidc: Some(OidcSettings {
            issuer: oidc.url.clone(),
            audience: "pinfleet".into(),
            jwks_url: None,
            groups_claim: "groups".into(),
            username_claim: "email".into(),
        }),
        token_review: false,
        team_prefix: "team:".into(),
        admin_group: "pinfleet:admins".into(),
        anonymous: None,
    };
    let config = service::Config {
        namespace: namespace.clone(),
        identity: "console-test".into(),
        policy: Policy::default(),
        interval: Duration::from_millis(200),
        lease_duration: Duration::from_secs(15),
        member_refresh: Duration::from_secs(1),
        api: pinfleet::kube::budget::Budget::GATEWAY,
        audit_log: None,
    };
    let svc: Arc<Service> =
        Service::start(client.clone(), ms, Identity::new(settings, Some(client.clone())), config).await.unwrap();
    tokio::spawn(svc.clone().run(tokio::sync::watch::channel(false).1));
    let console = pinfleet::console::Console::new(svc.clone(), None, Duration::from_secs(1), false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let c2 = console.clone();
    let server = tokio::spawn(pinfleet::gateway::http::serve_app(
        pinfleet::console::app(console.clone()),
        listener,
        None,
        async move {
            let _ = stop_rx.await;
            c2.close();
        },
    ));
    let alice = oidc.token("alice@example.com", &["team:search"]);
    let api_client = Client::new(&url, &Credentials { token: Some(alice.clone()), ..Default::default() }).unwrap();
    let axe = browser::axe_source();

    let b = Browser::start(1280, 900).await;

    // Not signed in: the browser is sent to sign in; a forged token is refused there, saying why.
    b.client.goto(&format!("{url}/")).await.unwrap();
    assert!(b.client.current_url().await.unwrap().path().ends_with("/login"), "an unsigned visitor signs in first");
    b.client
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(&oidc.token_with(&oidc.other, "mallory@example.com", &["team:search"], "pinfleet", 3600))
        .await
        .unwrap();
    b.client.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
    b.until("a forged token is refused with a reason", "return document.querySelector('[role=alert]') !== null && /refused/.test(document.querySelector('[role=alert]').innerText)", WAIT).await;
    b.client.find(Locator::Id("token")).await.unwrap().send_keys(&alice).await.unwrap();
    b.client.find(Locator::Css("button[type=submit]")).await.unwrap().click().await.unwrap();
    b.until("signed in, the fleet page", "return location.pathname === '/' && document.querySelector('h1') && document.querySelector('h1').innerText === 'Fleet'", WAIT).await;

    // Fleet: every member with what its API says (nodes ready, version).
    b.until(
        "every member reachable with its nodes",
        "const rows = [...document.querySelectorAll('#clusters tbody tr')]; return rows.length === 3 && rows.every(r => /reachable/.test(r.innerText) && /\\d\\/\\d ready/.test(r.innerText));",
        WAIT,
    )
    .await;
    let fleet: Value = api_client.call("GET", "/v1/views/fleet", None).await.unwrap().ok().unwrap();
    for m in &members {
        let mc = pinfleet::kube::apply::connect(&m.kubeconfig).await.unwrap();
        let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(mc.clone())
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        let version = mc.apiserver_version().await.unwrap().git_version;
        let row = b
            .eval(&format!("return [...document.querySelectorAll('#clusters tbody tr')].find(r => r.querySelector('th').innerText === '{}').innerText", m.name))
            .await;
        let row = row.as_str().unwrap();
        assert!(
            row.contains(&format!("{nodes}/{nodes} ready")),
            "{}: the page shows the member's {nodes} nodes: {row}",
            m.name
        );
        assert!(row.contains(&version), "{}: the page shows the member's version {version}: {row}", m.name);
        let j = fleet["clusters"].as_array().unwrap().iter().find(|c| c["name"] == m.name.as_str()).unwrap();
        assert_eq!(j["nodes"], json!(nodes), "the JSON view says the same");
    }
    assert_accessible("fleet", &b.axe(&axe).await);
    assert_no_text_overlap(&b, "fleet").await;
    b.screenshot("fleet").await;

    // Keyboard: the first Tab lands on the skip link.
    b.client.find(Locator::Css("body")).await.unwrap().send_keys("\u{E004}").await.unwrap();
    let focused = b.eval("return document.activeElement ? document.activeElement.innerText : ''").await;
    assert_eq!(focused, json!("Skip to content"), "the first Tab stop skips to the content");

    // Team page, live: submissions arrive while it is open, without a reload.
    b.client.goto(&format!("{url}/teams/search")).await.unwrap();
    b.eval("window.__notReloaded = true; return true").await;
    b.until(
        "the live stream is connected",
        "return /Live: connected|Live: updated/.test(document.getElementById('live').innerText)",
        WAIT,
    )
    .await;
    let submit = |id: &str, w: Value| {
        let c = &api_client;
        let body = json!({"id": id, "workload": w});
        async move { c.call("POST", "/v1/submissions", Some(&body)).await.unwrap() }
    };
    let a = submit("web-1", service_of("search", "web", 3, "200m")).await;
    assert!(a.status < 300, "{}", a.body);
    let a = submit("reindex-1", jobset_of("search", "reindex", "800m")).await;
    assert!(a.status < 300, "{}", a.body);
    b.until(
        "the waiting job appears in the queue with its position and reason",
        "const t = document.getElementById('queue-table'); return t !== null && /reindex-1/.test(t.innerText) && /cpu/.test(t.innerText)",
        WAIT,
    )
    .await;
    b.until(
        "the service appears as admitted",
        "const t = document.getElementById('admitted-table'); return t !== null && /web-1/.test(t.innerText)",
        WAIT,
    )
    .await;
    assert_eq!(b.eval("return window.__notReloaded === true").await, json!(true), "updates arrived without a reload");
    assert!(b.eval("return Number(document.body.getAttribute('data-updates') || 0)").await.as_u64().unwrap() >= 1);
    // What the page says is what the queue API says.
    let q: Value = api_client.call("GET", "/v1/queue?team=search", None).await.unwrap().ok().unwrap();
    let item = q["items"].as_array().unwrap().iter().find(|i| i["id"] == "reindex-1").expect("reindex-1 queued");
    let row = b.eval("return document.querySelector('#queue-table tbody tr').innerText").await;
    let row = row.as_str().unwrap();
    assert!(row.contains(item["why"]["message"].as_str().unwrap()), "the page's reason is the API's: {row} vs {item}");
    assert!(row.starts_with(&item["position"].to_string()), "the page's position is the API's: {row} vs {item}");
    // Use over time: sampled since the gateway started, a chart with a text alternative.
    b.until(
        "the team's use over time",
        "const c = document.querySelector('figure.chart svg[role=img]'); return c !== null && /^OnDemand use over time/.test(c.getAttribute('aria-label'))",
        WAIT,
    )
    .await;
    assert_accessible("team", &b.axe(&axe).await);
    assert_no_text_overlap(&b, "team").await;
    b.screenshot("team").await;

    // A reason is one click away: the queue's why leads to the workload's why.
    // Found and clicked in one step: a live update may replace <main> between two WebDriver calls.
    b.eval("document.querySelector('#queue-table tbody tr td:last-child a').click(); return true").await;
    b.until("the workload's reason", "return location.pathname === '/workloads/search/reindex-1' && location.hash === '#why' && document.getElementById('why') !== null", WAIT).await;
    let why = b.eval("return document.getElementById('content').innerText").await;
    assert!(why.as_str().unwrap().contains("What would unblock it"), "the reason says what would unblock it");
    assert!(
        why.as_str().unwrap().contains(item["why"]["quota"].as_str().unwrap()),
        "and names the quota that holds it"
    );

    // The admitted service: placement with each cluster's reason, what the controller made of it.
    b.client.goto(&format!("{url}/workloads/search/web-1")).await.unwrap();
    b.until("placed on the members, with reasons", "const t = document.getElementById('placement-table'); return t !== null && t.querySelectorAll('tbody tr').length >= 1 && !/none/.test(t.querySelector('tbody').innerText)", WAIT).await;
    b.until(
        "what the controller made, read from the members",
        "return document.querySelectorAll('table[id^=made-]').length >= 1",
        WAIT,
    )
    .await;
    let described: Value = api_client.call("GET", "/v1/submissions/search/web-1", None).await.unwrap().ok().unwrap();
    for p in described["status"]["placement"].as_array().unwrap().iter().filter(|p| p["replicas"].as_u64() > Some(0)) {
        let cluster = p["cluster"].as_str().unwrap();
        let text = b.eval("return document.getElementById('placement-table').innerText").await;
        assert!(text.as_str().unwrap().contains(cluster), "the placement lists {cluster}");
        assert!(text.as_str().unwrap().contains(p["reason"].as_str().unwrap()), "with its reason");
    }
    let made = b.eval("return [...document.querySelectorAll('table[id^=made-] tbody tr')].map(r => r.innerText)").await;
    let made: Vec<String> = made.as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect();
    assert!(made.iter().any(|r| r.starts_with("app") && r.contains("submitted")), "the submitted container: {made:?}");
    assert_accessible("workload", &b.axe(&axe).await);
    assert_no_text_overlap(&b, "workload").await;
    b.screenshot("workload").await;

    // A cluster: machines and the parts placed there; links lead back to the workload.
    let first =
        described["status"]["placement"].as_array().unwrap().iter().find(|p| p["replicas"].as_u64() > Some(0)).unwrap()
            ["cluster"]
            .as_str()
            .unwrap()
            .to_string();
    b.client.goto(&format!("{url}/clusters/{first}")).await.unwrap();
    b.until("the cluster's machines and its workload parts", "return document.querySelectorAll('#machines-table tbody tr').length >= 1 && /web/.test(document.getElementById('parts-table').innerText)", WAIT).await;
    assert_accessible("cluster", &b.axe(&axe).await);
    assert_no_text_overlap(&b, "cluster").await;
    b.screenshot("cluster").await;

    // Another team's page is refused; so is its view.
    b.client.goto(&format!("{url}/teams/ads")).await.unwrap();
    let h1 = b.eval("return document.querySelector('h1').innerText").await;
    assert_eq!(h1, json!("Not your team"));
    let r = api_client.call("GET", "/v1/views/teams/ads", None).await.unwrap();
    assert_eq!(r.status, 403);

    // A phone's width: the page reflows; wide tables scroll inside their own region.
    b.client.set_window_size(390, 844).await.unwrap();
    b.client.goto(&format!("{url}/teams/search")).await.unwrap();
    b.until("the team page at a phone's width", "return document.getElementById('queue-table') !== null", WAIT).await;
    let overflow = b.eval("return document.documentElement.scrollWidth - document.documentElement.clientWidth").await;
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "the page itself does not scroll sideways on a phone (overflow {overflow}px)"
    );
    b.screenshot("team-phone").await;
    b.client.set_window_size(1280, 900).await.unwrap();

    // A member that stops answering is marked stale since a time, live, and keeps its figures.
    b.client.goto(&format!("{url}/")).await.unwrap();
    b.eval("window.__notReloaded = true; return true").await;
    b.until(
        "the live stream is connected",
        "return /Live: connected|Live: updated/.test(document.getElementById('live').innerText)",
        WAIT,
    )
    .await;
    let [east, west, north] = members;
    drop(north);
    b.until(
        "north marked stale, with its last figures",
        "const r = [...document.querySelectorAll('#clusters tbody tr')].find(r => r.querySelector('th').innerText === 'north'); return r !== undefined && /stale since/.test(r.innerText) && /1\\/1 ready/.test(r.innerText)",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(b.eval("return window.__notReloaded === true").await, json!(true), "marked stale without a reload");
    b.screenshot("fleet-stale").await;

    b.stop().await;
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server ends once its streams are closed")
        .unwrap()
        .unwrap();
    drop((east, west));
}

/// What arrives on a stream within `within` (empty: nothing).
async fn heard(sse: &mut tokio::net::TcpStream, within: Duration) -> String {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, sse.read(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).to_string(),
        _ => String::new(),
    }
}

/// A page on another origin tries what a hostile site would against a
/// gateway on loopback in anonymous mode (credentials are ambient there):
/// a cross-site form, a `text/plain` fetch, a login form with the
/// attacker's token, and a name of the attacker's resolving to 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_on_another_origin_changes_nothing_and_a_rebound_name_is_refused() {
    let host = KubeEnv::start();
    let members = [member("east", 1, "4", false)];
    let client = host.client().await;
    let namespace = host.unique("csrf");
    service::install(&client, &namespace).await.unwrap();
    let team = "search";
    let api: Api<TeamQuota> = Api::namespaced(client.clone(), &namespace);
    let obj = json!({"apiVersion": "gateway.pinfleet.dev/v1alpha1", "kind": "TeamQuota", "metadata": {"name": team, "namespace": namespace},
        "spec": {"tiers": {"OnDemand": {"guaranteed": {"cpu": "2", "memory": "4Gi", "pods": 10}}}}});
    api.patch(team, &PatchParams::apply("test").force(), &Patch::Apply(&obj)).await.unwrap();
    let mut other = obj.clone();
    other["metadata"]["name"] = json!("ads");
    api.patch("ads", &PatchParams::apply("test").force(), &Patch::Apply(&other)).await.unwrap();
    let ms = vec![MemberCluster {
        name: "east".into(),
        client: pinfleet::kube::apply::connect(&members[0].kubeconfig).await.unwrap(),
        labels: Default::default(),
        weight: 1,
    }];
    let settings = Settings {
        oidc: None,
        token_review: false,
        team_prefix: "team:".into(),
        admin_group: "pinfleet:admins".into(),
        anonymous: Some(pinfleet::gateway::intake::Caller {
            user: "alice".into(),
            teams: vec![team.into()],
            admin: false,
            via: "loopback".into(),
        }),
    };
    let config = service::Config {
        namespace: namespace.clone(),
        identity: "csrf-test".into(),
        policy: Policy::default(),
        interval: Duration::from_millis(200),
        lease_duration: Duration::from_secs(15),
        member_refresh: Duration::from_secs(1),
        api: pinfleet::kube::budget::Budget::GATEWAY,
        audit_log: None,
    };
    let svc: Arc<Service> =
        Service::start(client.clone(), ms, Identity::new(settings, Some(client.clone())), config).await.unwrap();
    let console = pinfleet::console::Console::new(svc.clone(), None, Duration::from_secs(1), false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let gw = format!("http://127.0.0.1:{port}");
    let c2 = console.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(pinfleet::gateway::http::serve_app(
        pinfleet::console::app(console.clone()),
        listener,
        None,
        async move {
            let _ = stop_rx.await;
            c2.close();
        },
    ));
    // The attacker's page, on another port of loopback (another origin).
    let workload = service_of(team, "csrf", 1, "100m");
    let body = json!({"id": "csrf-fetch", "workload": workload}).to_string();
    let form_name = json!({"id": "csrf-form", "workload": workload}).to_string();
    let page = format!(
        "<!doctype html><title>cute cats</title>\
<form id=f method=post enctype=text/plain action=\"{gw}/v1/submissions\" target=sink><input type=hidden name='{}' value=''></form>\
<form id=l method=post action=\"{gw}/login\" target=sink2><input type=hidden name=token value=attacker.token.value></form>\
<iframe name=sink></iframe><iframe name=sink2></iframe>\
<script>fetch('{gw}/v1/submissions', {{method: 'POST', mode: 'no-cors', headers: {{'content-type': 'text/plain'}}, body: {}}}).finally(() => {{ window.__fetched = true; }});\
document.getElementById('f').submit(); document.getElementById('l').submit();</script>",
        form_name.replace('\'', "&#39;"),
        serde_json::to_string(&body).unwrap()
    );
    let evil = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_url = format!("http://127.0.0.1:{}", evil.local_addr().unwrap().port());
    let evil_app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let evil_server = tokio::spawn(async move { axum::serve(evil, evil_app).await.unwrap() });

    let b = Browser::start_with(1024, 768, &["--host-resolver-rules=MAP rebind.attacker.example 127.0.0.1"]).await;
    b.client.goto(&format!("{evil_url}/")).await.unwrap();
    b.until("the attacker's fetch settled", "return window.__fetched === true", WAIT).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in ["csrf-fetch", "csrf-form"] {
        assert!(svc.find(team, id).await.unwrap().is_none(), "{id}: a page on another origin created work");
    }
    // The browser's own session on the gateway holds no attacker cookie.
    b.client.goto(&format!("{gw}/login")).await.unwrap();
    let cookies = b.client.get_all_cookies().await.unwrap();
    assert!(
        cookies.iter().all(|c| c.value() != "attacker.token.value"),
        "login CSRF set the attacker's token: {cookies:?}"
    );
    // DNS rebinding: the attacker's name, resolving to 127.0.0.1, reaches the port but not the gateway.
    b.client.goto(&format!("http://rebind.attacker.example:{port}/v1/submissions")).await.unwrap();
    let text = b.eval("return document.body.innerText").await;
    assert!(text.as_str().unwrap_or_default().contains("answers to 127.0.0.1"), "{text}");
    // The same from its own origin works: the console is usable.
    b.client.goto(&format!("{gw}/")).await.unwrap();
    assert_eq!(b.client.current_url().await.unwrap().path(), "/");
    b.stop().await;

    // Live updates tell a viewer of their own teams' work only: alice
    // (team search) hears nothing when team ads submits, and hears of her own.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sse = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    sse.write_all(
        format!("GET /ui/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = sse.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    // Whatever the fleet's first observation announced has passed.
    while heard(&mut sse, Duration::from_millis(1500)).await.contains("event: change") {}
    let admin =
        pinfleet::gateway::intake::Caller { user: "ops".into(), teams: vec![], admin: true, via: "test".into() };
    let (code, d) = svc.submit(&admin, "theirs", &service_of("ads", "theirs", 1, "100m"), None, false).await.unwrap();
    assert_eq!(code, 201, "{d:?}");
    let got = heard(&mut sse, Duration::from_secs(3)).await;
    assert!(!got.contains("event: change"), "alice heard of team ads's submission: {got:?}");
    let (code, d) = svc.submit(&admin, "mine", &service_of(team, "mine", 1, "100m"), None, false).await.unwrap();
    assert_eq!(code, 201, "{d:?}");
    let got = heard(&mut sse, Duration::from_secs(5)).await;
    assert!(got.contains("event: change"), "alice did not hear of her own team's submission: {got:?}");
    drop(sse);
    evil_server.abort();
    let _ = stop_tx.send(());
    let _ = server.await;
}
