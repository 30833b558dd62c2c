//! Known-answer tests: the 14 AES-GCM ESP packets of draft-mcgrew-gcm-test-01 (testdata/), sealed and opened.

use netveil_crypto::rand::OsRng;
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::EspSuite;
use netveil_ipsec::{esp, InboundSa, Mode, OutboundSa, SaParams};
use netveil_sa::lifetime::Lifetime;
use netveil_wire::PacketBuf;

fn params(keymat: &[u8], spi: u32, esn: bool, dir: Direction) -> SaParams {
    let name = match keymat.len() {
        20 => "aes128gcm16",
        28 => "aes192gcm16",
        36 => "aes256gcm16",
        n => panic!("unexpected keymat length {n}"),
    };
    SaParams {
        name: "kat".into(),
        spi,
        direction: dir,
        suite: Suite::Esp(EspSuite::parse(name, false).unwrap()),
        mode: Mode::Transport,
        enc_key: zeroize::Zeroizing::new(keymat.to_vec()),
        auth_key: zeroize::Zeroizing::new(vec![]),
        esn,
        replay_window: 1024,
        lifetime: Lifetime::default(),
        encap: None,
        tfc_pad_to: 0,
        first_seq: 1,
    }
}

fn h(v: &serde_json::Value, k: &str) -> Vec<u8> {
    hex::decode(v[k].as_str().unwrap()).unwrap()
}

#[test]
fn draft_mcgrew_gcm_test_01_all_cases() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/esp-gcm-draft-mcgrew-gcm-test-01.json"
    ))
    .unwrap();
    let cases: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(cases.len(), 14);
    for c in &cases {
        let n = c["case"].as_u64().unwrap();
        let keymat = h(c, "keymat");
        let spi = u32::from_be_bytes(h(c, "spi").try_into().unwrap());
        let esn = c["esn"].as_bool().unwrap();
        let seq_b = h(c, "seq");
        let seq = if seq_b.len() == 8 {
            u64::from_be_bytes(seq_b.clone().try_into().unwrap())
        } else {
            u32::from_be_bytes(seq_b.clone().try_into().unwrap()) as u64
        };
        let iv = h(c, "iv");
        let plaintext = h(c, "plaintext");
        let wire = h(c, "esp_packet");

        // Seal: lay out SPI, low sequence bits, IV, plaintext (with trailer) and ICV room, behind a fake 20-byte
        // IP header so that ESN sealing has bytes in front.
        let out =
            OutboundSa::new(params(&keymat, spi, esn, Direction::Out), 0, &mut OsRng).unwrap();
        let mut laid = Vec::new();
        laid.extend_from_slice(&spi.to_be_bytes());
        laid.extend_from_slice(&(seq as u32).to_be_bytes());
        laid.extend_from_slice(&iv);
        laid.extend_from_slice(&plaintext);
        laid.extend_from_slice(&[0u8; 16]);
        let mut pkt = PacketBuf::from_slice(&laid, 64, 64);
        esp::seal_laid_out(&out, &mut pkt, 0, seq).unwrap();
        assert_eq!(
            hex::encode(pkt.data()),
            hex::encode(&wire),
            "case {n}: sealed packet differs"
        );

        // Open the packet from the vector.
        let inb = InboundSa::new(params(&keymat, spi, esn, Direction::In), 0).unwrap();
        let mut pkt = PacketBuf::from_slice(&wire, 64, 64);
        esp::open_laid_out(&inb, &mut pkt, 0, seq).unwrap();
        let body = &pkt.data()[8 + iv.len()..pkt.len() - 16];
        assert_eq!(
            hex::encode(body),
            hex::encode(&plaintext),
            "case {n}: opened plaintext differs"
        );

        // Any single flipped bit fails authentication.
        for bit in [0usize, 33, 8 * 8 + 3, wire.len() * 8 - 1] {
            let mut bad = wire.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut pkt = PacketBuf::from_slice(&bad, 64, 64);
            assert!(
                esp::open_laid_out(&inb, &mut pkt, 0, seq).is_err(),
                "case {n}: bit {bit} flip accepted"
            );
        }
        // With ESN, the high sequence bits are authenticated although they are not on the wire.
        if esn {
            let mut pkt = PacketBuf::from_slice(&wire, 64, 64);
            assert!(
                esp::open_laid_out(&inb, &mut pkt, 0, seq ^ (1 << 40)).is_err(),
                "case {n}: wrong seq_hi accepted"
            );
        }
    }
}
