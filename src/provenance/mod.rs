//! Provenance (pure): whether an image, by digest, is one a team trusts —
//! signed by one of the team's keys in cosign's signature format, and
//! carrying an in-toto statement with a SLSA provenance predicate, in a
//! DSSE envelope signed by one of those keys, that names a builder the team
//! trusts, a source repository it trusts, a landed ref, and no build
//! parameter it does not know.
//!
//! ```text
//! registry (effects: the image's digest, the `sha256-<hex>.sig` and
//!           `.att` artifacts beside it)
//!     │ Evidence { digest, signatures, attestations }
//!     ▼
//! verify(policy, evidence) ─▶ Verdict { what was checked, which key,
//!                                       which statement, why not }
//! ```
//!
//! The signatures are ECDSA P-256 over SHA-256 (cosign's default key
//! type), checked with the RustCrypto `p256` crate: a cosign signature
//! signs its simple-signing payload (the JSON naming the image's digest);
//! a DSSE envelope's signature signs the envelope's pre-authentication
//! encoding of its payload type and payload.

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// cosign's simple-signing payload type.
pub const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";
/// The layer media type of a cosign signature.
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a cosign signature (base64 DER).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The layer media type of a DSSE envelope (an attestation).
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The payload type of an in-toto statement in a DSSE envelope.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The SLSA provenance predicate, version 1.
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";

/// What a failed verification does to a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Refused with the reason.
    #[default]
    Enforce,
    /// Admitted, flagged and audited: how a team adopts a policy.
    Warn,
}

/// A public key a team trusts, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedKey {
    pub name: String,
    /// The key as PEM (`-----BEGIN PUBLIC KEY-----`, P-256).
    pub pem: String,
}

/// A team's trust policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustPolicy {
    #[serde(default)]
    pub mode: Mode,
    pub keys: Vec<TrustedKey>,
    /// Builder ids (`runDetails.builder.id`) the team trusts.
    pub builders: Vec<String>,
    /// Source repositories the image may be built from.
    pub repositories: Vec<String>,
    /// Refs that are landed (reviewed and merged).
    #[serde(default = "landed")]
    pub refs: Vec<String>,
    /// External build parameters the team knows; any other is refused.
    #[serde(default = "known_parameters")]
    pub parameters: Vec<String>,
}

fn landed() -> Vec<String> {
    vec!["refs/heads/main".into()]
}

fn known_parameters() -> Vec<String> {
    vec!["workflow".into()]
}

/// What the registry holds for one image digest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Each cosign signature: its payload and its base64 signature.
    pub signatures: Vec<(Vec<u8>, String)>,
    /// Each attestation: a DSSE envelope, as JSON bytes.
    pub attestations: Vec<Vec<u8>>,
}

/// What the provenance a verdict accepted says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Statement {
    pub builder: String,
    pub repository: String,
    #[serde(rename = "ref")]
    pub git_ref: String,
}

/// The verdict on one digest, recorded with the submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub digest: String,
    /// Each check made, in words, in order.
    pub checked: Vec<String>,
    /// The key whose signature held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The provenance accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement: Option<Statement>,
    /// Why the digest is not trusted (None: trusted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Verdict {
    pub fn trusted(&self) -> bool {
        self.refused.is_none()
    }

    /// Whether the submission goes on under `mode` (warn admits, flagged).
    pub fn admits(&self, mode: Mode) -> bool {
        self.trusted() || mode == Mode::Warn
    }
}

/// Where cosign keeps a digest's signature and attestations: tags beside
/// the image (the registry has no referrers endpoint).
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

pub fn attestation_tag(digest: &str) -> String {
    format!("{}.att", digest.replace(':', "-"))
}

/// cosign's simple-signing payload for `reference` at `digest`.
pub fn simple_signing_payload(reference: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": SIMPLE_SIGNING_TYPE,
        },
        "optional": null,
    }))
    .unwrap_or_default()
}

/// DSSE's pre-authentication encoding: what an envelope's signature signs.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The team's keys, parsed; a key that does not parse is named.
fn keys(policy: &TrustPolicy) -> Result<Vec<(String, VerifyingKey)>, String> {
    policy
        .keys
        .iter()
        .map(|k| {
            VerifyingKey::from_public_key_pem(k.pem.trim())
                .map(|v| (k.name.clone(), v))
                .map_err(|e| format!("trusted key {} is not a P-256 public key in PEM: {e}", k.name))
        })
        .collect()
}

