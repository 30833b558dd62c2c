//! The codec on hand-written malformed input: truncated headers, lengths that overrun or are too small, zero
//! lengths, wrong versions, trailing bytes, payloads after SK, unknown critical payloads, SA substructure markers
//! and proposal numbers, caps on payloads, proposals, transforms and attributes, nonce lengths, traffic selector
//! ranges, fragment numbers. Each case names the error it expects.

use netveil_ike::message::sa::protocol_id;
use netveil_ike::message::{
    header, payload_type, AddrRange, Chain, EncryptedFragment, Error, ExchangeType, Flags, Header,
    Message, Nonce, Payload, Sa, TrafficSelector, Ts, Unknown, VendorId, MAX_PAYLOADS,
    MAX_PROPOSALS, MAX_TRAFFIC_SELECTORS, MAX_TRANSFORMS, MAX_TRANSFORM_ATTRIBUTES,
};
use std::net::{Ipv4Addr, Ipv6Addr};

fn header(exchange_type: ExchangeType) -> Header {
    Header {
        initiator_spi: 1,
        responder_spi: 2,
        exchange_type,
        flags: Flags::default(),
        message_id: 7,
    }
}

/// A generic payload: next payload, flags byte, length, body.
fn gp(next: u8, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![next, flags];
    v.extend_from_slice(&((body.len() + 4) as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A datagram: a 2.0 header whose length is right, first payload `first`, then `chain`.
fn datagram(first: u8, chain: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; 28];
    v[..8].copy_from_slice(&[1; 8]);
    v[16] = first;
    v[17] = 0x20;
    v[18] = 34;
    v[19] = 0x08;
    v[24..28].copy_from_slice(&((28 + chain.len()) as u32).to_be_bytes());
    v.extend_from_slice(chain);
    v
}

#[test]
fn header_errors() {
    let d = datagram(0, &[]);
    assert_eq!(
        Message::parse(&d[..27]),
        Err(Error::Truncated { what: "IKE header" })
    );
    assert!(header::Packet::new_checked(&d[..27]).is_err());
    // Higher and lower major versions are reported with the version.
    let mut v = d.clone();
    v[17] = 0x30;
    assert_eq!(
        Message::parse(&v),
        Err(Error::BadVersion { major: 3, minor: 0 })
    );
    v[17] = 0x10;
    assert_eq!(
        Message::parse(&v),
        Err(Error::BadVersion { major: 1, minor: 0 })
    );
    // Length under the header's, above and below the datagram's.
    let mut v = d.clone();
    v[27] = 27;
    assert_eq!(
        Message::parse(&v),
        Err(Error::BadLength {
            what: "IKE message"
        })
    );
    v[27] = 29;
    assert_eq!(
        Message::parse(&v),
        Err(Error::LengthMismatch {
            header: 29,
            datagram: 28
        })
    );
    let mut v = d.clone();
    v.push(0);
    assert_eq!(
        Message::parse(&v),
        Err(Error::LengthMismatch {
            header: 28,
            datagram: 29
        })
    );
    let mut v = d;
    v[24] = 0xff;
    assert!(matches!(
        Message::parse(&v),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn chain_errors() {
    let n = gp(0, 0, &[7; 16]);
    assert!(Message::parse(&datagram(payload_type::NONCE, &n)).is_ok());
    // Truncated generic header, payload running past the message, lengths 0 and 3.
    assert_eq!(
        Message::parse(&datagram(payload_type::NONCE, &n[..3])),
        Err(Error::Truncated {
            what: "generic payload header"
        })
    );
    assert_eq!(
        Message::parse(&datagram(payload_type::NONCE, &n[..19])),
        Err(Error::Truncated { what: "payload" })
    );
    for len in [0u8, 3] {
        let mut b = n.clone();
        b[2] = 0;
        b[3] = len;
        assert_eq!(
            Message::parse(&datagram(payload_type::NONCE, &b)),
            Err(Error::BadLength { what: "payload" })
        );
    }
    // A next payload named, but no bytes for it.
    let b = gp(payload_type::NOTIFY, 0, &[7; 16]);
    assert_eq!(
        Message::parse(&datagram(payload_type::NONCE, &b)),
        Err(Error::Truncated {
            what: "generic payload header"
        })
    );
    // Bytes after the last payload.
    let mut b = n.clone();
    b.extend_from_slice(&[0; 5]);
    assert_eq!(
        Message::parse(&datagram(payload_type::NONCE, &b)),
        Err(Error::TrailingBytes { len: 5 })
    );
    // A header that names no payload, but bytes follow.
    assert_eq!(
        Message::parse(&datagram(0, &n)),
        Err(Error::TrailingBytes { len: 20 })
    );
    // A payload after SK.
    let mut b = gp(payload_type::IDI, 0, &[0; 20]);
    b.extend(gp(0, 0, &[7; 16]));
    assert_eq!(
        Message::parse(&datagram(payload_type::SK, &b)),
        Err(Error::PayloadAfterEncrypted)
    );
    let raw: Vec<_> = Chain::new(payload_type::SK, &b).collect();
    assert_eq!(raw, [Err(Error::PayloadAfterEncrypted)]);
}

#[test]
fn unknown_payloads_critical_or_not() {
    // Unknown, not critical: kept as Unknown (the state machine skips it), the chain goes on.
    let mut b = gp(payload_type::NONCE, 0, &[1, 2, 3]);
    b.extend(gp(0, 0, &[7; 16]));
    let m = Message::parse(&datagram(200, &b)).unwrap();
    assert_eq!(m.payloads.len(), 2);
    assert_eq!(
        m.payloads[0],
        Payload::Unknown(Unknown::new(200, vec![1, 2, 3]).unwrap())
    );
    assert_eq!(m.payloads[1].payload_type(), payload_type::NONCE);
    // Unknown and critical: an error that carries the type.
    let mut b = gp(payload_type::NONCE, 0x80, &[1, 2, 3]);
    b.extend(gp(0, 0, &[7; 16]));
    assert_eq!(
        Message::parse(&datagram(200, &b)),
        Err(Error::UnsupportedCriticalPayload { payload_type: 200 })
    );
    // Known and critical (and reserved bits set): the bit is ignored.
    let b = gp(0, 0xff, &[7; 16]);
    assert_eq!(
        Message::parse(&datagram(payload_type::NONCE, &b))
            .unwrap()
            .payloads
            .len(),
        1
    );
    // Unknown cannot be built with a known type.
    assert!(Unknown::new(payload_type::SA, vec![]).is_none());
    assert!(Unknown::new(0, vec![]).is_none());
}

#[test]
fn payload_count_cap() {
    let chain = |n: usize| {
        let mut b = Vec::new();
        for i in 0..n {
            let next = if i + 1 == n {
                0
            } else {
                payload_type::VENDOR_ID
            };
            b.extend(gp(next, 0, &[i as u8]));
        }
        datagram(payload_type::VENDOR_ID, &b)
    };
    assert_eq!(
        Message::parse(&chain(MAX_PAYLOADS)).unwrap().payloads.len(),
        MAX_PAYLOADS
    );
    assert_eq!(
        Message::parse(&chain(MAX_PAYLOADS + 1)),
        Err(Error::TooMany {
            what: "payloads",
            cap: MAX_PAYLOADS
        })
    );
    let m = Message {
        header: header(ExchangeType::INFORMATIONAL),
        payloads: vec![Payload::VendorId(VendorId(vec![])); MAX_PAYLOADS + 1],
    };
    assert!(matches!(m.to_vec(), Err(Error::TooMany { .. })));
}

/// Transforms written by hand: (last substructure, type, id).
type RawTransforms<'a> = &'a [(u8, u8, u16)];

/// An SA body from proposals written by hand: (last, number, transforms as (last, type, id)).
fn sa_body(props: &[(u8, u8, RawTransforms<'_>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (last, number, ts) in props {
        let mut p = vec![*number, protocol_id::IKE, 0, ts.len() as u8];
        for (tl, ty, id) in ts.iter() {
            p.extend_from_slice(&[*tl, 0, 0, 8, *ty, 0]);
            p.extend_from_slice(&id.to_be_bytes());
        }
        out.extend_from_slice(&[*last, 0]);
        out.extend_from_slice(&((p.len() + 4) as u16).to_be_bytes());
        out.extend(p);
    }
    out
}

#[test]
fn sa_substructures_and_numbers() {
    let t1: &[(u8, u8, u16)] = &[(3, 1, 12), (0, 4, 31)];
    assert_eq!(
        Sa::parse(&sa_body(&[(2, 1, t1), (0, 2, t1)]))
            .unwrap()
            .proposals
            .len(),
        2
    );
    // A reply's single proposal may carry another number.
    assert_eq!(
        Sa::parse(&sa_body(&[(0, 3, t1)])).unwrap().proposals[0].number,
        3
    );
    let bad = |b: Vec<u8>, e: Error| assert_eq!(Sa::parse(&b), Err(e));
    let number = Error::BadValue {
        what: "proposal number",
    };
    bad(sa_body(&[(0, 0, t1)]), number);
    bad(sa_body(&[(2, 1, t1), (0, 3, t1)]), number);
    bad(sa_body(&[(2, 2, t1), (0, 3, t1)]), number);
    // Proposal's "last substructure": 2 on the last one, 0 before another, 3.
    bad(sa_body(&[(2, 1, t1)]), Error::Truncated { what: "SA" });
    bad(
        sa_body(&[(0, 1, t1), (0, 2, t1)]),
        Error::BadLength {
            what: "SA (bytes after the last proposal)",
        },
    );
    bad(
        sa_body(&[(3, 1, t1)]),
        Error::BadValue {
            what: "proposal's last substructure",
        },
    );
    // Transform's: 0 before another, 3 on the last.
    let tlast = Error::BadValue {
        what: "transform's last substructure",
    };
    bad(sa_body(&[(0, 1, &[(0, 1, 12), (0, 4, 31)])]), tlast);
    bad(sa_body(&[(0, 1, &[(3, 1, 12), (3, 4, 31)])]), tlast);
    // Num transforms above what the proposal holds, and below.
    let mut b = sa_body(&[(0, 1, t1)]);
    b[7] = 3;
    bad(b.clone(), tlast);
    b[7] = 1;
    bad(b, tlast);
    // A transform length under 8 and one past the proposal.
    let mut b = sa_body(&[(0, 1, t1)]);
    b[11] = 7;
    bad(b.clone(), Error::BadLength { what: "transform" });
    b[11] = 100;
    bad(b, Error::Truncated { what: "proposal" });
    // A proposal length under 8; an empty SA.
    let mut b = sa_body(&[(0, 1, t1)]);
    b[3] = 4;
    bad(b, Error::BadLength { what: "proposal" });
    bad(
        vec![],
        Error::Truncated {
            what: "proposal header",
        },
    );
    // An attribute running past its transform.
    let mut b = sa_body(&[(0, 1, &[(0, 1, 12)])]);
    b[11] = 10;
    b[3] = 18;
    b.extend_from_slice(&[0, 99]);
    bad(
        b,
        Error::Truncated {
            what: "transform attribute",
        },
    );
}

#[test]
fn sa_caps() {
    let many: Vec<(u8, u8, u16)> = (0..=MAX_TRANSFORMS)
        .map(|i| (if i == MAX_TRANSFORMS { 0 } else { 3 }, 1, i as u16))
        .collect();
    assert_eq!(
        Sa::parse(&sa_body(&[(0, 1, &many)])),
        Err(Error::TooMany {
            what: "transforms",
            cap: MAX_TRANSFORMS
        })
    );
    let ok = &many[1..];
    assert_eq!(
        Sa::parse(&sa_body(&[(0, 1, ok)])).unwrap().proposals[0]
            .transforms
            .len(),
        MAX_TRANSFORMS
    );
    let t1: &[(u8, u8, u16)] = &[(0, 1, 12)];
    let props = |n: usize| -> Vec<(u8, u8, RawTransforms<'_>)> {
        (0..n)
            .map(|i| (if i + 1 == n { 0 } else { 2 }, (i + 1) as u8, t1))
            .collect()
    };
    assert_eq!(
        Sa::parse(&sa_body(&props(MAX_PROPOSALS)))
            .unwrap()
            .proposals
            .len(),
        MAX_PROPOSALS
    );
    assert_eq!(
        Sa::parse(&sa_body(&props(MAX_PROPOSALS + 1))),
        Err(Error::TooMany {
            what: "proposals",
            cap: MAX_PROPOSALS
        })
    );
    // Attributes.
    let mut b = sa_body(&[(0, 1, &[(0, 1, 12)])]);
    let n = MAX_TRANSFORM_ATTRIBUTES + 1;
    b[11] = (8 + 4 * n) as u8;
    b[3] = (16 + 4 * n) as u8;
    for _ in 0..n {
        b.extend_from_slice(&[0x80, 14, 0, 128]);
    }
    assert_eq!(
        Sa::parse(&b),
        Err(Error::TooMany {
            what: "transform attributes",
            cap: MAX_TRANSFORM_ATTRIBUTES
        })
    );
}

#[test]
fn nonce_lengths() {
    for (len, ok) in [
        (15, false),
        (16, true),
        (256, true),
        (257, false),
        (0, false),
    ] {
        let b = gp(0, 0, &vec![1; len]);
        let r = Message::parse(&datagram(payload_type::NONCE, &b));
        assert_eq!(r.is_ok(), ok, "nonce of {len} bytes");
        if !ok {
            assert_eq!(r, Err(Error::BadLength { what: "nonce" }));
        }
        assert_eq!(Nonce::new(vec![0; len]).is_ok(), ok);
    }
}

#[test]
fn traffic_selector_checks() {
    fn ts4(proto: u8, sp: u16, ep: u16, s: [u8; 4], e: [u8; 4]) -> Vec<u8> {
        let mut b = vec![1, 0, 0, 0, 7, proto, 0, 16];
        b.extend_from_slice(&sp.to_be_bytes());
        b.extend_from_slice(&ep.to_be_bytes());
        b.extend_from_slice(&s);
        b.extend_from_slice(&e);
        b
    }
    assert!(Ts::parse(&ts4(0, 0, 65535, [10, 0, 0, 1], [10, 0, 0, 1])).is_ok());
    assert!(Ts::parse(&ts4(17, 65535, 0, [10, 0, 0, 1], [10, 0, 0, 1])).is_ok()); // OPAQUE
    assert_eq!(
        Ts::parse(&ts4(0, 0, 65535, [10, 0, 0, 2], [10, 0, 0, 1])),
        Err(Error::BadValue {
            what: "traffic selector address range (start > end)"
        })
    );
    assert_eq!(
        Ts::parse(&ts4(6, 443, 80, [10, 0, 0, 1], [10, 0, 0, 1])),
        Err(Error::BadValue {
            what: "traffic selector port range (start > end)"
        })
    );
    // IPv6, start > end.
    let mut b = vec![1, 0, 0, 0, 8, 0, 0, 40, 0, 0, 255, 255];
    b.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
    b.extend_from_slice(&Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).octets());
    assert!(matches!(Ts::parse(&b), Err(Error::BadValue { .. })));
    // Emit refuses what parse refuses.
    let t = Ts {
        selectors: vec![TrafficSelector::Range {
            ip_protocol: 0,
            start_port: 2,
            end_port: 1,
            addrs: AddrRange::V4 {
                start: Ipv4Addr::LOCALHOST,
                end: Ipv4Addr::LOCALHOST,
            },
        }],
    };
    assert!(t.emit(&mut [0; 64]).is_err());
    // Selector length not 16 for IPv4; a count that says more than is there; none at all.
    let mut b = ts4(0, 0, 65535, [10, 0, 0, 1], [10, 0, 0, 1]);
    b[7] = 20;
    b.extend_from_slice(&[0; 4]);
    assert_eq!(
        Ts::parse(&b),
        Err(Error::BadLength {
            what: "traffic selector"
        })
    );
    let mut b = ts4(0, 0, 65535, [10, 0, 0, 1], [10, 0, 0, 1]);
    b[0] = 2;
    assert!(matches!(Ts::parse(&b), Err(Error::Truncated { .. })));
    b[0] = 0;
    assert!(matches!(Ts::parse(&b), Err(Error::BadValue { .. })));
    b[0] = (MAX_TRAFFIC_SELECTORS + 1) as u8;
    assert!(matches!(Ts::parse(&b), Err(Error::TooMany { .. })));
}

#[test]
fn fragment_numbers() {
    let skf = |num: u16, total: u16| {
        let mut body = num.to_be_bytes().to_vec();
        body.extend_from_slice(&total.to_be_bytes());
        body.extend_from_slice(&[0xcc; 16]);
        Message::parse(&datagram(
            payload_type::SKF,
            &gp(payload_type::IDI, 0, &body),
        ))
    };
    let m = skf(1, 2).unwrap();
    match &m.payloads[0] {
        Payload::Skf(f) => {
            assert_eq!(
                (f.number(), f.total(), f.first_inner()),
                (1, 2, payload_type::IDI)
            );
            assert_eq!(f.data(), &[0xcc; 16]);
        }
        p => panic!("{p:?}"),
    }
    assert!(skf(2, 2).is_ok());
    for (n, t) in [(0, 2), (3, 2), (1, 0), (0, 0)] {
        assert_eq!(
            skf(n, t),
            Err(Error::BadValue {
                what: "fragment number (0, or above the total)"
            }),
            "fragment {n} of {t}"
        );
    }
    assert!(EncryptedFragment::new(3, 2, 0, vec![]).is_err());
}
