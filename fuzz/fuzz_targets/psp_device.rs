//! The PSP device under arbitrary operation sequences: receive associations of every version, rotations,
//! forgotten SAs, replay windows, arbitrary bytes, and valid packets from the device's own SAs (transport or
//! tunnel, IPv4 or IPv6, any crypt offset, with or without VC), possibly corrupted at an input-chosen byte or
//! delivered twice. A model of which SAs are alive checks, besides that nothing panics:
//!
//! - an untouched packet from an SA at most one rotation old and not forgotten decrypts, to exactly the cleartext;
//! - a packet from an SA two or more rotations old, or forgotten, never decrypts;
//! - a corrupted packet decrypts only if the corruption is in the outer IP or UDP header (not authenticated), and
//!   then the inner packet (tunnel) or the payload (transport) is still exactly the cleartext;
//! - a repeat is dropped as a replay when the SA has a replay window, and decrypts again when it has none;
//! - the counters only grow, and `rx_packets` grows by one exactly for each packet that decrypted.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_psp::{Device, Mode, RxDrop, StatsSnapshot, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

const MAX_PEERS: usize = 32;
const MAX_OPS: usize = 200;

/// The transmit side of one receive SA, and what the model knows about it.
struct Peer {
    tx: TxSa,
    spi: u32,
    /// Rotations done when the SA was made.
    born: u32,
    forgotten: bool,
    /// Made while a replay window was set.
    replay: bool,
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
}

/// A master key that no earlier rotation used.
fn master(n: u32) -> Zeroizing<[u8; 32]> {
    let mut k = [0x3c; 32];
    for c in k.chunks_mut(4) {
        c.copy_from_slice(&n.to_be_bytes());
    }
    k[0] = 0xc3;
    Zeroizing::new(k)
}

/// An IPv4 or IPv6 UDP packet with `n` payload bytes and a valid IPv4 header checksum.
fn clear_packet(v6: bool, n: usize, fill: u8) -> Vec<u8> {
    let mut p;
    let l4 = if v6 {
        p = vec![0u8; 40 + 8 + n];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
        p[6] = 17;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
        40
    } else {
        p = vec![0u8; 20 + 8 + n];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((28 + n) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[192, 0, 2, 1]);
        p[16..20].copy_from_slice(&[192, 0, 2, 2]);
        let c = netveil_wire::checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        20
    };
    p[l4..l4 + 2].copy_from_slice(&4000u16.to_be_bytes());
    p[l4 + 2..l4 + 4].copy_from_slice(&5000u16.to_be_bytes());
    p[l4 + 4..l4 + 6].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    for (i, b) in p[l4 + 8..].iter_mut().enumerate() {
        *b = fill.wrapping_add(i as u8);
    }
    p
}

fn grew(before: &StatsSnapshot, after: &StatsSnapshot) -> bool {
    let a = [
        before.rx_packets,
        before.rx_bytes,
        before.rx_auth_fail,
        before.rx_error,
        before.rx_bad,
        before.rx_unknown_spi,
        before.rx_replay,
        before.tx_packets,
        before.tx_bytes,
        before.tx_error,
    ];
    let b = [
        after.rx_packets,
        after.rx_bytes,
        after.rx_auth_fail,
        after.rx_error,
        after.rx_bad,
        after.rx_unknown_spi,
        after.rx_replay,
        after.tx_packets,
        after.tx_bytes,
        after.tx_error,
    ];
    a.iter().zip(&b).all(|(x, y)| x <= y)
}