/// The first of `keys` whose signature `sig_b64` (base64, DER or raw) over
/// `message` holds.
fn signed_by(keys: &[(String, VerifyingKey)], message: &[u8], sig_b64: &str) -> Option<String> {
    let raw = base64::engine::general_purpose::STANDARD.decode(sig_b64.trim()).ok()?;
    let sig = Signature::from_der(&raw).or_else(|_| Signature::from_slice(&raw)).ok()?;
    keys.iter().find(|(_, k)| k.verify(message, &sig).is_ok()).map(|(n, _)| n.clone())
}

/// Verifies `ev` against `policy`.
pub fn verify(policy: &TrustPolicy, ev: &Evidence) -> Verdict {
    let mut v = Verdict { digest: ev.digest.clone(), checked: Vec::new(), key: None, statement: None, refused: None };
    let keys = match keys(policy) {
        Ok(k) if !k.is_empty() => k,
        Ok(_) => return refuse(v, "the team's trust policy names no key"),
        Err(e) => return refuse(v, &e),
    };
    match signature(&keys, ev) {
        Ok(key) => {
            v.checked.push(format!("signature by {key} over {}", ev.digest));
            v.key = Some(key);
        }
        Err(why) => return refuse(v, &why),
    }
    match provenance(policy, &keys, ev) {
        Ok((key, statement)) => {
            v.checked.push(format!(
                "SLSA provenance signed by {key}: built by {} from {}@{}",
                statement.builder, statement.repository, statement.git_ref
            ));
            v.statement = Some(statement);
        }
        Err(why) => return refuse(v, &why),
    }
    v
}

fn refuse(mut v: Verdict, why: &str) -> Verdict {
    v.refused = Some(why.to_string());
    v
}

/// The key of a cosign signature over this digest.
fn signature(keys: &[(String, VerifyingKey)], ev: &Evidence) -> Result<String, String> {
    if ev.signatures.is_empty() {
        return Err(format!("unsigned: no signature for {} (tag {})", ev.digest, signature_tag(&ev.digest)));
    }
    let mut why = Vec::new();
    for (payload, sig) in &ev.signatures {
        let Ok(p) = serde_json::from_slice::<Value>(payload) else {
            why.push("a signature payload that is not JSON".to_string());
            continue;
        };
        let named = p.pointer("/critical/image/docker-manifest-digest").and_then(Value::as_str);
        let kind = p.pointer("/critical/type").and_then(Value::as_str);
        if kind != Some(SIMPLE_SIGNING_TYPE) {
            why.push("a signature payload of another type".to_string());
            continue;
        }
        if named != Some(ev.digest.as_str()) {
            why.push(format!("a signature over another digest ({})", named.unwrap_or("none")));
            continue;
        }
        match signed_by(keys, payload, sig) {
            Some(k) => return Ok(k),
            None => why.push("signed by a key the team does not trust".to_string()),
        }
    }
    Err(format!("{}: {}", ev.digest, why.join("; ")))
}

/// The provenance of this digest: a DSSE envelope signed by a trusted key,
/// an in-toto statement about the digest, a SLSA v1 predicate the policy
/// accepts.
fn provenance(
    policy: &TrustPolicy,
    keys: &[(String, VerifyingKey)],
    ev: &Evidence,
) -> Result<(String, Statement), String> {
    if ev.attestations.is_empty() {
        return Err(format!("no provenance for {} (tag {})", ev.digest, attestation_tag(&ev.digest)));
    }
    let mut why = Vec::new();
    for envelope in &ev.attestations {
        match attestation(policy, keys, &ev.digest, envelope) {
            Ok(found) => return Ok(found),
            Err(w) => why.push(w),
        }
    }
    Err(why.join("; "))
}

