//! The key exchange's TLS 1.3: the certificates and key of `[psp]` (read once, checked through the descriptor)
//! built into client and server configurations before anything changes, the handshake, the peer's name.

use crate::engines::ip::config::PspConfig;
use crate::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

/// The whole TLS handshake must finish within this time.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// The TLS configurations, built (and so checked) before the daemon changes anything on the system.
pub struct Tls {
    pub(super) server: Arc<rustls::ServerConfig>,
    pub(super) client: Arc<rustls::ClientConfig>,
    pub(super) peer_name: ServerName<'static>,
}

pub(super) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Loads the certificates and key of `cfg` and builds TLS 1.3-only client and server configurations that
/// require and verify the peer's certificate. Errors name the configuration key (exit code 2).
pub fn tls(cfg: &PspConfig) -> Result<Tls> {
    let bad = |key: &str, why: String| {
        Error::Config(crate::runtime::config::ConfigError {
            key: key.into(),
            reason: why,
        })
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cfg.cert)
        .and_then(|i| i.collect::<std::result::Result<_, _>>())
        .map_err(|e| {
            bad(
                "psp.cert",
                format!("cannot read certificates from {}: {e}", cfg.cert),
            )
        })?;
    if certs.is_empty() {
        return Err(bad("psp.cert", format!("no certificate in {}", cfg.cert)));
    }
    // The key is a secret and the CA decides whom we trust: each read once, checked through its descriptor
    // (crate::runtime::secret_file: root's, the key 0600 or 0400, the CA writable by root only).
    use crate::runtime::secret_file::{read, Level};
    let key_file =
        read(Path::new(&cfg.key), Level::Secret).map_err(|e| bad("psp.key", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_file.bytes).map_err(|e| {
        bad(
            "psp.key",
            format!(
                "cannot read a private key from {}: {e}",
                crate::runtime::secret_file::shown(Path::new(&cfg.key))
            ),
        )
    })?;
    let mut roots = rustls::RootCertStore::empty();
    let ca_file = read(Path::new(&cfg.peer_ca), Level::Rules)
        .map_err(|e| bad("psp.peer_ca", e.to_string()))?;
    let anchors: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&ca_file.bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            bad(
                "psp.peer_ca",
                format!("cannot read certificates from {}: {e}", cfg.peer_ca),
            )
        })?;
    for c in anchors {
        roots.add(c).map_err(|e| {
            bad(
                "psp.peer_ca",
                format!("{}: not a usable trust anchor: {e}", cfg.peer_ca),
            )
        })?;
    }
    if roots.is_empty() {
        return Err(bad(
            "psp.peer_ca",
            format!("no certificate in {}", cfg.peer_ca),
        ));
    }
    let roots = Arc::new(roots);
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| bad("psp.peer_ca", e.to_string()))?;
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Crypto {
            context: "TLS 1.3".into(),
            cause: e.to_string(),
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| bad("psp.key", format!("does not match psp.cert: {e}")))?;
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Crypto {
            context: "TLS 1.3".into(),
            cause: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| bad("psp.key", format!("does not match psp.cert: {e}")))?;
    let peer_name = ServerName::try_from(cfg.peer_name.clone())
        .map_err(|e| bad("psp.peer_name", e.to_string()))?;
    Ok(Tls {
        server: Arc::new(server),
        client: Arc::new(client),
        peer_name,
    })
}

/// `netveil keygen --name NAME --out DIR`: a P-256 key and a self-signed certificate for `NAME` (DNS name),
/// written as `DIR/NAME.key` (mode 0600) and `DIR/NAME.crt`. Existing files are not overwritten. Returns the
/// paths (certificate, key).
pub fn keygen(name: &str, dir: &Path) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    if ServerName::try_from(name).is_err() || name.contains('/') {
        return Err(Error::Usage(
            "--name: is not a valid DNS name (value not shown)".into(),
        ));
    }
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    for p in [&crt, &key] {
        if p.exists() {
            return Err(Error::Usage(format!(
                "{} exists; not overwriting it",
                p.display()
            )));
        }
    }
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])
        .map_err(|e| Error::Usage(format!("--name: {e}")))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let kp = rcgen::KeyPair::generate().map_err(|e| Error::Crypto {
        context: "P-256 key".into(),
        cause: e.to_string(),
    })?;
    let cert = params.self_signed(&kp).map_err(|e| Error::Crypto {
        context: "self-signed certificate".into(),
        cause: e.to_string(),
    })?;
    std::fs::create_dir_all(dir).map_err(Error::io(format!("cannot create {}", dir.display())))?;
    let key_pem = Zeroizing::new(kp.serialize_pem());
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .map_err(Error::io(format!("cannot create {}", key.display())))?;
        f.write_all(key_pem.as_bytes())
            .map_err(Error::io(format!("cannot write {}", key.display())))?;
    }
    std::fs::write(&crt, cert.pem())
        .map_err(Error::io(format!("cannot write {}", crt.display())))?;
    Ok((crt, key))
}

pub(super) fn handshake<C, D>(conn: &mut C, sock: &mut TcpStream) -> std::result::Result<(), String>
where
    C: core::ops::DerefMut<Target = rustls::ConnectionCommon<D>>,
    D: rustls::SideData,
{
    let deadline = Instant::now() + HANDSHAKE_DEADLINE;
    while conn.is_handshaking() {
        // Every read waits at most until the deadline of the whole handshake.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "TLS handshake: not finished within {} s",
                HANDSHAKE_DEADLINE.as_secs()
            ));
        }
        sock.set_read_timeout(Some(left.min(Duration::from_secs(1))))
            .map_err(|e| e.to_string())?;
        match conn.complete_io(sock) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(format!("TLS handshake: {e}")),
        }
    }
    Ok(())
}

/// The server side checks that the client's (already chain-verified) certificate names the configured peer.
pub(super) fn check_client_name(
    conn: &rustls::ServerConnection,
    name: &ServerName<'static>,
) -> std::result::Result<(), String> {
    let der = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("the peer sent no certificate")?;
    let ee =
        webpki::EndEntityCert::try_from(der).map_err(|e| format!("peer certificate: {e:?}"))?;
    ee.verify_is_valid_for_subject_name(name)
        .map_err(|_| format!("the peer's certificate is not for {}", name.to_str()))
}
