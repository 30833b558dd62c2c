//! The IKE messages of a recorded strongSwan 5.9.8 session (testdata/ikev2/strongswan-session.pcap, a copy of
//! ../shared/vectors/ikev2/strongswan-session/ike-esp.pcap) parsed by the codec and checked against what tshark
//! (Wireshark 4.0.17) prints for the same packets; and every message, and every decrypted inner chain, emitted
//! back to the same bytes.
//!
//! The expectations were produced by these commands (P = the pcap, T = the line of the session's
//! ikev2_decryption_table, hard-coded below as the keys):
//!   tshark -r $P -Y isakmp -T fields -E separator='|' -e frame.number -e isakmp.ispi -e isakmp.rspi
//!          -e isakmp.exchangetype -e isakmp.flags -e isakmp.messageid -e isakmp.length -e isakmp.typepayload
//!          -e isakmp.payloadlength -e isakmp.notify.msgtype
//!   tshark -r $P -Y 'frame.number==1' -V            (the proposal's transforms, KE group, nonce and notify data)
//!   tshark -r $P -o "uat:ikev2_decryption_table:$T" -Y isakmp -T fields -E separator='|' -e frame.number
//!          -e isakmp.typepayload -e isakmp.notify.msgtype -e isakmp.delete.spi -e isakmp.spi
//!          -e isakmp.enc.pad_length -e isakmp.auth.method
//!   tshark -r $P -o "uat:ikev2_decryption_table:$T" -Y 'frame.number==N' -V   (inner SA transforms, TS, IDs)
//! (typepayload also lists proposal (2) and transform (3) substructures; they are left out of the lists below.)

use netveil_crypto::{new_cbc, CbcAlg};
use netveil_ike::message::notify::NotifyType;
use netveil_ike::message::sa::{encr, esn, integ, ke, prf, protocol_id, transform_type};
use netveil_ike::message::{
    emit_chain, parse_chain, payload_type as pt, AddrRange, ExchangeType, Message, Payload,
    TrafficSelector, Transform,
};
use std::net::Ipv4Addr;
use std::path::Path;

const SPI_I: u64 = 0x6a07_171c_e918_5c57;
const SPI_R: u64 = 0xe41b_7488_5d5a_e38e;
// From ikev2_decryption_table (Wireshark's column order: SPIi, SPIr, SK_ei, SK_er, cipher, SK_ai, SK_ar, integ).
const SK_EI: &str = "a0559ff18d83c6f963e4cf8d730a79366f41ca45d676f031805ccbd50bfde122";
const SK_ER: &str = "7e65de0ff18a6fceb0a53eb69dcee53cf8618a3dcd452f55ad6718224ddac9cd";
// AES-CBC-256 with HMAC-SHA2-256-128: a 16-byte IV before the ciphertext, a 16-byte ICV after it.
const IV_LEN: usize = 16;
const ICV_LEN: usize = 16;

/// What tshark shows for one protected message.
struct Want {
    frame: usize,
    exchange: ExchangeType,
    response: bool,
    message_id: u32,
    length: usize,
    /// The SK payload's length (generic header included).
    sk_len: usize,
    /// Inner payload types, in order (the first is the SK payload's next payload).
    inner: &'static [u8],
    notifies: &'static [u16],
    /// The SPI of the inner SA's proposal or of the Delete.
    spi: Option<u32>,
    pad_len: u8,
}

const CHILD: &[u8] = &[pt::SA, pt::NONCE, pt::KE, pt::TSI, pt::TSR];
const DEL: &[u8] = &[pt::DELETE];

