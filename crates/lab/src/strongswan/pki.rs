//! Certificates with strongSwan's `pki`: CA, host keys and certificates ([`Pki`], [`Credential`]).

use super::check::check_name;
use crate::lab::run_ok;
use crate::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Key types for [`Pki`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Rsa(u32),
    EcdsaP256,
}

impl KeyType {
    fn args(self) -> (&'static str, String) {
        match self {
            KeyType::Rsa(bits) => ("rsa", bits.to_string()),
            KeyType::EcdsaP256 => ("ecdsa", "256".into()),
        }
    }
}

/// One end entity's PEM files: certificate, private key, and the CA certificate to trust.
#[derive(Debug, Clone)]
pub struct Credential {
    pub key_type: KeyType,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

impl Credential {
    pub(super) fn cert_file_name(&self) -> String {
        self.cert
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }
}

/// A CA made with strongSwan's `pki` in a directory, issuing end-entity certificates (key type of the CA's).
pub struct Pki {
    dir: PathBuf,
    key_type: KeyType,
    ca_key: PathBuf,
    ca_cert: PathBuf,
}

/// Runs `pki ARGS` (5.9 writes to standard output only) and writes what it prints (PEM) to `out` (mode 0600).
fn pki(args: &[&str], out: &Path) -> Result<()> {
    let pem = run_ok(Command::new("pki").args(args).stdin(Stdio::null()))?;
    if !pem.contains("-----BEGIN ") {
        return Err(Error::output(
            format!("pki {}", args.join(" ")),
            "no PEM output",
        ));
    }
    // Private keys among them: readable by root only.
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(out)
        .and_then(|mut f| f.write_all(pem.as_bytes()))
        .map_err(Error::io(format!("write {}", out.display())))
}

pub(super) fn path_str(p: &Path) -> Result<&str> {
    p.to_str().ok_or_else(|| Error::not_utf8(p))
}

impl Pki {
    /// A self-signed CA (`CN=netveil lab CA`, 30 days) in `dir`.
    pub fn new(dir: &Path, key_type: KeyType) -> Result<Pki> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("mkdir {}", dir.display())))?;
        let (t, size) = key_type.args();
        let ca_key = dir.join("ca.key.pem");
        let ca_cert = dir.join("ca.pem");
        pki(
            &["--gen", "--type", t, "--size", &size, "--outform", "pem"],
            &ca_key,
        )?;
        pki(
            &[
                "--self",
                "--ca",
                "--lifetime",
                "30",
                "--in",
                path_str(&ca_key)?,
                "--type",
                t,
                "--dn",
                "CN=netveil lab CA",
                "--outform",
                "pem",
            ],
            &ca_cert,
        )?;
        Ok(Pki {
            dir: dir.to_path_buf(),
            key_type,
            ca_key,
            ca_cert,
        })
    }

    /// A key and a certificate for `name` (`CN=NAME`, subjectAltName `NAME`, so `NAME` works as an FQDN id).
    pub fn issue(&self, name: &str) -> Result<Credential> {
        check_name("certificate name", &name.replace('.', "-"))?;
        let (t, size) = self.key_type.args();
        let key = self.dir.join(format!("{name}.key.pem"));
        let public = self.dir.join(format!("{name}.pub.pem"));
        let cert = self.dir.join(format!("{name}.pem"));
        pki(
            &["--gen", "--type", t, "--size", &size, "--outform", "pem"],
            &key,
        )?;
        pki(
            &[
                "--pub",
                "--in",
                path_str(&key)?,
                "--type",
                t,
                "--outform",
                "pem",
            ],
            &public,
        )?;
        pki(
            &[
                "--issue",
                "--lifetime",
                "30",
                "--in",
                path_str(&public)?,
                "--type",
                "pub",
                "--cacert",
                path_str(&self.ca_cert)?,
                "--cakey",
                path_str(&self.ca_key)?,
                "--dn",
                &format!("CN={name}"),
                "--san",
                name,
                "--outform",
                "pem",
            ],
            &cert,
        )?;
        Ok(Credential {
            key_type: self.key_type,
            cert,
            key,
            ca: self.ca_cert.clone(),
        })
    }
}
