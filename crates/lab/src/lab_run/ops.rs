//! `netveil lab` experiment `ops`: netveil's own per-operation times, in process, on one thread.
//!
//! - **ESP per operation against packet size**, as the bare-PC IPsec study timed its stack (Table II, Figs. 6 and
//!   7): ESP with AES-CBC-128 and HMAC-SHA1-96 (the study's suite, netveil's `aes128-sha1`), transport and tunnel
//!   mode, IPv4 ICMP echo packets with 64 to 1,024 payload bytes in steps of 64 (`--quick`: 64, 512, 1,024).
//!   Incoming: SA lookup (the SPI read from the ESP header, the SAD's lookup), anti-replay (the window's check and
//!   update), integrity (HMAC-SHA1-96 computed and compared), decryption (AES-CBC), and the whole decapsulation
//!   (`bundle::unprotect`: all of these, the padding check and the header rewrite). Outgoing: SA lookup (the flow
//!   key parsed from the packet and the policy lookup that names the SA, as the IP engine does it), encryption,
//!   MAC, and the total (that lookup and `bundle::protect`: sequence number, IV, padding, encryption, MAC).
//! - **PSP per stage at a 500-byte payload**, beside the PSP study's Fig. 4.8 (the split of
//!   [`crate::bench::split`]): send total and encryption, receive total, decryption and SA lookup, and what deriving
//!   the key per packet (as the thesis did) would cost instead of the lookup.
//!
//! How a figure is taken: [`SAS`] SAs (keys of their own), [`TEMPLATES`] packets spread over them, batches of
//! [`BATCH`] packets timed with one clock read each (a clock read costs about as much as an SA lookup), every
//! operation timed batch after batch in turn, the fastest batch kept (other processes only ever add time). One
//! repetition gives one figure per operation; the cell is the median of the repetitions (5, as the study ran each
//! size; `--quick`: 3), with min and max. Each operation is checked, not only timed: an ICV that does not verify
//! or a packet that does not decapsulate stops the run (a bug, not a measurement).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use netveil_crypto::{CbcCipher, Mac};
use netveil_ipsec::bundle::{self, OutIdx, Sad, Unprotected};
use netveil_ipsec::sa::Protocol;
use netveil_ipsec::EspSuite;
use netveil_sa::policy::{Action, Direction, FlowKey, PolicyDb, PortRange, Rule, Selector};
use netveil_sa::replay::ReplayWindow;
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

use crate::bench::split::{fastest, per_packet, spread};
use crate::lab_report::Cell;

/// The bare-PC study's ESP suite: AES-CBC-128 with HMAC-SHA1-96.
pub const SUITE: &str = "aes128-sha1";
/// SAs in the SAD (and policies in the SPD), each with keys of its own; packets per timed batch; distinct packets,
/// used batch after batch: as the PSP split's (whose helpers spread and time the packets here too).
pub use crate::bench::split::{BATCH, SAS, TEMPLATES};
/// The PSP payload of the PSP study's per-stage figure.
pub const PSP_PAYLOAD: usize = 500;

const EXPERIMENT: &str = "ops";
const UNIT: &str = "ns";
/// The caller's clock for the SAs' lifetimes (seconds); constant, nothing expires.
const NOW: u64 = 1000;
const HEADROOM: usize = 128;
/// Room in a buffer beyond the clear packet: an outer IPv4 header, ESP's header, IV, padding and ICV.
const GROWTH: usize = 128;
const BARE_PC: &str =
    "bare-PC IPsec study, abstract and Figs. 6-7: outgoing ESP about 6% cheaper than incoming";
const PSP_FIG: &str = "PSP study, Fig. 4.8 (500-byte payload)";

/// The ICMP payload sizes of the ESP figures (the study's 64 to 1,024 bytes in steps of 64).
pub fn sizes(quick: bool) -> Vec<usize> {
    if quick {
        vec![64, 512, 1024]
    } else {
        (1..=16).map(|k| k * 64).collect()
    }
}

/// ESP's per-operation times for one mode and size, nanoseconds per packet (fastest batch of each).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EspOps {
    pub in_lookup: f64,
    pub in_replay: f64,
    pub in_integrity: f64,
    pub in_decryption: f64,
    pub in_total: f64,
    pub out_lookup: f64,
    pub out_encryption: f64,
    pub out_mac: f64,
    pub out_total: f64,
}