fn protected() -> Vec<Want> {
    use ExchangeType as X;
    let w =
        |frame, exchange, response, message_id, length, sk_len, inner, notifies, spi, pad_len| {
            Want {
                frame,
                exchange,
                response,
                message_id,
                length,
                sk_len,
                inner,
                notifies,
                spi: Some(spi),
                pad_len,
            }
        };
    vec![
        w(
            3,
            X::IKE_AUTH,
            false,
            1,
            272,
            244,
            &[
                pt::IDI,
                pt::NOTIFY,
                pt::IDR,
                pt::AUTH,
                pt::SA,
                pt::TSI,
                pt::TSR,
                pt::NOTIFY,
                pt::NOTIFY,
                pt::NOTIFY,
                pt::NOTIFY,
                pt::NOTIFY,
            ],
            &[16384, 16396, 16399, 16404, 16417, 16420],
            0xaaa1_0c06,
            9,
        ),
        w(
            4,
            X::IKE_AUTH,
            true,
            1,
            224,
            196,
            &[
                pt::IDR,
                pt::AUTH,
                pt::SA,
                pt::TSI,
                pt::TSR,
                pt::NOTIFY,
                pt::NOTIFY,
            ],
            &[16396, 16399],
            0xa380_aeab,
            6,
        ),
        w(
            11,
            X::INFORMATIONAL,
            false,
            2,
            80,
            52,
            DEL,
            &[],
            0xaaa1_0c06,
            3,
        ),
        w(
            12,
            X::INFORMATIONAL,
            true,
            2,
            80,
            52,
            DEL,
            &[],
            0xa380_aeab,
            3,
        ),
        w(
            13,
            X::CREATE_CHILD_SA,
            false,
            3,
            256,
            228,
            CHILD,
            &[],
            0xbb28_8615,
            15,
        ),
        w(
            14,
            X::CREATE_CHILD_SA,
            true,
            3,
            256,
            228,
            CHILD,
            &[],
            0x1e1a_5b4c,
            15,
        ),
        w(
            21,
            X::INFORMATIONAL,
            false,
            4,
            80,
            52,
            DEL,
            &[],
            0xbb28_8615,
            3,
        ),
        w(
            22,
            X::INFORMATIONAL,
            true,
            4,
            80,
            52,
            DEL,
            &[],
            0x1e1a_5b4c,
            3,
        ),
        w(
            23,
            X::CREATE_CHILD_SA,
            false,
            5,
            256,
            228,
            CHILD,
            &[],
            0x0fa8_d324,
            15,
        ),
        w(
            24,
            X::CREATE_CHILD_SA,
            true,
            5,
            256,
            228,
            CHILD,
            &[],
            0x7d72_4739,
            15,
        ),
        w(
            31,
            X::INFORMATIONAL,
            false,
            6,
            80,
            52,
            DEL,
            &[],
            0x0fa8_d324,
            3,
        ),
        w(
            32,
            X::INFORMATIONAL,
            true,
            6,
            80,
            52,
            DEL,
            &[],
            0x7d72_4739,
            3,
        ),
        w(
            33,
            X::CREATE_CHILD_SA,
            false,
            7,
            240,
            212,
            CHILD,
            &[],
            0x62f3_a52a,
            3,
        ),
        w(
            34,
            X::CREATE_CHILD_SA,
            true,
            7,
            240,
            212,
            CHILD,
            &[],
            0xc241_908e,
            3,
        ),
        w(
            41,
            X::INFORMATIONAL,
            false,
            8,
            80,
            52,
            DEL,
            &[],
            0x62f3_a52a,
            3,
        ),
        w(
            42,
            X::INFORMATIONAL,
            true,
            8,
            80,
            52,
            DEL,
            &[],
            0xc241_908e,
            3,
        ),
    ]
}

