//! The suites and both sides' connections: netveil's initiator (the load generator's and the in-process
//! exchange's) and its responder's configuration, with PSKs or certificates made by strongSwan's `pki`.

use crate::lab::Lab;
use crate::strongswan::{Credential, KeyType, Pki, SwanPair, PAIR_IDS};
use crate::{Error, Result};
use netveil_crypto::sig::PrivateKey;
use netveil_ike::cert::Certificate;
use netveil_ike::config::{
    Action, AuthMethod, AuthRound, ChildConfig, Connection, Identity, Lifetimes, Mode, PubKeyCreds,
    Retransmit, TsSpec,
};
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The suites, in table order.
pub const SUITES: &[&str] = &["psk-x25519", "psk-modp2048", "ecdsa-p256"];

/// The child's ESP proposal in every row.
pub(super) const ESP: &str = "aes128gcm16";
/// The PSK of the lab (test key).
pub(super) const PSK: &str = "netveil-bench-ike-psk-0123456789";
/// The connection and child names on both sides.
pub(super) const CONN: &str = "site";
pub(super) const CHILD: &str = "net";

/// A suite's IKE proposal and authentication.
pub(super) struct Suite {
    pub(super) name: &'static str,
    /// strongSwan's syntax, the same on both implementations.
    pub(super) ike: &'static str,
    /// Certificates (ECDSA P-256) instead of the PSK.
    pub(super) cert: bool,
}

pub(super) fn suite(name: &str) -> Option<Suite> {
    let (name, ike, cert) = match name {
        "psk-x25519" => ("psk-x25519", "aes128-sha256-x25519", false),
        "psk-modp2048" => ("psk-modp2048", "aes128-sha256-modp2048", false),
        "ecdsa-p256" => ("ecdsa-p256", "aes128-sha256-ecp256", true),
        _ => return None,
    };
    Some(Suite { name, ike, cert })
}

/// The credentials of a `cert` suite, None for PSK suites: a CA made with strongSwan's `pki` in `dir/pki` and one
/// ECDSA P-256 certificate per side (`CN` and subjectAltName the side's FQDN id of [`PAIR_IDS`]), as the
/// strongSwan row has them.
pub(super) fn suite_creds(s: &Suite, dir: &Path) -> Result<Option<[Credential; 2]>> {
    if !s.cert {
        return Ok(None);
    }
    let pki = Pki::new(&dir.join("pki"), KeyType::EcdsaP256)?;
    Ok(Some([pki.issue(PAIR_IDS[0])?, pki.issue(PAIR_IDS[1])?]))
}

/// The `auth = pubkey` methods of side `side` with `creds`: ours, our certificate and key; the peer's, our CA.
fn pubkey_methods(creds: &[Credential; 2], side: usize) -> Result<(AuthMethod, AuthMethod)> {
    let read = |p: &Path| {
        std::fs::read(p)
            .map(zeroize::Zeroizing::new)
            .map_err(Error::io(format!("read {}", p.display())))
    };
    let certs = |p: &Path| Certificate::load(&read(p)?).map_err(Error::file(p));
    let c = &creds[side];
    let key = PrivateKey::from_pem_or_der(&read(&c.key)?).map_err(Error::file(&c.key))?;
    Ok((
        AuthMethod::PubKey(PubKeyCreds {
            certs: certs(&c.cert)?,
            cacerts: Vec::new(),
            key: Some(Arc::new(key)),
        }),
        AuthMethod::PubKey(PubKeyCreds {
            certs: Vec::new(),
            cacerts: certs(&c.ca)?,
            key: None,
        }),
    ))
}

fn host_ts(a: IpAddr) -> TsSpec {
    TsSpec {
        addr: a,
        prefix: if a.is_ipv4() { 32 } else { 128 },
        protocol: 0,
        ports: (0, 65535),
    }
}

