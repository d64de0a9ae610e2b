//! The cluster's PKI, generated once at bootstrap (rcgen) and kept in the
//! state store: the cluster CA, the front-proxy CA, the service-account key
//! pair, an admin client certificate, a kubeadm bootstrap token and the key
//! that protects control-plane certificates between `kubeadm init` and
//! `join --control-plane`. Never printed or logged: `Debug` is redacted.

use anyhow::{Context as _, Result};
use base64::Engine;
use rand::Rng;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData,
};
use serde::{Deserialize, Serialize};

use super::Store;

pub const PKI_KEY: &str = "pki/bundle.json";

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pki {
    pub ca_cert: String,
    pub ca_key: String,
    pub front_proxy_ca_cert: String,
    pub front_proxy_ca_key: String,
    pub sa_key: String,
    pub sa_pub: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// kubeadm bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub join_token: String,
    /// 32 bytes hex: encrypts certificates uploaded by `kubeadm init --upload-certs`.
    pub certificate_key: String,
    /// `sha256:<hex>` of the CA's SubjectPublicKeyInfo (kubeadm discovery).
    pub ca_cert_hash: String,
    /// etcd's CA, shared by every control-plane machine (they fetch it from
    /// the state store instead of kubeadm's two-hour certificate upload).
    /// Empty in PKIs made before it existed; filled on the next load.
    #[serde(default)]
    pub etcd_ca_cert: String,
    #[serde(default)]
    pub etcd_ca_key: String,
    /// Secrets' encryption at rest: the API servers' secretbox keys, the
    /// newest first (it encrypts; every one decrypts). Never removed: a
    /// backup written under an older key needs it to read its Secrets.
    /// Empty in PKIs made before it existed; filled on the next load.
    #[serde(default)]
    pub encryption_keys: Vec<EncryptionKey>,
    /// Where etcd's CA came from when it was taken over with a running
    /// cluster (kubeadm's, copied off its control plane): only then do new
    /// control-plane machines join that cluster's etcd, and only then is
    /// an adopted control plane rolled. None: the CA is pinfleet's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_ca_from: Option<String>,
}

/// One key of the API servers' EncryptionConfiguration.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncryptionKey {
    pub name: String,
    /// The key, base64: 32 random bytes for pinfleet's own (secretbox:
    /// XSalsa20 and Poly1305).
    pub secret: String,
    /// Its provider: pinfleet makes secretbox keys; a cluster taken over
    /// brings its own (kops's `aescbc`, say).
    #[serde(default, skip_serializing_if = "Cipher::is_secretbox")]
    pub provider: Cipher,
}

/// The API server's encryption providers a key can be carried in (what
/// `k8s:enc:<provider>:v1:<key>:` prefixes a stored value with).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cipher {
    #[default]
    Secretbox,
    Aescbc,
    Aesgcm,
}

impl Cipher {
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Secretbox => "secretbox",
            Cipher::Aescbc => "aescbc",
            Cipher::Aesgcm => "aesgcm",
        }
    }

    pub fn from_name(s: &str) -> Option<Cipher> {
        [Cipher::Secretbox, Cipher::Aescbc, Cipher::Aesgcm].into_iter().find(|c| c.name() == s)
    }

    fn is_secretbox(&self) -> bool {
        *self == Cipher::Secretbox
    }

    /// The key lengths (bytes) the API server takes for it.
    pub fn key_lengths(self) -> &'static [usize] {
        match self {
            Cipher::Secretbox => &[32],
            Cipher::Aescbc | Cipher::Aesgcm => &[16, 24, 32],
        }
    }
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncryptionKey {{ name: {:?}, provider: {}, <redacted> }}", self.name, self.provider.name())
    }
}

impl EncryptionKey {
    pub fn generate(now: chrono::DateTime<chrono::Utc>) -> EncryptionKey {
        EncryptionKey {
            name: format!("key-{}", now.format("%Y%m%dt%H%M%S")),
            secret: base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>()),
            provider: Cipher::Secretbox,
        }
    }
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pki { <redacted> }")
    }
}

fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

fn ca(common_name: &str) -> Result<(CertificateParams, KeyPair, String)> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    // kubeadm's CA lifetime: ten years.
    params.not_before = time_now();
    params.not_after = time_now() + time_days(3650);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((params, key, cert.pem()))
}

