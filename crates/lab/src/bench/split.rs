//! Where a PSP packet's time goes: key lookup, cryptography and the rest, per packet, in process, on one thread.
//!
//! The set-up is a realistic receive table: one [`Device`] holding [`SAS`] receive SAs (AES-GCM-128, version 0),
//! one [`TxSa`] per SA built from what [`Device::rx_assoc`] handed out, and [`TEMPLATES`] tunnel-mode packets
//! (IPv4/UDP inner packets with `payload` bytes) sealed over SAs picked pseudo-randomly, so that consecutive
//! packets hit different table entries and key schedules.
//!
//! Each figure is timed with [`Instant`] around a batch of [`BATCH`] packets (a clock read costs about as much as
//! a table lookup, so per-packet reads would distort the small figures), divided by the batch size; the figure
//! reported is that of the fastest batch: other processes (on a small shared machine) and preemption only ever
//! add time, so the minimum is the estimate least disturbed by them, and it keeps `rest` (a difference of three
//! figures) from swinging with a preempted batch. The phases are interleaved batch by batch, and a few batches
//! run untimed first to warm caches and the branch predictors. Receive:
//!
//! - *key lookup*: [`Device::lookup`], which parses the outer headers up to the PSP header (SPI, version) and
//!   finds the cached SA in the SPI table.
//! - *crypto*: the AES-GCM open of the packet alone: the same AEAD (`netveil_crypto::new_aead`, AES-GCM-128 with
//!   a 16-byte tag, keyed with the SA's key) over the same bytes as decapsulation hands it (PSP header as AAD,
//!   the inner packet as ciphertext, the ICV), with the nonce taken from the header beforehand.
//! - *total*: [`Device::decapsulate`] end to end (lookup, header checks, open, stripping the outer headers, the
//!   counters); *rest* = total - lookup - crypto.
//!
//! Transmit: *total* is [`TxSa::encapsulate`] (headers, IV, seal), *crypto* the AEAD seal alone over the same
//! region. Packets are copied into their buffers outside the timed loops (decapsulation works in place), so
//! every timed loop starts on data that is warm in cache, as a packet just received or just written is.
//!
//! For comparison with the PSP thesis, which spent about a quarter of its 77 us per packet deriving keys, the
//! split also times what a receiver without an SA cache would do per packet instead of the lookup: parse the
//! SPI, derive the SA key (SP 800-108 with AES-256-CMAC, [`kdf::derive`]) and build the AES-GCM key schedule.
//! And, for scale, ESP with the same AEAD (`aes128gcm16`, tunnel mode, [`SAS`] SAs) end to end.
//!
//! Gbit/s figures are inner packet bytes x 8 per nanosecond: what one core could carry if it did nothing but
//! this (no I/O, no system calls).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use netveil_crypto::rand::OsRng;
use netveil_crypto::{new_aead, Aead, AeadAlg};
use netveil_ipsec::bundle::{self, Sad, Unprotected};
use netveil_ipsec::sa::Direction;
use netveil_ipsec::{EspSuite, InboundSa, Mode as EspMode, OutboundSa, SaParams};
use netveil_psp::{kdf, Device, Header, Mode, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

/// Receive SAs in the device's table.
pub const SAS: usize = 1000;
/// Packets per timed batch.
pub const BATCH: usize = 256;
/// Distinct sealed packets, used batch after batch.
pub const TEMPLATES: usize = 1024;

const VERSION: Version = Version::AesGcm128;
const ALG: AeadAlg = AeadAlg::AesGcm128 { tag_len: ICV };
const HEADROOM: usize = 128;
const TAILROOM: usize = 64;
/// Outer IPv4 header + UDP header in front of the PSP header.
const OUTER: usize = 28;
const PSP_HDR: usize = 16;
const ICV: usize = 16;
/// The caller's clock for ESP lifetimes (seconds); constant, nothing expires.
const NOW: u64 = 1000;

/// Per-packet times in nanoseconds (fastest batch of each figure).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// Packets timed per figure (batches x batch size).
    pub packets: usize,
    pub batches: usize,
    pub batch: usize,
    /// Payload bytes of the inner UDP packet.
    pub payload: usize,
    /// The inner IP packet (what the tunnel carries) and the PSP packet on the wire (IP, no link layer).
    pub inner_len: usize,
    pub outer_len: usize,
    pub sas: usize,
    /// Receive: [`Device::lookup`].
    pub rx_lookup_ns: f64,
    /// Receive: the AES-GCM open alone.
    pub rx_crypto_ns: f64,
    /// Receive: [`Device::decapsulate`].
    pub rx_total_ns: f64,
    /// Transmit: the AES-GCM seal alone.
    pub tx_crypto_ns: f64,
    /// Transmit: [`TxSa::encapsulate`].
    pub tx_total_ns: f64,
    /// Per-packet key derivation instead of the lookup: parse the SPI, derive the key, build the key schedule.
    pub derive_ns: f64,
    /// ESP aes128gcm16 tunnel, same inner packets: decapsulation and encapsulation end to end.
    pub esp_rx_total_ns: f64,
    pub esp_tx_total_ns: f64,
}

