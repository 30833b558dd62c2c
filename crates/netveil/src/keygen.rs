//! `netveil keygen`: its arguments. The keys and certificates are made in `netveil_pki::keygen` (and, for the
//! PSP certificate and the l2sec key, where those key exchanges live).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use netveil_pki::keygen::{self as kg, Flag, Form, KeySource, KeyType};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct KeygenArgs {
    #[command(subcommand)]
    cmd: Option<KeygenCmd>,
    /// The host's name: the files are NAME.key and NAME.crt (and the PSP certificate's DNS name, the peer's
    /// `psp.peer_name`).
    #[arg(short, long, required = true)]
    name: Option<String>,
    /// Make an Ed25519 key for l2sec signatures instead.
    #[arg(long, conflicts_with = "key_type")]
    ed25519: bool,
    /// Make only a private key of this type, NAME.key (PKCS#8, mode 0600), as `pki --gen`.
    #[arg(long = "type", value_enum, value_name = "TYPE")]
    key_type: Option<KeyTypeArg>,
    /// With --type: write the key as PEM (default) or DER.
    #[arg(long, value_enum, value_name = "FORM", requires = "key_type")]
    outform: Option<FormArg>,
    /// Directory to write the files into.
    #[arg(short, long, default_value = ".")]
    out: PathBuf,
}

