//! The values of the `[ike]` section's keys: names, identities, pre-shared keys (inline or from a file),
//! durations, actions, traffic selectors, and which ESP algorithms the IP engine installs. Errors name no value.

use crate::runtime::config::{typed, ConfigError};
use crate::runtime::names::is_name;
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::{parse_dn, Certificate};
use netveil_ike::config::{Action, AuthMethod, AuthRound, Identity, PubKeyCreds, TsSpec};
use netveil_ike::keys::Secret as IkeSecret;
use netveil_ike::proposal::{Encr, Integ, Proposal, ProposalError};
use netveil_ipsec::suite::{Enc, EspSuite};
use serde::Deserialize;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub(super) fn e(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        reason: reason.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    id: Option<String>,
    auth: Option<String>,
    /// auth = "pubkey": local side: our certificate (first) and intermediates; remote side: pinned certificates.
    certs: Option<Vec<String>>,
    /// auth = "pubkey", remote side: the CA certificates the peer's chain must lead to.
    cacerts: Option<Vec<String>>,
    /// auth = "pubkey", local side: the private key of certs[0].
    key: Option<String>,
}

pub(super) fn name(s: &str, key: &str) -> Result<(), ConfigError> {
    if is_name(s) {
        Ok(())
    } else {
        Err(e(
            key,
            "must be 1 to 64 characters of A-Z a-z 0-9 . _ - (value not shown)",
        ))
    }
}

/// One side's `local` / `remote` table: `id`, `auth`, and for `auth = "pubkey"` the credentials (files relative to
/// `base`): `certs` and `key` on the local side, `cacerts` or `certs` (pinned) on the remote side.
pub(super) fn auth(
    v: toml::Value,
    key: &str,
    remote: bool,
    base: &Path,
) -> Result<AuthRound, ConfigError> {
    let r: RawAuth = typed(v, key)?;
    let k = |what: &str| format!("{key}.{what}");
    let method = match r.auth.as_deref() {
        Some("psk") => {
            for (set, what) in [
                (r.certs.is_some(), "certs"),
                (r.cacerts.is_some(), "cacerts"),
                (r.key.is_some(), "key"),
            ] {
                if set {
                    return Err(e(k(what), "is for auth = \"pubkey\" only"));
                }
            }
            AuthMethod::Psk
        }
        Some("pubkey") => AuthMethod::PubKey(pubkey_creds(&r, key, remote, base)?),
        Some(_) => return Err(e(k("auth"), "must be \"psk\" or \"pubkey\"")),
        None => return Err(e(k("auth"), "is required (\"psk\" or \"pubkey\")")),
    };
    let id = match (r.id.as_deref(), &method) {
        // swanctl: our ID defaults to our certificate's subject.
        (None, AuthMethod::PubKey(c)) if !remote => Identity::Dn(c.certs[0].subject_der().to_vec()),
        (None, _) => return Err(e(
            k("id"),
            "is required (an IP address, a name, user@name, a DN \"C=CH, O=org, CN=name\" or %any)",
        )),
        (Some(s), _) => identity(s, remote).map_err(|why| e(k("id"), why))?,
    };
    if let (false, AuthMethod::PubKey(c)) = (remote, &method) {
        let ours = netveil_ike::machine::glue::id_payload(&id);
        if !ours.is_some_and(|i| c.certs[0].has_subject(&i)) {
            return Err(e(
                k("id"),
                format!(
                    "is not the subject or a subjectAltName of certs[0] ({})",
                    c.certs[0].subject()
                ),
            ));
        }
    }
    Ok(AuthRound { id, method })
}

