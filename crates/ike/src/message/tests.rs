//! Round trips of every payload, the RFC's byte layout, the views and the accessors (the malformed inputs are in
//! tests/message_malformed.rs, through the public API).

use super::payloads::{auth_method, cert_encoding, cfg_type};
use super::sa::{encr, integ, ke, prf, protocol_id, transform_type};
use super::ts::OPAQUE_PORTS;
use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn header(exchange_type: ExchangeType) -> Header {
    Header {
        initiator_spi: 0x0102_0304_0506_0708,
        responder_spi: 0x1112_1314_1516_1718,
        exchange_type,
        flags: Flags {
            initiator: true,
            version: false,
            response: false,
        },
        message_id: 7,
    }
}

/// Emits `payloads` in a message, checks the length in the header, parses it back and compares.
fn round_trip(payloads: Vec<Payload>) -> Vec<u8> {
    let m = Message {
        header: header(ExchangeType::IKE_AUTH),
        payloads,
    };
    let bytes = m.to_vec().expect("emit");
    assert_eq!(bytes.len(), m.buffer_len());
    let p = header::Packet::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.length() as usize, bytes.len());
    assert_eq!(p.next_payload(), first_type(&m.payloads));
    assert_eq!(Message::parse(&bytes), Ok(m));
    bytes
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

fn nonce() -> Nonce {
    Nonce::new((0..32).collect()).unwrap()
}

fn ike_sa() -> Sa {
    Sa {
        proposals: vec![
            Proposal {
                number: 1,
                protocol_id: protocol_id::IKE,
                spi: vec![],
                transforms: vec![
                    Transform::new(transform_type::ENCR, encr::AES_CBC).with_key_length(256),
                    Transform::new(transform_type::INTEG, integ::HMAC_SHA2_256_128),
                    Transform::new(transform_type::PRF, prf::HMAC_SHA2_256),
                    Transform::new(transform_type::KE, ke::CURVE25519),
                ],
            },
            Proposal {
                number: 2,
                protocol_id: protocol_id::IKE,
                spi: vec![],
                transforms: vec![
                    Transform::new(transform_type::ENCR, encr::AES_GCM_16).with_key_length(128),
                    Transform::new(transform_type::PRF, prf::HMAC_SHA2_384),
                    Transform::new(transform_type::KE, ke::ECP_256),
                    // RFC 9370: an additional key exchange, and a type and an id nobody knows (kept).
                    Transform::new(transform_type::ADDKE1, ke::ML_KEM_768),
                    Transform::new(200, 4242),
                    Transform {
                        transform_type: transform_type::ENCR,
                        transform_id: 1000,
                        attributes: vec![Attribute {
                            attribute_type: 99,
                            value: AttributeValue::Tlv(vec![1, 2, 3]),
                        }],
                    },
                ],
            },
        ],
    }
}