impl EspOps {
    /// (metric name, value) in the report's order.
    pub fn named(&self) -> [(&'static str, f64); 9] {
        [
            ("in sa lookup", self.in_lookup),
            ("in anti-replay", self.in_replay),
            ("in integrity", self.in_integrity),
            ("in decryption", self.in_decryption),
            ("in total", self.in_total),
            ("out sa lookup", self.out_lookup),
            ("out encryption", self.out_encryption),
            ("out mac", self.out_mac),
            ("out total", self.out_total),
        ]
    }
}

/// The inner address of SA `i`'s peer (what its policy selects).
fn peer(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, (i / 256) as u8, (i % 256) as u8)
}

/// An IPv4 ICMP echo request 10.0.0.1 -> `dst` with `payload` bytes, checksums filled in.
fn echo(dst: Ipv4Addr, payload: usize, seed: usize) -> Vec<u8> {
    let (src, to) = (
        SocketAddr::from(([10, 0, 0, 1], 0)),
        SocketAddr::from((dst, 0)),
    );
    // An IPv4/UDP header is the IPv4 header and 8 bytes behind it, as long as ICMP's echo header: written as
    // such, then the protocol and the 8 bytes made ICMP's.
    let hlen = netveil_wire::ip::ip_udp_header_len(src.ip());
    let mut p = vec![0u8; hlen + payload];
    netveil_wire::ip::emit_ip_udp(&mut p[..hlen], src, to, payload).expect("a small IPv4 packet");
    let mut ip = netveil_wire::ipv4::Packet::new_unchecked(&mut p[..]);
    ip.set_protocol(1);
    ip.fill_checksum();
    let l3 = ip.header_len();
    let mut icmp = netveil_wire::icmpv4::Packet::new_unchecked(&mut p[l3..]);
    icmp.set_msg_type(netveil_wire::icmpv4::msg_type::ECHO_REQUEST);
    icmp.set_msg_code(0);
    icmp.set_echo_ident(0x4e56);
    icmp.set_echo_seq_no(seed as u16);
    for (i, b) in icmp.payload_mut().iter_mut().enumerate() {
        *b = (i * 31 + seed) as u8;
    }
    icmp.fill_checksum();
    p
}

/// The SAs of one mode: the SAD (an outbound and an inbound SA per index, same keys), the policies naming them,
/// and per SA the bare cipher and MAC (keyed as the SA) and an anti-replay window of the timing's own.
struct Esp {
    sad: Sad,
    out: Vec<OutIdx>,
    spd: PolicyDb,
    ciphers: Vec<Box<dyn CbcCipher>>,
    macs: Vec<Box<dyn Mac>>,
    windows: Vec<ReplayWindow>,
    seqs: Vec<u64>,
    /// The suite's IV and ICV lengths.
    iv: usize,
    icv: usize,
}

fn esp(tunnel: bool) -> Esp {
    let suite = EspSuite::parse(SUITE, false).expect("known suite");
    let integ = suite.integ.expect("an integrity algorithm");
    let mut e = Esp {
        sad: Sad::default(),
        out: Vec::with_capacity(SAS),
        spd: PolicyDb::new(Action::Bypass),
        ciphers: Vec::with_capacity(SAS),
        macs: Vec::with_capacity(SAS),
        windows: Vec::with_capacity(SAS),
        seqs: vec![0; SAS],
        iv: suite.enc.iv_len(),
        icv: suite.icv_len(),
    };
    for i in 0..SAS {
        // Keys of their own per SA (their values do not change the times).
        let key = |len: usize, salt: u8| -> Zeroizing<Vec<u8>> {
            Zeroizing::new(
                (0..len)
                    .map(|k| (k as u8) ^ (i as u8).wrapping_mul(37) ^ salt)
                    .collect(),
            )
        };
        let (enc_key, auth_key) = (key(suite.enc.key_len(), 0x5a), key(integ.key_len(), 0xa5));
        e.out.push(crate::bench::split::insert_sa_pair(
            &mut e.sad, i, suite, tunnel, &enc_key, &auth_key,
        ));
        let mut sel = Selector::any_v4();
        sel.dst = ipnet::IpNet::from(IpAddr::V4(peer(i)));
        sel.src_ports = PortRange::ANY;
        e.spd.push(Rule {
            direction: Direction::Out,
            selector: sel,
            action: Action::Protect(i),
        });
        e.ciphers.push(
            netveil_crypto::new_cbc(netveil_crypto::CbcAlg::Aes128, &enc_key).expect("key length"),
        );
        e.macs.push(
            netveil_crypto::new_mac(integ.hash(), &auth_key, integ.icv_len()).expect("key length"),
        );
        e.windows.push(ReplayWindow::new(64, false));
    }
    e
}

