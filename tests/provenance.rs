//! Provenance against a real OCI registry (Debian's docker-registry, which
//! scripts/test unpacks and starts on 127.0.0.1): images, cosign
//! signatures and DSSE-enveloped SLSA provenance pushed with oci-client
//! (tests/support/registry.rs), then checked by the gateway's registry edge.

#[path = "support/registry.rs"]
mod registry_support;

use std::sync::atomic::Ordering;

use pinfleet::provenance::Mode;
use pinfleet::registry::Registries;
use registry_support::*;

#[tokio::test]
async fn a_signed_landed_release_is_pinned_and_each_untrusted_image_refused_with_its_reason() {
    let host = registry();
    let c = client(&host);
    let (team, other) = (key("search-team"), key("ads-team"));
    // A release: signed by the team, built from main.
    let good = push_image(&c, &host, "search/web", "v1", "release 1").await;
    sign_image(&c, &host, "search/web", &good, &team).await;
    attest_image(&c, &host, "search/web", &good, &team, "refs/heads/main").await;
    // Unsigned; signed by another team; signed but built from a branch.
    let unsigned = push_image(&c, &host, "search/web", "unsigned", "unsigned").await;
    let foreign = push_image(&c, &host, "search/web", "foreign", "foreign").await;
    sign_image(&c, &host, "search/web", &foreign, &other).await;
    attest_image(&c, &host, "search/web", &foreign, &other, "refs/heads/main").await;
    let branch = push_image(&c, &host, "search/web", "wip", "wip").await;
    sign_image(&c, &host, "search/web", &branch, &team).await;
    attest_image(&c, &host, "search/web", &branch, &team, "refs/heads/wip").await;

    let regs = Registries::new(vec![host.clone()], vec![host.clone()]);
    let p = policy(&team);

    let ok = regs.check(&format!("{host}/search/web:v1"), &p).await;
    assert!(ok.verdict.trusted(), "{:?}", ok.verdict);
    assert_eq!(
        ok.pinned.as_deref(),
        Some(format!("{host}/search/web@{good}").as_str()),
        "the tag resolved once, pinned"
    );
    assert_eq!(ok.verdict.key.as_deref(), Some("search-release"));
    println!("verdict: {}", serde_json::to_string(&ok.verdict).unwrap());

    let why = |c: &pinfleet::registry::Checked| c.verdict.refused.clone().unwrap_or_default();
    let u = regs.check(&format!("{host}/search/web:unsigned"), &p).await;
    assert!(why(&u).starts_with("unsigned"), "{}", why(&u));
    assert_eq!(u.verdict.digest, unsigned, "the refusal names the digest the tag resolved to");
    let f = regs.check(&format!("{host}/search/web:foreign"), &p).await;
    assert!(why(&f).contains("signed by a key the team does not trust"), "{}", why(&f));
    let b = regs.check(&format!("{host}/search/web:wip"), &p).await;
    assert!(why(&b).contains("not a landed ref"), "{}", why(&b));
    assert!(b.verdict.admits(Mode::Warn) && !b.verdict.admits(Mode::Enforce), "warn admits what enforce refuses");
    let missing = format!("{host}/search/web@sha256:{}", "0".repeat(64));
    let m = regs.check(&missing, &p).await;
    assert!(why(&m).contains("no such image"), "{}", why(&m));
    let calls = regs.calls.load(Ordering::Relaxed);
    let look_alike = regs.check(&format!("{}.evil.example/search/web:v1", host.replace(':', "-")), &p).await;
    assert!(why(&look_alike).contains("is not one the gateway reads"), "{}", why(&look_alike));
    assert_eq!(regs.calls.load(Ordering::Relaxed), calls, "a look-alike host is refused before any request");

    // A resubmission by digest: from the cache, one request (the digest's existence).
    let before = regs.calls.load(Ordering::Relaxed);
    let again = regs.check(&format!("{host}/search/web@{good}"), &p).await;
    assert!(again.verdict.trusted());
    assert_eq!(regs.calls.load(Ordering::Relaxed) - before, 1, "verified once, by digest");
}

#[tokio::test]
async fn a_delivery_moves_only_signed_builds_of_landed_code() {
    let host = registry();
    let c = client(&host);
    let team = key("delivery-team");
    let good = release(&c, &host, "search/api", "v7", &team, "refs/heads/main").await;
    let wip = release(&c, &host, "search/api", "v8-wip", &team, "refs/heads/wip").await;
    let unsigned = push_image(&c, &host, "search/api", "v9", "unsigned api").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trust.yaml"), serde_saphyr::to_string(&policy(&team)).unwrap()).unwrap();
    let spec = |digest: &str| {
        let text = format!(
            "workload: {{namespace: search, name: api}}\nversion: v\nimages: {{app: \"{host}/search/api@{digest}\"}}\nstateStore: file:///nowhere\ntrustPolicy: trust.yaml\nclusters: {{north: {{kubeconfig: k}}}}\n"
        );
        pinfleet::delivery::DeliverySpec::parse(&text, dir.path()).unwrap()
    };
    let said = std::sync::Mutex::new(Vec::new());
    let on = |e: pinfleet::delivery::run::Event| said.lock().unwrap().push(format!("{e:?}"));
    assert_eq!(pinfleet::delivery::run::untrusted(&spec(&good), &on).await.unwrap(), None);
    assert!(said.lock().unwrap()[0].contains("search-release"), "{said:?}");
    let why = pinfleet::delivery::run::untrusted(&spec(&wip), &on).await.unwrap().unwrap();
    assert!(why.starts_with("images.app:") && why.contains("not a landed ref"), "{why}");
    let why = pinfleet::delivery::run::untrusted(&spec(&unsigned), &on).await.unwrap().unwrap();
    assert!(why.contains("unsigned"), "{why}");
}