#[test]
fn every_payload_round_trips() {
    let ts = Ts {
        selectors: vec![
            TrafficSelector::Range {
                ip_protocol: 6,
                start_port: 80,
                end_port: 443,
                addrs: AddrRange::V4 {
                    start: Ipv4Addr::new(10, 0, 0, 0),
                    end: Ipv4Addr::new(10, 0, 0, 255),
                },
            },
            TrafficSelector::Range {
                ip_protocol: 0,
                start_port: OPAQUE_PORTS.0,
                end_port: OPAQUE_PORTS.1,
                addrs: AddrRange::V6 {
                    start: Ipv6Addr::LOCALHOST,
                    end: Ipv6Addr::LOCALHOST,
                },
            },
            TrafficSelector::Other {
                ts_type: ts::ts_type::SECLABEL,
                ip_protocol: 0,
                data: b"system_u:object_r".to_vec(),
            },
        ],
    };
    let all = vec![
        Payload::Sa(ike_sa()),
        Payload::Ke(Ke {
            group: ke::CURVE25519,
            data: vec![9; 32],
        }),
        Payload::IdI(Id::fqdn("site1")),
        Payload::IdR(Id::ipv4(Ipv4Addr::new(10, 99, 0, 2))),
        Payload::IdI(Id::ipv6(Ipv6Addr::LOCALHOST)),
        Payload::IdI(Id::rfc822("a@example.org")),
        Payload::IdI(Id::der_dn(vec![0x30, 0])),
        Payload::IdI(Id::key_id(vec![1, 2, 3])),
        Payload::Cert(Cert {
            encoding: cert_encoding::X509_SIGNATURE,
            data: vec![0x30, 3, 1, 2, 3],
        }),
        Payload::CertReq(CertReq {
            encoding: cert_encoding::X509_SIGNATURE,
            data: vec![7; 40],
        }),
        Payload::Auth(Auth {
            method: auth_method::SHARED_KEY_MIC,
            data: vec![5; 32],
        }),
        Payload::Auth(Auth {
            method: auth_method::DIGITAL_SIGNATURE,
            data: vec![],
        }),
        Payload::Nonce(nonce()),
        Payload::Notify(Notify::new(
            NotifyType::SIGNATURE_HASH_ALGORITHMS,
            vec![0, 2, 0, 5],
        )),
        Payload::Notify(Notify {
            protocol_id: protocol_id::ESP,
            spi: vec![0xc0, 1, 2, 3],
            notify_type: NotifyType::REKEY_SA,
            data: vec![],
        }),
        Payload::Notify(Notify::new(NotifyType(40000), vec![1])),
        Payload::Delete(Delete::ike()),
        Payload::Delete(Delete::child(protocol_id::ESP, &[1, 0xdead_beef])),
        Payload::VendorId(VendorId(b"strongSwan".to_vec())),
        Payload::TsI(ts.clone()),
        Payload::TsR(ts),
        Payload::Cp(Cp {
            cfg_type: cfg_type::REQUEST,
            attributes: vec![
                CpAttribute {
                    attribute_type: payloads::cfg_attribute::INTERNAL_IP4_ADDRESS,
                    value: vec![],
                },
                CpAttribute {
                    attribute_type: payloads::cfg_attribute::INTERNAL_IP6_DNS,
                    value: vec![0; 16],
                },
            ],
        }),
        Payload::Eap(Eap(vec![1, 2, 0, 4])),
        Payload::Unknown(Unknown::new(200, vec![1, 2, 3]).unwrap()),
        Payload::Sk(Encrypted {
            first_inner: payload_type::IDI,
            data: vec![0xaa; 48],
        }),
    ];
    round_trip(all.clone());
    // Each payload alone too (and SKF, which is last like SK).
    for p in all {
        round_trip(vec![p]);
    }
    round_trip(vec![
        Payload::Notify(Notify::new(NotifyType::COOKIE, vec![1; 8])),
        Payload::Skf(EncryptedFragment::new(2, 3, 0, vec![0xbb; 20]).unwrap()),
    ]);
    // An empty message (no payloads) is a header alone.
    assert_eq!(round_trip(vec![]).len(), HEADER_LEN);
}

