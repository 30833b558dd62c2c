//! Distinguished names: swanctl's syntax (`C=CH, O=strongSwan, CN=moon`) encoded to DER ([`parse_dn`]), two DNs
//! compared as strongSwan compares them ([`dn_equal`]), a DN written back as text ([`dn_string`], RFC 4514's
//! escapes). [`crate::cert`] re-exports the three.

use x509_parser::prelude::{FromDer, X509Name};

/// The attribute types swanctl's DN syntax names (strongSwan's x501rdns), with their OID.
const ATTRS: &[(&str, &[u64])] = &[
    ("CN", &[2, 5, 4, 3]),
    ("SN", &[2, 5, 4, 5]),
    ("serialNumber", &[2, 5, 4, 5]),
    ("C", &[2, 5, 4, 6]),
    ("L", &[2, 5, 4, 7]),
    ("ST", &[2, 5, 4, 8]),
    ("S", &[2, 5, 4, 8]),
    ("O", &[2, 5, 4, 10]),
    ("OU", &[2, 5, 4, 11]),
    ("T", &[2, 5, 4, 12]),
    ("E", &[1, 2, 840, 113549, 1, 9, 1]),
    ("Email", &[1, 2, 840, 113549, 1, 9, 1]),
    ("emailAddress", &[1, 2, 840, 113549, 1, 9, 1]),
    ("DC", &[0, 9, 2342, 19200300, 100, 1, 25]),
    ("UID", &[0, 9, 2342, 19200300, 100, 1, 1]),
];

/// A DN in swanctl's syntax (`C=CH, O=strongSwan, CN=moon`: `type=value` separated by `,` or `/`) as DER: one
/// attribute per RDN, in the order written; a value as PrintableString where its characters allow (as
/// strongSwan's `pki --dn` encodes it), else UTF8String (IA5String for e-mail addresses and domain components).
/// RFC 4514's escapes are read, so that what [`dn_string`] shows (in `status`, the logs) can be written back:
/// `\,` `\+` `\"` `\\` `\;` `\<` `\>` `\=` `\#` `\ ` (and `\/`, since `/` separates here) or two hex
/// digits (`\2F`: one byte of the value's UTF-8).
pub fn parse_dn(s: &str) -> Result<Vec<u8>, String> {
    let parts: Vec<&str> = split_unescaped(s)
        .into_iter()
        .map(str::trim_start)
        .filter(|p| !p.trim_end().is_empty())
        .collect();
    if parts.is_empty() {
        return Err("is an empty distinguished name".into());
    }
    let mut rdns = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("'{}' is not type=value", p.trim_end()))?;
        let k = k.trim();
        let v = dn_value(v).map_err(|e| format!("attribute {k}: {e}"))?;
        let v = v.as_str();
        let oid = ATTRS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, o)| *o)
            .ok_or_else(|| {
                format!("unknown attribute type '{k}' (C, ST, L, O, OU, CN, SN, T, E, DC, UID)")
            })?;
        if v.is_empty() || v.len() > 256 {
            return Err(format!("attribute {k} has an empty or too long value"));
        }
        rdns.push((oid, v.to_string()));
    }
    let der = yasna::construct_der(|w| {
        w.write_sequence_of(|w| {
            for (oid, v) in &rdns {
                w.next().write_set_of(|w| {
                    w.next().write_sequence(|w| {
                        w.next()
                            .write_oid(&yasna::models::ObjectIdentifier::from_slice(oid));
                        let ia5 = oid.len() > 4;
                        if ia5 && v.is_ascii() {
                            w.next().write_ia5_string(v);
                        } else if v.bytes().all(printable) {
                            w.next().write_printable_string(v);
                        } else {
                            w.next().write_utf8_string(v);
                        }
                    })
                })
            }
        })
    });
    Ok(der)
}