/// Whether `key_pem` is the private key of `cert_pem`'s certificate, and
/// loads as a signer (what [`Pki::adopted`] checks of each pair).
pub fn check_key_pair(cert_pem: &str, key_pem: &str) -> Result<()> {
    adopted_key(cert_pem, key_pem).map(|_| ())
}

/// A PEM block's DER, the first of `label`s (None: no such block).
fn pem_der(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let body = pem.split_once(&begin)?.1.split_once(&end)?.0;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// DER length octets.
fn der_len(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let bytes: Vec<u8> = n.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
    let mut out = vec![0x80 | bytes.len() as u8];
    out.extend(bytes);
    out
}

/// A PKCS#1 RSA key (kops writes `RSA PRIVATE KEY`) as PKCS#8, which the
/// signer reads: `SEQUENCE { 0, rsaEncryption, OCTET STRING pkcs1 }`.
fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    const HEAD: [u8; 18] =
        [0x02, 0x01, 0x00, 0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00];
    let mut octets = vec![0x04];
    octets.extend(der_len(pkcs1.len()));
    octets.extend_from_slice(pkcs1);
    let mut out = vec![0x30];
    out.extend(der_len(HEAD.len() + octets.len()));
    out.extend_from_slice(&HEAD);
    out.extend(octets);
    out
}

/// An adopted certificate's key as a signer, and its public key
/// (SubjectPublicKeyInfo, DER), refused unless the certificate holds that
/// very public key. RSA keys in PKCS#1 or PKCS#8 and ECDSA P-256 keys.
fn adopted_key(cert_pem: &str, key_pem: &str) -> Result<(KeyPair, Vec<u8>)> {
    // A certificate, or a bare public key (kubeadm's sa.pub).
    let cert = pem_der(cert_pem, "CERTIFICATE")
        .or_else(|| pem_der(cert_pem, "PUBLIC KEY"))
        .context("no CERTIFICATE (or PUBLIC KEY) PEM block")?;
    let key = if let Some(pkcs1) = pem_der(key_pem, "RSA PRIVATE KEY") {
        let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs1_to_pkcs8(&pkcs1));
        KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
    } else if let Some(pkcs8) = pem_der(key_pem, "PRIVATE KEY") {
        let der = rustls::pki_types::PrivatePkcs8KeyDer::from(pkcs8);
        KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
            .or_else(|_| KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_ECDSA_P256_SHA256))
    } else {
        anyhow::bail!("no RSA PRIVATE KEY or PRIVATE KEY PEM block")
    };
    let key = key.map_err(|e| anyhow::anyhow!("the private key does not load: {e}"))?;
    let spki = key.subject_public_key_info();
    // The certificate's SubjectPublicKeyInfo is these very bytes.
    if !cert.windows(spki.len()).any(|w| w == spki.as_slice()) {
        anyhow::bail!("the private key is not the one its certificate (or public key) holds");
    }
    Ok((key, spki))
}

/// A CA to take over: a CA certificate (basicConstraints CA:TRUE), valid
/// now (`now`: Unix seconds). A leaf or an expired CA would sign nothing
/// any kubelet or client accepts.
fn check_ca(cert_pem: &str, now: i64) -> Result<()> {
    let blocks = cert_pem.matches("-----BEGIN CERTIFICATE-----").count();
    if blocks > 1 {
        anyhow::bail!("holds {blocks} certificates: a CA's file holds its own alone (the others would be trusted too)");
    }
    let der = pem_der(cert_pem, "CERTIFICATE").context("no CERTIFICATE PEM block")?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| anyhow::anyhow!("not a certificate: {e}"))?;
    let is_ca = cert.basic_constraints().ok().flatten().is_some_and(|b| b.value.ca);
    if !is_ca {
        anyhow::bail!("{} is not a CA certificate (no basicConstraints CA:TRUE)", cert.subject());
    }
    let validity = cert.validity();
    if now < validity.not_before.timestamp() || now > validity.not_after.timestamp() {
        anyhow::bail!(
            "{} is not valid now: valid from {} to {}",
            cert.subject(),
            validity.not_before,
            validity.not_after
        );
    }
    Ok(())
}