#[test]
fn emitted_bytes_follow_the_rfc_layout() {
    // The IKE header (RFC 7296 3.1) and a Nonce payload (3.2, 3.9), byte by byte.
    let bytes = round_trip(vec![Payload::Nonce(nonce())]);
    let mut want = vec![
        1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
    ];
    want.extend_from_slice(&[40, 0x20, 35, 0x08, 0, 0, 0, 7, 0, 0, 0, 28 + 36]);
    want.extend_from_slice(&[0, 0, 0, 36]);
    want.extend(0..32u8);
    assert_eq!(bytes, want);

    // A transform with a key length (RFC 7296 3.3.2, 3.3.5), as tshark shows strongSwan's: last substructure 0,
    // length 12, type ENCR, id 12, attribute TV 0x800e = 256.
    let sa = Sa {
        proposals: vec![Proposal {
            number: 1,
            protocol_id: protocol_id::ESP,
            spi: vec![0xc1, 0xc2, 0xc3, 0xc4],
            transforms: vec![
                Transform::new(transform_type::ENCR, encr::AES_CBC).with_key_length(256),
                Transform::new(transform_type::ESN, 0),
            ],
        }],
    };
    let mut b = vec![0; sa.buffer_len()];
    assert_eq!(sa.emit(&mut b), Ok(32));
    assert_eq!(
        b,
        [
            0, 0, 0, 32, 1, 3, 4, 2, 0xc1, 0xc2, 0xc3,
            0xc4, // proposal: last, len 32, #1, ESP, SPI size 4, 2 transforms
            3, 0, 0, 12, 1, 0, 0, 12, 0x80, 0x0e, 1,
            0, // transform: more, ENCR AES-CBC, key length 256
            0, 0, 0, 8, 5, 0, 0, 0, // transform: last, ESN none
        ]
    );
    assert_eq!(sa.proposals[0].transforms[0].key_length(), Some(256));
    assert_eq!(sa.proposals[0].transforms[1].key_length(), None);

    // A traffic selector (RFC 7296 3.13.1).
    let ts = Ts {
        selectors: vec![TrafficSelector::any_v4()],
    };
    let mut b = vec![0; ts.buffer_len()];
    ts.emit(&mut b).unwrap();
    assert_eq!(
        b,
        [1, 0, 0, 0, 7, 0, 0, 16, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 255, 255, 255, 255]
    );
}

#[test]
fn header_fields_and_flags() {
    let mut d = datagram(0, &[]);
    d[19] = 0x20 | 0x10 | 0x01; // response, version, and a reserved bit (ignored)
    d[20..24].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    let m = Message::parse(&d).unwrap();
    assert_eq!(
        m.header.flags,
        Flags {
            initiator: false,
            version: true,
            response: true
        }
    );
    assert_eq!(m.header.message_id, 0xdead_beef);
    assert_eq!(m.header.exchange_type, ExchangeType::IKE_SA_INIT);
    assert_eq!(m.header.initiator_spi, 0x0101_0101_0101_0101);
    assert_eq!(
        format!("{:?}", ExchangeType::IKE_INTERMEDIATE),
        "IKE_INTERMEDIATE"
    );
    assert_eq!(ExchangeType::IKE_INTERMEDIATE.0, 43);
    assert_eq!(format!("{:?}", ExchangeType(99)), "ExchangeType(99)");
    // A minor version is ignored (RFC 7296 2.5).
    d[17] = 0x21;
    assert!(Message::parse(&d).is_ok());
}