/// The certificates of the files `paths` (PEM, one or more each, or DER), each error naming its entry. `trusted`:
/// they decide whom we trust (the remote side's CA or pinned certificates), so they are read as rules are (owned
/// by root, writable by it only: [`crate::runtime::secret_file`]); our own are only read.
fn cert_files(
    paths: &[String],
    key: &str,
    base: &Path,
    trusted: bool,
) -> Result<Vec<Certificate>, ConfigError> {
    let mut out = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let path = base.join(p);
        let shown = crate::runtime::secret_file::shown(&path);
        let bytes = if trusted {
            crate::runtime::secret_file::read(&path, crate::runtime::secret_file::Level::Rules)
                .map_err(|x| e(format!("{key}[{i}]"), x.to_string()))?
                .bytes
        } else {
            zeroize::Zeroizing::new(
                std::fs::read(&path)
                    .map_err(|x| e(format!("{key}[{i}]"), format!("cannot read {shown}: {x}")))?,
            )
        };
        let certs = Certificate::load(&bytes)
            .map_err(|x| e(format!("{key}[{i}]"), format!("{shown} {x}")))?;
        out.extend(certs);
    }
    Ok(out)
}

/// The credentials of `auth = "pubkey"` (see [`auth`]).
fn pubkey_creds(
    r: &RawAuth,
    key: &str,
    remote: bool,
    base: &Path,
) -> Result<PubKeyCreds, ConfigError> {
    let k = |what: &str| format!("{key}.{what}");
    let certs = cert_files(
        r.certs.as_deref().unwrap_or_default(),
        &k("certs"),
        base,
        remote,
    )?;
    if remote {
        if r.key.is_some() {
            return Err(e(k("key"), "is for the local side only"));
        }
        let cacerts = cert_files(
            r.cacerts.as_deref().unwrap_or_default(),
            &k("cacerts"),
            base,
            true,
        )?;
        if certs.is_empty() && cacerts.is_empty() {
            return Err(e(
                k("cacerts"),
                "auth = \"pubkey\" needs the CA certificates (cacerts) or the peer's certificate (certs)",
            ));
        }
        return Ok(PubKeyCreds {
            certs,
            cacerts,
            key: None,
        });
    }
    if r.cacerts.is_some() {
        return Err(e(k("cacerts"), "is for the remote side only"));
    }
    if certs.is_empty() {
        return Err(e(
            k("certs"),
            "auth = \"pubkey\" needs our certificate (certs = [\"cert.pem\"], intermediates after it)",
        ));
    }
    let Some(path) = &r.key else {
        return Err(e(
            k("key"),
            "auth = \"pubkey\" needs the private key of certs[0]",
        ));
    };
    let private = read_key_file(&base.join(path)).map_err(|why| e(k("key"), why))?;
    if private.public_key() != *certs[0].public_key() {
        return Err(e(
            k("key"),
            format!("is not the key of certs[0] ({})", certs[0].subject()),
        ));
    }
    own_cert_current(&certs[0], &k("certs"), std::time::SystemTime::now())?;
    Ok(PubKeyCreds {
        certs,
        cacerts: Vec::new(),
        key: Some(Arc::new(private)),
    })
}

/// Our certificate at load, against `now`: an expired one is refused (every peer would refuse it; the error says
/// since when), one not valid yet is only warned about (the clock may be behind at boot, and it becomes valid by
/// itself).
pub(super) fn own_cert_current(
    cert: &Certificate,
    key: &str,
    now: std::time::SystemTime,
) -> Result<(), ConfigError> {
    let Some((not_before, not_after, end)) = cert.validity() else {
        return Ok(());
    };
    let t = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if t > not_after {
        return Err(e(
            format!("{key}[0]"),
            format!(
                "our certificate ({}) expired on {end}: every peer would refuse it; renew it (netveil keygen cert, or pki)",
                cert.subject()
            ),
        ));
    }
    if t < not_before {
        tracing::warn!(
            "{key}[0]: our certificate ({}) is not valid yet: is this machine's clock right?",
            cert.subject()
        );
    }
    Ok(())
}

/// A private key file: a regular file owned by root, readable by its owner only (as the PSK file: see
/// [`crate::runtime::secret_file`]), PEM or DER.
pub(super) fn read_key_file(path: &Path) -> Result<PrivateKey, String> {
    let c = crate::runtime::secret_file::read(path, crate::runtime::secret_file::Level::Secret)
        .map_err(|x| x.to_string())?;
    PrivateKey::from_pem_or_der(&c.bytes)
        .map_err(|x| format!("{}: {x}", crate::runtime::secret_file::shown(path)))
}

