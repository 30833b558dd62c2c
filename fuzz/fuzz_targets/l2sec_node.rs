//! A protected host (`netveil_l2sec::Node`) on hostile input: arbitrary frames from the wire and from the host
//! side, interleaved with frames a genuine peer sealed (then possibly corrupted), SEP messages included, replays
//! of the peer's earlier frames, restarts of the peer (a new epoch), and time jumps. Nothing may panic; a
//! corrupted frame from the peer must never be delivered, and no frame is accepted twice (across restarts too).

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_crypto::rand::SeededRng;
use netveil_l2sec::node::{Inbound, Node, NodeConfig, Outbound};
use netveil_wire::PacketBuf;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use zeroize::Zeroizing;

const A: [u8; 6] = [2, 0, 0x5e, 0, 0x53, 10];
const B: [u8; 6] = [2, 0, 0x5e, 0, 0x53, 11];

fn node(mac: [u8; 6], host: u8, now: Instant, epoch: u64) -> Node {
    let mut c = NodeConfig::new(mac, Ipv4Addr::new(192, 0, 2, host), 24, Zeroizing::new(vec![3; 32]));
    c.lifetime = Duration::from_secs(30);
    c.rekey_margin = Duration::from_secs(5);
    c.epoch = epoch;
    // A seeded generator: every run of an input is the same.
    let rng = SeededRng::new(u64::from(host) << 32 | epoch);
    Node::new(c, now, 0, Box::new(rng)).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let mut now = Instant::now();
    let mut epoch = 1;
    let mut a = node(A, 10, now, epoch);
    let mut b = node(B, 11, now, 1);
    // Frames of A that B accepted: none may be accepted again.
    let mut accepted: Vec<Vec<u8>> = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(rest[1]) * 4 % 1600;
        let arg = rest[2];
        rest = &rest[3..];
        let take = len.min(rest.len());
        let (chunk, r) = rest.split_at(take);
        rest = r;
        match op % 7 {
            // Arbitrary bytes from the wire.
            0 => {
                let mut f = PacketBuf::from_slice(chunk, 0, 0);
                let _ = b.handle_inbound(&mut f, now);
            }
            // Arbitrary bytes from the host side.
            1 => {
                let mut f = PacketBuf::from_slice(chunk, 64, 128);
                let _ = b.handle_outbound(&mut f, now);
            }
            // A genuine frame from A (to B, or broadcast), corrupted at one byte if `arg` says so.
            2 | 3 => {
                let dst = if op % 7 == 2 { B } else { [0xff; 6] };
                let mut clear = Vec::with_capacity(14 + chunk.len());
                clear.extend_from_slice(&dst);
                clear.extend_from_slice(&A);
                clear.extend_from_slice(&[0x08, 0x00]);
                clear.extend_from_slice(chunk);
                let mut f = PacketBuf::from_slice(&clear, 64, 128);
                let sent = a.handle_outbound(&mut f, now) == Ok(Outbound::Send);
                let mut frames: Vec<Vec<u8>> = Vec::new();
                if sent {
                    frames.push(f.data().to_vec());
                }
                while let Some(x) = a.poll_transmit() {
                    frames.push(x);
                }
                for mut x in frames {
                    let corrupt = arg & 0x80 != 0 && !x.is_empty();
                    if corrupt {
                        let i = usize::from(arg) * 7 % x.len();
                        x[i] ^= 1 | (arg & 0x7f);
                    }
                    let mut g = PacketBuf::from_slice(&x, 0, 0);
                    let r = b.handle_inbound(&mut g, now);
                    if corrupt {
                        assert_ne!(r, Ok(Inbound::Deliver), "a corrupted frame was delivered");
                    } else if r.is_ok() && accepted.len() < 256 {
                        accepted.push(x);
                    }
                }
                // B's answers (SEP) go back to A.
                while let Some(x) = b.poll_transmit() {
                    let mut g = PacketBuf::from_slice(&x, 0, 0);
                    let _ = a.handle_inbound(&mut g, now);
                }
            }
            // A replay of a frame B accepted before.
            5 => {
                if !accepted.is_empty() {
                    let x = &accepted[usize::from(arg) % accepted.len()];
                    let mut g = PacketBuf::from_slice(x, 0, 0);
                    let r = b.handle_inbound(&mut g, now);
                    assert!(r.is_err(), "a replayed frame was accepted: {r:?}");
                }
            }
            // A restarts: a new epoch, no state.
            6 if arg & 1 == 1 => {
                epoch += 1 + u64::from(arg >> 1);
                a = node(A, 10, now, epoch);
            }
            // Time passes.
            _ => {
                now += Duration::from_millis(u64::from(arg) * 50);
                a.handle_timeout(now);
                b.handle_timeout(now);
                let _ = a.poll_timeout();
                let _ = b.peers(now);
            }
        }
    }
});
