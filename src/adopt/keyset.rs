//! kops's keysets (pure): the CAs and service-account key a kops cluster
//! trusts, read from its state store as kops writes them
//! (`pki/private/<name>/keyset.yaml`, kind `Keyset`: each key's
//! certificate and private key as base64 PEM, the primary named by
//! `spec.primaryID`), and made into the PKI pinfleet keeps for the cluster.
//!
//! ```text
//! kops's state store: pki/private/{kubernetes-ca, apiserver-aggregator-ca, service-account}/keyset.yaml
//!     │ primary: the primary key's certificate and private key (PEM)
//!     ▼
//! state::pki::Pki::adopted (the CAs as they are; an admin credential signed by kops's CA)
//! ```

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use serde::Deserialize;

/// The keysets a take-over reads, and what pinfleet keeps each as.
pub const KEYSETS: [(&str, &str); 3] = [
    ("kubernetes-ca", "the cluster CA (every client and kubelet trusts it)"),
    ("apiserver-aggregator-ca", "the front-proxy CA (aggregated APIs trust it)"),
    ("service-account", "the key service-account tokens are signed with (every pod's token)"),
];

/// Where a keyset lives in kops's cluster folder.
pub fn keyset_key(name: &str) -> String {
    format!("pki/private/{name}/keyset.yaml")
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Keyset {
    kind: Option<String>,
    spec: KeysetSpec,
}

#[derive(Deserialize)]
struct KeysetSpec {
    #[serde(default)]
    keys: Vec<KeysetItem>,
    #[serde(rename = "primaryID", alias = "primaryId", default)]
    primary_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeysetItem {
    id: String,
    #[serde(default)]
    public_material: Option<String>,
    #[serde(default)]
    private_material: Option<String>,
}

/// One keyset's primary key: its certificate and private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Primary {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Primary { <redacted> }")
    }
}

