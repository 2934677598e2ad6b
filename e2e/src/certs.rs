//! The harness's own PKI. Every apiserver gets a CA of its own (like a real cluster), which
//! signs its serving certificate and its admin client certificate; Kueue's webhook server
//! gets a serving certificate from the management CA.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};

use crate::error::{Context, Result};

/// A PEM certificate and its PKCS#8 PEM key.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl CertPair {
    /// Writes `<stem>.crt` and `<stem>.key` into `dir`; returns both paths.
    pub fn write(&self, dir: &Path, stem: &str) -> Result<(PathBuf, PathBuf)> {
        let crt = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        write_private(&crt, &self.cert_pem)?;
        write_private(&key, &self.key_pem)?;
        Ok((crt, key))
    }
}

/// A certificate authority that can issue serving and client certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

fn base_params(common_name: &str, sans: Vec<String>) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(sans)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    // Fixed, wide validity: the plane is ephemeral and tests must not depend on the clock.
    params.not_before = date_time_ymd(2000, 1, 1);
    params.not_after = date_time_ymd(2100, 1, 1);
    Ok(params)
}

impl Ca {
    pub fn new(common_name: &str) -> Result<Ca> {
        let key = KeyPair::generate()?;
        let mut params = base_params(common_name, Vec::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A TLS serving certificate for `sans` (IP addresses or DNS names).
    pub fn serving(&self, common_name: &str, sans: &[&str]) -> Result<CertPair> {
        let params = base_params(common_name, sans.iter().map(|s| s.to_string()).collect())?;
        self.leaf(params, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate; Kubernetes maps CN to the user name and O to groups.
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<CertPair> {
        let mut params = base_params(user, Vec::new())?;
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        self.leaf(params, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A leaf certificate of `params` with a fresh key, signed by this CA, used for
    /// `purpose` only.
    fn leaf(
        &self,
        mut params: CertificateParams,
        purpose: ExtendedKeyUsagePurpose,
    ) -> Result<CertPair> {
        let key = KeyPair::generate()?;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![purpose];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A ServiceAccount token signing key: `(private PKCS#8 PEM, public SPKI PEM)`.
pub fn service_account_key() -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// Writes a file readable only by us: keys and tokens live in the state dir.
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp~");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .context(|| format!("writing {}", tmp.display()))?;
    f.write_all(contents.as_bytes())
        .context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).context(|| format!("writing {}", path.display()))
}
