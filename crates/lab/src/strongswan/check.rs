//! The checks every value passes before it goes into `swanctl.conf` or a `pki` command: a value that could change
//! the file's structure is refused rather than escaped.

use crate::{Error, Result};
use std::net::IpAddr;

/// A name (connection, child): letters, digits, `-`, `_`, at most 64.
pub(super) fn check_name(what: &str, v: &str) -> Result<()> {
    if v.is_empty()
        || v.len() > 64
        || !v
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::Usage(format!(
            "{what} {v:?}: a strongSwan name is 1-64 letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

/// A value of `key = value`: printable ASCII (spaces inside allowed), none of the characters that strongSwan's
/// settings parser gives a meaning (`{ } " # = \` and line ends), no leading or trailing space, at most 512.
pub(super) fn check_value(what: &str, v: &str) -> Result<()> {
    let bad = |c: char| {
        matches!(c, '{' | '}' | '"' | '#' | '=' | '\\' | '[' | ']')
            || !(c == ' ' || c.is_ascii_graphic())
    };
    if v.is_empty() || v.len() > 512 || v.trim() != v || v.chars().any(bad) {
        return Err(Error::Usage(format!(
            "{what} {v:?} is refused: it could break swanctl.conf (empty, too long, surrounding spaces, \
             a line end or one of {{ }} \" # = \\ [ ])"
        )));
    }
    Ok(())
}

/// An identity: a value as above, except that `=` is allowed (DNs such as `C=CH, O=lab, CN=a`).
pub(super) fn check_id(what: &str, v: &str) -> Result<()> {
    check_value(what, &v.replace('=', ":"))
}

/// A proposal list: comma-separated tokens of letters, digits, `-` and `_`.
pub(super) fn check_proposals(what: &str, v: &str) -> Result<()> {
    let ok = !v.trim().is_empty()
        && v.trim() == v
        && v.len() <= 512
        && v.split(',').all(|p| {
            let p = p.trim();
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !ok {
        return Err(Error::Usage(format!(
            "{what} {v:?}: expected strongSwan proposals such as 'aes128gcm16-x25519, aes128-sha256'"
        )));
    }
    Ok(())
}

/// A traffic selector: an address or prefix with an optional `[proto/port]` (checked as an address here).
pub(super) fn check_ts(what: &str, v: &str) -> Result<()> {
    let (net, len) = v.split_once('/').unwrap_or((v, ""));
    let ok = net.parse::<IpAddr>().is_ok()
        && (len.is_empty() || len.parse::<u8>().is_ok_and(|l| l <= 128));
    if !ok {
        return Err(Error::Usage(format!(
            "{what} {v:?}: expected an address or prefix such as 198.51.100.1/32"
        )));
    }
    Ok(())
}
