use super::*;

fn conn() -> SwanConn {
    SwanPair::conn(
        0,
        "site",
        SwanAuth::Psk(SwanPsk::new("lab psk 0123456789").unwrap()),
        "aes128-sha256-x25519",
        "gcm",
        "aes128gcm16-x25519",
    )
}

#[test]
fn renders_one_key_value_per_line() {
    let text = render_swanctl_conf(&[conn()]).unwrap();
    for want in [
        "    local_addrs = 192.0.2.1\n",
        "    remote_addrs = 192.0.2.2\n",
        "    proposals = aes128-sha256-x25519\n",
        "    encap = yes\n",
        "      auth = psk\n      id = a.lab.test\n",
        "      auth = psk\n      id = b.lab.test\n",
        "        local_ts = 198.51.100.1/32\n",
        "        remote_ts = 198.51.100.2/32\n",
        "        esp_proposals = aes128gcm16-x25519\n",
        "        mode = tunnel\n",
        "    id-1 = a.lab.test\n    id-2 = b.lab.test\n    secret = \"lab psk 0123456789\"\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{}", text.as_str());
    }
    // Balanced braces, and the structure as charon reads it: parse it back with the pretty parser's rules.
    assert_eq!(text.matches('{').count(), text.matches('}').count());
    for line in text.lines() {
        let l = line.trim();
        assert!(
            l.ends_with('{') || l == "}" || l.split_once(" = ").is_some(),
            "{line:?}"
        );
    }
}

#[test]
fn values_that_could_break_the_file_are_refused() {
    let evil = [
        "x\n  }\n}\nconnections {",
        "x}",
        "x{",
        "a\"b",
        "a#b",
        "a\rb",
        "a\\b",
        " lead",
        "trail ",
        "",
        "a\0b",
    ];
    for v in evil {
        let mut c = conn();
        c.local_id = v.into();
        assert!(c.render().is_err(), "local id {v:?} accepted");
        let mut c = conn();
        c.proposals = v.into();
        assert!(c.render().is_err(), "proposals {v:?} accepted");
        let mut c = conn();
        c.children[0].esp_proposals = v.into();
        assert!(c.render().is_err(), "esp proposals {v:?} accepted");
        let mut c = conn();
        c.children[0].local_ts = vec![v.into()];
        assert!(c.render().is_err(), "ts {v:?} accepted");
        let mut c = conn();
        c.name = v.into();
        assert!(c.render().is_err(), "name {v:?} accepted");
        let mut c = conn();
        c.children[0].name = v.into();
        assert!(c.render().is_err(), "child name {v:?} accepted");
        assert!(SwanPsk::new(v).is_err() || !v.contains(['"', '\\', '\n', '\r', '\0']));
    }
    for v in ["a\"b", "a\\b", "a\nb", "", "a\0b"] {
        assert!(SwanPsk::new(v).is_err(), "psk {v:?} accepted");
    }
    // What must stay possible: DN ids with '=' and ', ', several proposals, prefixes.
    let mut c = conn();
    c.local_id = "C=CH, O=lab, CN=a".into();
    c.proposals = "aes256gcm16-prfsha384-ecp384, aes128-sha256-modp2048".into();
    c.children[0].remote_ts = vec!["198.51.100.0/24".into(), "2001:db8::/64".into()];
    let text = c.render().unwrap();
    assert!(text.contains("    id = C=CH, O=lab, CN=a\n"), "{text}");
    assert!(
        text.contains("remote_ts = 198.51.100.0/24,2001:db8::/64\n"),
        "{text}"
    );
}

#[test]
fn psk_debug_prints_no_bytes() {
    let p = SwanPsk::new("very-secret-psk").unwrap();
    let d = format!("{p:?} {:?}", SwanAuth::Psk(p.clone()));
    assert!(!d.contains("very") && !d.contains("secret-psk"), "{d}");
}

/// `swanctl --list-sas --pretty` of charon 5.9.8 (two lab charons, PSK + X25519, AES-GCM child).
const PRETTY: &str = "list-sa event {
  site {
uniqueid = 17
version = 2
state = ESTABLISHED
local-host = 192.0.2.1
local-port = 4500
local-id = site1
remote-host = 192.0.2.2
remote-port = 4500
remote-id = C=CH, O=lab, CN=b
initiator = yes
initiator-spi = 21fe016b58dfd1f1
responder-spi = 68161dd1103e0848
nat-remote = yes
nat-any = yes
encr-alg = AES_CBC
encr-keysize = 128
integ-alg = HMAC_SHA2_256_128
prf-alg = PRF_HMAC_SHA2_256
dh-group = CURVE_25519
established = 26
rekey-time = 13329
child-sas {
  c-17 {
    name = c
    uniqueid = 17
    reqid = 1
    state = INSTALLED
    mode = TUNNEL
    protocol = ESP
    encap = yes
    spi-in = 1d4e5d05
    spi-out = 7967d41f
    encr-alg = AES_GCM_16
    encr-keysize = 128
    bytes-in = 168
    packets-in = 2
    bytes-out = 0
    packets-out = 0
    rekey-time = 3249
    life-time = 3934
    install-time = 26
    local-ts = [
      10.1.0.1/32
    ]
    remote-ts = [
      10.2.0.1/32
      10.3.0.0/24
    ]
  }
}
  }
}
list-sas reply {
}
";

