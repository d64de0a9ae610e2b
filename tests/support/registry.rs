//! A real OCI registry for the tests (Debian's docker-registry, which
//! scripts/test unpacks and starts on 127.0.0.1, named by
//! PINFLEET_TEST_REGISTRY), and what a release pipeline puts in it: images,
//! cosign signatures and DSSE-enveloped SLSA provenance, pushed with
//! oci-client in cosign's tag scheme (`sha256-<hex>.sig`, `.att`).
#![allow(dead_code)]

use std::collections::BTreeMap;

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey as _, LineEnding};
use pinfleet::provenance::{self, Mode, TrustPolicy, TrustedKey};
use sha2::Digest as _;

pub const BUILDER: &str =
    "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/builder.yml@refs/tags/v2.0.0";
pub const REPO: &str = "https://github.com/example/search";

pub fn registry() -> String {
    std::env::var("PINFLEET_TEST_REGISTRY").ok().filter(|r| !r.is_empty()).expect(
        "the registry is needed: run scripts/test (it unpacks Debian's docker-registry and starts it on 127.0.0.1), or set PINFLEET_TEST_REGISTRY=host:port",
    )
}

pub fn client(host: &str) -> Client {
    Client::new(ClientConfig { protocol: ClientProtocol::HttpsExcept(vec![host.to_string()]), ..Default::default() })
}

pub fn key(seed: &str) -> SigningKey {
    SigningKey::from_slice(&sha2::Sha256::digest(seed.as_bytes())).unwrap()
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn sign(k: &SigningKey, message: &[u8]) -> String {
    let sig: Signature = k.sign(message);
    b64(sig.to_der().as_bytes())
}

pub fn policy(k: &SigningKey) -> TrustPolicy {
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
pub async fn push_image(c: &Client, host: &str, repo: &str, tag: &str, content: &str) -> String {
    let r = Reference::with_tag(host.into(), repo.into(), tag.into());
    let layer = ImageLayer::new(content.as_bytes().to_vec(), "application/vnd.oci.image.layer.v1.tar".into(), None);
    let config = Config::new(b"{}".to_vec(), "application/vnd.oci.image.config.v1+json".into(), None);
    c.push(&r, &[layer], config, &RegistryAuth::Anonymous, None).await.unwrap();
    c.fetch_manifest_digest(&r, &RegistryAuth::Anonymous).await.unwrap()
}

/// Pushes an artifact of one layer beside `digest` under cosign's tag.
pub async fn push_beside(
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

pub async fn sign_image(c: &Client, host: &str, repo: &str, digest: &str, k: &SigningKey) {
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

pub async fn attest_image(c: &Client, host: &str, repo: &str, digest: &str, k: &SigningKey, git_ref: &str) {
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

/// A release as a pipeline makes one: the image pushed as `repo:tag`,
/// signed with `k` and attested as built from `git_ref`; its digest.
pub async fn release(c: &Client, host: &str, repo: &str, tag: &str, k: &SigningKey, git_ref: &str) -> String {
    let digest = push_image(c, host, repo, tag, &format!("{repo}:{tag}")).await;
    sign_image(c, host, repo, &digest, k).await;
    attest_image(c, host, repo, &digest, k, git_ref).await;
    digest
}
