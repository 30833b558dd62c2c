//! `[[sa]]`: one SA each (ESP or AH, one direction), and an SA given at runtime (`netveil sa add`).

use super::values::*;
use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSa {
    name: Option<String>,
    direction: Option<String>,
    protocol: Option<String>,
    spi: Option<i64>,
    mode: Option<String>,
    local: Option<String>,
    remote: Option<String>,
    suite: Option<String>,
    enc_key: Option<Secret>,
    auth_key: Option<Secret>,
    #[serde(default)]
    esn: bool,
    replay_window: Option<i64>,
    encap: Option<String>,
    local_port: Option<i64>,
    remote_port: Option<i64>,
    tfc_pad_to: Option<i64>,
    lifetime: Option<RawLifetime>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLifetime {
    soft_bytes: Option<i64>,
    hard_bytes: Option<i64>,
    soft_packets: Option<i64>,
    hard_packets: Option<i64>,
    soft_seconds: Option<i64>,
    hard_seconds: Option<i64>,
}

pub(crate) fn opt_u64(key: &str, v: Option<i64>) -> Result<Option<u64>, ConfigError> {
    match v {
        None => Ok(None),
        Some(x) if x <= 0 => err(key, "must be positive"),
        Some(x) => Ok(Some(x as u64)),
    }
}

/// An SA given at runtime (`netveil sa add`, `update`): the keys of one `[[sa]]` table, `name` required, checked as
/// the configuration file's SAs are (errors name `sa.KEY`). `others`: the SAs it must not clash with.
pub fn sa_from_table(
    t: toml::Table,
    interface: &Interface,
    others: &[SaParams],
) -> Result<SaParams, ConfigError> {
    let raw: RawSa = typed(toml::Value::Table(t), "sa")?;
    if raw.name.as_deref().is_none_or(str::is_empty) {
        return err(
            "sa.name",
            "missing (SAs are added, replaced and removed by name)",
        );
    }
    parse_sa(
        &|f| format!("sa.{f}"),
        String::new(),
        raw,
        interface,
        others,
    )
}

/// Parses one `[[sa]]` table (`k` names its keys in errors: `sa[0].spi`, `sa.spi`). `others`: the SAs it must not
/// clash with (name; inbound SPI of the same protocol).
pub(crate) fn parse_sa(
    k: &dyn Fn(&str) -> String,
    default_name: String,
    s: RawSa,
    interface: &Interface,
    others: &[SaParams],
) -> Result<SaParams, ConfigError> {
    let name = s.name.unwrap_or(default_name);
    crate::runtime::names::check_name(&k("name"), &name)?;
    if others.iter().any(|o| o.name == name) {
        return err(k("name"), "is used by another SA");
    }
    let direction = match s.direction.as_deref() {
        Some("out") => Direction::Out,
        Some("in") => Direction::In,
        Some(_) => return err(k("direction"), "must be 'out' or 'in'"),
        None => return err(k("direction"), "missing ('out' or 'in')"),
    };
    let spi = match s.spi {
        None => return err(k("spi"), "missing"),
        Some(v) => int_in(&k("spi"), v, 256, u32::MAX as i64)? as u32,
    };
    let suite = sa_suite(k, s.protocol.as_deref(), s.suite.as_deref(), interface)?;
    let mode = sa_mode(
        k,
        s.mode.as_deref(),
        s.local.as_deref(),
        s.remote.as_deref(),
    )?;
    let enc_key = match &s.enc_key {
        Some(h) => parse_hex(&k("enc_key"), h)?,
        None => zeroize::Zeroizing::new(vec![]),
    };
    let auth_key = match &s.auth_key {
        Some(h) => parse_hex(&k("auth_key"), h)?,
        None => zeroize::Zeroizing::new(vec![]),
    };
    check_keys(suite, &enc_key, &auth_key, k)?;
    let replay_window = match s.replay_window {
        None => DEFAULT_REPLAY_WINDOW,
        Some(w) => int_in(&k("replay_window"), w, 64, 1 << 20)? as u32,
    };
    let encap = sa_encap(
        k,
        suite,
        s.encap.as_deref(),
        s.local_port,
        s.remote_port,
        interface,
    )?;
    let tfc_pad_to = int_in(
        &k("tfc_pad_to"),
        s.tfc_pad_to.unwrap_or(0),
        0,
        TFC_PAD_MAX.into(),
    )? as u16;
    if tfc_pad_to > 0 && (mode == Mode::Transport || matches!(suite, Suite::Ah(_))) {
        return err(k("tfc_pad_to"), "TFC padding needs ESP in tunnel mode");
    }
    let lifetime = sa_lifetime(k, s.lifetime.unwrap_or_default())?;
    if direction == Direction::In
        && others.iter().any(|o| {
            o.direction == Direction::In
                && o.spi == spi
                && suite_proto(&o.suite) == suite_proto(&suite)
        })
    {
        return err(
            k("spi"),
            "is used by another inbound SA of the same protocol",
        );
    }
    Ok(SaParams {
        name,
        spi,
        direction,
        suite,
        mode,
        enc_key,
        auth_key,
        esn: s.esn,
        replay_window,
        lifetime,
        encap,
        tfc_pad_to,
        first_seq: 1,
    })
}

/// An SA's suite: `suite` (required) read as `protocol`'s (`esp`, the default, or `ah`). A missing suite is
/// reported before an unknown protocol.
fn sa_suite(
    k: &dyn Fn(&str) -> String,
    protocol: Option<&str>,
    suite: Option<&str>,
    interface: &Interface,
) -> Result<Suite, ConfigError> {
    let proto = protocol.unwrap_or("esp");
    let suite_name = match suite {
        Some(x) => x,
        None => return err(k("suite"), "missing (e.g. 'aes128gcm16')"),
    };
    Ok(match proto {
        "esp" => Suite::Esp(
            EspSuite::parse(suite_name, interface.allow_null_null)
                .or_else(|e| err(k("suite"), suite_error(&e)))?,
        ),
        "ah" => {
            Suite::Ah(AhSuite::parse(suite_name).or_else(|e| err(k("suite"), suite_error(&e)))?)
        }
        _ => return err(k("protocol"), "must be 'esp' or 'ah'"),
    })
}

/// An SA's mode (`tunnel`, the default, with its `local` and `remote` endpoints of one family, or `transport`).
fn sa_mode(
    k: &dyn Fn(&str) -> String,
    mode: Option<&str>,
    local: Option<&str>,
    remote: Option<&str>,
) -> Result<Mode, ConfigError> {
    Ok(match mode.unwrap_or("tunnel") {
        "transport" => {
            if local.is_some() || remote.is_some() {
                // Allowed but unused in transport mode: the packet's own addresses are used.
            }
            Mode::Transport
        }
        "tunnel" => {
            let local = parse_ip(
                &k("local"),
                local.ok_or_else(|| ConfigError {
                    key: k("local"),
                    reason: "missing (the local tunnel endpoint address)".into(),
                })?,
            )?;
            let remote = parse_ip(
                &k("remote"),
                remote.ok_or_else(|| ConfigError {
                    key: k("remote"),
                    reason: "missing (the remote tunnel endpoint address)".into(),
                })?,
            )?;
            if local.is_ipv4() != remote.is_ipv4() {
                return err(
                    k("remote"),
                    "local and remote must be of the same address family",
                );
            }
            Mode::Tunnel { local, remote }
        }
        _ => return err(k("mode"), "must be 'tunnel' or 'transport'"),
    })
}

/// An SA's UDP encapsulation (`encap`, ESP only, with `local_port` and `remote_port`).
fn sa_encap(
    k: &dyn Fn(&str) -> String,
    suite: Suite,
    encap: Option<&str>,
    local_port: Option<i64>,
    remote_port: Option<i64>,
    interface: &Interface,
) -> Result<Option<UdpEncap>, ConfigError> {
    Ok(match encap {
        None | Some("none") => None,
        Some("udp") => {
            if matches!(suite, Suite::Ah(_)) {
                return err(
                    k("encap"),
                    "UDP encapsulation (RFC 3948) is defined for ESP only",
                );
            }
            Some(UdpEncap {
                local_port: int_in(
                    &k("local_port"),
                    local_port.unwrap_or(interface.nat_t_port as i64),
                    1,
                    65535,
                )? as u16,
                remote_port: int_in(&k("remote_port"), remote_port.unwrap_or(4500), 1, 65535)?
                    as u16,
            })
        }
        Some(_) => return err(k("encap"), "must be 'udp' or 'none'"),
    })
}

/// An SA's `lifetime` table: each limit positive (soft ones first), each soft limit below its hard one.
fn sa_lifetime(k: &dyn Fn(&str) -> String, l: RawLifetime) -> Result<Lifetime, ConfigError> {
    let lifetime = Lifetime {
        soft: Limits {
            bytes: opt_u64(&k("lifetime.soft_bytes"), l.soft_bytes)?,
            packets: opt_u64(&k("lifetime.soft_packets"), l.soft_packets)?,
            seconds: opt_u64(&k("lifetime.soft_seconds"), l.soft_seconds)?,
        },
        hard: Limits {
            bytes: opt_u64(&k("lifetime.hard_bytes"), l.hard_bytes)?,
            packets: opt_u64(&k("lifetime.hard_packets"), l.hard_packets)?,
            seconds: opt_u64(&k("lifetime.hard_seconds"), l.hard_seconds)?,
        },
    };
    for (soft, hard, f) in [
        (lifetime.soft.bytes, lifetime.hard.bytes, "bytes"),
        (lifetime.soft.packets, lifetime.hard.packets, "packets"),
        (lifetime.soft.seconds, lifetime.hard.seconds, "seconds"),
    ] {
        if let (Some(s), Some(h)) = (soft, hard) {
            if s >= h {
                return err(
                    k(&format!("lifetime.soft_{f}")),
                    format!("must be below lifetime.hard_{f}"),
                );
            }
        }
    }
    Ok(lifetime)
}

/// "in" or "out".
pub fn dir_word(d: Direction) -> &'static str {
    match d {
        Direction::In => "in",
        Direction::Out => "out",
    }
}

