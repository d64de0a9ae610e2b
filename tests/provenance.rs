//! Provenance against a real OCI registry (Debian's docker-registry, which
//! scripts/test unpacks and starts on 127.0.0.1): images, cosign
//! signatures and DSSE-enveloped SLSA provenance pushed here with
//! oci-client, in cosign's tag scheme (`sha256-<hex>.sig`, `.att`), then
//! checked by the gateway's registry edge.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey as _, LineEnding};
use pinfleet::gateway::registry::Registries;
use pinfleet::provenance::{self, Mode, TrustPolicy, TrustedKey};
use sha2::Digest as _;

const BUILDER: &str =
    "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/builder.yml@refs/tags/v2.0.0";
const REPO: &str = "https://github.com/example/search";

fn registry() -> String {
    std::env::var("PINFLEET_TEST_REGISTRY").ok().filter(|r| !r.is_empty()).expect(
        "the registry is needed: run scripts/test (it unpacks Debian's docker-registry and starts it on 127.0.0.1), or set PINFLEET_TEST_REGISTRY=host:port",
    )
}

fn client(host: &str) -> Client {
    Client::new(ClientConfig { protocol: ClientProtocol::HttpsExcept(vec![host.to_string()]), ..Default::default() })
}

fn key(seed: &str) -> SigningKey {
    SigningKey::from_slice(&sha2::Sha256::digest(seed.as_bytes())).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn sign(k: &SigningKey, message: &[u8]) -> String {
    let sig: Signature = k.sign(message);
    b64(sig.to_der().as_bytes())
}

fn policy(k: &SigningKey) -> TrustPolicy {
    TrustPolicy {
        mode: Mode::Enforce,
        keys: vec![TrustedKey {
            name: "search-release".into(),
            pem: k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap(),
        }],
        builders: vec![BUILDER.into()],
        repositories: vec![REPO.into()],
        refs: vec!["refs/heads/main".into()],
        parameters: vec!["workflow".into()],
    }
}

/// Pushes a one-layer image as `repo:tag`; its manifest digest.
async fn push_image(c: &Client, host: &str, repo: &str, tag: &str, content: &str) -> String {
    let r = Reference::with_tag(host.into(), repo.into(), tag.into());
    let layer = ImageLayer::new(content.as_bytes().to_vec(), "application/vnd.oci.image.layer.v1.tar".into(), None);
    let config = Config::new(b"{}".to_vec(), "application/vnd.oci.image.config.v1+json".into(), None);
    c.push(&r, &[layer], config, &RegistryAuth::Anonymous, None).await.unwrap();
    c.fetch_manifest_digest(&r, &RegistryAuth::Anonymous).await.unwrap()
}

/// Pushes an artifact of one layer beside `digest` under cosign's tag.
async fn push_beside(
    c: &Client,
    host: &str,
    repo: &str,
    tag: String,
    media_type: &str,
    data: Vec<u8>,
    note: Option<(&str, String)>,
) {
    let r = Reference::with_tag(host.into(), repo.into(), tag);
    let annotations = note.map(|(k, v)| BTreeMap::from([(k.to_string(), v)]));
    let layer = ImageLayer::new(data, media_type.into(), annotations);
    let config = Config::new(b"{}".to_vec(), "application/vnd.oci.image.config.v1+json".into(), None);
    c.push(&r, &[layer], config, &RegistryAuth::Anonymous, None).await.unwrap();
}

async fn sign_image(c: &Client, host: &str, repo: &str, digest: &str, k: &SigningKey) {
    let payload = provenance::simple_signing_payload(&format!("{host}/{repo}"), digest);
    let sig = sign(k, &payload);
    let tag = provenance::signature_tag(digest);
    push_beside(
        c,
        host,
        repo,
        tag,
        provenance::SIGNATURE_MEDIA_TYPE,
        payload,
        Some((provenance::SIGNATURE_ANNOTATION, sig)),
    )
    .await;
}

async fn attest_image(c: &Client, host: &str, repo: &str, digest: &str, k: &SigningKey, git_ref: &str) {
    let statement = serde_json::to_vec(&serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": format!("{host}/{repo}"), "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": provenance::SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1",
                "externalParameters": {"workflow": {"ref": git_ref, "repository": REPO, "path": ".github/workflows/release.yml"}},
            },
            "runDetails": {"builder": {"id": BUILDER}},
        },
    }))
    .unwrap();
    let envelope = serde_json::to_vec(&serde_json::json!({
        "payloadType": provenance::IN_TOTO_PAYLOAD_TYPE,
        "payload": b64(&statement),
        "signatures": [{"keyid": "", "sig": sign(k, &provenance::pae(provenance::IN_TOTO_PAYLOAD_TYPE, &statement))}],
    }))
    .unwrap();
    push_beside(c, host, repo, provenance::attestation_tag(digest), provenance::DSSE_MEDIA_TYPE, envelope, None).await;
}

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

    let why = |c: &pinfleet::gateway::registry::Checked| c.verdict.refused.clone().unwrap_or_default();
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