/// Whether `cert_pem` is a certificate the CA `ca_pem` issued (not a CA
/// itself; its signature checked with the CA's public key).
pub fn check_signed_by(cert_pem: &str, ca_pem: &str) -> Result<()> {
    let parse = |pem: &str| -> Result<Vec<u8>> { pem_der(pem, "CERTIFICATE").context("no CERTIFICATE PEM block") };
    let (cert_der, ca_der) = (parse(cert_pem)?, parse(ca_pem)?);
    let (_, cert) =
        x509_parser::parse_x509_certificate(&cert_der).map_err(|e| anyhow::anyhow!("not a certificate: {e}"))?;
    let (_, ca) =
        x509_parser::parse_x509_certificate(&ca_der).map_err(|e| anyhow::anyhow!("not a certificate: {e}"))?;
    if cert.basic_constraints().ok().flatten().is_some_and(|b| b.value.ca) {
        anyhow::bail!("{} is a CA certificate, not one the CA issued to a member", cert.subject());
    }
    cert.verify_signature(Some(ca.public_key()))
        .map_err(|_| anyhow::anyhow!("{} is not signed by {}", cert.subject(), ca.subject()))
}

/// A CA to take over (`what` names it): its key its certificate's, a CA
/// valid now.
pub fn check_ca_pair(cert: &str, key: &str, what: &str) -> Result<()> {
    let now = chrono::Utc::now().timestamp();
    adopted_key(cert, key).with_context(|| what.to_string())?;
    check_ca(cert, now).with_context(|| what.to_string())
}

/// A client certificate for `common_name` (a year), signed by the CA
/// `ca_cert`/`ca_key`: (certificate PEM, key PEM).
pub fn client_certificate(ca_cert: &str, ca_key: &str, common_name: &str) -> Result<(String, String)> {
    let (key, _) = adopted_key(ca_cert, ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, key).context("the CA's certificate")?;
    let client_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.not_before = time_now();
    params.not_after = time_now() + time_days(365);
    Ok((params.signed_by(&client_key, &issuer)?.pem(), client_key.serialize_pem()))
}

/// An etcd CA to take over: its key its certificate's, a CA valid now.
fn check_etcd_ca(cert: &str, key: &str, now: i64) -> Result<()> {
    adopted_key(cert, key).context("etcd's CA")?;
    check_ca(cert, now).context("etcd's CA")
}

