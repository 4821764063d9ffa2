//! The sandbox's certificates: a cluster CA (serving certificates and client-certificate users),
//! a front-proxy CA (the aggregator's client certificate), and the service-account signing key.
//!
//! Users authenticate with client certificates: the API server takes the user name from the
//! certificate's CommonName and the groups from its Organization entries.

use std::fs;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// CommonName the front-proxy client certificate carries; kube-apiserver's
/// `--requestheader-allowed-names`.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// DNS name the aggregator uses (SNI and verification) for the emulated virt-api service.
pub const VIRT_API_DNS: &str = "virt-api.kubevirt.svc";

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct CertKey {
    /// PEM certificate.
    pub cert_pem: String,
    /// PEM PKCS#8 private key.
    pub key_pem: String,
    /// DER certificate.
    pub cert_der: Vec<u8>,
    /// DER PKCS#8 private key.
    pub key_der: Vec<u8>,
}

/// Every certificate an instance needs, written under `<dir>/pki/`.
#[derive(Clone, Debug)]
pub struct Pki {
    /// Directory the PEM files live in.
    pub dir: PathBuf,
    /// Cluster CA certificate (PEM).
    pub ca_pem: String,
    /// Front-proxy CA certificate (PEM).
    pub front_proxy_ca_pem: String,
    /// Front-proxy CA certificate (DER), trusted by the emulated virt-api for client certificates.
    pub front_proxy_ca_der: Vec<u8>,
    /// kube-apiserver's serving certificate.
    pub apiserver: CertKey,
    /// The emulated virt-api's serving certificate.
    pub virt_api: CertKey,
    /// The aggregator's client certificate.
    pub front_proxy_client: CertKey,
}

/// Common name of the cluster's CA, which signs the users' client certificates.
const CLUSTER_CA: &str = "corral-sandbox-ca";

fn ca_params(name: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

fn ca(name: &str) -> Result<CertifiedIssuer<'static, KeyPair>> {
    Ok(CertifiedIssuer::self_signed(
        ca_params(name)?,
        KeyPair::generate()?,
    )?)
}

/// A client certificate for `user` (with `groups`) signed by the cluster CA of the instance
/// whose PKI is in `pki_dir`, valid from a minute ago for `lifetime`: what an exec credential
/// plugin of a real cluster's identity provider hands out. Returns the certificate and key
/// (PEM) and its expiry.
///
/// Errors: the instance's CA key cannot be read.
pub fn issue_client_cert(
    pki_dir: &Path,
    user: &str,
    groups: &[&str],
    lifetime: std::time::Duration,
) -> Result<(CertKey, jiff::Timestamp)> {
    let key_pem = fs::read_to_string(pki_dir.join("ca.key"))
        .with_context(|| format!("read the sandbox's CA key in {}", pki_dir.display()))?;
    let issuer = rcgen::Issuer::new(ca_params(CLUSTER_CA)?, KeyPair::from_pem(&key_pem)?);
    let now = time::OffsetDateTime::now_utc();
    let not_after = now + lifetime;
    let cert = leaf_with(&issuer, user, groups, &[], false, |params| {
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = not_after;
    })?;
    let expiry = jiff::Timestamp::from_second(not_after.unix_timestamp())?;
    Ok((cert, expiry))
}

fn leaf(
    issuer: &rcgen::Issuer<'_, KeyPair>,
    common_name: &str,
    organizations: &[&str],
    dns: &[&str],
    server: bool,
) -> Result<CertKey> {
    leaf_with(issuer, common_name, organizations, dns, server, |_| {})
}

fn leaf_with(
    issuer: &rcgen::Issuer<'_, KeyPair>,
    common_name: &str,
    organizations: &[&str],
    dns: &[&str],
    server: bool,
    adjust: impl FnOnce(&mut CertificateParams),
) -> Result<CertKey> {
    let mut params = CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())?;
    adjust(&mut params);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    // Kubernetes reads a client certificate's groups from its Organization entries. rcgen keeps
    // one value per attribute type, so a second group is written under the same OID (2.5.4.10)
    // spelled as a custom type; two groups is all the sandbox's users need.
    let organization_types = [
        DnType::OrganizationName,
        DnType::CustomDnType(vec![2, 5, 4, 10]),
    ];
    anyhow::ensure!(
        organizations.len() <= organization_types.len(),
        "a sandbox user has at most {} groups",
        organization_types.len()
    );
    for (org, ty) in organizations.iter().zip(organization_types) {
        params.distinguished_name.push(ty, *org);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    if server {
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok(CertKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    })
}

/// A client-certificate user of the sandbox.
#[derive(Clone, Debug)]
pub struct UserCert {
    /// User name (the certificate's CommonName).
    pub name: String,
    /// Certificate and key.
    pub cert: CertKey,
}

impl Pki {
    /// Generates a fresh set under `dir/pki` and returns it with client certificates for
    /// `users` (name, groups).
    pub fn generate(dir: &Path, users: &[(&str, &[&str])]) -> Result<(Self, Vec<UserCert>)> {
        let pki_dir = dir.join("pki");
        fs::create_dir_all(&pki_dir).with_context(|| format!("create {}", pki_dir.display()))?;
        let cluster_ca = ca(CLUSTER_CA)?;
        let front_ca = ca("corral-sandbox-front-proxy-ca")?;
        let apiserver = leaf(
            &cluster_ca,
            "kube-apiserver",
            &[],
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ],
            true,
        )?;
        let virt_api = leaf(
            &cluster_ca,
            "virt-api",
            &[],
            &["localhost", "virt-api", "virt-api.kubevirt", VIRT_API_DNS],
            true,
        )?;
        let front_proxy_client = leaf(&front_ca, FRONT_PROXY_CLIENT, &[], &[], false)?;
        let users = users
            .iter()
            .map(|(name, groups)| {
                Ok(UserCert {
                    name: (*name).to_owned(),
                    cert: leaf(&cluster_ca, name, groups, &[], false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let sa_key = KeyPair::generate()?;
        let pki = Pki {
            dir: pki_dir,
            ca_pem: cluster_ca.pem(),
            front_proxy_ca_pem: front_ca.pem(),
            front_proxy_ca_der: front_ca.der().to_vec(),
            apiserver,
            virt_api,
            front_proxy_client,
        };
        pki.write("ca.crt", &pki.ca_pem)?;
        // Kept so that tests can play an identity provider (issue_client_cert).
        pki.write("ca.key", &cluster_ca.key().serialize_pem())?;
        pki.write("front-proxy-ca.crt", &pki.front_proxy_ca_pem)?;
        pki.write("apiserver.crt", &pki.apiserver.cert_pem)?;
        pki.write("apiserver.key", &pki.apiserver.key_pem)?;
        pki.write("front-proxy-client.crt", &pki.front_proxy_client.cert_pem)?;
        pki.write("front-proxy-client.key", &pki.front_proxy_client.key_pem)?;
        pki.write("sa.key", &sa_key.serialize_pem())?;
        pki.write("sa.pub", &sa_key.public_key_pem())?;
        Ok((pki, users))
    }

    /// Path of a file written by [`Pki::generate`].
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn write(&self, file: &str, contents: &str) -> Result<()> {
        let path = self.path(file);
        fs::write(&path, contents).with_context(|| format!("write {}", path.display()))?;
        restrict(&path)
    }
}

/// Makes a file readable by its owner only (keys and kubeconfigs).
pub fn restrict(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 600 {}", path.display()))
}