/// swanctl's identity syntax: `%any`, an IP address, `@fqdn`, a name with a dot, `user@name`, `@#hex` (a key
/// id), a distinguished name `C=CH, O=strongSwan, CN=moon` (DER as [`parse_dn`] encodes it).
pub(super) fn identity(s: &str, remote: bool) -> Result<Identity, String> {
    if s == "%any" {
        return if remote {
            Ok(Identity::Any)
        } else {
            Err("%any is for the remote side only".into())
        };
    }
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok(match a {
            IpAddr::V4(a) => Identity::Ipv4(a),
            IpAddr::V6(a) => Identity::Ipv6(a),
        });
    }
    let printable =
        |t: &str| !t.is_empty() && t.len() <= 255 && t.bytes().all(|b| b.is_ascii_graphic());
    if let Some(h) = s.strip_prefix("@#") {
        return match hex::decode(h) {
            Ok(b) if !b.is_empty() => Ok(Identity::KeyId(b)),
            _ => Err("@# must be followed by hex digits (a key id)".into()),
        };
    }
    if let Some(n) = s.strip_prefix('@') {
        return if printable(n) {
            Ok(Identity::Fqdn(n.into()))
        } else {
            Err("is not a valid name".into())
        };
    }
    if s.contains('=') {
        // (parse_dn's errors quote the part they refuse: a key pasted here would be shown.)
        return parse_dn(s).map(Identity::Dn).map_err(|_| {
            "is not a distinguished name netveil reads (\"C=CH, O=org, CN=name\": attribute types C, ST, L, O, OU, \
             CN, SN, T, E, DC, UID, each with a value; value not shown)"
                .into()
        });
    }
    if printable(s) && s.contains('@') {
        return Ok(Identity::Email(s.into()));
    }
    if printable(s) {
        return Ok(Identity::Fqdn(s.into()));
    }
    Err("is not an identity (an IP address, a name, user@name, @#hex, a DN or %any)".into())
}

/// A PSK as written: `0x` followed by hex digits, or the string's bytes (as swanctl's `secret`).
pub(super) fn decode_psk(s: &str) -> Result<IkeSecret, String> {
    let bytes = match s.strip_prefix("0x") {
        Some(h) => zeroize::Zeroizing::new(
            hex::decode(h).map_err(|_| "0x must be followed by hex digits (value not shown)")?,
        ),
        None => zeroize::Zeroizing::new(s.as_bytes().to_vec()),
    };
    // RFC 7296 2.15: the key should be as strong as the PRF's key; strongSwan warns below 20 bytes. Refuse what
    // is trivially guessable.
    if bytes.len() < 16 {
        return Err(format!(
            "is too short ({} bytes; at least 16, value not shown)",
            bytes.len()
        ));
    }
    Ok(IkeSecret::new(&bytes))
}

/// The PSK file: a regular file owned by root, readable by its owner only (mode 0400 or 0600: see
/// [`crate::runtime::secret_file`]); its contents as [`decode_psk`] reads them, without a final line break.
pub(super) fn read_psk_file(path: &Path) -> Result<IkeSecret, String> {
    let c = crate::runtime::secret_file::read(path, crate::runtime::secret_file::Level::Secret)
        .map_err(|x| x.to_string())?;
    let text = c.text().map_err(|x| x.to_string())?;
    decode_psk(text.trim_end_matches(['\n', '\r']))
}

/// A duration as swanctl writes them: seconds as an integer, or a string with `s`, `m`, `h` or `d`.
pub(super) fn duration(v: toml::Value, key: &str) -> Result<Duration, ConfigError> {
    let bad = || {
        e(
            key,
            "expected seconds (an integer) or a string like \"30s\", \"10m\", \"4h\", \"1d\"",
        )
    };
    let secs = match v {
        toml::Value::Integer(n) => u64::try_from(n).map_err(|_| bad())?,
        toml::Value::String(s) => {
            let (num, unit) = match s.char_indices().last() {
                Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
                _ => (s.as_str(), 's'),
            };
            let n: u64 = num.parse().map_err(|_| bad())?;
            let mult = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => return Err(bad()),
            };
            n.checked_mul(mult).ok_or_else(bad)?
        }
        _ => return Err(bad()),
    };
    if secs > 365 * 86400 {
        return Err(e(key, "is longer than a year"));
    }
    Ok(Duration::from_secs(secs))
}

