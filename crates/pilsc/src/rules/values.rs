//! The values of the rule file's tags, parsed (peer, protocol, ports, mode, key), and the statements of a line.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv4Net;
use zeroize::Zeroizing;

use super::model::{ApplMode, KeyRef, PortRange, Protocol};
use crate::cipher::{parse_number, Cipher};

/// The key a rule writes: bytes if the hex is the algorithm's key length, a name otherwise.
pub(super) fn key_ref(cipher: Cipher, value: &str) -> Result<KeyRef, String> {
    let lens = cipher.key_len();
    if let Some(h) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        let bytes = decode_hex(h)
            .ok_or_else(|| "not hexadecimal (0x and pairs of hex digits)".to_string())?;
        if bytes.len() > *lens.end() {
            return Err(format!(
                "{} bytes is longer than {cipher} takes ({})",
                bytes.len(),
                fmt_lens(cipher)
            ));
        }
        if lens.contains(&bytes.len()) {
            return Ok(KeyRef::Literal(bytes));
        }
        // Too short to be a key: the name of one (the paper's `Key = 0xcda8`).
        return Ok(KeyRef::Name(value.to_string()));
    }
    if !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        Ok(KeyRef::Name(value.to_string()))
    } else {
        Err("neither 0x and hex digits nor a key name (letters, digits, _ . -)".into())
    }
}

pub(super) fn fmt_lens(c: Cipher) -> String {
    let l = c.key_len();
    if l.start() == l.end() {
        format!("{} bytes", l.start())
    } else {
        format!("{} to {} bytes", l.start(), l.end())
    }
}

pub(super) fn decode_hex(h: &str) -> Option<Zeroizing<Vec<u8>>> {
    if h.is_empty() || !h.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Zeroizing::new(Vec::with_capacity(h.len() / 2));
    for pair in h.as_bytes().chunks(2) {
        let s = std::str::from_utf8(pair).ok()?;
        out.push(u8::from_str_radix(s, 16).ok()?);
    }
    Some(out)
}

pub(super) fn parse_bool(v: &str) -> Result<bool, String> {
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err("is neither true nor false (value not shown)".into())
    }
}

pub(super) fn parse_protocol(v: &str) -> Result<Protocol, String> {
    match v.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Protocol::Tcp),
        "udp" => Ok(Protocol::Udp),
        "icmp" => Ok(Protocol::Icmp),
        "any" => Ok(Protocol::Any),
        _ => Err("is not one of TCP, UDP, ICMP, any (value not shown)".into()),
    }
}

pub(super) fn parse_mode(v: &str) -> Result<ApplMode, String> {
    if v.eq_ignore_ascii_case("server") {
        Ok(ApplMode::Server)
    } else if v.eq_ignore_ascii_case("client") {
        Ok(ApplMode::Client)
    } else {
        Err("is neither Server (the port is ours) nor Client (the peer's) (value not shown)".into())
    }
}

fn parse_port(v: &str) -> Result<u16, String> {
    parse_number(v)
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| "is not a port (0 to 65535, or 0x0 to 0xffff; value not shown)".into())
}

pub(super) fn parse_ports(v: &str) -> Result<PortRange, String> {
    let (lo, hi) = match v.split_once('-') {
        Some((a, b)) => (parse_port(a.trim())?, parse_port(b.trim())?),
        None => {
            let p = parse_port(v)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!("the range ends below its start ({lo}-{hi})"));
    }
    Ok(PortRange { lo, hi })
}

/// `193.140.1.1`, `c1:8c:01:01`, either with `/len`.
pub(super) fn parse_peer(v: &str) -> Result<Ipv4Net, String> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => {
            let len =
                l.parse::<u8>().ok().filter(|l| *l <= 32).ok_or_else(|| {
                    "the prefix length must be 0 to 32 (value not shown)".to_string()
                })?;
            (a, len)
        }
        None => (v, 32),
    };
    let ip = if let Ok(a) = addr.parse::<Ipv4Addr>() {
        a
    } else if let Some(a) = colon_hex(addr) {
        a
    } else if addr.parse::<Ipv6Addr>().is_ok() {
        return Err(
            "is IPv6: PILSC protects IPv4 only (it marks packets with the IPv4 security option, type 130)".into(),
        );
    } else {
        return Err(
            "is not an IPv4 address (193.140.1.1 or c1:8c:01:01, optionally /len; value not shown)"
                .into(),
        );
    };
    let net = Ipv4Net::new(ip, len).map_err(|e| e.to_string())?;
    if net.network() != ip {
        return Err(format!(
            "{ip} has bits set past its /{len} prefix (did you mean {}?)",
            net.trunc()
        ));
    }
    Ok(net)
}

/// The paper's `00:00:00:00 .. ff:ff:ff:ff`: four groups of one or two hex digits.
fn colon_hex(s: &str) -> Option<Ipv4Addr> {
    let mut b = [0u8; 4];
    let mut n = 0;
    for g in s.split(':') {
        if n == 4 || g.is_empty() || g.len() > 2 {
            return None;
        }
        b[n] = u8::from_str_radix(g, 16).ok()?;
        n += 1;
    }
    (n == 4).then_some(Ipv4Addr::from(b))
}

/// Splits a line into its statements: the comment dropped, `;` separating.
pub(super) fn statements(line: &str) -> impl Iterator<Item = &str> {
    let line = line.split('#').next().unwrap_or("");
    line.split(';').map(str::trim).filter(|s| !s.is_empty())
}