/// `s` cut at each `,` or `/` that no backslash escapes.
fn split_unescaped(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let (mut parts, mut start, mut i) = (Vec::new(), 0, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b',' | b'/' => {
                parts.push(&s[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    parts.push(&s[start.min(s.len())..]);
    parts
}

/// A value as written (after `=`), its escapes read: leading spaces and trailing spaces that no backslash escapes
/// are not part of it.
fn dn_value(raw: &str) -> Result<String, String> {
    let raw = raw.trim_start();
    let b = raw.as_bytes();
    let mut end = b.len();
    while end > 0 && b[end - 1] == b' ' {
        let escapes = b[..end - 1]
            .iter()
            .rev()
            .take_while(|&&c| c == b'\\')
            .count();
        if escapes % 2 == 1 {
            break;
        }
        end -= 1;
    }
    let b = &b[..end];
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match (b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (Some(x), Some(y)) if hex(x).is_some() && hex(y).is_some() => {
                out.push(hex(x).unwrap_or(0) << 4 | hex(y).unwrap_or(0));
                i += 3;
            }
            (Some(x), _) if b" \"#+,;<=>\\/".contains(&x) => {
                out.push(x);
                i += 2;
            }
            _ => {
                return Err(
                    "a backslash escapes one of ' \"#+,;<=>\\/' or stands before two hex digits"
                        .into(),
                )
            }
        }
    }
    String::from_utf8(out).map_err(|_| "its \\XX escapes are not UTF-8".into())
}

/// X.680's PrintableString characters.
fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b)
}

/// The attributes of a DN, each (OID as text, value as text); `None` if it does not parse or holds a value that
/// is not a string.
fn dn_attrs(der: &[u8]) -> Option<Vec<(String, String)>> {
    let (rest, name) = X509Name::from_der(der).ok()?;
    if !rest.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for rdn in name.iter() {
        for a in rdn.iter() {
            out.push((a.attr_type().to_id_string(), a.as_str().ok()?.to_string()));
        }
    }
    Some(out)
}

/// Whether two DER DNs are equal as strongSwan compares them: the same attribute types in the same order, the
/// values equal ignoring ASCII case and the string type (PrintableString or UTF8String).
pub fn dn_equal(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    match (dn_attrs(a), dn_attrs(b)) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(&y)
                    .all(|((ta, va), (tb, vb))| ta == tb && va.eq_ignore_ascii_case(vb))
        }
        _ => false,
    }
}

/// A DER DN as text, for `status`, JSON and logs: `C=CH, O=strongSwan, CN=moon`.
///
/// Each attribute as RFC 4514 writes it: the type by the name swanctl's syntax gives it (`CN`, `O`, `E`, ...;
/// [`parse_dn`] reads them back), a string value with RFC 4514's escapes (`\` before `"` `+` `,` `;` `<` `>`
/// `\`, before a leading space or `#` and a trailing space; control characters, NUL included, as `\XX` per
/// UTF-8 byte, so that nothing a peer puts in a DN can forge a log line), the attributes of a multi-valued RDN
/// joined by `+`; an unknown type as its OID in dotted decimal and every value that is not a string (or an
/// unknown type's value) as `#` and the hex of its DER encoding. The RDNs in the order of the DER, separated by
/// `, ` (strongSwan's order and separator, the way swanctl.conf's `id` is written, where RFC 4514 would reverse
/// them). Bytes that are not a DN: `#` and their hex.
pub fn dn_string(der: &[u8]) -> String {
    let hex = |b: &[u8]| -> String { b.iter().map(|x| format!("{x:02x}")).collect() };
    let Ok(([], name)) = X509Name::from_der(der) else {
        return format!("#{}", hex(der));
    };
    let mut out = String::new();
    for (i, rdn) in name.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        for (j, a) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            let oid = a.attr_type();
            let known = oid.iter().and_then(|arcs| {
                let arcs: Vec<u64> = arcs.collect();
                ATTRS.iter().find(|(_, o)| *o == arcs).map(|(n, _)| *n)
            });
            out.push_str(&known.map_or_else(|| oid.to_id_string(), str::to_string));
            out.push('=');
            match known.and(dn_value_text(a.attr_value())) {
                Some(t) => escape_dn_value(&t, &mut out),
                None => {
                    use x509_parser::asn1_rs::ToDer;
                    out.push('#');
                    out.push_str(&hex(&a.attr_value().to_der_vec().unwrap_or_default()));
                }
            }
        }
    }
    out
}

/// The text of a DN attribute value of a string type (`None`: another type, or bytes that are not the type's).
fn dn_value_text(v: &x509_parser::asn1_rs::Any<'_>) -> Option<String> {
    use x509_parser::asn1_rs::{Class, Tag};
    if v.class() != Class::Universal || v.header.is_constructed() {
        return None;
    }
    let d = v.data;
    match v.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString => std::str::from_utf8(d).ok().map(str::to_string),
        Tag::BmpString if d.len().is_multiple_of(2) => {
            char::decode_utf16(d.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
                .collect::<Result<String, _>>()
                .ok()
        }
        Tag::UniversalString if d.len().is_multiple_of(4) => d
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// `v` with RFC 4514's escapes (2.4), and control characters and whitespace other than a space (line and
/// paragraph separators) as `\XX` per UTF-8 byte.
fn escape_dn_value(v: &str, out: &mut String) {
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' ' | '#' if i == 0 => {
                out.push('\\');
                out.push(c);
            }
            ' ' if i == last => out.push_str("\\ "),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let mut b = [0u8; 4];
                for x in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\{x:02X}"));
                }
            }
            c => out.push(c),
        }
    }
}
