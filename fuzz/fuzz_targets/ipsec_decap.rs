//! Inbound ESP/AH processing on hostile input: arbitrary bytes as a received IP packet, and valid protected packets
//! with arbitrary corruptions, go through `bundle::unprotect` against SAs of every kind (including null-null, whose
//! lack of authentication lets garbage reach the trailer and header-fixing code). Nothing may panic, and:
//!
//! - an untouched protected packet opens, to exactly the packet that was protected;
//! - a packet with any byte changed from its ESP/AH header on (SPI, sequence number, IV, payload, trailer, ICV)
//!   never opens under an SA that authenticates (every suite but null-null). Bytes before it (the outer IP and UDP
//!   headers) are not all covered (ESP does not authenticate the outer header; AH skips mutable fields).
//!
//! ESP in UDP also goes through `bundle::unprotect_udp_payload`, as a datagram of a coalesced receive: its UDP
//! payload between other bytes in one buffer. The same two rules hold, and besides: the bytes around the datagram
//! never change, and a datagram it leaves to the general path (`NeedsHeaders`) is untouched.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_ipsec::bundle::{self, Sad};
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::{AhSuite, EspSuite};
use netveil_ipsec::{InboundSa, Mode, OutboundSa, SaParams, UdpEncap};
use netveil_sa::lifetime::Lifetime;
use netveil_wire::PacketBuf;
use std::net::IpAddr;
use std::sync::OnceLock;

fn params(spi: u32, dir: Direction, suite: Suite, mode: Mode, esn: bool, udp: bool) -> SaParams {
    let (ek, ak) = match suite {
        Suite::Esp(s) => (s.enc.key_len(), s.integ.map_or(0, |i| i.key_len())),
        Suite::Ah(a) => (0, a.integ.key_len()),
    };
    SaParams {
        name: format!("{spi:x}"),
        spi,
        direction: dir,
        suite,
        mode,
        enc_key: zeroize::Zeroizing::new((0..ek).map(|i| i as u8 ^ 0x5a).collect()),
        auth_key: zeroize::Zeroizing::new((0..ak).map(|i| i as u8 ^ 0xa5).collect()),
        esn,
        replay_window: 64,
        lifetime: Lifetime::default(),
        encap: udp.then_some(UdpEncap { local_port: 4500, remote_port: 4500 }),
        tfc_pad_to: 0,
        first_seq: 1,
    }
}

struct World {
    out: Sad,
    specs: Vec<(u32, Suite, Mode, bool, bool)>,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let t4 = Mode::Tunnel { local: "192.0.2.1".parse::<IpAddr>().unwrap(), remote: "192.0.2.2".parse().unwrap() };
        let t6 = Mode::Tunnel { local: "2001:db8::1".parse::<IpAddr>().unwrap(), remote: "2001:db8::2".parse().unwrap() };
        let esp = |s: &str| Suite::Esp(EspSuite::parse(s, true).unwrap());
        let ah = |s: &str| Suite::Ah(AhSuite::parse(s).unwrap());
        let specs = vec![
            (0x100, esp("aes128gcm16"), t4, false, false),
            (0x101, esp("aes128-sha1"), Mode::Transport, false, false),
            (0x102, esp("null-null"), Mode::Transport, false, false),
            (0x103, esp("null-null"), t4, false, false),
            (0x104, esp("null-null"), t6, true, true),
            (0x105, esp("aes128gmac"), t6, true, false),
            (0x106, ah("sha256"), Mode::Transport, true, false),
            (0x107, ah("sha1"), t4, false, false),
            (0x108, esp("3des-md5"), Mode::Transport, true, true),
            (0x109, esp("aes128gmac"), t4, true, true),
        ];
        let mut out = Sad::default();
        for (spi, suite, mode, esn, udp) in &specs {
            out.insert_out(OutboundSa::new(params(*spi, Direction::Out, *suite, *mode, *esn, *udp), 0, &mut SeededRng::new(0)).unwrap());
        }
        World { out, specs }
    })
}