impl Split {
    /// Receive time that is neither lookup nor cryptography: header checks, stripping, counters.
    pub fn rx_rest_ns(&self) -> f64 {
        self.rx_total_ns - self.rx_lookup_ns - self.rx_crypto_ns
    }

    /// Transmit time that is not cryptography: headers, IV, copies.
    pub fn tx_rest_ns(&self) -> f64 {
        self.tx_total_ns - self.tx_crypto_ns
    }

    /// Receive shares in percent of the total: lookup, crypto, rest.
    pub fn rx_shares(&self) -> [f64; 3] {
        let t = self.rx_total_ns;
        [
            100.0 * self.rx_lookup_ns / t,
            100.0 * self.rx_crypto_ns / t,
            100.0 * self.rx_rest_ns() / t,
        ]
    }

    /// Transmit shares in percent of the total: crypto, rest.
    pub fn tx_shares(&self) -> [f64; 2] {
        let t = self.tx_total_ns;
        [100.0 * self.tx_crypto_ns / t, 100.0 * self.tx_rest_ns() / t]
    }

    /// The receive time per packet if keys were derived per packet instead of looked up.
    pub fn rx_total_with_derive_ns(&self) -> f64 {
        self.rx_total_ns - self.rx_lookup_ns + self.derive_ns
    }

    /// Inner-packet throughput of one core at `ns` per packet.
    pub fn gbit_per_s(&self, ns: f64) -> f64 {
        self.inner_len as f64 * 8.0 / ns
    }
}

/// An IPv4/UDP packet 10.0.0.1:4000 -> 10.0.1.2:5000 with `payload` bytes (UDP checksum 0: not checked here).
fn inner_packet(payload: usize, seed: usize) -> Vec<u8> {
    let (src, dst) = (
        std::net::SocketAddr::from(([10, 0, 0, 1], 4000)),
        std::net::SocketAddr::from(([10, 0, 1, 2], 5000)),
    );
    let hlen = netveil_wire::ip::ip_udp_header_len(src.ip());
    let mut p = vec![0u8; hlen + payload];
    netveil_wire::ip::emit_ip_udp(&mut p[..hlen], src, dst, payload)
        .expect("a small IPv4/UDP packet");
    for (i, b) in p[hlen..].iter_mut().enumerate() {
        *b = (i * 31 + seed) as u8;
    }
    p
}

/// Refills `buf` with a copy of `bytes`, `HEADROOM` bytes in.
fn load(buf: &mut PacketBuf, bytes: &[u8]) {
    buf.reset(HEADROOM);
    buf.push_back(bytes.len())
        .expect("buffer sized for the packet")
        .copy_from_slice(bytes);
}

