//! Identities: a configured [`Identity`] as the ID payload it is sent as ([`id_payload`]), a received ID matched
//! against it ([`id_matches`]), both as text for `status`, events and logs ([`id_string`], [`id_text`],
//! [`identity_string`]). `crate::machine::glue` re-exports what the machine and the daemon name there.

use crate::config::Identity;
use crate::dn::{dn_equal, dn_string};
use crate::message::{Id, IdType};

/// The ID payload for a local identity (`None` for `%any`, which is never a local one).
pub fn id_payload(id: &Identity) -> Option<Id> {
    Some(match id {
        Identity::Any => return None,
        Identity::Ipv4(a) => Id::ipv4(*a),
        Identity::Ipv6(a) => Id::ipv6(*a),
        Identity::Fqdn(s) => Id::fqdn(s),
        Identity::Email(s) => Id::rfc822(s),
        Identity::Dn(d) => Id::der_dn(d.clone()),
        Identity::KeyId(k) => Id::key_id(k.clone()),
    })
}

/// Whether a received ID is the configured identity, DNs compared as [`dn_equal`] does (`%any` matches all; other
/// IDs: the ID payload the identity makes, byte for byte).
pub fn id_matches(conf: &Identity, got: &Id) -> bool {
    match (conf, got.as_der_dn()) {
        (Identity::Dn(want), Some(d)) => dn_equal(want, d),
        _ => match id_payload(conf) {
            None => true,
            Some(want) => want == *got,
        },
    }
}

/// An ID as text, as strongSwan prints it (`10.0.0.1`, `vpn.example.org`, `user@example.org`, `@#0a0b` for a key
/// id, a DN as [`dn_string`] writes it: `C=CH, O=strongSwan, CN=moon`), for `status`, JSON and
/// logs; at most [`ID_TEXT_MAX`] characters (a peer's DN can be as long as its message).
pub fn id_string(id: &Id) -> String {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    if let Some(d) = id.as_der_dn() {
        let t = dn_string(d);
        return match t.char_indices().nth(ID_TEXT_MAX) {
            Some((at, _)) => format!("{}...", &t[..at]),
            None => t,
        };
    }
    if let Some(a) = id.as_ipv4() {
        a.to_string()
    } else if let Some(a) = id.as_ipv6() {
        a.to_string()
    } else if let Some(s) = id.as_fqdn().or_else(|| id.as_rfc822()) {
        s.chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .take(256)
            .collect()
    } else if id.id_type() == IdType::KEY_ID {
        format!("@#{}", hex(id.data()))
    } else {
        let d = id.data();
        format!(
            "{:?}:{}{}",
            id.id_type(),
            hex(&d[..d.len().min(64)]),
            if d.len() > 64 { "..." } else { "" }
        )
    }
}

/// The longest ID text [`id_string`] makes of a DN, in characters.
pub const ID_TEXT_MAX: usize = 512;

/// A configured identity as text (for events).
pub fn identity_string(id: &Identity) -> String {
    id_payload(id).map_or_else(|| "%any".to_string(), |i| id_string(&i))
}

/// The peer's identity as it authenticated (`got`, its ID payload), kept for `status` only where the configured
/// one (`conf`) does not already say it (`%any`, or a DN written otherwise): `None` where it would print the same.
pub fn authenticated_id(conf: &Identity, got: &Id) -> Option<Box<str>> {
    let text = id_text(got);
    (text != identity_string(conf)).then(|| text.into_boxed_str())
}

/// An ID for messages: DNs as text, others as the machine prints them.
pub fn id_text(id: &Id) -> String {
    match id.as_der_dn() {
        Some(d) => dn_string(d),
        None => id_string(id),
    }
}