/// The cluster's admin credential (`system:masters`, a year), signed by `issuer`.
fn admin_credential<S: rcgen::SigningKey>(cluster: &str, issuer: &Issuer<'_, S>) -> Result<(String, KeyPair)> {
    let admin_key = KeyPair::generate()?;
    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{cluster}-admin"));
    dn.push(DnType::OrganizationName, "system:masters");
    admin.distinguished_name = dn;
    admin.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    admin.not_before = time_now();
    admin.not_after = time_now() + time_days(365);
    Ok((admin.signed_by(&admin_key, issuer)?.pem(), admin_key))
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
fn time_days(d: i64) -> time::Duration {
    time::Duration::days(d)
}

impl Pki {
    pub fn generate(cluster: &str) -> Result<Pki> {
        let (ca_params, ca_key, ca_cert) = ca("kubernetes")?;
        let ca_cert_hash = {
            use sha2::Digest;
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(ca_key.subject_public_key_info())))
        };
        let (_, fp_key, fp_cert) = ca("front-proxy-ca")?;
        let (_, etcd_key, etcd_cert) = ca("etcd-ca")?;
        let sa = KeyPair::generate()?;
        let ca_key_pem = ca_key.serialize_pem();
        let (admin_cert, admin_key) = admin_credential(cluster, &Issuer::new(ca_params, ca_key))?;
        Ok(Pki {
            ca_cert,
            ca_key: ca_key_pem,
            front_proxy_ca_cert: fp_cert,
            front_proxy_ca_key: fp_key.serialize_pem(),
            sa_key: sa.serialize_pem(),
            sa_pub: sa.public_key_pem(),
            admin_cert,
            admin_key: admin_key.serialize_pem(),
            join_token: format!("{}.{}", random_token(6), random_token(16)),
            certificate_key: hex::encode(rand::random::<[u8; 32]>()),
            ca_cert_hash,
            etcd_ca_cert: etcd_cert,
            etcd_ca_key: etcd_key.serialize_pem(),
            encryption_keys: vec![EncryptionKey::generate(chrono::Utc::now())],
            etcd_ca_from: None,
        })
    }

    /// The PKI of a cluster taken over from another tool: its CA, its
    /// front-proxy CA and its service-account key as they are (every
    /// kubelet, client and pod token keeps working), each key checked
    /// against its certificate. What the other tool keeps no copy of is
    /// pinfleet's own: an admin credential signed by the adopted CA, a
    /// join token and an encryption key. etcd's CA is taken too when given
    /// (kubeadm's stacked etcd: new control-plane machines join its
    /// members as peers); else it is pinfleet's own (kops's etcd-manager
    /// keeps CAs of its own, and its control plane is not rolled).
    pub fn adopted(
        cluster: &str,
        cluster_ca: (&str, &str),
        front_proxy: (&str, &str),
        sa: (&str, &str),
        etcd_ca: Option<(&str, &str, &str)>,
    ) -> Result<Pki> {
        let (ca_key, ca_spki) = adopted_key(cluster_ca.0, cluster_ca.1).context("the cluster CA")?;
        adopted_key(front_proxy.0, front_proxy.1).context("the front-proxy CA")?;
        let now = chrono::Utc::now().timestamp();
        check_ca(cluster_ca.0, now).context("the cluster CA")?;
        check_ca(front_proxy.0, now).context("the front-proxy CA")?;
        let (_, sa_spki) = adopted_key(sa.0, sa.1).context("the service-account key")?;
        let ca_cert_hash = {
            use sha2::Digest;
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&ca_spki)))
        };
        let issuer = Issuer::from_ca_cert_pem(cluster_ca.0, ca_key).context("the cluster CA's certificate")?;
        let (admin_cert, admin_key) = admin_credential(cluster, &issuer)?;
        let (etcd_cert, etcd_key) = match etcd_ca {
            Some((cert, key, _)) => {
                check_etcd_ca(cert, key, now)?;
                (cert.to_string(), key.to_string())
            }
            None => {
                let (_, key, cert) = ca("etcd-ca")?;
                (cert, key.serialize_pem())
            }
        };
        Ok(Pki {
            ca_cert: cluster_ca.0.to_string(),
            ca_key: cluster_ca.1.to_string(),
            front_proxy_ca_cert: front_proxy.0.to_string(),
            front_proxy_ca_key: front_proxy.1.to_string(),
            sa_key: sa.1.to_string(),
            sa_pub: pem_block("PUBLIC KEY", &sa_spki),
            admin_cert,
            admin_key: admin_key.serialize_pem(),
            join_token: format!("{}.{}", random_token(6), random_token(16)),
            certificate_key: hex::encode(rand::random::<[u8; 32]>()),
            ca_cert_hash,
            etcd_ca_cert: etcd_cert,
            etcd_ca_key: etcd_key,
            encryption_keys: vec![EncryptionKey::generate(chrono::Utc::now())],
            etcd_ca_from: etcd_ca.map(|(_, _, from)| from.to_string()),
        })
    }

    /// etcd's CA of a running cluster taken over into a PKI adopted before
    /// it was (its etcd CA pinfleet's own, never used: the control plane
    /// it would sign for was not rolled). Checked as [`Pki::adopted`] checks it.
    pub fn take_etcd_ca(&mut self, cert: &str, key: &str, from: &str) -> Result<()> {
        check_etcd_ca(cert, key, chrono::Utc::now().timestamp())?;
        (self.etcd_ca_cert, self.etcd_ca_key, self.etcd_ca_from) = (cert.into(), key.into(), Some(from.into()));
        Ok(())
    }

    /// Loads the cluster's PKI, generating and storing it the first time.
    /// Generation uses a conditional write, so two first runs agree on one.
    pub async fn load_or_create(store: &Store) -> Result<(Pki, bool)> {
        if let Some(mut p) = store.get_json::<Pki>(PKI_KEY).await? {
            let mut changed = false;
            if p.etcd_ca_cert.is_empty() {
                let (_, key, cert) = ca("etcd-ca")?;
                (p.etcd_ca_cert, p.etcd_ca_key) = (cert, key.serialize_pem());
                changed = true;
            }
            if p.encryption_keys.is_empty() {
                p.encryption_keys.push(EncryptionKey::generate(chrono::Utc::now()));
                changed = true;
            }
            if changed {
                store.put_json(PKI_KEY, &p).await?;
            }
            return Ok((p, false));
        }
        let pki = Pki::generate(store.cluster())?;
        match store.put(PKI_KEY, serde_json::to_vec(&pki)?, super::Condition::IfAbsent).await {
            Ok(_) => Ok((pki, true)),
            Err(e) if e.is::<super::PreconditionFailed>() => {
                let p = store.get_json::<Pki>(PKI_KEY).await?.context("PKI vanished while loading")?;
                Ok((p, false))
            }
            Err(e) => Err(e),
        }
    }

    pub async fn load(store: &Store) -> Result<Option<Pki>> {
        store.get_json::<Pki>(PKI_KEY).await
    }

    /// [`Pki::load`] reading past a delete marker to the version kept
    /// beneath it (locked with the backups when Object Lock is on): what a
    /// restore reads its encryption keys from.
    pub async fn load_kept(store: &Store) -> Result<Option<Pki>> {
        store.get_json_kept::<Pki>(PKI_KEY).await
    }

    /// What control-plane machines fetch from the state store (under
    /// `machine/pki/`, readable by their instance role only): the shared
    /// CAs and service-account keys, as (object name, content). The admin
    /// credentials stay in the bundle, which no machine may read.
    pub fn machine_files(&self) -> Vec<(&'static str, String)> {
        let contents = [
            &self.ca_cert,
            &self.ca_key,
            &self.front_proxy_ca_cert,
            &self.front_proxy_ca_key,
            &self.sa_key,
            &self.sa_pub,
            &self.etcd_ca_cert,
            &self.etcd_ca_key,
            &self.encryption_config(),
        ];
        Self::MACHINE_FILES.into_iter().zip(contents.map(String::clone)).collect()
    }

    /// The API servers' EncryptionConfiguration: Secrets written with the
    /// first key, read with any (each provider listed once, where its first
    /// key stands, its keys in order), and with `identity` last so Secrets
    /// written before encryption was on still read (until `pinfleet etcd
    /// rotate-key` has them rewritten).
    pub fn encryption_config(&self) -> String {
        let mut s = String::from(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n",
        );
        let mut providers: Vec<Cipher> = Vec::new();
        for k in &self.encryption_keys {
            if !providers.contains(&k.provider) {
                providers.push(k.provider);
            }
        }
        for p in providers {
            s.push_str(&format!("      - {}:\n          keys:\n", p.name()));
            for k in self.encryption_keys.iter().filter(|k| k.provider == p) {
                s.push_str(&format!("            - name: {}\n              secret: {}\n", k.name, k.secret));
            }
        }
        s.push_str("      - identity: {}\n");
        s
    }

    /// Takes the keys a cluster taken over encrypts its Secrets with
    /// (`taken`, its writing key first), before pinfleet's own: the running
    /// API servers and pinfleet's new ones then write with the same key,
    /// and every Secret stays readable by both while the control plane
    /// rolls. Ok(false): it holds them all already. A key of the same
    /// provider and name with another secret is refused (a stored value
    /// names its key by provider and name alone).
    pub fn take_encryption_keys(&mut self, taken: &[EncryptionKey]) -> Result<bool> {
        let mut missing = false;
        for k in taken {
            match self.encryption_keys.iter().find(|h| h.provider == k.provider && h.name == k.name) {
                Some(h) if h.secret == k.secret => {}
                Some(_) => anyhow::bail!(
                    "encryption key {} ({}) is held already with another secret: Secrets stored under one of them could not be read",
                    k.name,
                    k.provider.name()
                ),
                None => missing = true,
            }
        }
        if !missing {
            return Ok(false);
        }
        // All of them in their order, ahead of the rest: one taken again
        // (lost from the PKI) goes back to its place, not ahead of the
        // writing key.
        let rest = self.encryption_keys.drain(..).filter(|h| !taken.contains(h));
        let mut keys: Vec<EncryptionKey> = taken.to_vec();
        keys.extend(rest);
        self.encryption_keys = keys;
        Ok(true)
    }

    /// The names of the encryption keys (what a backup needs to be read).
    pub fn encryption_key_names(&self) -> Vec<String> {
        self.encryption_keys.iter().map(|k| k.name.clone()).collect()
    }

    /// The object names of [`Pki::machine_files`], in its order.
    pub const MACHINE_FILES: [&'static str; 9] = [
        "ca.crt",
        "ca.key",
        "front-proxy-ca.crt",
        "front-proxy-ca.key",
        "sa.key",
        "sa.pub",
        "etcd-ca.crt",
        "etcd-ca.key",
        "encryption-config.yaml",
    ];

    pub fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_taken_over_is_a_ca_certificate_valid_now() {
        let key = KeyPair::generate().unwrap();
        let now = chrono::Utc::now().timestamp();
        let leaf = CertificateParams::new(vec!["leaf.example.com".to_string()]).unwrap().self_signed(&key).unwrap();
        let e = check_ca(&leaf.pem(), now).unwrap_err().to_string();
        assert!(e.contains("is not a CA certificate"), "{e}");
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).unwrap().pem();
        check_ca(&ca, now).unwrap();
        // rcgen's certificates end in 4096: long after that, it has expired.
        let e = check_ca(&ca, 100_000_000_000).unwrap_err().to_string();
        assert!(e.contains("is not valid now: valid from"), "{e}");
        // One CA to a file: a second would be trusted with it.
        let e = check_ca(&format!("{ca}{ca}"), now).unwrap_err().to_string();
        assert!(e.contains("holds 2 certificates"), "{e}");
    }

    #[test]
    fn a_certificate_is_checked_against_the_ca_said_to_sign_it() {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(params, ca_key);
        let peer_key = KeyPair::generate().unwrap();
        let peer = CertificateParams::new(vec!["peer".to_string()]).unwrap().signed_by(&peer_key, &issuer).unwrap();
        check_signed_by(&peer.pem(), &ca).unwrap();
        let stranger = CertificateParams::new(vec!["peer".to_string()]).unwrap().self_signed(&peer_key).unwrap();
        let e = check_signed_by(&stranger.pem(), &ca).unwrap_err().to_string();
        assert!(e.contains("is not signed by"), "{e}");
        // The CA itself (self-signed) is no member's certificate.
        let e = check_signed_by(&ca, &ca).unwrap_err().to_string();
        assert!(e.contains("is a CA certificate"), "{e}");
    }

    /// A cluster taken over brings its keys ahead of pinfleet's own: the
    /// first of them writes, every one reads, each provider listed once.
    #[test]
    fn taken_encryption_keys_go_first_and_write() {
        let mut p = Pki::generate("t").unwrap();
        let own = p.encryption_keys[0].clone();
        let kops = |name: &str, secret: &str| EncryptionKey {
            name: name.into(),
            secret: secret.into(),
            provider: Cipher::Aescbc,
        };
        let taken = [kops("key2", "Mg=="), kops("key1", "MQ==")];
        assert!(p.take_encryption_keys(&taken).unwrap());
        assert!(!p.take_encryption_keys(&taken).unwrap(), "held already");
        let names: Vec<&str> = p.encryption_keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["key2", "key1", own.name.as_str()]);
        let config = p.encryption_config();
        let tail = config.split_once("    providers:\n").unwrap().1;
        assert_eq!(
            tail,
            format!(
                "      - aescbc:\n          keys:\n            - name: key2\n              secret: Mg==\n            - name: key1\n              secret: MQ==\n      - secretbox:\n          keys:\n            - name: {}\n              secret: {}\n      - identity: {{}}\n",
                own.name, own.secret
            )
        );
        // One lost from the PKI is taken back to its place, not ahead of
        // the writing key.
        p.encryption_keys.remove(1);
        assert!(p.take_encryption_keys(&taken).unwrap());
        let again: Vec<&str> = p.encryption_keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(again, ["key2", "key1", own.name.as_str()]);
        let e = p.take_encryption_keys(&[kops("key1", "eA==")]).unwrap_err().to_string();
        assert_eq!(e, "encryption key key1 (aescbc) is held already with another secret: Secrets stored under one of them could not be read");
        // pinfleet's own keys keep the form they were stored in.
        let json = serde_json::to_value(&p.encryption_keys).unwrap();
        assert_eq!(json[0]["provider"], "aescbc");
        assert!(json[2].get("provider").is_none(), "{json}");
        assert_eq!(
            format!("{:?}", p.encryption_keys[0]),
            "EncryptionKey { name: \"key2\", provider: aescbc, <redacted> }"
        );
    }

    #[test]
    fn generated_pki_has_the_shapes_kubeadm_expects() {
        let p = Pki::generate("t").unwrap();
        let (a, b) = p.join_token.split_once('.').unwrap();
        assert_eq!((a.len(), b.len()), (6, 16));
        assert!(p.ca_cert_hash.starts_with("sha256:") && p.ca_cert_hash.len() == 7 + 64);
        assert_eq!(p.certificate_key.len(), 64);
        assert!(p.ca_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(p.admin_key.contains("PRIVATE KEY"));
        assert_eq!(format!("{p:?}"), "Pki { <redacted> }");
    }
}