#[test]
fn payload_view() {
    let b = gp(payload_type::NOTIFY, 0x80, &[1, 2, 3]);
    let mut with_next = b.clone();
    with_next.extend_from_slice(&[9, 9]);
    let v = chain::Packet::new_checked(&with_next[..]).unwrap();
    assert_eq!(
        (v.next_payload(), v.critical(), v.payload_len(), v.body()),
        (payload_type::NOTIFY, true, 7, &[1u8, 2, 3][..])
    );
    assert!(matches!(
        chain::Packet::new_checked(&b[..6]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        chain::Packet::new_checked(&b[..3]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        chain::Packet::new_checked(&[0u8, 0, 0, 3][..]),
        Err(Error::BadLength { .. })
    ));
}

#[test]
fn delete_id_notify_details() {
    // Delete: SPI size 0 with SPIs; a count past the body; bytes after the SPIs.
    assert!(matches!(
        Delete::parse(&[1, 0, 0, 1]),
        Err(Error::BadValue { .. })
    ));
    assert!(matches!(
        Delete::parse(&[3, 4, 0, 2, 0, 0, 0, 1]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        Delete::parse(&[3, 4, 0, 1, 0, 0, 0, 1, 9]),
        Err(Error::BadLength { .. })
    ));
    let d = Delete::parse(&[3, 4, 0, 2, 0, 0, 0, 1, 0xc0, 0, 0, 2]).unwrap();
    assert_eq!(d.spis_u32(), Some(vec![1, 0xc000_0002]));
    assert_eq!(d.spis().count(), 2);
    assert_eq!(Delete::ike().spis().count(), 0);
    // ID: address lengths checked; accessors by type.
    assert!(matches!(
        Id::parse(&[1, 0, 0, 0, 10, 0, 0]),
        Err(Error::BadLength { .. })
    ));
    assert!(matches!(
        Id::parse(&[5, 0, 0, 0, 10, 0, 0, 1]),
        Err(Error::BadLength { .. })
    ));
    let id = Id::parse(&[1, 0, 0, 0, 10, 0, 0, 1]).unwrap();
    assert_eq!(id.as_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(id.as_fqdn(), None);
    let id = Id::parse(b"\x02\0\0\0site1").unwrap();
    assert_eq!((id.id_type(), id.as_fqdn()), (IdType::FQDN, Some("site1")));
    assert_eq!(Id::rfc822("a@b").as_rfc822(), Some("a@b"));
    assert_eq!(Id::der_dn(vec![0x30]).as_der_dn(), Some(&[0x30][..]));
    assert_eq!(Id::key_id(vec![1]).as_key_id(), Some(&[1][..]));
    assert_eq!(
        Id::ipv6(Ipv6Addr::LOCALHOST).as_ipv6(),
        Some(Ipv6Addr::LOCALHOST)
    );
    // Notify: SPI past the body; SIGNATURE_HASH_ALGORITHMS read as ids.
    assert!(matches!(
        Notify::parse(&[3, 4, 0x40, 9, 0, 0]),
        Err(Error::Truncated { .. })
    ));
    let n = Notify::new(
        NotifyType::SIGNATURE_HASH_ALGORITHMS,
        vec![0, 2, 0, 3, 0, 4, 0, 5],
    );
    assert_eq!(n.signature_hash_algorithms(), Some(vec![2, 3, 4, 5]));
    assert!(NotifyType::NO_PROPOSAL_CHOSEN.is_error() && !NotifyType::COOKIE.is_error());
    let n = Notify::parse(&[0, 0, 0, 17, 0, 31]).unwrap();
    assert_eq!(
        (n.notify_type, n.invalid_ke_group()),
        (NotifyType::INVALID_KE_PAYLOAD, Some(31))
    );
    assert_eq!(Notify::invalid_ke_payload(19).invalid_ke_group(), Some(19));
    assert_eq!(
        Notify::new(NotifyType::COOKIE, vec![0, 19]).invalid_ke_group(),
        None
    );
    assert_eq!(
        format!("{:?}", NotifyType(16430)),
        "IKEV2_FRAGMENTATION_SUPPORTED"
    );
    // KE, AUTH, CP shorter than their fixed fields.
    assert!(matches!(
        Ke::parse(&[0, 31, 0]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        Auth::parse(&[2, 0, 0]),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        Cp::parse(&[1, 0, 0, 0, 0, 1, 0, 4, 0]),
        Err(Error::Truncated { .. })
    ));
}

#[test]
fn emit_into_a_short_buffer_fails() {
    let m = Message {
        header: header(ExchangeType::IKE_SA_INIT),
        payloads: vec![Payload::Sa(ike_sa()), Payload::Nonce(nonce())],
    };
    let mut b = vec![0; m.buffer_len() - 1];
    assert_eq!(m.emit(&mut b), Err(Error::BufferTooSmall));
    let mut b = vec![0; m.buffer_len() + 10];
    assert_eq!(m.emit(&mut b), Ok(m.buffer_len()));
    // SK not last.
    let m = Message {
        header: header(ExchangeType::IKE_AUTH),
        payloads: vec![
            Payload::Sk(Encrypted {
                first_inner: 0,
                data: vec![],
            }),
            Payload::Nonce(nonce()),
        ],
    };
    assert_eq!(m.to_vec(), Err(Error::PayloadAfterEncrypted));
}