/// A team's own registry content cannot make the gateway hold more than a
/// signature's or an attestation's size: a layer past its kind's cap is
/// refused by its descriptor before it is pulled; and a refusal is asked
/// again once it is old (an image signed after its first submission is
/// trusted then).
#[tokio::test]
async fn oversized_evidence_is_refused_unread_and_a_refusal_is_not_kept_for_ever() {
    let host = registry();
    let c = client(&host);
    let team = key("search-team");
    let p = policy(&team);
    let huge = push_image(&c, &host, "search/huge", "v1", "huge").await;
    push_beside(
        &c,
        &host,
        "search/huge",
        pinfleet::provenance::signature_tag(&huge),
        pinfleet::provenance::SIGNATURE_MEDIA_TYPE,
        vec![b'x'; 4 << 20],
        Some((pinfleet::provenance::SIGNATURE_ANNOTATION, "AAAA".into())),
    )
    .await;
    let regs =
        Registries::new(vec![host.clone()], vec![host.clone()]).refusals_kept(std::time::Duration::from_millis(200));
    let r = regs.check(&format!("{host}/search/huge:v1"), &p).await;
    let why = r.verdict.refused.clone().unwrap_or_default();
    assert!(why.contains("more than such a layer may be (16384)"), "{why}");

    // Unsigned at first: refused; signed since: trusted once the refusal is old.
    let later = push_image(&c, &host, "search/later", "v1", "later").await;
    let first = regs.check(&format!("{host}/search/later:v1"), &p).await;
    assert!(first.verdict.refused.as_deref().unwrap_or_default().starts_with("unsigned"), "{:?}", first.verdict);
    sign_image(&c, &host, "search/later", &later, &team).await;
    attest_image(&c, &host, "search/later", &later, &team, "refs/heads/main").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = regs.check(&format!("{host}/search/later:v1"), &p).await;
    assert!(second.verdict.trusted(), "{:?}", second.verdict);
}

/// A registry stands up here, serving what `routes` says for each path.
async fn fake_registry(
    ip: &str,
    routes: impl Fn(&str) -> axum::response::Response + Clone + Send + Sync + 'static,
) -> String {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let routes = routes.clone();
        async move { routes(uri.path()) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// A registry cannot send the gateway's requests elsewhere: a redirect to
/// another host is refused and that host is never asked; a redirect on the
/// registry's own host is followed; a blob whose bytes are not its digest's
/// is refused.
#[tokio::test]
async fn a_redirect_off_the_registrys_host_is_not_followed() {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse as _;
    use sha2::Digest as _;
    let digest_of = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    // Elsewhere: counts every request that reaches it.
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let elsewhere = fake_registry("127.0.0.2", move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        "stolen".into_response()
    })
    .await;
    let image = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#;
    let image_digest = digest_of(image);
    let sig_tag = pinfleet::provenance::signature_tag(&image_digest);
    let sig_blob = b"sig";
    let sig_manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2}},"layers":[{{"mediaType":"{}","digest":"{}","size":3}}]}}"#,
        pinfleet::provenance::SIGNATURE_MEDIA_TYPE,
        digest_of(sig_blob)
    );
    let (away, sig_path) = (format!("http://{elsewhere}/blob"), format!("/v2/team/app/manifests/{sig_tag}"));
    let blob_path = format!("/v2/team/app/blobs/{}", digest_of(sig_blob));
    let routes = move |blob: &'static str| {
        let (away, sig_path, blob_path, sig_manifest) =
            (away.clone(), sig_path.clone(), blob_path.clone(), sig_manifest.clone());
        move |path: &str| -> axum::response::Response {
            let redirect =
                |to: &str| (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, to.to_string())]).into_response();
            match path {
                "/v2/" => "{}".into_response(),
                "/v2/team/app/manifests/v1" => image.to_vec().into_response(),
                // A tag that moved: on the registry's own host.
                "/v2/team/app/manifests/moved" => redirect("/v2/team/app/manifests/v1"),
                p if p == sig_path => sig_manifest.clone().into_response(),
                p if p == blob_path => match blob {
                    "away" => redirect(&away),
                    "lies" => b"not the signature".to_vec().into_response(),
                    _ => sig_blob.to_vec().into_response(),
                },
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }
    };
    let p = policy(&key("search-team"));
    let check = |host: String, tag: &'static str| {
        let p = p.clone();
        async move {
            let regs = Registries::new(vec![host.clone()], vec![host.clone()]);
            let c = regs.check(&format!("{host}/team/app:{tag}"), &p).await;
            c.verdict.refused.unwrap_or_default()
        }
    };
    let away = fake_registry("127.0.0.1", routes("away")).await;
    let why = check(away.clone(), "v1").await;
    assert!(why.contains("the registry redirected to another host, which the gateway does not follow"), "{why}");
    assert!(!why.contains("127.0.0.2"), "where it pointed is not echoed: {why}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the other host was never asked");
    let lies = fake_registry("127.0.0.1", routes("lies")).await;
    let why = check(lies, "v1").await;
    assert!(why.contains("the bytes served are not that digest's"), "{why}");
    let honest = fake_registry("127.0.0.1", routes("honest")).await;
    let why = check(honest.clone(), "moved").await;
    assert!(
        !why.contains("redirect") && !why.contains("no such image"),
        "a redirect on its own host is followed: {why}"
    );
    assert!(!why.is_empty(), "a signature of three bytes does not verify: {why}");
}