pub(super) fn action(s: Option<&str>, key: &str, allowed: &[&str]) -> Result<Action, ConfigError> {
    let a = match s {
        None | Some("none") => Action::None,
        Some("start") | Some("restart") => Action::Start,
        Some("trap") => Action::Trap,
        Some(_) => {
            return Err(e(
                key,
                format!("must be one of: none, {}", allowed.join(", ")),
            ))
        }
    };
    let word = match a {
        Action::None => "none",
        Action::Start => "start",
        Action::Trap => "trap",
    };
    if a != Action::None && !allowed.contains(&word) {
        return Err(e(
            key,
            format!("must be one of: none, {}", allowed.join(", ")),
        ));
    }
    Ok(a)
}

/// A traffic selector: `10.0.0.0/24`, `10.0.0.1` (a host), `10.0.0.1/32[tcp/80]`, `[udp]`, `[tcp/1024-65535]`,
/// `[6/%any]`; `dynamic` is the side's first address (the one it initiates from or to) as a host selector:
/// negotiated addresses (virtual IPs) are not supported.
pub(super) fn ts(s: &str, own: &[IpAddr]) -> Result<TsSpec, String> {
    let (net, extra) = match s.split_once('[') {
        Some((n, rest)) => (
            n,
            Some(
                rest.strip_suffix(']')
                    .ok_or("a '[' without its ']' (as in 10.0.0.1/32[tcp/80])")?,
            ),
        ),
        None => (s, None),
    };
    let (addr, prefix) = if net == "dynamic" {
        let a = *own
            .first()
            .ok_or("dynamic needs the side's address (local_addrs or remote_addrs)")?;
        (a, if a.is_ipv4() { 32 } else { 128 })
    } else {
        let n: ipnet::IpNet = match net.parse() {
            Ok(n) => n,
            Err(_) => net
                .parse::<IpAddr>()
                .map(ipnet::IpNet::from)
                .map_err(|_| "is not a network (10.0.0.0/24), an address or dynamic".to_string())?,
        };
        if n.trunc() != n {
            return Err("has host bits set (write the network's address, value not shown)".into());
        }
        (n.addr(), n.prefix_len())
    };
    let (mut protocol, mut ports) = (0u8, (0u16, 65535u16));
    if let Some(x) = extra {
        let (p, port) = match x.split_once('/') {
            Some((p, port)) => (p, Some(port)),
            None => (x, None),
        };
        protocol = match p {
            "" | "%any" => 0,
            "tcp" => 6,
            "udp" => 17,
            "icmp" => 1,
            "ipv6-icmp" | "icmp6" => 58,
            "sctp" => 132,
            n => n
                .parse()
                .map_err(|_| "unknown protocol (tcp, udp, icmp, icmp6, sctp or a number)")?,
        };
        if let Some(port) = port {
            let pn = |t: &str| {
                t.parse::<u16>()
                    .map_err(|_| "bad port (a number, a-b or %any)")
            };
            ports = match port {
                "%any" | "" => (0, 65535),
                r => match r.split_once('-') {
                    Some((a, b)) => (pn(a)?, pn(b)?),
                    None => (pn(r)?, pn(r)?),
                },
            };
            if ports.0 > ports.1 {
                return Err("port range runs backwards".into());
            }
            if ports != (0, 65535) && !netveil_sa::policy::has_ports(protocol) {
                return Err("ports need a protocol with ports (tcp, udp, sctp)".into());
            }
        }
    }
    Ok(TsSpec {
        addr,
        prefix,
        protocol,
        ports,
    })
}

