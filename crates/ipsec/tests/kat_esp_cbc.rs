//! Known-answer test at the ESP layer: RFC 3602 section 4, case #5 (transport-mode ESP with AES-128-CBC, SPI
//! 0x4321, sequence number 1; the RFC's vectors carry no ICV, so the SA has no integrity algorithm).

use netveil_crypto::rand::OsRng;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{Enc, EspSuite};
use netveil_ipsec::{esp, inbound, InboundSa, Mode, OutboundSa, SaParams};
use netveil_sa::lifetime::Lifetime;
use netveil_wire::PacketBuf;

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s.split_whitespace().collect::<String>()).unwrap()
}

fn out_sa() -> OutboundSa {
    OutboundSa::new(params(Direction::Out), 0, &mut OsRng).unwrap()
}

fn in_sa() -> InboundSa {
    InboundSa::new(params(Direction::In), 0).unwrap()
}

fn params(dir: Direction) -> SaParams {
    SaParams {
        name: "rfc3602-case5".into(),
        spi: 0x4321,
        direction: dir,
        suite: Suite::Esp(EspSuite {
            enc: Enc::AesCbc { key_bits: 128 },
            integ: None,
        }),
        mode: Mode::Transport,
        enc_key: zeroize::Zeroizing::new(hx("90d382b4 10eeba7a d938c46c ec1a82bf")),
        auth_key: zeroize::Zeroizing::new(vec![]),
        esn: false,
        replay_window: 1024,
        lifetime: Lifetime::default(),
        encap: None,
        tfc_pad_to: 0,
        first_seq: 1,
    }
}

const IV: &str = "e96e8c08 ab465763 fd098d45 dd3ff893";
// The ICMP echo request (64 bytes) followed by the ESP trailer: padding 01..0e, pad length 0e, next header 01.
const PLAIN: &str = "08000ebd a70a0000 8e9c083d b95b0700 08090a0b 0c0d0e0f 10111213 14151617
                     18191a1b 1c1d1e1f 20212223 24252627 28292a2b 2c2d2e2f 30313233 34353637
                     01020304 05060708 090a0b0c 0d0e0e01";
const CIPHER: &str = "f663c25d 325c18c6 a9453e19 4e120849 a4870b66 cc6b9965 330013b4 898dc856
                      a4699e52 3a55db08 0b59ec3a 8e4b7e52 775b07d1 db34ed9c 538ab50c 551b874a
                      a269add0 47ad2d59 13ac19b7 cfbad4a6";

fn esp_header() -> Vec<u8> {
    let mut v = hx("00004321 00000001");
    v.extend(hx(IV));
    v
}

#[test]
fn rfc3602_case5_seal_and_open() {
    let mut laid = esp_header();
    laid.extend(hx(PLAIN));
    let mut pkt = PacketBuf::from_slice(&laid, 64, 64);
    esp::seal_laid_out(&out_sa(), &mut pkt, 0, 1).unwrap();
    let mut want = esp_header();
    want.extend(hx(CIPHER));
    assert_eq!(hex::encode(pkt.data()), hex::encode(&want));

    let mut pkt = PacketBuf::from_slice(&want, 64, 64);
    esp::open_laid_out(&in_sa(), &mut pkt, 0, 1).unwrap();
    assert_eq!(hex::encode(&pkt.data()[24..]), hex::encode(hx(PLAIN)));
}

#[test]
fn rfc3602_case5_decapsulates_to_the_icmp_echo() {
    // The RFC's packet travels 192.168.123.3 -> 192.168.123.100; rebuild its IPv4 header (protocol 50) around the
    // ESP bytes and decapsulate it in transport mode: the ICMP echo request must come out, protocol 1.
    let mut esp = esp_header();
    esp.extend(hx(CIPHER));
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 64, 50, 0, 0, 192, 168, 123, 3, 192, 168, 123, 100,
    ];
    let total = (20 + esp.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend(esp);
    let mut pkt = PacketBuf::from_slice(&ip, 0, 0);
    let inbound_sa = in_sa();
    let loc = match inbound::classify(&mut pkt, 4500).unwrap() {
        inbound::Classified::Protected(l) => l,
        other => panic!("not ESP: {other:?}"),
    };
    esp::decapsulate(&inbound_sa, &mut pkt, &loc, 0).unwrap();
    let out = pkt.data();
    assert_eq!(out[9], 1, "next header is ICMP");
    assert_eq!(u16::from_be_bytes([out[2], out[3]]) as usize, out.len());
    assert_eq!(netveil_wire::checksum::checksum(&out[..20]), 0);
    assert_eq!(hex::encode(&out[20..]), hex::encode(&hx(PLAIN)[..64]));
}