/// A suite error without the suite name given (the ipsec crate's messages quote it).
pub(crate) fn suite_error(e: &netveil_ipsec::suite::SuiteError) -> String {
    use netveil_ipsec::suite::SuiteError as E;
    match e {
        E::Unknown(_, known) => format!("unknown suite (value not shown; known: {known})"),
        E::AeadWithInteg(_) => "an AEAD suite takes no integrity algorithm".into(),
        E::MissingInteg(_) => {
            "needs an integrity algorithm (e.g. aes128-sha256; value not shown)".into()
        }
        E::NullNull | E::Key(_) => e.to_string(),
    }
}

pub(crate) fn suite_proto(s: &Suite) -> u8 {
    match s {
        Suite::Esp(_) => 50,
        Suite::Ah(_) => 51,
    }
}

/// The key lengths an SA's suite needs (ESP: encryption key, with the salt for AEAD, and integrity key; AH: no
/// encryption key, its integrity key). Errors name `k(KEY)` and give lengths, never a value. One rule for the file
/// and for SAs added at runtime ([`crate::runtime::sa_port`]).
pub(crate) fn check_keys(
    suite: Suite,
    enc_key: &[u8],
    auth_key: &[u8],
    k: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    match suite {
        Suite::Esp(es) => {
            let want = es.enc.key_len();
            if enc_key.len() != want {
                let salt = if es.enc.is_aead() {
                    ", key followed by the 4-byte salt"
                } else {
                    ""
                };
                return err(
                    k("enc_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits{salt}), got {}",
                        es.name(),
                        want * 2,
                        enc_key.len()
                    ),
                );
            }
            let want = es.integ.map_or(0, |i| i.key_len());
            if auth_key.len() != want {
                return err(
                    k("auth_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        es.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
        Suite::Ah(a) => {
            if !enc_key.is_empty() {
                return err(k("enc_key"), "AH does not encrypt: remove enc_key");
            }
            let want = a.integ.key_len();
            if auth_key.len() != want {
                return err(
                    k("auth_key"),
                    format!(
                        "{} needs {want} bytes ({} hex digits), got {}",
                        a.name(),
                        want * 2,
                        auth_key.len()
                    ),
                );
            }
        }
    }
    Ok(())
}