/// Side `side`'s connection (0: the initiator in `a`, 1: the responder in `b`) for the in-process rows and the
/// load generator: what [`netveil_responder_config`] says in TOML. `creds`: those of [`suite_creds`].
pub(super) fn initiator_conn(
    s: &Suite,
    side: usize,
    creds: Option<&[Credential; 2]>,
) -> Result<Connection> {
    let o = 1 - side;
    let (local, remote, psk) = match creds {
        Some(c) => {
            let (l, r) = pubkey_methods(c, side)?;
            (l, r, None)
        }
        None if s.cert => {
            return Err(Error::internal(format!(
                "suite {} needs certificates",
                s.name
            )))
        }
        None => (
            AuthMethod::Psk,
            AuthMethod::Psk,
            Some(Secret::new(PSK.as_bytes())),
        ),
    };
    let parse = |p: Protocol, t: &str| {
        Proposal::parse(p, t).map_err(|e| Error::internal(format!("proposal {t}: {e}")))
    };
    let hour = Duration::from_secs(3600);
    Ok(Connection {
        name: CONN.into(),
        local_addrs: vec![SwanPair::outer(side)],
        remote_addrs: vec![SwanPair::outer(o)],
        remote_port: 500,
        proposals: vec![parse(Protocol::Ike, s.ike)?],
        encap: true,
        fragmentation: false,
        local: AuthRound {
            id: Identity::Fqdn(PAIR_IDS[side].into()),
            method: local,
        },
        remote: AuthRound {
            id: Identity::Fqdn(PAIR_IDS[o].into()),
            method: remote,
        },
        psk,
        dpd_delay: None,
        lifetimes: Lifetimes {
            rekey: 4 * hour,
            life: 5 * hour,
            rand: Duration::ZERO,
        },
        reauth: Duration::ZERO,
        retransmit: Retransmit {
            timeout: Duration::from_secs(2),
            base: 1.8,
            tries: 3,
        },
        children: vec![ChildConfig {
            name: CHILD.into(),
            local_ts: vec![host_ts(SwanPair::inner(side))],
            remote_ts: vec![host_ts(SwanPair::inner(o))],
            esp_proposals: vec![parse(Protocol::Esp, ESP)?],
            mode: Mode::Tunnel,
            lifetimes: Lifetimes {
                rekey: hour,
                life: 2 * hour,
                rand: Duration::ZERO,
            },
            start_action: Action::None,
            dpd_action: Action::None,
            close_action: Action::None,
            replay_window: 32,
        }],
    })
}

/// The responder daemon's configuration: a TUN with the inner address, and `[ike]` with the connection (PSK, or
/// with `creds` the responder's certificate and key and the CA).
pub(super) fn netveil_responder_config(
    lab: &Lab,
    s: &Suite,
    creds: Option<&[Credential; 2]>,
) -> String {
    let (me, peer) = (SwanPair::inner(1), SwanPair::inner(0));
    let (lid, rid) = (PAIR_IDS[1], PAIR_IDS[0]);
    let auth = match creds {
        Some([_, c]) => format!(
            "local = {{ id = \"@{lid}\", auth = \"pubkey\", certs = [\"{}\"], key = \"{}\" }}\n\
             remote = {{ id = \"@{rid}\", auth = \"pubkey\", cacerts = [\"{}\"] }}\n",
            c.cert.display(),
            c.key.display(),
            c.ca.display()
        ),
        None => format!(
            "psk = \"{PSK}\"\nlocal = {{ id = \"@{lid}\", auth = \"psk\" }}\n\
             remote = {{ id = \"@{rid}\", auth = \"psk\" }}\n"
        ),
    };
    format!(
        "# netveil bench --ike: the responder\nlog_level = \"info\"\n\
         [interface]\nname = \"nvbike0\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\nstate_dir = \"{state}\"\n\
         addresses = [\"{me}/32\"]\nroutes = [\"{peer}/32\"]\n\n[ike]\n\n\
         [[ike.connection]]\nname = \"{CONN}\"\nlocal_addrs = [\"{lo}\"]\nremote_addrs = [\"{ro}\"]\n\
         proposals = [\"{ike}\"]\nencap = true\n{auth}\n\
         [[ike.connection.children]]\nname = \"{CHILD}\"\nlocal_ts = [\"{me}/32\"]\nremote_ts = [\"{peer}/32\"]\n\
         esp_proposals = [\"{ESP}\"]\nstart_action = \"none\"\n",
        sock = lab.socket_path("nvbike").display(),
        state = lab.dir().join("state-nvbike").display(),
        lo = SwanPair::outer(1),
        ro = SwanPair::outer(0),
        ike = s.ike,
    )
}