/// Decapsulates and checks the counters: they only grow, and `rx_packets` counts exactly the successes.
fn decap(d: &Device, pkt: &mut PacketBuf) -> Result<netveil_psp::Decapsulated, RxDrop> {
    let before = d.stats.snapshot();
    let r = d.decapsulate(pkt);
    let after = d.stats.snapshot();
    assert!(
        grew(&before, &after),
        "counters went down: {before:?} -> {after:?}"
    );
    assert_eq!(
        after.rx_packets - before.rx_packets,
        r.is_ok() as u64,
        "{r:?}"
    );
    r
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let mut d = Device::with_master_keys(master(0), master(1), Box::new(netveil_crypto::rand::SeededRng::new(0)));
    let mut rotations = 0u32;
    let mut window = 0u32;
    let mut peers: Vec<Peer> = Vec::new();
    for _ in 0..MAX_OPS {
        let Some(op) = inp.byte() else { break };
        let before = d.stats.snapshot();
        match op % 8 {
            // A receive association and its transmit side.
            0 | 1 => {
                let (Some(a), Some(b)) = (inp.byte(), inp.byte()) else {
                    break;
                };
                if peers.len() >= MAX_PEERS {
                    continue;
                }
                let version = Version::from_number(a & 3).unwrap();
                let assoc = d
                    .rx_assoc(version)
                    .expect("SPI space is not exhausted here");
                assert_eq!(assoc.spi >> 31, u32::from(d.phase()));
                assert_eq!(assoc.key.len(), version.key_len());
                let off = b & 0x3f;
                let cfg = TxConfig {
                    spi: assoc.spi,
                    version,
                    mode: if a & 4 == 0 {
                        Mode::Tunnel
                    } else {
                        Mode::Transport
                    },
                    crypt_offset_transport: off,
                    crypt_offset_tunnel_v4: off,
                    crypt_offset_tunnel_v6: off,
                    vc: b & 0x40 != 0,
                };
                let tx = TxSa::with_key(&assoc.key, cfg).expect("valid transmit SA");
                peers.push(Peer {
                    tx,
                    spi: assoc.spi,
                    born: rotations,
                    forgotten: false,
                    replay: window > 0,
                });
            }
            // Rotation to a fresh master key.
            2 => {
                rotations += 1;
                d.rotate_with(Some(master(rotations + 1)));
                assert_eq!(u32::from(d.generation()), rotations % 128);
                let live = peers
                    .iter()
                    .filter(|p| !p.forgotten && rotations - p.born <= 1)
                    .count();
                assert_eq!(d.rx_sa_count(), live);
            }
            // Forget a peer's SA, or an arbitrary SPI.
            3 => {
                let Some(a) = inp.byte() else { break };
                let spi = if a & 0x80 == 0 && !peers.is_empty() {
                    peers[a as usize % peers.len()].spi
                } else {
                    let b = inp.bytes(4);
                    let mut s = [0u8; 4];
                    s[..b.len()].copy_from_slice(b);
                    u32::from_be_bytes(s)
                };
                let held = d.rx_spis().iter().any(|&(s, _)| s == spi);
                let live = peers
                    .iter()
                    .any(|p| p.spi == spi && !p.forgotten && rotations - p.born <= 1);
                assert_eq!(
                    held, live,
                    "the device and the model disagree on SPI {spi:#x}"
                );
                assert_eq!(d.forget(spi), held);
                // Every live SA with that SPI is gone (at most one: SPIs are not reused under a master key).
                for p in peers
                    .iter_mut()
                    .filter(|p| p.spi == spi && rotations - p.born <= 1)
                {
                    p.forgotten = true;
                }
            }
            // Arbitrary bytes as a received packet.
            4 => {
                let Some(n) = inp.byte() else { break };
                let bytes = inp.bytes(n as usize).to_vec();
                let _ = decap(&d, &mut PacketBuf::from_slice(&bytes, 64, 64));
            }
            // A valid packet from a peer, possibly corrupted at one byte, possibly delivered twice.
            5 | 6 => {
                let (Some(a), Some(n), Some(pos), Some(x)) =
                    (inp.byte(), inp.byte(), inp.byte(), inp.byte())
                else {
                    break;
                };
                if peers.is_empty() {
                    continue;
                }
                let np = peers.len();
                let p = &mut peers[a as usize % np];
                let alive = !p.forgotten && rotations - p.born <= 1;
                let clear = clear_packet(op & 0x10 != 0, n as usize, x);
                let mut pkt = PacketBuf::from_slice(&clear, 128, 64);
                if p.tx.encapsulate(&mut pkt).is_err() {
                    // Only a crypt offset past the payload can refuse these packets.
                    assert!(4 * p.tx.config().crypt_offset_tunnel_v4 as usize > n as usize);
                    continue;
                }
                let sealed = pkt.data().to_vec();
                let ip_hlen = if sealed[0] >> 4 == 4 { 20 } else { 40 };
                // Corrupt byte `pos` (scaled over the packet) with `x` when op says so and x is not 0.
                let corrupt = op & 0x20 != 0 && x != 0;
                let at = pos as usize * sealed.len() / 256;
                if corrupt {
                    pkt.data_mut()[at] ^= x;
                }
                let r = decap(&d, &mut pkt);
                if !alive {
                    assert!(r.is_err(), "a dead SA's packet decrypted: {r:?}");
                    continue;
                }
                if !corrupt {
                    let got =
                        r.unwrap_or_else(|e| panic!("a live SA's packet did not decrypt: {e:?}"));
                    assert_eq!(got.spi, p.spi);
                    assert_eq!(
                        pkt.data(),
                        &clear[..],
                        "decrypted packet differs from the cleartext"
                    );
                } else if r.is_ok() {
                    assert!(
                        at < ip_hlen + 8,
                        "corruption at {at} (authenticated) went unnoticed"
                    );
                    let inner_hlen = if clear[0] >> 4 == 4 { 20 } else { 40 };
                    match p.tx.config().mode {
                        Mode::Tunnel => assert_eq!(pkt.data(), &clear[..]),
                        Mode::Transport => {
                            assert_eq!(pkt.len(), clear.len());
                            assert_eq!(&pkt.data()[inner_hlen..], &clear[inner_hlen..]);
                        }
                    }
                }
                // Deliver the packet as sent again.
                if op & 0x40 != 0 {
                    let mut pkt = PacketBuf::from_slice(&sealed, 128, 64);
                    let again = decap(&d, &mut pkt);
                    if p.replay && r.is_ok() {
                        assert_eq!(
                            again,
                            Err(RxDrop::Replay),
                            "a repeat passed the replay window"
                        );
                    } else {
                        // No window, or the first delivery was corrupted and did not move it: decrypts.
                        again.unwrap_or_else(|e| {
                            panic!("a live SA's packet did not decrypt: {e:?}")
                        });
                        assert_eq!(pkt.data(), &clear[..]);
                    }
                }
            }
            // Replay window for SAs made from now on.
            _ => {
                let Some(a) = inp.byte() else { break };
                window = if a & 0x80 == 0 {
                    0
                } else {
                    u32::from(a & 0x7f) + 1
                };
                d.set_replay_window(window);
            }
        }
        assert!(grew(&before, &d.stats.snapshot()));
    }
});