/// A deterministic spread of packets over [`SAS`] SAs (SplitMix64); [`crate::lab_run::ops`] spreads its own so.
pub(crate) fn spread(i: usize) -> usize {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % SAS as u64) as usize
}

/// The fastest of a figure's batches (other processes only ever add time).
pub(crate) fn fastest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Times `f` over one batch; nanoseconds per packet.
pub(crate) fn per_packet(n: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / n as f64
}

/// The ESP side of the comparison: a SAD with an outbound and an inbound aes128gcm16 tunnel SA per index.
fn esp_sad() -> (Sad, Vec<bundle::OutIdx>) {
    let suite = EspSuite::parse("aes128gcm16", false).expect("known suite");
    let mut sad = Sad::default();
    let mut out = Vec::with_capacity(SAS);
    for i in 0..SAS {
        let mut key = Zeroizing::new(vec![0u8; suite.enc.key_len()]);
        netveil_crypto::rand::fill_random(&mut key[..]);
        out.push(insert_sa_pair(
            &mut sad,
            i,
            suite,
            true,
            &key,
            &Zeroizing::new(Vec::new()),
        ));
    }
    (sad, out)
}

/// Inserts SA `i` of a timing SAD into `sad`, both directions with the same keys (SPI 0x1000 + `i`, replay window
/// 64, no lifetime): tunnel mode between 192.0.2.1 and 192.0.2.2, or transport. Returns the outbound SA's index.
pub(crate) fn insert_sa_pair(
    sad: &mut Sad,
    i: usize,
    suite: EspSuite,
    tunnel: bool,
    enc_key: &Zeroizing<Vec<u8>>,
    auth_key: &Zeroizing<Vec<u8>>,
) -> bundle::OutIdx {
    let (a, b) = (
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)),
    );
    let params = |direction, local, remote| SaParams {
        name: format!("esp{i}"),
        spi: 0x1000 + i as u32,
        direction,
        suite: netveil_ipsec::sa::Suite::Esp(suite),
        mode: if tunnel {
            EspMode::Tunnel { local, remote }
        } else {
            EspMode::Transport
        },
        enc_key: enc_key.clone(),
        auth_key: auth_key.clone(),
        esn: false,
        replay_window: 64,
        lifetime: Default::default(),
        encap: None,
        tfc_pad_to: 0,
        first_seq: 1,
    };
    let o = OutboundSa::new(params(Direction::Out, a, b), NOW, &mut OsRng).expect("ESP SA");
    let n = InboundSa::new(params(Direction::In, b, a), NOW).expect("ESP SA");
    sad.insert_in(n).expect("fresh SPI");
    sad.insert_out(o)
}