#[derive(Subcommand)]
enum KeygenCmd {
    /// A certificate request NAME.csr (PKCS#10) for a key, as `pki --req` (with a new key NAME.key unless --key).
    Csr {
        #[command(flatten)]
        key: KeyArgs,
        /// The subject, in strongSwan's syntax: "C=CH, O=netveil, CN=moon".
        #[arg(long)]
        dn: String,
        #[command(flatten)]
        sans: SanArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// A self-signed CA certificate NAME.crt (basicConstraints CA, keyUsage keyCertSign and cRLSign), as
    /// `pki --self --ca` (with a new key NAME.key unless --key).
    Ca {
        #[command(flatten)]
        key: KeyArgs,
        /// The CA's subject, in strongSwan's syntax: "C=CH, O=netveil, CN=netveil Root CA".
        #[arg(long)]
        dn: String,
        /// Days the certificate is valid, from now.
        #[arg(long, default_value_t = 3650, value_name = "DAYS")]
        lifetime: u32,
        /// The longest chain of intermediate CAs below this one (basicConstraints pathLenConstraint).
        #[arg(long, value_name = "N")]
        pathlen: Option<u8>,
        #[command(flatten)]
        out: OutArgs,
    },
    /// An end-entity certificate NAME.crt for a request, signed by a CA, as `pki --issue --type pkcs10`: the
    /// subject and subjectAltNames come from the request, extendedKeyUsage from --flag, a random serial.
    Issue {
        /// The certificate request (PEM or DER), e.g. from `netveil keygen csr` or `pki --req`.
        #[arg(long, value_name = "FILE")]
        csr: PathBuf,
        /// The CA's certificate (PEM or DER).
        #[arg(long, value_name = "FILE")]
        cacert: PathBuf,
        /// The CA's private key (PEM or DER: PKCS#8, EC or RSA PRIVATE KEY).
        #[arg(long, value_name = "FILE")]
        cakey: PathBuf,
        /// A subject instead of the request's, in strongSwan's syntax.
        #[arg(long)]
        dn: Option<String>,
        #[command(flatten)]
        sans: SanArgs,
        /// Days the certificate is valid, from now.
        #[arg(long, default_value_t = 1095, value_name = "DAYS")]
        lifetime: u32,
        /// An extendedKeyUsage purpose (repeatable), as `pki --flag`.
        #[arg(long, value_enum, value_name = "FLAG")]
        flag: Vec<FlagArg>,
        #[command(flatten)]
        out: OutArgs,
    },
}

#[derive(Args)]
struct KeyArgs {
    /// The subject's private key (PEM or DER: PKCS#8, EC or RSA PRIVATE KEY, as `pki --gen` or openssl write).
    #[arg(long, value_name = "FILE", conflicts_with = "key_type")]
    key: Option<PathBuf>,
    /// Without --key: the type of the new key, written as NAME.key (mode 0600).
    #[arg(long = "type", value_enum, value_name = "TYPE", default_value_t = KeyTypeArg::EcdsaP256)]
    key_type: KeyTypeArg,
}

impl KeyArgs {
    fn source(self) -> KeySource {
        match self.key {
            Some(p) => KeySource::File(p),
            None => KeySource::New(self.key_type.into()),
        }
    }
}

#[derive(Args)]
struct SanArgs {
    /// A subjectAltName (repeatable), as `pki --san`: an IP address, user@domain (email), a DNS name (or @name);
    /// or say the type with dns:, email:, ip:.
    #[arg(long, value_name = "NAME")]
    san: Vec<String>,
}

#[derive(Args)]
struct OutArgs {
    /// The files' name: NAME.crt, NAME.csr, NAME.key.
    #[arg(short, long)]
    name: String,
    /// Directory to write the files into.
    #[arg(short, long, default_value = ".")]
    out: PathBuf,
    /// PEM (default) or DER.
    #[arg(long, value_enum, default_value_t = FormArg::Pem, value_name = "FORM")]
    outform: FormArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum KeyTypeArg {
    #[value(name = "ecdsa-p256")]
    EcdsaP256,
    #[value(name = "ecdsa-p384")]
    EcdsaP384,
    #[value(name = "ed25519")]
    Ed25519,
    #[value(name = "rsa-2048")]
    Rsa2048,
    #[value(name = "rsa-3072")]
    Rsa3072,
    #[value(name = "rsa-4096")]
    Rsa4096,
}

impl From<KeyTypeArg> for KeyType {
    fn from(t: KeyTypeArg) -> KeyType {
        match t {
            KeyTypeArg::EcdsaP256 => KeyType::EcdsaP256,
            KeyTypeArg::EcdsaP384 => KeyType::EcdsaP384,
            KeyTypeArg::Ed25519 => KeyType::Ed25519,
            KeyTypeArg::Rsa2048 => KeyType::Rsa2048,
            KeyTypeArg::Rsa3072 => KeyType::Rsa3072,
            KeyTypeArg::Rsa4096 => KeyType::Rsa4096,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum FormArg {
    Pem,
    Der,
}

impl From<FormArg> for Form {
    fn from(f: FormArg) -> Form {
        match f {
            FormArg::Pem => Form::Pem,
            FormArg::Der => Form::Der,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum FlagArg {
    #[value(name = "serverAuth")]
    ServerAuth,
    #[value(name = "clientAuth")]
    ClientAuth,
    #[value(name = "ikeIntermediate")]
    IkeIntermediate,
}

impl From<FlagArg> for Flag {
    fn from(f: FlagArg) -> Flag {
        match f {
            FlagArg::ServerAuth => Flag::ServerAuth,
            FlagArg::ClientAuth => Flag::ClientAuth,
            FlagArg::IkeIntermediate => Flag::IkeIntermediate,
        }
    }
}

pub fn run(a: KeygenArgs) -> Result<(), crate::Error> {
    let written = match a.cmd {
        None => {
            // `required = true` without a subcommand.
            let name = a.name.unwrap_or_default();
            if a.ed25519 {
                let (path, public) = netveil_daemon::engines::l2::keygen(&name, &a.out)?;
                println!("private key: {}\npublic key: {public}", path.display());
                return Ok(());
            }
            match a.key_type {
                Some(t) => kg::cmd_key(
                    &name,
                    &a.out,
                    t.into(),
                    a.outform.unwrap_or(FormArg::Pem).into(),
                )?,
                None => {
                    let (c, k) = netveil_daemon::drivers::psp_kx::keygen(&name, &a.out)?;
                    println!("certificate: {}\nprivate key: {}", c.display(), k.display());
                    return Ok(());
                }
            }
        }
        Some(KeygenCmd::Csr { key, dn, sans, out }) => kg::cmd_csr(
            &out.name,
            &out.out,
            &key.source(),
            &dn,
            &sans.san,
            out.outform.into(),
        )?,
        Some(KeygenCmd::Ca {
            key,
            dn,
            lifetime,
            pathlen,
            out,
        }) => kg::cmd_ca(
            &out.name,
            &out.out,
            &key.source(),
            &dn,
            lifetime,
            pathlen,
            out.outform.into(),
        )?,
        Some(KeygenCmd::Issue {
            csr,
            cacert,
            cakey,
            dn,
            sans,
            lifetime,
            flag,
            out,
        }) => kg::cmd_issue(&kg::IssueArgs {
            name: &out.name,
            dir: &out.out,
            csr: &csr,
            cacert: &cacert,
            cakey: &cakey,
            dn: dn.as_deref(),
            sans: &sans.san,
            days: lifetime,
            flags: flag.into_iter().map(Flag::from).collect(),
            form: out.outform.into(),
        })?,
    };
    for (what, path) in written {
        println!("{what}: {}", path.display());
    }
    Ok(())
}