/// The IKE messages of the capture by frame number (1-based), after the UDP header and, on port 4500, the
/// non-ESP marker; ESP packets are left out.
fn ike_messages() -> Vec<(usize, Vec<u8>)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ikev2/strongswan-session.pcap");
    let pcap = netveil_pcap::read_file(&path).expect("read the session's pcap");
    let mut out = Vec::new();
    for (i, r) in pcap.records.iter().enumerate() {
        let frame = netveil_pcap::split_frame(pcap.link, &r.data).expect("an IP frame");
        let ip = netveil_pcap::ip_own(frame.ip).expect("a whole IP packet");
        assert_eq!(ip[0] >> 4, 4, "the session is IPv4");
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        if ip[9] != 17 {
            continue;
        }
        let udp = &ip[ihl..];
        let dport = u16::from_be_bytes([udp[2], udp[3]]);
        let payload = &udp[8..];
        let ike = match dport {
            500 => payload,
            4500 if payload.starts_with(&[0; 4]) => &payload[4..],
            _ => continue,
        };
        out.push((i + 1, ike.to_vec()));
    }
    out
}

#[test]
fn notify_names_are_tsharks() {
    // The names tshark -V prints for the notify types of the session.
    for (v, name) in [
        (16384, "INITIAL_CONTACT"),
        (16388, "NAT_DETECTION_SOURCE_IP"),
        (16389, "NAT_DETECTION_DESTINATION_IP"),
        (16396, "MOBIKE_SUPPORTED"),
        (16399, "NO_ADDITIONAL_ADDRESSES"),
        (16404, "MULTIPLE_AUTH_SUPPORTED"),
        (16406, "REDIRECT_SUPPORTED"),
        (16417, "EAP_ONLY_AUTHENTICATION"),
        (16418, "CHILDLESS_IKEV2_SUPPORTED"),
        (16420, "IKEV2_MESSAGE_ID_SYNC_SUPPORTED"),
        (16430, "IKEV2_FRAGMENTATION_SUPPORTED"),
        (16431, "SIGNATURE_HASH_ALGORITHMS"),
    ] {
        assert_eq!(NotifyType(v).name(), Some(name));
    }
}

fn notify_types(payloads: &[Payload]) -> Vec<u16> {
    payloads
        .iter()
        .filter_map(|p| match p {
            Payload::Notify(n) => Some(n.notify_type.0),
            _ => None,
        })
        .collect()
}

#[test]
fn every_ike_message_parses_as_tshark_shows_and_emits_back() {
    let msgs = ike_messages();
    let frames: Vec<usize> = msgs.iter().map(|(f, _)| *f).collect();
    let mut want_frames = vec![1, 2];
    want_frames.extend(protected().iter().map(|w| w.frame));
    assert_eq!(frames, want_frames);
    for (frame, bytes) in &msgs {
        let m = Message::parse(bytes).unwrap_or_else(|e| panic!("frame {frame}: {e}"));
        assert_eq!(m.header.initiator_spi, SPI_I, "frame {frame}");
        let rspi = if *frame == 1 { 0 } else { SPI_R };
        assert_eq!(m.header.responder_spi, rspi, "frame {frame}");
        assert!(!m.header.flags.version);
        // The original initiator (site1) sends every request in this session.
        assert_eq!(
            m.header.flags.initiator, !m.header.flags.response,
            "frame {frame}"
        );
        assert_eq!(m.buffer_len(), bytes.len());
        assert_eq!(
            &m.to_vec().unwrap(),
            bytes,
            "frame {frame}: emit gives back the bytes"
        );
    }
}