fn attestation(
    policy: &TrustPolicy,
    keys: &[(String, VerifyingKey)],
    digest: &str,
    envelope: &[u8],
) -> Result<(String, Statement), String> {
    let env: Value = serde_json::from_slice(envelope).map_err(|_| "an attestation that is not a DSSE envelope")?;
    let payload_type = env["payloadType"].as_str().unwrap_or_default();
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(format!("an attestation of payload type {payload_type:?}, not an in-toto statement"));
    }
    let payload = base64::engine::general_purpose::STANDARD
        .decode(env["payload"].as_str().unwrap_or_default())
        .map_err(|_| "an attestation whose payload is not base64")?;
    let message = pae(payload_type, &payload);
    let key = env["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|s| signed_by(keys, &message, s["sig"].as_str().unwrap_or_default()))
        .ok_or("provenance not signed by a key the team trusts")?;
    let st: Value = serde_json::from_slice(&payload).map_err(|_| "a provenance statement that is not JSON")?;
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    let about =
        st["subject"].as_array().into_iter().flatten().any(|s| s.pointer("/digest/sha256") == Some(&Value::from(hex)));
    if !about {
        return Err(format!("a provenance statement about another artifact than {digest}"));
    }
    let predicate_type = st["predicateType"].as_str().unwrap_or_default();
    if predicate_type != SLSA_PROVENANCE_V1 {
        return Err(format!("provenance of predicate type {predicate_type:?}, not SLSA provenance v1"));
    }
    let p = &st["predicate"];
    let builder = p.pointer("/runDetails/builder/id").and_then(Value::as_str).unwrap_or_default().to_string();
    if !policy.builders.contains(&builder) {
        return Err(format!("built by {builder:?}, not a builder the team trusts ({})", policy.builders.join(", ")));
    }
    let params = p.pointer("/buildDefinition/externalParameters").and_then(Value::as_object);
    if let Some(unknown) = params.into_iter().flatten().map(|(k, _)| k).find(|k| !policy.parameters.contains(k)) {
        return Err(format!("an unknown build parameter {unknown:?} (known: {})", policy.parameters.join(", ")));
    }
    let workflow = p.pointer("/buildDefinition/externalParameters/workflow");
    let field = |f: &str| workflow.and_then(|w| w[f].as_str()).unwrap_or_default().to_string();
    let (repository, git_ref) = (field("repository"), field("ref"));
    if !policy.repositories.contains(&repository) {
        return Err(format!("built from {repository:?}, not a repository the team trusts"));
    }
    if !policy.refs.contains(&git_ref) {
        return Err(format!("built from {git_ref:?}, not a landed ref ({})", policy.refs.join(", ")));
    }
    Ok((key, Statement { builder, repository, git_ref }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;
    use p256::ecdsa::SigningKey;
    use p256::pkcs8::{EncodePublicKey as _, LineEnding};
    use sha2::Digest as _;

    const DIGEST: &str = "sha256:0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
    const BUILDER: &str =
        "https://github.com/slsa-framework/slsa-github-generator/.github/workflows/builder.yml@refs/tags/v2.0.0";

    fn key(seed: &str) -> SigningKey {
        SigningKey::from_slice(&sha2::Sha256::digest(seed.as_bytes())).unwrap()
    }

    fn pem(k: &SigningKey) -> String {
        k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap()
    }

    fn sign(k: &SigningKey, message: &[u8]) -> String {
        let sig: Signature = k.sign(message);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    }

    fn policy(k: &SigningKey) -> TrustPolicy {
        TrustPolicy {
            mode: Mode::Enforce,
            keys: vec![TrustedKey { name: "search-release".into(), pem: pem(k) }],
            builders: vec![BUILDER.into()],
            repositories: vec!["https://github.com/example/search".into()],
            refs: landed(),
            parameters: known_parameters(),
        }
    }

    fn statement(digest: &str, git_ref: &str, extra: Option<(&str, Value)>) -> Vec<u8> {
        let mut params = serde_json::json!({
            "workflow": {"ref": git_ref, "repository": "https://github.com/example/search", "path": ".github/workflows/release.yml"}
        });
        if let Some((k, v)) = extra {
            params[k] = v;
        }
        serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "registry.example/search/web", "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
            "predicateType": SLSA_PROVENANCE_V1,
            "predicate": {
                "buildDefinition": {"buildType": "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1", "externalParameters": params},
                "runDetails": {"builder": {"id": BUILDER}},
            },
        }))
        .unwrap()
    }

    fn envelope(k: &SigningKey, payload: &[u8]) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(payload);
        let sig = sign(k, &pae(IN_TOTO_PAYLOAD_TYPE, payload));
        serde_json::to_vec(&serde_json::json!({
            "payloadType": IN_TOTO_PAYLOAD_TYPE, "payload": b64, "signatures": [{"keyid": "", "sig": sig}],
        }))
        .unwrap()
    }

    fn evidence(k: &SigningKey, git_ref: &str) -> Evidence {
        let payload = simple_signing_payload("registry.example/search/web", DIGEST);
        Evidence {
            digest: DIGEST.into(),
            signatures: vec![(payload.clone(), sign(k, &payload))],
            attestations: vec![envelope(k, &statement(DIGEST, git_ref, None))],
        }
    }

    #[test]
    fn a_signed_landed_build_is_trusted_and_says_what_was_checked() {
        let k = key("search");
        let v = verify(&policy(&k), &evidence(&k, "refs/heads/main"));
        assert!(v.trusted(), "{v:?}");
        assert_eq!(v.key.as_deref(), Some("search-release"));
        assert_eq!(v.statement.as_ref().unwrap().git_ref, "refs/heads/main");
        assert_eq!(v.checked.len(), 2, "{:?}", v.checked);
    }

    #[test]
    fn each_untrusted_case_is_refused_with_its_reason() {
        let (k, other) = (key("search"), key("ads"));
        let p = policy(&k);
        let why = |ev: &Evidence| verify(&p, ev).refused.unwrap_or_default();
        let mut unsigned = evidence(&k, "refs/heads/main");
        unsigned.signatures.clear();
        assert!(why(&unsigned).starts_with("unsigned"), "{}", why(&unsigned));
        assert!(why(&evidence(&other, "refs/heads/main")).contains("signed by a key the team does not trust"));
        assert!(why(&evidence(&k, "refs/heads/wip")).contains("not a landed ref"));
        let mut elsewhere = evidence(&k, "refs/heads/main");
        let payload = simple_signing_payload("registry.example/search/web", "sha256:ffff");
        elsewhere.signatures = vec![(payload.clone(), sign(&k, &payload))];
        assert!(why(&elsewhere).contains("another digest"));
        let mut tampered = evidence(&k, "refs/heads/main");
        tampered.signatures[0].0 = simple_signing_payload("registry.example/search/evil", DIGEST);
        assert!(why(&tampered).contains("does not trust"), "{}", why(&tampered));
        let mut extra = evidence(&k, "refs/heads/main");
        extra.attestations =
            vec![envelope(&k, &statement(DIGEST, "refs/heads/main", Some(("cacheFrom", Value::from("x")))))];
        assert!(why(&extra).contains("unknown build parameter \"cacheFrom\""), "{}", why(&extra));
        let mut no_att = evidence(&k, "refs/heads/main");
        no_att.attestations.clear();
        assert!(why(&no_att).starts_with("no provenance"));
        let mut foreign_att = evidence(&k, "refs/heads/main");
        foreign_att.attestations = vec![envelope(&other, &statement(DIGEST, "refs/heads/main", None))];
        assert!(why(&foreign_att).contains("provenance not signed"));
    }

    #[test]
    fn warn_admits_what_enforce_refuses_and_both_keep_the_reason() {
        let k = key("search");
        let v = verify(&policy(&k), &evidence(&k, "refs/heads/wip"));
        assert!(!v.trusted() && !v.admits(Mode::Enforce) && v.admits(Mode::Warn));
    }

    #[test]
    fn hostile_evidence_is_refused_never_a_panic() {
        let k = key("search");
        let p = policy(&k);
        for junk in [
            &b""[..],
            b"null",
            b"{\"payloadType\": 5}",
            b"\xff\xfe",
            b"{\"payload\":\"!!\",\"payloadType\":\"application/vnd.in-toto+json\"}",
        ] {
            let ev = Evidence {
                digest: DIGEST.into(),
                signatures: vec![(junk.to_vec(), "%%%".into())],
                attestations: vec![junk.to_vec()],
            };
            assert!(!verify(&p, &ev).trusted());
        }
        let mut bad_key = p.clone();
        bad_key.keys[0].pem = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----".into();
        let v = verify(&bad_key, &evidence(&k, "refs/heads/main"));
        assert!(v.refused.unwrap().contains("is not a P-256 public key"));
    }

    #[test]
    fn cosign_tags_sit_beside_the_image() {
        assert_eq!(signature_tag("sha256:abc"), "sha256-abc.sig");
        assert_eq!(attestation_tag("sha256:abc"), "sha256-abc.att");
        assert_eq!(pae("t", b"xy"), b"DSSEv1 1 t 2 xy");
    }
}