/// Measures the split over at least `packets` packets per figure (rounded up to whole batches) of `payload`
/// payload bytes. Panics if a packet fails to decapsulate (a bug, not a measurement).
pub fn psp_split(packets: usize, payload: usize) -> Split {
    let batch = packets.clamp(1, BATCH);
    let batches = packets.div_ceil(batch).max(1);
    let master = Zeroizing::new([0x5a; 32]);
    let mut dev =
        Device::with_master_keys(master.clone(), Zeroizing::new([0xa5; 32]), Box::new(OsRng));

    // The SAs, their transmit sides, and a key object per SA for the bare AEAD calls.
    let mut txs = Vec::with_capacity(SAS);
    let mut aeads: Vec<Box<dyn Aead>> = Vec::with_capacity(SAS);
    for _ in 0..SAS {
        let a = dev.rx_assoc(VERSION).expect("SPI space");
        // The derivation row derives the very keys the device handed out.
        debug_assert_eq!(&kdf::derive(&master, a.spi, VERSION)[..], &a.key[..]);
        let cfg = TxConfig {
            spi: a.spi,
            version: VERSION,
            mode: Mode::Tunnel,
            crypt_offset_transport: 0,
            crypt_offset_tunnel_v4: 0,
            crypt_offset_tunnel_v6: 0,
            vc: false,
        };
        txs.push(TxSa::with_key(&a.key, cfg).expect("valid SA"));
        aeads.push(new_aead(ALG, &a.key).expect("key length"));
    }

    // The packets: clear templates, their SA, the sealed templates and their nonces.
    let clear: Vec<Vec<u8>> = (0..TEMPLATES).map(|i| inner_packet(payload, i)).collect();
    let sa_of: Vec<usize> = (0..TEMPLATES).map(spread).collect();
    let inner_len = clear[0].len();
    let cap = HEADROOM + inner_len + OUTER + PSP_HDR + ICV + TAILROOM + 64;
    let sealed: Vec<Vec<u8>> = (0..TEMPLATES)
        .map(|i| {
            let mut b = PacketBuf::new(cap, HEADROOM);
            load(&mut b, &clear[i]);
            txs[sa_of[i]].encapsulate(&mut b).expect("encapsulate");
            b.data().to_vec()
        })
        .collect();
    let outer_len = sealed[0].len();
    let nonces: Vec<[u8; 12]> = sealed
        .iter()
        .map(|p| Header::new_unchecked(&p[OUTER..]).nonce())
        .collect();
    let (sad, esp_out) = esp_sad();

    let mut bufs: Vec<PacketBuf> = (0..batch).map(|_| PacketBuf::new(cap, HEADROOM)).collect();
    let mut work: Vec<Vec<u8>> = (0..batch).map(|_| vec![0u8; outer_len]).collect();
    let mut fig: [Vec<f64>; 8] = Default::default();
    let warmup = (batches / 10).max(2);
    let mut next = 0usize;
    for round in 0..warmup + batches {
        let ids: Vec<usize> = (0..batch).map(|k| (next + k) % TEMPLATES).collect();
        next = (next + batch) % TEMPLATES;
        let mut r = [0f64; 8];

        // Receive: lookup alone.
        r[0] = per_packet(batch, || {
            for &i in &ids {
                black_box(dev.lookup(black_box(&sealed[i])).is_ok());
            }
        });
        // Receive: the AEAD open alone, on a fresh copy of each packet.
        for (w, &i) in work.iter_mut().zip(&ids) {
            w.copy_from_slice(&sealed[i]);
        }
        let mut fails = 0;
        r[1] = per_packet(batch, || {
            for (w, &i) in work.iter_mut().zip(&ids) {
                let psp = &mut w[OUTER..];
                let (body, icv) = psp.split_at_mut(psp.len() - ICV);
                let (aad, enc) = body.split_at_mut(PSP_HDR);
                fails += aeads[sa_of[i]]
                    .open(black_box(&nonces[i]), aad, enc, icv)
                    .is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "AEAD open failed");
        // Receive: Device::decapsulate end to end.
        for (b, &i) in bufs.iter_mut().zip(&ids) {
            load(b, &sealed[i]);
        }
        r[2] = per_packet(batch, || {
            for b in bufs.iter_mut() {
                fails += dev.decapsulate(b).is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "decapsulation failed");
        // Transmit: TxSa::encapsulate end to end.
        for (b, &i) in bufs.iter_mut().zip(&ids) {
            load(b, &clear[i]);
        }
        r[3] = per_packet(batch, || {
            for (b, &i) in bufs.iter_mut().zip(&ids) {
                fails += txs[sa_of[i]].encapsulate(b).is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "encapsulation failed");
        // Transmit: the AEAD seal alone, over the same region of the packets just sealed.
        r[4] = per_packet(batch, || {
            for (b, &i) in bufs.iter_mut().zip(&ids) {
                let psp = &mut b.data_mut()[OUTER..];
                let (body, icv) = psp.split_at_mut(psp.len() - ICV);
                let (aad, enc) = body.split_at_mut(PSP_HDR);
                aeads[sa_of[i]].seal(black_box(&nonces[i]), aad, enc, icv);
            }
        });
        // Per-packet derivation instead of the lookup: parse, derive, build the key schedule.
        r[5] = per_packet(batch, || {
            for &i in &ids {
                let (spi, v) = netveil_psp::xform::peek(black_box(&sealed[i])).expect("PSP");
                let key = kdf::derive(&master, spi, v);
                black_box(new_aead(ALG, &key).expect("key length"));
            }
        });
        // ESP for scale: encapsulate then decapsulate the same inner packets (sequence numbers stay in order).
        for (b, &i) in bufs.iter_mut().zip(&ids) {
            load(b, &clear[i]);
        }
        r[6] = per_packet(batch, || {
            for (b, &i) in bufs.iter_mut().zip(&ids) {
                let sa = [esp_out[sa_of[i]]];
                fails += bundle::protect(&sad, &sa, b, NOW).is_err() as usize;
            }
        });
        assert_eq!(fails, 0, "ESP encapsulation failed");
        r[7] = per_packet(batch, || {
            for b in bufs.iter_mut() {
                let ok = matches!(
                    bundle::unprotect(&sad, b, 4500, NOW),
                    Ok(Unprotected::Packet(_))
                );
                fails += (!ok) as usize;
            }
        });
        assert_eq!(fails, 0, "ESP decapsulation failed");

        if round >= warmup {
            for (f, x) in fig.iter_mut().zip(r) {
                f.push(x);
            }
        }
    }
    let [lookup, rx_crypto, rx_total, tx_total, tx_crypto, derive, esp_tx, esp_rx] =
        fig.map(|v| fastest(&v));
    Split {
        packets: batch * batches,
        batches,
        batch,
        payload,
        inner_len,
        outer_len,
        sas: SAS,
        rx_lookup_ns: lookup,
        rx_crypto_ns: rx_crypto,
        rx_total_ns: rx_total,
        tx_crypto_ns: tx_crypto,
        tx_total_ns: tx_total,
        derive_ns: derive,
        esp_rx_total_ns: esp_rx,
        esp_tx_total_ns: esp_tx,
    }
}

/// The split as a small table.
pub fn render(s: &Split) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let row = |o: &mut String, name: &str, ns: f64, share: Option<f64>, gbit: Option<f64>| {
        let share = share.map_or(String::new(), |p| format!("{p:5.1}%"));
        let gbit = gbit.map_or(String::new(), |g| format!("{g:6.2} Gbit/s"));
        let line = format!("  {name:<52} {ns:9.1} {share:>7} {gbit:>13}");
        let _ = writeln!(o, "{}", line.trim_end());
    };
    let _ = writeln!(
        o,
        "PSP per-packet time split: AES-GCM-128 (version 0), tunnel mode, {} receive SAs, {}-byte inner packets \
         ({} on the wire); fastest of {} batches of {} packets, one thread",
        s.sas, s.inner_len, s.outer_len, s.batches, s.batch
    );
    let _ = writeln!(o, "  {:<52} {:>9} {:>7}", "", "ns/packet", "share");
    let _ = writeln!(o, "receive (Device::decapsulate)");
    let [l, c, r] = s.rx_shares();
    row(
        &mut o,
        "key lookup (SPI -> cached SA)",
        s.rx_lookup_ns,
        Some(l),
        None,
    );
    row(
        &mut o,
        "crypto (AES-GCM open alone)",
        s.rx_crypto_ns,
        Some(c),
        None,
    );
    row(
        &mut o,
        "rest (header checks, stripping, counters)",
        s.rx_rest_ns(),
        Some(r),
        None,
    );
    row(
        &mut o,
        "total",
        s.rx_total_ns,
        Some(100.0),
        Some(s.gbit_per_s(s.rx_total_ns)),
    );
    let _ = writeln!(o, "transmit (TxSa::encapsulate)");
    let [c, r] = s.tx_shares();
    row(
        &mut o,
        "crypto (AES-GCM seal alone)",
        s.tx_crypto_ns,
        Some(c),
        None,
    );
    row(&mut o, "rest (headers, IV)", s.tx_rest_ns(), Some(r), None);
    row(
        &mut o,
        "total",
        s.tx_total_ns,
        Some(100.0),
        Some(s.gbit_per_s(s.tx_total_ns)),
    );
    let _ = writeln!(
        o,
        "without the SA cache (what the PSP thesis did per packet)"
    );
    let with = s.rx_total_with_derive_ns();
    row(
        &mut o,
        "parse SPI + derive key (AES-256-CMAC) + key schedule",
        s.derive_ns,
        Some(100.0 * s.derive_ns / with),
        None,
    );
    row(
        &mut o,
        "receive total with it",
        with,
        Some(100.0),
        Some(s.gbit_per_s(with)),
    );
    let _ = writeln!(
        o,
        "  the cache saves {:.0} ns per packet: derivation costs {:.0}x the lookup",
        s.derive_ns - s.rx_lookup_ns,
        s.derive_ns / s.rx_lookup_ns
    );
    let _ = writeln!(
        o,
        "for scale: ESP aes128gcm16 tunnel, same inner packets, {} SAs",
        s.sas
    );
    row(
        &mut o,
        "receive total (bundle::unprotect)",
        s.esp_rx_total_ns,
        None,
        Some(s.gbit_per_s(s.esp_rx_total_ns)),
    );
    row(
        &mut o,
        "transmit total (bundle::protect)",
        s.esp_tx_total_ns,
        None,
        Some(s.gbit_per_s(s.esp_tx_total_ns)),
    );
    let _ = writeln!(
        o,
        "Gbit/s: inner packet bits per ns on one core, no I/O. Crypto: the same AEAD key object type over the \
         same bytes, called directly."
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_has_the_right_shape() {
        let s = psp_split(8 * BATCH, 1400);
        assert_eq!((s.inner_len, s.outer_len), (1428, 1428 + 28 + 32));
        assert_eq!((s.batches, s.batch, s.packets), (8, BATCH, 8 * BATCH));
        // Measured quantities are positive; the derived "rest" is a difference of timings and may come out
        // negative on a loaded machine (this is a structure test, not a timing test).
        assert!(s.rx_rest_ns().is_finite() && s.tx_rest_ns().is_finite());
        for (name, ns) in [
            ("rx lookup", s.rx_lookup_ns),
            ("rx crypto", s.rx_crypto_ns),
            ("tx crypto", s.tx_crypto_ns),
            ("derive", s.derive_ns),
            ("esp rx", s.esp_rx_total_ns),
            ("esp tx", s.esp_tx_total_ns),
        ] {
            assert!(ns > 0.0 && ns.is_finite(), "{name}: {ns} ns");
        }
        let rx: f64 = s.rx_shares().iter().sum();
        let tx: f64 = s.tx_shares().iter().sum();
        assert!((rx - 100.0).abs() < 1e-9 && (tx - 100.0).abs() < 1e-9);
        assert!(s.gbit_per_s(s.rx_total_ns) > 0.0);

        let t = render(&s);
        for want in [
            "key lookup",
            "crypto",
            "rest",
            "total",
            "Gbit/s",
            "thesis",
            "ESP",
        ] {
            assert!(t.contains(want), "{want} missing from\n{t}");
        }
    }

    #[test]
    fn small_counts_still_make_one_batch() {
        let s = psp_split(3, 0);
        assert_eq!((s.batch, s.batches, s.packets), (3, 1, 3));
        assert_eq!(s.inner_len, 28);
    }

    /// The figures on this machine: `cargo test --release -p netveil --lib bench::split -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a test: run in release"]
    fn print_split() {
        for payload in [1400, 64] {
            println!("{}", render(&psp_split(200_000, payload)));
        }
    }
}