/// The primary key of a keyset's text (`at` names it in errors).
pub fn primary(at: &str, text: &str) -> Result<Primary> {
    let k: Keyset = serde_saphyr::from_str(text).with_context(|| format!("{at}: not a kops Keyset"))?;
    if k.kind.as_deref() != Some("Keyset") {
        bail!("{at}: kind is {:?}, not Keyset", k.kind.unwrap_or_default());
    }
    let id = k.spec.primary_id.with_context(|| format!("{at}: spec.primaryID is missing"))?;
    let item = k
        .spec
        .keys
        .iter()
        .find(|i| i.id == id)
        .with_context(|| format!("{at}: spec.primaryID {id} is none of spec.keys[].id"))?;
    let pem = |field: &str, b64: &Option<String>, begins: &str| -> Result<String> {
        let b64 = b64.as_deref().with_context(|| format!("{at}: key {id} has no {field}"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .with_context(|| format!("{at}: key {id}'s {field} is not base64"))?;
        let text = String::from_utf8(bytes).ok().filter(|t| t.contains(begins));
        text.with_context(|| format!("{at}: key {id}'s {field} holds no {begins} PEM"))
    };
    Ok(Primary {
        cert_pem: pem("publicMaterial", &item.public_material, "-----BEGIN CERTIFICATE-----")?,
        key_pem: pem("privateMaterial", &item.private_material, "PRIVATE KEY-----")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyset(primary: &str, private: &str) -> String {
        let b = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "apiVersion: kops.k8s.io/v1alpha2\nkind: Keyset\nmetadata:\n  name: kubernetes-ca\nspec:\n  keys:\n  - id: \"1\"\n    privateMaterial: {}\n    publicMaterial: {}\n  primaryID: \"{primary}\"\n  type: Keypair\n",
            b(private),
            b("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
        )
    }

    #[test]
    fn the_primary_key_is_read_and_a_broken_keyset_is_named() {
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n";
        let p = primary("pki/private/kubernetes-ca/keyset.yaml", &keyset("1", key)).unwrap();
        assert_eq!(p.key_pem, key);
        assert!(p.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let e = primary("ks", &keyset("2", key)).unwrap_err().to_string();
        assert_eq!(e, "ks: spec.primaryID 2 is none of spec.keys[].id");
        let e = primary("ks", &keyset("1", "test fixture: no key material")).unwrap_err().to_string();
        assert_eq!(e, "ks: key 1's privateMaterial holds no PRIVATE KEY----- PEM");
        let e = primary("ks", "kind: Cluster\nspec: {}\n").unwrap_err().to_string();
        assert_eq!(e, "ks: kind is \"Cluster\", not Keyset");
        assert_eq!(format!("{p:?}"), "Primary { <redacted> }");
    }

    fn fixture(name: &str) -> Primary {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kops/prod.k8s.example.com/pki/private");
        let at = format!("{dir}/{name}/keyset.yaml");
        primary(&at, &std::fs::read_to_string(&at).unwrap()).unwrap()
    }

    #[test]
    fn kops_s_keysets_become_the_pki_with_an_admin_its_ca_signed() {
        use x509_parser::pem::parse_x509_pem;
        let [ca, fp, sa] = [fixture("kubernetes-ca"), fixture("apiserver-aggregator-ca"), fixture("service-account")];
        let pki = crate::state::pki::Pki::adopted(
            "prod",
            (&ca.cert_pem, &ca.key_pem),
            (&fp.cert_pem, &fp.key_pem),
            (&sa.cert_pem, &sa.key_pem),
            None,
        )
        .unwrap();
        assert_eq!((pki.ca_cert.as_str(), pki.ca_key.as_str()), (ca.cert_pem.as_str(), ca.key_pem.as_str()));
        assert_eq!(pki.front_proxy_ca_cert, fp.cert_pem);
        assert_eq!(pki.sa_key, sa.key_pem);
        let (_, ca_pem) = parse_x509_pem(ca.cert_pem.as_bytes()).unwrap();
        let ca_cert = ca_pem.parse_x509().unwrap();
        // The admin credential is signed by kops's CA (RSA, PKCS#1 as kops writes it).
        let (_, admin_pem) = parse_x509_pem(pki.admin_cert.as_bytes()).unwrap();
        let admin = admin_pem.parse_x509().unwrap();
        admin.verify_signature(Some(ca_cert.public_key())).unwrap();
        assert_eq!(admin.issuer(), ca_cert.subject());
        // kubeadm's discovery hash is of kops's CA's public key.
        use sha2::Digest;
        let spki = ca_cert.public_key().raw;
        assert_eq!(pki.ca_cert_hash, format!("sha256:{}", hex::encode(sha2::Sha256::digest(spki))));
        // sa.pub is the service-account certificate's public key.
        let (_, sa_pem) = parse_x509_pem(sa.cert_pem.as_bytes()).unwrap();
        let sa_cert = sa_pem.parse_x509().unwrap();
        let (_, pubkey) = x509_parser::pem::parse_x509_pem(pki.sa_pub.as_bytes()).unwrap();
        assert_eq!(pubkey.label, "PUBLIC KEY");
        assert_eq!(pubkey.contents, sa_cert.public_key().raw);
        // A key that is not its certificate's is refused, naming which.
        let e = crate::state::pki::Pki::adopted(
            "prod",
            (&ca.cert_pem, &ca.key_pem),
            (&fp.cert_pem, &sa.key_pem),
            (&sa.cert_pem, &sa.key_pem),
            None,
        )
        .unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "the front-proxy CA: the private key is not the one its certificate (or public key) holds"
        );
        // etcd's CA, when given (kubeadm's), is taken as it is and checked.
        let with_etcd = |key: &str| {
            crate::state::pki::Pki::adopted(
                "prod",
                (&ca.cert_pem, &ca.key_pem),
                (&fp.cert_pem, &fp.key_pem),
                (&sa.cert_pem, &sa.key_pem),
                Some((&fp.cert_pem, key, "kubeadm's etcd/ca.crt")),
            )
        };
        let pki = with_etcd(&fp.key_pem).unwrap();
        assert_eq!((pki.etcd_ca_cert.as_str(), pki.etcd_ca_key.as_str()), (fp.cert_pem.as_str(), fp.key_pem.as_str()));
        assert_eq!(pki.etcd_ca_from.as_deref(), Some("kubeadm's etcd/ca.crt"));
        let e = with_etcd(&ca.key_pem).unwrap_err();
        assert_eq!(format!("{e:#}"), "etcd's CA: the private key is not the one its certificate (or public key) holds");
    }
}