#[test]
fn ike_sa_init_as_tshark_shows() {
    let msgs = ike_messages();
    for (frame, notifies) in [
        (1, &[16388u16, 16389, 16430, 16431, 16406][..]),
        (2, &[16388, 16389, 16430, 16431, 16418, 16404][..]),
    ] {
        let bytes = &msgs.iter().find(|(f, _)| *f == frame).unwrap().1;
        let m = Message::parse(bytes).unwrap();
        assert_eq!(m.header.exchange_type, ExchangeType::IKE_SA_INIT);
        assert_eq!(m.header.message_id, 0);
        assert_eq!(m.header.flags.response, frame == 2);
        assert_eq!(bytes.len(), if frame == 1 { 240 } else { 248 });
        let mut types = vec![pt::SA, pt::KE, pt::NONCE];
        types.extend(std::iter::repeat_n(pt::NOTIFY, notifies.len()));
        assert_eq!(
            m.payloads
                .iter()
                .map(Payload::payload_type)
                .collect::<Vec<_>>(),
            types
        );
        let Payload::Sa(sa) = &m.payloads[0] else {
            panic!()
        };
        assert_eq!(sa.proposals.len(), 1);
        let p = &sa.proposals[0];
        assert_eq!(
            (p.number, p.protocol_id, p.spi.len()),
            (1, protocol_id::IKE, 0)
        );
        assert_eq!(
            p.transforms,
            [
                Transform::new(transform_type::ENCR, encr::AES_CBC).with_key_length(256),
                Transform::new(transform_type::INTEG, integ::HMAC_SHA2_256_128),
                Transform::new(transform_type::PRF, prf::HMAC_SHA2_256),
                Transform::new(transform_type::KE, ke::CURVE25519),
            ]
        );
        let Payload::Ke(kex) = &m.payloads[1] else {
            panic!()
        };
        assert_eq!((kex.group, kex.data.len()), (31, 32));
        let Payload::Nonce(n) = &m.payloads[2] else {
            panic!()
        };
        assert_eq!(n.as_bytes().len(), 32);
        if frame == 1 {
            assert_eq!(
                n.as_bytes()[..4],
                [0xd8, 0x7f, 0x0a, 0x8d],
                "tshark: Nonce DATA: d87f0a8d..."
            );
            assert_eq!(
                kex.data[..4],
                [0x1b, 0xaf, 0x9c, 0x85],
                "tshark: Key Exchange Data: 1baf9c85..."
            );
        }
        assert_eq!(notify_types(&m.payloads), notifies);
        for n in m.notifies() {
            assert_eq!((n.protocol_id, n.spi.len()), (0, 0));
            match n.notify_type {
                NotifyType::NAT_DETECTION_SOURCE_IP | NotifyType::NAT_DETECTION_DESTINATION_IP => {
                    assert_eq!(n.data.len(), 20)
                }
                NotifyType::SIGNATURE_HASH_ALGORITHMS => {
                    assert_eq!(n.signature_hash_algorithms(), Some(vec![2, 3, 4, 5]))
                }
                _ => assert!(n.data.is_empty()),
            }
        }
    }
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

#[test]
fn protected_messages_and_their_inner_chains_as_tshark_shows() {
    let msgs = ike_messages();
    let ei = new_cbc(CbcAlg::Aes256, &unhex(SK_EI)).unwrap();
    let er = new_cbc(CbcAlg::Aes256, &unhex(SK_ER)).unwrap();
    for w in protected() {
        let f = w.frame;
        let bytes = &msgs.iter().find(|(fr, _)| *fr == f).unwrap().1;
        assert_eq!(bytes.len(), w.length, "frame {f}");
        let m = Message::parse(bytes).unwrap();
        assert_eq!(m.header.exchange_type, w.exchange, "frame {f}");
        assert_eq!(m.header.message_id, w.message_id, "frame {f}");
        assert_eq!(m.header.flags.response, w.response, "frame {f}");
        let [Payload::Sk(sk)] = &m.payloads[..] else {
            panic!("frame {f}: {:?}", m.payloads)
        };
        assert_eq!(sk.data.len() + 4, w.sk_len, "frame {f}");
        assert_eq!(sk.first_inner, w.inner[0], "frame {f}");

        // Open it (without checking the ICV: that is the sk module's test) and parse what is inside.
        let cipher = if w.response { &er } else { &ei };
        let (iv, rest) = sk.data.split_at(IV_LEN);
        let mut pt_bytes = rest[..rest.len() - ICV_LEN].to_vec();
        cipher.decrypt(iv, &mut pt_bytes);
        let pad_len = *pt_bytes.last().unwrap();
        assert_eq!(pad_len, w.pad_len, "frame {f}");
        let inner_bytes = &pt_bytes[..pt_bytes.len() - 1 - usize::from(pad_len)];
        let inner =
            parse_chain(sk.first_inner, inner_bytes).unwrap_or_else(|e| panic!("frame {f}: {e}"));
        assert_eq!(
            inner.iter().map(Payload::payload_type).collect::<Vec<_>>(),
            w.inner,
            "frame {f}"
        );
        assert_eq!(notify_types(&inner), w.notifies, "frame {f}");
        let mut out = vec![0; inner_bytes.len()];
        assert_eq!(emit_chain(&inner, &mut out), Ok(inner_bytes.len()));
        assert_eq!(out, inner_bytes, "frame {f}: the inner chain emits back");

        for p in &inner {
            match p {
                Payload::Delete(d) => {
                    assert_eq!(d.protocol_id(), protocol_id::ESP);
                    assert_eq!(d.spis_u32(), w.spi.map(|s| vec![s]), "frame {f}");
                }
                Payload::Sa(sa) => {
                    let [p] = &sa.proposals[..] else { panic!() };
                    assert_eq!(p.protocol_id, protocol_id::ESP);
                    assert_eq!(
                        Some(p.spi.clone()),
                        w.spi.map(|s| s.to_be_bytes().to_vec()),
                        "frame {f}"
                    );
                    let esn = Transform::new(transform_type::ESN, esn::NO);
                    let pfs = Transform::new(transform_type::KE, ke::CURVE25519);
                    let want = match w.message_id {
                        1 => vec![
                            Transform::new(transform_type::ENCR, encr::AES_GCM_16)
                                .with_key_length(128),
                            esn,
                        ],
                        3 => vec![
                            Transform::new(transform_type::ENCR, encr::AES_CBC)
                                .with_key_length(128),
                            Transform::new(transform_type::INTEG, integ::HMAC_SHA1_96),
                            pfs,
                            esn,
                        ],
                        5 => vec![
                            Transform::new(transform_type::ENCR, encr::AES_CBC)
                                .with_key_length(256),
                            Transform::new(transform_type::INTEG, integ::HMAC_SHA2_256_128),
                            pfs,
                            esn,
                        ],
                        7 => vec![
                            Transform::new(transform_type::ENCR, encr::DES3),
                            Transform::new(transform_type::INTEG, integ::HMAC_SHA1_96),
                            pfs,
                            esn,
                        ],
                        _ => unreachable!(),
                    };
                    assert_eq!(p.transforms, want, "frame {f}");
                }
                Payload::TsI(ts) | Payload::TsR(ts) => {
                    let a = if matches!(p, Payload::TsI(_)) {
                        Ipv4Addr::new(10, 11, 0, 1)
                    } else {
                        Ipv4Addr::new(10, 22, 0, 1)
                    };
                    assert_eq!(
                        ts.selectors,
                        [TrafficSelector::Range {
                            ip_protocol: 0,
                            start_port: 0,
                            end_port: 65535,
                            addrs: AddrRange::V4 { start: a, end: a },
                        }],
                        "frame {f}"
                    );
                }
                Payload::IdI(id) => assert_eq!(id.as_fqdn(), Some("site1")),
                Payload::IdR(id) => assert_eq!(id.as_fqdn(), Some("site2")),
                Payload::Auth(a) => assert_eq!((a.method, a.data.len()), (2, 32), "frame {f}"),
                Payload::Ke(k) => assert_eq!((k.group, k.data.len()), (31, 32), "frame {f}"),
                Payload::Nonce(n) => assert_eq!(n.as_bytes().len(), 32, "frame {f}"),
                Payload::Notify(_) => {}
                other => panic!("frame {f}: {other:?}"),
            }
        }
    }
}