fn inbound() -> Sad {
    let mut sad = Sad::default();
    for (spi, suite, mode, esn, udp) in &world().specs {
        // The receiving end of the outbound SA: a tunnel's ends swap.
        let mode = match *mode {
            Mode::Tunnel { local, remote } => Mode::Tunnel { local: remote, remote: local },
            m => m,
        };
        sad.insert_in(InboundSa::new(params(*spi, Direction::In, *suite, mode, *esn, *udp), 0).unwrap()).unwrap();
    }
    sad
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let sad = inbound();
    if sel & 1 == 0 {
        // Arbitrary bytes as a received IP packet.
        let mut pkt = PacketBuf::from_slice(rest, 256, 640);
        let _ = bundle::unprotect(&sad, &mut pkt, 4500, 0);
        // The same bytes as a datagram's payload, for either family's destination.
        let dst = if sel & 2 == 0 { "192.0.2.2" } else { "2001:db8::2" };
        let _ = in_place(&inbound(), rest, dst.parse().unwrap());
        return;
    }
    // A valid packet protected by SA `sel`, then corrupted: rest = [n_edits, (pos_hi, pos_lo, xor)*, payload...].
    let w = world();
    let idx = (sel as usize >> 1) % w.specs.len();
    let (n, rest) = rest.split_first().map(|(n, r)| ((*n % 8) as usize, r)).unwrap_or((0, rest));
    let (edits, payload) = rest.split_at((n * 3).min(rest.len()));
    let v6 = matches!(w.specs[idx].2, Mode::Tunnel { local: IpAddr::V6(_), .. });
    let mut inner = if v6 {
        let mut h = vec![0x60, 0, 0, 0, 0, 0, 253, 64];
        h[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        h
    } else {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 253, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2];
        h[2..4].copy_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
        h
    };
    // (Protocol 253, experimental: a transport-mode payload that cannot be mistaken for a nested ESP/AH layer.)
    inner.extend_from_slice(payload);
    if !v6 {
        let c = netveil_wire::checksum::checksum(&inner[..20]);
        inner[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let mut pkt = PacketBuf::from_slice(&inner, 256, 640);
    let o = w.out.outbound_indices().nth(idx).expect("one outbound SA per spec");
    if bundle::protect(&w.out, &[o], &mut pkt, 0).is_err() {
        return;
    }
    let genuine = pkt.data().to_vec();
    let len = pkt.len();
    for e in edits.chunks_exact(3) {
        let pos = u16::from_be_bytes([e[0], e[1]]) as usize % len.max(1);
        pkt.data_mut()[pos] ^= e[2];
    }
    // Where the ESP/AH header starts: after the outer IP header (and the UDP header of ESP-in-UDP).
    let (_, suite, _, _, udp) = w.specs[idx];
    let ip_len = if genuine[0] >> 4 == 6 { 40 } else { usize::from(genuine[0] & 0x0f) * 4 };
    let hdr_at = ip_len + if udp { 8 } else { 0 };
    let untouched = pkt.data() == &genuine[..];
    let auth_changed = pkt.data()[hdr_at..] != genuine[hdr_at..];
    let authenticates = !matches!(suite, Suite::Esp(s) if s.integ.is_none() && !s.enc.is_aead());
    let corrupted = pkt.data().to_vec();
    let r = bundle::unprotect(&sad, &mut pkt, 4500, 0);
    if udp && corrupted.len() >= hdr_at {
        // The datagram's payload opened where it lies, against the destination it was sent to.
        let dst = if v6 { "2001:db8::2" } else { "192.0.2.2" };
        let (r2, opened) = in_place(&inbound(), &corrupted[hdr_at..], dst.parse().unwrap());
        if untouched {
            match (r2, &w.specs[idx].2) {
                (Ok(bundle::UdpUnprotected::Packet(_)), Mode::Tunnel { .. }) => assert_eq!(opened, inner, "a genuine datagram opened in place to other bytes"),
                (Ok(bundle::UdpUnprotected::NeedsHeaders), Mode::Transport) => {}
                (r2, _) => panic!("a genuine datagram of SA {idx} did not open in place: {r2:?}"),
            }
        } else if auth_changed && authenticates {
            assert!(!matches!(r2, Ok(bundle::UdpUnprotected::Packet(_))), "a changed datagram opened in place");
        }
    }
    if untouched {
        assert!(matches!(r, Ok(bundle::Unprotected::Packet(_))), "a genuine packet of SA {idx} did not open: {r:?} {:02x?}", &genuine[..genuine.len().min(64)]);
        assert_eq!(pkt.data(), &inner[..], "a genuine packet opened to other bytes");
    } else if auth_changed && authenticates {
        assert!(
            !matches!(r, Ok(bundle::Unprotected::Packet(_))),
            "a packet changed at or after its {} header opened",
            if matches!(suite, Suite::Ah(_)) { "AH" } else { "ESP" }
        );
    }
});

/// Opens `payload` as a datagram of a coalesced receive to `dst`: between other bytes in one buffer. Checks that
/// the bytes around it stay, and that a datagram left to the general path is untouched. Returns the result and the
/// packet's bytes afterwards.
fn in_place(sad: &Sad, payload: &[u8], dst: IpAddr) -> (Result<bundle::UdpUnprotected, netveil_ipsec::Drop>, Vec<u8>) {
    let (lead, trail) = ([0xa5u8; 48], [0x5au8; 48]);
    let mut b = PacketBuf::between(&lead, payload, &trail);
    let r = bundle::unprotect_udp_payload(sad, &mut b, dst, 0);
    assert!(b.storage().starts_with(&lead) && b.storage().ends_with(&trail), "bytes around a datagram changed: {r:?}");
    if matches!(r, Ok(bundle::UdpUnprotected::NeedsHeaders)) {
        assert_eq!(b.data(), payload, "a datagram left to the general path was changed");
    }
    (r, b.data().to_vec())
}