/// A proposal's error as the IKE crate words it, except that a token it does not know (which may be anything,
/// a secret pasted in the wrong place too) is named by its position, not shown; the other errors name keywords
/// it knows.
pub(super) fn proposal_error(s: &str, x: &ProposalError) -> String {
    match x {
        ProposalError::UnknownToken(t) => {
            let n = s
                .trim()
                .split('-')
                .position(|w| w == t)
                .map_or(0, |n| n + 1);
            format!(
                "algorithm {n} (of those separated by '-') is not a keyword netveil knows (value not shown; e.g. \
                 aes128, aes256gcm16, chacha20poly1305, sha256, prfsha384, x25519, ecp384, modp2048, ke1_mlkem768, \
                 esn)"
            )
        }
        other => other.to_string(),
    }
}

/// Whether the IKE machine computes a proposal's key exchange methods: Diffie-Hellman groups as the key exchange
/// (IKE_SA_INIT, and CREATE_CHILD_SA's PFS), ML-KEM-768 only as an additional key exchange of an IKE proposal
/// (RFC 9370, in IKE_INTERMEDIATE); CHILD_SAs take no additional key exchanges yet.
pub(super) fn ke_supported(p: &Proposal) -> Result<(), String> {
    use netveil_ike::proposal::{Ke, Protocol, ADD_KE_SLOTS};
    if p.ke().contains(&Ke::MlKem768) {
        return Err("mlkem768 is only supported as an additional key exchange (e.g.                     aes256gcm16-prfsha384-x25519-ke1_mlkem768)"
            .into());
    }
    for n in 1..=ADD_KE_SLOTS {
        let slot = p.add_ke(n);
        if slot.is_empty() {
            continue;
        }
        if p.protocol() == Protocol::Esp {
            return Err(format!(
                "ke{n}_: additional key exchanges are supported for the IKE SA only, not in esp_proposals"
            ));
        }
        if slot.iter().any(|&k| k != Ke::MlKem768) {
            return Err(format!(
                "ke{n}_: only mlkem768 is supported as an additional key exchange"
            ));
        }
    }
    Ok(())
}

/// The IP engine's suite for one encryption and integrity algorithm of an ESP proposal. Exhaustive: an
/// algorithm the IKE crate learns does not compile here until it is mapped (or refused).
pub fn esp_suite(encr: Encr, integ: Option<Integ>) -> Option<EspSuite> {
    use netveil_ipsec::suite::Integ as I;
    let enc = match encr {
        Encr::AesCbc128 => Enc::AesCbc { key_bits: 128 },
        Encr::AesCbc256 => Enc::AesCbc { key_bits: 256 },
        Encr::AesGcm16_128 => Enc::AesGcm {
            key_bits: 128,
            icv: 16,
        },
        Encr::AesGcm16_256 => Enc::AesGcm {
            key_bits: 256,
            icv: 16,
        },
        Encr::ChaCha20Poly1305 => Enc::ChaCha20Poly1305,
        Encr::TripleDes => Enc::TripleDesCbc,
    };
    let integ = integ.map(|i| match i {
        Integ::HmacSha1_96 => I::HmacSha1_96,
        Integ::HmacSha256_128 => I::HmacSha256_128,
        Integ::HmacSha384_192 => I::HmacSha384_192,
        Integ::HmacSha512_256 => I::HmacSha512_256,
    });
    if enc.is_aead() != integ.is_none() {
        return None;
    }
    Some(EspSuite { enc, integ })
}

/// Whether every encryption/integrity pair a proposal may select is one the IP engine installs.
pub(super) fn engine_supports(p: &Proposal) -> Result<(), String> {
    for &en in p.encr() {
        let integs: Vec<Option<Integ>> = if en.is_aead() {
            vec![None]
        } else {
            p.integ().iter().map(|&i| Some(i)).collect()
        };
        for i in integs {
            if esp_suite(en, i).is_none() {
                return Err(format!(
                    "{en:?} with {i:?} is not supported by the IP engine (aes*gcm16, chacha20poly1305, \
                     aes128/aes256/3des with sha1/sha256/sha384/sha512)"
                ));
            }
        }
    }
    Ok(())
}