/// ESP's per-operation times for `payload` ICMP payload bytes: the fastest of `batches` batches per operation.
pub fn esp_ops(tunnel: bool, payload: usize, batches: usize) -> EspOps {
    let mut e = esp(tunnel);
    let clear: Vec<Vec<u8>> = (0..TEMPLATES)
        .map(|t| echo(peer(spread(t)), payload, t))
        .collect();
    let cap = HEADROOM + clear[0].len() + GROWTH;
    let (hdr, iv, icv) = (netveil_wire::esp::HEADER_LEN, e.iv, e.icv);
    let mut bufs: Vec<PacketBuf> = (0..BATCH).map(|_| PacketBuf::new(cap, HEADROOM)).collect();
    let mut work: Vec<Vec<u8>> = (0..BATCH).map(|_| Vec::with_capacity(cap)).collect();
    let mut sa_of = [0usize; BATCH];
    let mut fig: [Vec<f64>; 9] = Default::default();
    let warmup = (batches / 10).max(2);
    let mut next = 0usize;
    for round in 0..warmup + batches {
        let ids: Vec<usize> = (0..BATCH).map(|k| (next + k) % TEMPLATES).collect();
        next = (next + BATCH) % TEMPLATES;
        let mut r = [0f64; 9];
        let mut fails = 0usize;

        // Outgoing SA lookup: the flow key of the packet, the policy that names its SA.
        r[5] = per_packet(BATCH, || {
            for (k, &t) in ids.iter().enumerate() {
                let f = netveil_wire::ip::flow_key(black_box(&clear[t])).expect("IPv4");
                let key = FlowKey {
                    src: f.src,
                    dst: f.dst,
                    proto: f.proto,
                    src_port: f.src_port,
                    dst_port: f.dst_port,
                };
                match e.spd.lookup(Direction::Out, &key).1 {
                    Action::Protect(i) => sa_of[k] = i,
                    _ => fails += 1,
                }
            }
        });
        assert_eq!(fails, 0, "a packet without its policy");
        // Outgoing: bundle::protect (its SA named by the lookup above).
        for (b, &t) in bufs.iter_mut().zip(&ids) {
            b.reset(HEADROOM);
            b.push_back(clear[t].len())
                .expect("buffer sized for the packet")
                .copy_from_slice(&clear[t]);
        }
        let protect = per_packet(BATCH, || {
            for (b, &i) in bufs.iter_mut().zip(&sa_of) {
                fails += bundle::protect(&e.sad, &[e.out[i]], b, NOW).is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "ESP encapsulation failed");
        r[8] = r[5] + protect;
        // The ESP packets (behind their IPv4 header) for the operations alone.
        for (w, b) in work.iter_mut().zip(&bufs) {
            let l3 = netveil_wire::ipv4::Packet::new_unchecked(b.data()).header_len();
            w.clear();
            w.extend_from_slice(&b.data()[l3..]);
        }
        // Incoming: bundle::unprotect end to end (the packets just sealed, in sequence).
        r[4] = per_packet(BATCH, || {
            for b in bufs.iter_mut() {
                let ok = matches!(
                    bundle::unprotect(&e.sad, b, 4500, NOW),
                    Ok(Unprotected::Packet(_))
                );
                fails += (!ok) as usize;
            }
        });
        assert_eq!(fails, 0, "ESP decapsulation failed");
        // Incoming SA lookup: the SPI from the ESP header, the SAD's lookup.
        r[0] = per_packet(BATCH, || {
            for w in &work {
                let spi = netveil_wire::esp::Packet::new_unchecked(&black_box(w)[..]).spi();
                fails += e.sad.lookup_inbound(Protocol::Esp, spi).is_none() as usize;
            }
        });
        assert_eq!(fails, 0, "an SPI without its SA");
        // Anti-replay: the window's check and, the packet being authentic, its update.
        r[1] = per_packet(BATCH, || {
            for &i in &sa_of {
                e.seqs[i] += 1;
                let lo = e.seqs[i] as u32;
                let w = &mut e.windows[i];
                match w.check(black_box(lo)) {
                    Ok(seq) => fails += w.update(seq).is_err() as usize,
                    Err(_) => fails += 1,
                }
            }
        });
        assert_eq!(
            fails, 0,
            "the anti-replay window refused a fresh sequence number"
        );
        // Integrity: HMAC-SHA1-96 over the ESP header, IV and ciphertext, compared with the ICV.
        r[2] = per_packet(BATCH, || {
            for (w, &i) in work.iter().zip(&sa_of) {
                let (authed, tag) = w.split_at(w.len() - icv);
                fails += e.macs[i].verify(&[black_box(authed)], tag).is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "an ICV did not verify");
        // Decryption: AES-CBC over the ciphertext, in place.
        r[3] = per_packet(BATCH, || {
            for (w, &i) in work.iter_mut().zip(&sa_of) {
                let end = w.len() - icv;
                let (head, body) = w[..end].split_at_mut(hdr + iv);
                e.ciphers[i].decrypt(&head[hdr..], black_box(body));
            }
        });
        // Encryption: AES-CBC over the (now clear) body again, in place: the ciphertext it had.
        r[6] = per_packet(BATCH, || {
            for (w, &i) in work.iter_mut().zip(&sa_of) {
                let end = w.len() - icv;
                let (head, body) = w[..end].split_at_mut(hdr + iv);
                e.ciphers[i].encrypt(&head[hdr..], black_box(body));
            }
        });
        // MAC: HMAC-SHA1-96 computed into the ICV's place (the ICV it had).
        r[7] = per_packet(BATCH, || {
            for (w, &i) in work.iter_mut().zip(&sa_of) {
                let n = w.len() - icv;
                let (authed, tag) = w.split_at_mut(n);
                e.macs[i].compute(&[black_box(authed)], tag);
            }
        });
        // Both steps restored the sealed packet: its ICV still verifies.
        for (w, &i) in work.iter().zip(&sa_of) {
            let (authed, tag) = w.split_at(w.len() - icv);
            fails += e.macs[i].verify(&[authed], tag).is_err() as usize;
        }
        assert_eq!(
            fails, 0,
            "encryption and MAC did not give the sealed packet back"
        );

        if round >= warmup {
            for (f, x) in fig.iter_mut().zip(r) {
                f.push(x);
            }
        }
    }
    let f = fig.map(|v| fastest(&v));
    EspOps {
        in_lookup: f[0],
        in_replay: f[1],
        in_integrity: f[2],
        in_decryption: f[3],
        in_total: f[4],
        out_lookup: f[5],
        out_encryption: f[6],
        out_mac: f[7],
        out_total: f[8],
    }
}

/// The report path of the ESP cells of a mode.
pub fn esp_path(tunnel: bool) -> String {
    format!(
        "esp {SUITE} {}",
        if tunnel { "tunnel" } else { "transport" }
    )
}

/// The PSP cells' path.
pub const PSP_PATH: &str = "psp aes-gcm-128";

/// The `ops` experiment's cells.
pub fn run(quick: bool) -> Vec<Cell> {
    let (reps, batches) = if quick { (3, 20) } else { (5, 100) };
    let sizes = sizes(quick);
    let mut cells = Vec::new();
    for tunnel in [true, false] {
        let path = esp_path(tunnel);
        // [size][metric] -> one figure per repetition.
        let mut runs: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); 9]; sizes.len()];
        // Repetitions outermost: each size measured once per pass, so that a slow spell of the machine spreads
        // over the sizes instead of bending one of them.
        for _ in 0..reps {
            for (s, &size) in sizes.iter().enumerate() {
                let ops = esp_ops(tunnel, size, batches);
                for (m, (_, v)) in ops.named().into_iter().enumerate() {
                    runs[s][m].push(v);
                }
            }
        }
        let names = EspOps::default().named().map(|(n, _)| n);
        let mut ratio = Vec::new();
        for (s, &size) in sizes.iter().enumerate() {
            for (m, name) in names.iter().enumerate() {
                cells.push(Cell::measured(
                    EXPERIMENT,
                    &path,
                    &format!("{name} {size} B"),
                    UNIT,
                    runs[s][m].clone(),
                ));
            }
            let (i, o) = (
                crate::bench::ping::median(&runs[s][4]),
                crate::bench::ping::median(&runs[s][8]),
            );
            ratio.push(100.0 * (o / i - 1.0));
        }
        // The study's one number: outgoing about 6% cheaper than incoming (its figure over all sizes).
        cells.push(
            Cell::measured(
                EXPERIMENT,
                &path,
                "out total vs in total, mean over sizes",
                "%",
                vec![ratio.iter().sum::<f64>() / ratio.len() as f64],
            )
            .paper(-6.0, BARE_PC),
        );
    }
    cells.extend(psp_cells(if quick { 3 } else { 5 }, batches * BATCH));
    cells
}

/// PSP's per-stage cells at [`PSP_PAYLOAD`] bytes: `reps` splits of `packets` packets per figure.
fn psp_cells(reps: usize, packets: usize) -> Vec<Cell> {
    let splits: Vec<crate::bench::split::Split> = (0..reps)
        .map(|_| crate::bench::split::psp_split(packets, PSP_PAYLOAD))
        .collect();
    let col =
        |f: fn(&crate::bench::split::Split) -> f64| splits.iter().map(f).collect::<Vec<f64>>();
    let m = |metric: &str, runs: Vec<f64>| {
        Cell::measured(
            EXPERIMENT,
            PSP_PATH,
            &format!("{metric} {PSP_PAYLOAD} B"),
            UNIT,
            runs,
        )
    };
    let recv_vs_send: Vec<f64> = splits
        .iter()
        .map(|s| 100.0 * (s.rx_total_ns / s.tx_total_ns - 1.0))
        .collect();
    vec![
        m("send total", col(|s| s.tx_total_ns)).paper(64_750.0, PSP_FIG),
        m("send encryption", col(|s| s.tx_crypto_ns)).paper(31_640.0, PSP_FIG),
        Cell::missing(
            EXPERIMENT,
            PSP_PATH,
            &format!("send key derivation {PSP_PAYLOAD} B"),
            UNIT,
            "netveil's sender derives no key per packet: its SA holds the key (the thesis derived one per packet)",
        )
        .paper(20_100.0, PSP_FIG),
        m("receive total", col(|s| s.rx_total_ns)).paper(12_530.0, PSP_FIG),
        m("receive decryption", col(|s| s.rx_crypto_ns)).paper(7_860.0, PSP_FIG),
        m("receive sa lookup", col(|s| s.rx_lookup_ns)),
        m("receive key derivation, if done per packet", col(|s| s.derive_ns)).paper(
            3_170.0,
            "PSP study, Fig. 4.8 (the thesis derives the key per packet; netveil derives it once per SA and \
             looks the SA up: `receive sa lookup`)",
        ),
        Cell::measured(
            EXPERIMENT,
            PSP_PATH,
            &format!("receive total vs send total {PSP_PAYLOAD} B"),
            "%",
            recv_vs_send,
        )
        .paper(-80.64, "PSP study, Eq. 4.2: the receive path takes 80.64% less time"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_packets_are_icmp_with_good_checksums() {
        let p = echo(peer(3), 64, 7);
        let ip = netveil_wire::ipv4::Packet::new_checked(&p[..]).unwrap();
        assert_eq!(ip.protocol(), 1);
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(10, 1, 0, 3));
        let icmp = netveil_wire::icmpv4::Packet::new_checked(&p[ip.header_len()..]).unwrap();
        assert!(icmp.verify_checksum());
        assert_eq!(
            icmp.msg_type(),
            netveil_wire::icmpv4::msg_type::ECHO_REQUEST
        );
        assert_eq!(icmp.payload().len(), 64);
    }

    #[test]
    fn every_operation_runs_checked_and_bigger_packets_cost_more_crypto() {
        // Few batches: this checks that each operation runs (and is checked), not how fast.
        for tunnel in [true, false] {
            let small = esp_ops(tunnel, 64, 3);
            let large = esp_ops(tunnel, 1024, 3);
            for (n, v) in small.named().into_iter().chain(large.named()) {
                assert!(v.is_finite() && v > 0.0, "{n}: {v}");
            }
            // 16 times the bytes through AES-CBC and HMAC-SHA1: a wide margin for a noisy machine.
            assert!(large.in_total > small.in_total, "{small:?} {large:?}");
            assert!(large.out_total > small.out_total, "{small:?} {large:?}");
        }
    }

    #[test]
    fn sizes_are_the_studys() {
        let full = sizes(false);
        assert_eq!(full.len(), 16);
        assert_eq!((full[0], full[15]), (64, 1024));
        assert!(full.windows(2).all(|w| w[1] - w[0] == 64));
        assert!(sizes(true).iter().all(|s| full.contains(s)));
    }
}
