//! Distinguished names as text (`netveil_ike::cert::dn_string`, what `status`, JSON and the logs show of a DN
//! identity): RFC 4514's escapes, multi-valued RDNs, unknown attribute types as dotted decimal with the value's
//! DER in hex, values that are not strings, and control characters a peer could put in its DN.

use netveil_ike::cert::{dn_string, parse_dn};
use netveil_ike::machine::glue::id_string;
use netveil_ike::message::Id;
use yasna::models::ObjectIdentifier;

const CN: &[u64] = &[2, 5, 4, 3];
const OU: &[u64] = &[2, 5, 4, 11];

/// One attribute value, as the DER writer takes it.
#[derive(Clone)]
enum V {
    Utf8(&'static str),
    Printable(&'static str),
    Bmp(&'static str),
    Int(i64),
}

/// A DN of RDNs, each a set of (type, value) in the order given.
fn dn(rdns: &[&[(&[u64], V)]]) -> Vec<u8> {
    // By hand around yasna's encoding of each attribute: yasna's SET OF would sort the attributes.
    let atv = |(oid, v): &(&[u64], V)| {
        yasna::construct_der(|w| {
            w.write_sequence(|w| {
                w.next().write_oid(&ObjectIdentifier::from_slice(oid));
                match v {
                    V::Utf8(s) => w.next().write_utf8_string(s),
                    V::Printable(s) => w.next().write_printable_string(s),
                    V::Bmp(s) => w.next().write_bmp_string(s),
                    V::Int(i) => w.next().write_i64(*i),
                }
            })
        })
    };
    let tlv = |tag: u8, body: Vec<u8>| {
        let mut out = vec![tag];
        let n = body.len();
        match n {
            0..128 => out.push(n as u8),
            128..256 => out.extend([0x81, n as u8]),
            _ => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend(body);
        out
    };
    let seq: Vec<u8> = rdns
        .iter()
        .flat_map(|rdn| tlv(0x31, rdn.iter().flat_map(atv).collect()))
        .collect();
    tlv(0x30, seq)
}

#[test]
fn plain_names_read_as_swanctl_writes_them() {
    let d = parse_dn("C=CH, O=strongSwan, OU=lab, CN=moon, E=moon@example.org").unwrap();
    assert_eq!(
        dn_string(&d),
        "C=CH, O=strongSwan, OU=lab, CN=moon, E=moon@example.org"
    );
    // And back: the text is swanctl's syntax.
    assert_eq!(parse_dn(&dn_string(&d)).unwrap(), d);
}

#[test]
fn special_characters_are_escaped_as_rfc_4514_says() {
    for (value, want) in [
        ("a,b", r"CN=a\,b"),
        ("a+b", r"CN=a\+b"),
        (r#"say "hi""#, r#"CN=say \"hi\""#),
        ("a;b<c>d", r"CN=a\;b\<c\>d"),
        (r"back\slash", r"CN=back\\slash"),
        ("#not hex", r"CN=\#not hex"),
        ("in#side", "CN=in#side"),
        (" lead", r"CN=\ lead"),
        ("trail ", r"CN=trail\ "),
        ("a=b", "CN=a=b"),
        ("Zürich", "CN=Zürich"),
    ] {
        assert_eq!(
            dn_string(&dn(&[&[(CN, V::Utf8(value))]])),
            want,
            "{value:?}"
        );
    }
}

/// Nothing in a peer's DN can break a log line: control characters (NUL, line ends, ESC) and other line breaks as
/// `\XX` per UTF-8 byte.
#[test]
fn control_characters_are_hex_escaped() {
    for (value, want) in [
        ("a\nb", r"CN=a\0Ab"),
        ("a\0b", r"CN=a\00b"),
        ("\u{1b}[31mred", r"CN=\1B[31mred"),
        ("a\u{2028}b", r"CN=a\E2\80\A8b"),
        ("a\rb", r"CN=a\0Db"),
    ] {
        let text = dn_string(&dn(&[&[(CN, V::Utf8(value))]]));
        assert_eq!(text, want, "{value:?}");
        assert!(!text.chars().any(char::is_control));
    }
}

#[test]
fn a_multi_valued_rdn_joins_its_attributes_with_plus() {
    let d = dn(&[
        &[(&[2, 5, 4, 6], V::Printable("CH"))],
        &[(OU, V::Utf8("ops")), (CN, V::Utf8("moon"))],
    ]);
    assert_eq!(dn_string(&d), "C=CH, OU=ops+CN=moon");
}

/// An attribute type swanctl has no name for: its OID in dotted decimal, the value as `#` and its DER in hex
/// (RFC 4514 2.4), whatever its type; a known type with a value that is no string: the same for the value.
#[test]
fn unknown_types_and_values_that_are_not_strings_as_hex() {
    let d = dn(&[
        &[(&[1, 3, 6, 1, 4, 1, 99999, 1], V::Utf8("x"))],
        &[(&[2, 5, 4, 3], V::Int(5))],
        &[(&[2, 5, 4, 46], V::Printable("q"))],
    ]);
    assert_eq!(
        dn_string(&d),
        "1.3.6.1.4.1.99999.1=#0c0178, CN=#020105, 2.5.4.46=#130171"
    );
}

#[test]
fn other_string_types_are_read() {
    let d = dn(&[&[(CN, V::Bmp("Zürich"))]]);
    assert_eq!(dn_string(&d), "CN=Zürich");
}

/// Bytes that are no DN: `#` and their hex, not a panic.
#[test]
fn bytes_that_are_not_a_dn() {
    assert_eq!(dn_string(&[0x30, 0x03, 0x31]), "#300331");
    assert_eq!(dn_string(&[]), "#");
}

/// A DN ID payload as the peer sends it: the whole name as text (before: `ID_DER_ASN1_DN:3040...`, cut at 64 of 66
/// bytes), and a name as long as a message cut after 512 characters.
#[test]
fn dn_ids_show_whole_as_text() {
    let d = parse_dn("C=CH, O=netveil test, OU=interop lab, CN=moon.netveil.test").unwrap();
    assert!(d.len() > 64);
    assert_eq!(
        id_string(&Id::der_dn(d)),
        "C=CH, O=netveil test, OU=interop lab, CN=moon.netveil.test"
    );
    let long: &'static str = Box::leak("x".repeat(2000).into_boxed_str());
    let t = id_string(&Id::der_dn(dn(&[&[(CN, V::Utf8(long))]])));
    assert_eq!(t.chars().count(), 512 + 3);
    assert!(t.starts_with("CN=xxx") && t.ends_with("..."));
}

/// What `status` shows of a DN can be written back into a configuration: `parse_dn` reads RFC 4514's escapes, and
/// the name it gives is the one shown (values with `,` `+` `"` `\` `;` `<` `>` `=`, a leading `#` or space, a
/// trailing space, a control character). A `/` in a value (shown as is: swanctl's syntax splits at it) is written
/// `\/` or `\2F`.
#[test]
fn what_status_shows_parses_back_to_the_same_name() {
    use netveil_ike::cert::dn_equal;
    for value in [
        "Acme, Inc.",
        "a+b",
        "say \"hi\"",
        r"back\slash",
        "a;b<c>d=e",
        "#hash",
        " lead",
        "trail ",
        "line\nbreak",
        "  both  ",
        "caf\u{e9}",
    ] {
        let d = dn(&[&[(OU, V::Utf8(value))], &[(CN, V::Utf8("moon"))]]);
        let shown = dn_string(&d);
        let back = parse_dn(&shown).unwrap_or_else(|e| panic!("{value:?} shown as {shown:?}: {e}"));
        assert!(
            dn_equal(&back, &d),
            "{value:?} shown as {shown:?} read back as another name"
        );
        assert_eq!(dn_string(&back), shown, "{value:?}");
    }
    // Hex escapes are bytes of the UTF-8; `/` escaped either way.
    assert_eq!(
        parse_dn(r"CN=a\2Fb\C3\A9").unwrap(),
        parse_dn("CN=a\\/b\u{e9}").unwrap()
    );
    assert_eq!(
        dn_string(&parse_dn(r"O=a\/b, CN=x").unwrap()),
        "O=a/b, CN=x"
    );
    // Unescaped spaces around a value are not part of it; an escaped one is.
    assert_eq!(
        parse_dn("CN=  moon  ").unwrap(),
        parse_dn("CN=moon").unwrap()
    );
    assert_ne!(
        parse_dn(r"CN=moon\ ").unwrap(),
        parse_dn("CN=moon").unwrap()
    );
    // A backslash before anything else, at the end, or hex escapes that are not UTF-8: errors naming the attribute.
    for bad in [r"CN=a\qb", r"CN=a\", r"CN=\FF", r"CN=a\2"] {
        let e = parse_dn(bad).expect_err(bad);
        assert!(e.starts_with("attribute CN: "), "{bad}: {e}");
    }
}