#[test]
fn parses_list_sas_pretty() {
    let sas = parse_list_sas(PRETTY).unwrap();
    assert_eq!(sas.len(), 1);
    let s = &sas[0];
    assert_eq!(s.name, "site");
    assert_eq!(s.uniqueid, 17);
    assert_eq!(s.state, IkeState::Established);
    assert_eq!(s.local_host, Some("192.0.2.1".parse().unwrap()));
    assert_eq!(s.remote_port, Some(4500));
    assert_eq!(s.remote_id, "C=CH, O=lab, CN=b");
    assert!(s.initiator);
    assert_eq!(s.initiator_spi, 0x21fe016b58dfd1f1);
    assert_eq!(s.responder_spi, 0x68161dd1103e0848);
    assert_eq!(s.algorithms.encr.as_deref(), Some("AES_CBC"));
    assert_eq!(s.algorithms.encr_keysize, Some(128));
    assert_eq!(s.algorithms.integ.as_deref(), Some("HMAC_SHA2_256_128"));
    assert_eq!(s.algorithms.prf.as_deref(), Some("PRF_HMAC_SHA2_256"));
    assert_eq!(s.algorithms.dh_group.as_deref(), Some("CURVE_25519"));
    let c = s.child("c").unwrap();
    assert_eq!(c.state, ChildState::Installed);
    assert_eq!(
        (c.mode.as_str(), c.protocol.as_str(), c.encap),
        ("TUNNEL", "ESP", true)
    );
    assert_eq!((c.spi_in, c.spi_out), (0x1d4e5d05, 0x7967d41f));
    assert_eq!(c.algorithms.encr.as_deref(), Some("AES_GCM_16"));
    assert_eq!(c.algorithms.integ, None);
    assert_eq!((c.bytes_in, c.packets_in, c.packets_out), (168, 2, 0));
    assert_eq!(c.local_ts, vec!["10.1.0.1/32"]);
    assert_eq!(c.remote_ts, vec!["10.2.0.1/32", "10.3.0.0/24"]);
    // No SA: only the reply.
    assert!(parse_list_sas("list-sas reply {\n}\n").unwrap().is_empty());
    // Truncated output is an error, not a shorter list.
    let cut = &PRETTY[..PRETTY.len() / 2];
    assert!(parse_list_sas(cut).is_err());
    assert!(parse_list_sas("list-sa event {\n  site {\n    what\n  }\n}\n").is_err());
}

#[test]
fn vici_wire_format() {
    // The encoding of vici's README: length, CMD_REQUEST, name, KEY_VALUE name value.
    let m = vici_encode_request("initiate", &[("child", "gcm")]).unwrap();
    let want: Vec<u8> = [
        &[0u8, 0, 0, 22][..],
        &[0, 8],
        b"initiate",
        &[3, 5],
        b"child",
        &[0, 3],
        b"gcm",
    ]
    .concat();
    assert_eq!(m, want);
    // A response with a value, a list and a nested section.
    let body: Vec<u8> = [
        &[3u8, 7][..],
        b"success",
        &[0, 3],
        b"yes",
        &[4, 2],
        b"ts",
        &[5, 0, 1],
        b"a",
        &[5, 0, 2],
        b"bc",
        &[6],
        &[1, 1],
        b"s",
        &[3, 1],
        b"k",
        &[0, 0],
        &[2],
    ]
    .concat();
    let t = vici_decode(&body).unwrap();
    assert_eq!(t.get("success"), Some("yes"));
    assert_eq!(t.list("ts"), vec!["a", "bc"]);
    assert_eq!(t.section("s").and_then(|s| s.get("k")), Some(""));
    // A cut between two top-level elements is a shorter valid message; a cut anywhere else is an error
    // (never a panic).
    for n in 0..body.len() {
        let r = vici_decode(&body[..n]);
        assert_eq!(r.is_ok(), [0, 14, 28].contains(&n), "cut at {n}: {r:?}");
    }
    assert!(vici_decode(&[2]).is_err());
    assert!(vici_decode(&[1, 1, b's']).is_err());
    assert!(vici_decode(&[9]).is_err());
}
