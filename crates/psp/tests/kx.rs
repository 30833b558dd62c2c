//! The PSP key exchange's state machine (`netveil_psp::kx`) driven in memory: two hosts, each a machine and a
//! device, over a link that carries each direction's byte stream (the plaintext of the TLS connection), with time
//! passed in. Packets are sealed with the transmit SA one side installed and opened by the other side's device,
//! with the real transforms. Loss is a connection cut at a chosen byte; duplication is the same bytes delivered
//! twice; restarts are fresh machines and devices.

use netveil_crypto::rand::SeededRng;
use netveil_psp::kx::{Event, KeyExchange, KxConfig, KxError, KEEP};
use netveil_psp::xform::peek;
use netveil_psp::{assoc, Device, Mode, RxDrop, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;
use std::time::{Duration, Instant};

const ROTATE: Duration = Duration::from_secs(10);

fn cfg(version: Version, rotate_every: Option<Duration>) -> KxConfig {
    KxConfig {
        tx: TxConfig {
            spi: 0,
            version,
            mode: Mode::Tunnel,
            crypt_offset_transport: 0,
            crypt_offset_tunnel_v4: 1,
            crypt_offset_tunnel_v6: 1,
            vc: false,
        },
        rotate_every,
    }
}

/// An IPv4/UDP packet 192.0.2.1:4000 -> 192.0.2.2:5000 with `n` payload bytes of `fill`.
fn udp4(n: usize, fill: u8) -> Vec<u8> {
    let total = 28 + n;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[192, 0, 2, 1]);
    p[16..20].copy_from_slice(&[192, 0, 2, 2]);
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5000u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    p[28..].fill(fill);
    p
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One host: its machine, its device, and what the events told it.
struct Host {
    kx: KeyExchange,
    dev: Device,
    /// The installed transmit SA.
    tx: Option<TxSa>,
    installs: usize,
    /// SPIs of the associations sent, in order.
    sent: Vec<u32>,
    rotations: Vec<u8>,
    errors: Vec<KxError>,
    /// Every event's `Debug` text (to look for key bytes).
    debug: String,
}

impl Host {
    /// A host whose device draws its master keys from `rng` (seeded: every run of a test is the same).
    fn new(cfg: KxConfig, now: Instant, rng: SeededRng) -> Host {
        Host {
            kx: KeyExchange::new(cfg, now).unwrap(),
            dev: Device::new(Box::new(rng)),
            tx: None,
            installs: 0,
            sent: vec![],
            rotations: vec![],
            errors: vec![],
            debug: String::new(),
        }
    }

    fn apply_events(&mut self) {
        while let Some(e) = self.kx.poll_event() {
            self.debug += &format!("{e:?}\n");
            match e {
                Event::AssocSent { spi, generation } => {
                    assert_eq!(generation, self.dev.generation());
                    self.sent.push(spi)
                }
                Event::InstallTx(sa) => {
                    self.installs += 1;
                    self.tx = Some(sa);
                }
                Event::Rotated { generation } => self.rotations.push(generation),
                Event::Failed(e) => self.errors.push(e),
            }
        }
    }

    fn connected(&mut self, now: Instant) {
        self.kx.connected(now, &mut self.dev);
        self.apply_events();
    }

    fn rotate(&mut self, now: Instant) {
        self.kx.rotate(now, &mut self.dev);
        self.apply_events();
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.kx.handle_timeout(now, &mut self.dev);
        self.apply_events();
    }

    fn input(&mut self, now: Instant, bytes: &[u8]) {
        self.kx.handle_input(now, bytes);
        self.apply_events();
    }

    /// The bytes this host has to send, as one stream.
    fn outgoing(&mut self) -> Vec<u8> {
        let mut out = vec![];
        while let Some(t) = self.kx.poll_transmit() {
            out.extend_from_slice(&t);
        }
        out
    }

    fn tx_spi(&self) -> Option<u32> {
        self.tx.as_ref().map(|t| t.config().spi)
    }

    /// A packet sealed with the installed transmit SA.
    fn seal(&self, fill: u8) -> Sealed {
        let clear = udp4(100, fill);
        let mut b = PacketBuf::from_slice(&clear, 128, 64);
        self.tx
            .as_ref()
            .expect("a transmit SA")
            .encapsulate(&mut b)
            .unwrap();
        Sealed {
            clear,
            sealed: b.data().to_vec(),
        }
    }

    /// Opens a copy of `p` with the device; on success the inner packet must be the original.
    fn open(&self, p: &Sealed) -> Result<(), RxDrop> {
        let mut b = PacketBuf::from_slice(&p.sealed, 128, 64);
        self.dev.decapsulate(&mut b)?;
        assert_eq!(b.data(), &p.clear[..], "decrypted packet differs");
        Ok(())
    }
}

struct Sealed {
    clear: Vec<u8>,
    sealed: Vec<u8>,
}

impl Sealed {
    fn spi(&self) -> u32 {
        peek(&self.sealed).unwrap().0
    }
}

/// Two hosts (0 connects, 1 accepts: the machine does not care) and the time.
struct Pair {
    h: [Host; 2],
    now: Instant,
    /// Where the hosts' generators come from (also those of hosts restarted later).
    seeds: SeededRng,
    /// Everything delivered, in order: the sender's index, then the bytes.
    transcript: Vec<u8>,
}

impl Pair {
    fn new(c0: KxConfig, c1: KxConfig) -> Pair {
        Pair::seeded(c0, c1, 1)
    }

    fn seeded(c0: KxConfig, c1: KxConfig, seed: u64) -> Pair {
        let now = Instant::now();
        let mut seeds = SeededRng::new(seed);
        Pair {
            h: [
                Host::new(c0, now, seeds.fork()),
                Host::new(c1, now, seeds.fork()),
            ],
            now,
            seeds,
            transcript: vec![],
        }
    }

    fn both(version: Version) -> Pair {
        Pair::new(cfg(version, Some(ROTATE)), cfg(version, None))
    }

    fn connect(&mut self) {
        let now = self.now;
        for h in &mut self.h {
            h.connected(now);
        }
    }

    fn disconnect(&mut self) {
        for h in &mut self.h {
            h.kx.disconnected();
            h.apply_events();
        }
    }

    /// Delivers everything queued, both ways, until nothing moves.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for from in 0..2 {
                let bytes = self.h[from].outgoing();
                if !bytes.is_empty() {
                    moved = true;
                    self.transcript.push(from as u8);
                    self.transcript.extend_from_slice(&bytes);
                    let now = self.now;
                    self.h[1 - from].input(now, &bytes);
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Each side sends with the SPI the other handed out last, and packets open both ways.
    fn assert_associated(&self) {
        for i in 0..2 {
            let (me, peer) = (&self.h[i], &self.h[1 - i]);
            assert_eq!(me.tx_spi(), peer.sent.last().copied(), "side {i}");
            let p = me.seal(0x40 + i as u8);
            assert_eq!(peer.open(&p), Ok(()), "side {i} -> {}", 1 - i);
        }
    }

    fn assert_no_errors(&self) {
        for (i, h) in self.h.iter().enumerate() {
            assert!(h.errors.is_empty(), "side {i}: {:?}", h.errors);
        }
    }
}

/// The exchange runs on the seeded generators it is given: the same seed gives the same transcript (associations,
/// hence receive keys) through connection and rotations, and the same packets sealed with the installed transmit
/// SAs; another seed gives other ones.
#[test]
fn same_seed_same_transcript() {
    let run = |seed: u64| {
        let mut p = Pair::seeded(
            cfg(Version::AesGcm256, Some(ROTATE)),
            cfg(Version::AesGcm256, None),
            seed,
        );
        p.connect();
        p.pump();
        for side in [0, 1, 0] {
            let now = p.now;
            p.h[side].rotate(now);
            p.pump();
        }
        p.assert_associated();
        p.assert_no_errors();
        let sealed: Vec<Vec<u8>> = p.h.iter().map(|h| h.seal(0x77).sealed).collect();
        (p.transcript, sealed)
    };
    let (t1, s1) = run(5);
    let (t2, s2) = run(5);
    assert!(t1.len() > 4 * (3 + 6 + 32), "{} bytes", t1.len());
    assert_eq!(t1, t2, "same seed, same transcript");
    assert_eq!(s1, s2, "same seed, same transmit keys");
    let (t3, s3) = run(6);
    assert_eq!(t1.len(), t3.len());
    assert_ne!(t1, t3, "another seed, other keys");
    assert_ne!(s1, s3);
}

/// (a) Each side sends its association on connect; each installs the other's; packets sealed with each side's
/// transmit SA open on the other side's device. Input split anywhere (here: byte by byte) makes no difference.
#[test]
fn association_both_ways_then_traffic_opens() {
    for version in [Version::AesGcm128, Version::AesGcm256] {
        let mut p = Pair::both(version);
        assert!(
            p.h[0].kx.poll_transmit().is_none(),
            "nothing before connect"
        );
        p.connect();
        assert!(p.h.iter().all(|h| h.sent.len() == 1 && h.tx.is_none()));
        // Side 0's association trickles in byte by byte; side 1's arrives whole.
        let m = p.h[0].outgoing();
        assert_eq!(m.len(), 3 + 6 + version.key_len(), "{version:?}");
        for b in &m {
            assert_eq!(p.h[1].installs, 0, "installed before the whole message");
            let now = p.now;
            p.h[1].input(now, std::slice::from_ref(b));
        }
        assert_eq!(p.h[1].installs, 1);
        p.pump();
        assert_eq!([p.h[0].installs, p.h[1].installs], [1, 1]);
        p.assert_associated();
        p.assert_no_errors();
        assert_eq!(p.h[0].tx.as_ref().unwrap().config().version, version);
        assert_eq!(
            p.h[0].tx.as_ref().unwrap().config().crypt_offset_tunnel_v4,
            1
        );
        // A packet sealed for the other side does not open here (both devices count SPIs from 1: same SPI,
        // another key).
        let stray = p.h[0].seal(1);
        assert_eq!(
            p.h[0].open(&stray),
            Err(RxDrop::Psp(netveil_psp::Error::Auth))
        );
    }
}

/// (b) Rotation by the timer and by request: the new SPI is installed by the peer; packets under the SPI of one
/// rotation ago still open, those of two rotations ago do not. The timer restarts at every rotation; a time jump
/// rotates once.
#[test]
fn rotation_by_timer_and_by_request() {
    let mut p = Pair::both(Version::AesGcm128);
    let t0 = p.now;
    p.connect();
    p.pump();
    let g0 = p.h[0].dev.generation();
    assert_eq!(p.h[0].kx.poll_timeout(), Some(t0 + ROTATE));
    assert_eq!(p.h[1].kx.poll_timeout(), None, "no timer: only on request");
    let before = p.h[1].seal(1);
    let first_spi = before.spi();

    // Not due yet: nothing happens.
    p.now = t0 + ROTATE - Duration::from_millis(1);
    let now = p.now;
    p.h[0].handle_timeout(now);
    assert!(p.h[0].rotations.is_empty());

    // The timer.
    p.now = t0 + ROTATE;
    let now = p.now;
    p.h[0].handle_timeout(now);
    assert_eq!(p.h[0].rotations, vec![g0 + 1]);
    assert_eq!(p.h[0].sent.len(), 2, "a new association after the rotation");
    p.pump();
    assert_eq!(p.h[1].installs, 2);
    p.assert_associated();
    let one = p.h[1].seal(2);
    assert_ne!(one.spi(), first_spi);
    assert_eq!(
        one.spi() >> 31,
        1,
        "the new SA is under the other master key"
    );
    assert_eq!(
        p.h[0].open(&before),
        Ok(()),
        "one rotation old: still opens"
    );
    assert_eq!(p.h[0].kx.poll_timeout(), Some(t0 + 2 * ROTATE));

    // A request, before the timer: restarts the timer.
    p.now = t0 + ROTATE + Duration::from_secs(3);
    let now = p.now;
    p.h[0].rotate(now);
    assert_eq!(p.h[0].kx.poll_timeout(), Some(now + ROTATE));
    p.pump();
    assert_eq!(p.h[1].installs, 3);
    p.assert_associated();
    let two = p.h[1].seal(3);
    // Under a fresh master key the SPI counter starts over: the value of the first SPI comes back, as another
    // SA. Both handed SAs must be kept (the older value is not forgotten as if it were the first SA).
    assert_eq!(two.spi(), first_spi);
    assert_eq!(p.h[0].open(&two), Ok(()));
    assert_eq!(p.h[0].open(&one), Ok(()), "one rotation old: still opens");
    assert!(
        p.h[0].open(&before).is_err(),
        "two rotations old: must not open"
    );
    assert_eq!(p.h[0].dev.rx_sa_count(), KEEP);

    // A jump over three periods rotates once.
    p.now = now + 3 * ROTATE + Duration::from_secs(1);
    let now = p.now;
    p.h[0].handle_timeout(now);
    assert_eq!(p.h[0].rotations, vec![g0 + 1, g0 + 2, g0 + 3]);
    assert_eq!(p.h[0].kx.poll_timeout(), Some(now + ROTATE));
    p.pump();
    p.assert_associated();

    // Side 1 rotates on request too; side 0 follows.
    p.h[1].rotate(now);
    p.pump();
    assert_eq!(p.h[0].installs, 2);
    p.assert_associated();
    p.assert_no_errors();
}

/// The timer also runs while the connection is down: it rotates, sends nothing, and the next connection hands
/// out an SA under the new key.
#[test]
fn rotation_while_disconnected_sends_on_reconnect() {
    let mut p = Pair::both(Version::AesGcm256);
    p.connect();
    p.pump();
    p.disconnect();
    p.now += ROTATE;
    let now = p.now;
    p.h[0].handle_timeout(now);
    assert_eq!(p.h[0].rotations.len(), 1);
    assert_eq!(p.h[0].sent.len(), 1, "nothing sent while down");
    assert!(p.h[0].kx.poll_transmit().is_none());
    p.connect();
    p.pump();
    p.assert_associated();
    assert_eq!(p.h[1].tx_spi().unwrap() >> 31, 1, "under the new key");
    p.assert_no_errors();
}

/// (c) The connection drops in the middle of a rotation message, or before any of it: the peer keeps its
/// transmit SA (which still opens), reconnection re-associates, traffic flows; over many reconnections the
/// receive SA tables do not grow.
#[test]
fn lost_rotation_message_then_reconnection() {
    let mut p = Pair::both(Version::AesGcm128);
    p.connect();
    p.pump();
    p.assert_associated();
    let msg_len = 3 + 6 + 16;
    for round in 0..60usize {
        let cut = [0, 1, 2, 3, 9, msg_len - 1][round % 6];
        let installs = p.h[1].installs;
        let tx_before = p.h[1].tx_spi();
        p.now += Duration::from_secs(1);
        let now = p.now;
        if round % 2 == 0 {
            p.h[0].rotate(now);
        } else {
            p.now += ROTATE;
            let now = p.now;
            p.h[0].handle_timeout(now);
        }
        let bytes = p.h[0].outgoing();
        assert_eq!(bytes.len(), msg_len);
        p.h[1].input(now, &bytes[..cut]);
        assert_eq!(p.h[1].installs, installs, "round {round}: partial message");
        // Side 1 still sends with the SA of before the rotation, which is one rotation old: it opens.
        assert_eq!(p.h[1].tx_spi(), tx_before);
        let old = p.h[1].seal(round as u8);
        assert_eq!(p.h[0].open(&old), Ok(()), "round {round}");
        p.disconnect();
        p.connect();
        p.pump();
        // The cut message's bytes were dropped with the connection: the new one parses from its start.
        p.assert_no_errors();
        p.assert_associated();
        for (i, h) in p.h.iter().enumerate() {
            assert!(
                h.dev.rx_sa_count() <= KEEP,
                "round {round}, side {i}: {} receive SAs",
                h.dev.rx_sa_count()
            );
            assert_eq!(h.kx.handed().count(), KEEP);
        }
    }
    assert!(p.h[0].sent.len() > 100);
}

/// Reconnections alone (no rotation) keep the latest two SAs: the one the peer used until now keeps opening
/// until the next association replaces it.
#[test]
fn reconnections_keep_the_latest_two_sas() {
    let mut p = Pair::both(Version::AesGcm128);
    p.connect();
    p.pump();
    let mut prev = p.h[1].seal(0);
    let mut older: Option<Sealed> = None;
    for round in 0..20 {
        p.disconnect();
        p.connect();
        p.pump();
        p.assert_associated();
        assert_eq!(p.h[0].open(&prev), Ok(()), "round {round}: the previous SA");
        if let Some(o) = &older {
            assert_eq!(
                p.h[0].open(o),
                Err(RxDrop::UnknownSpi),
                "round {round}: the SA before the previous one is forgotten"
            );
        }
        let handed: Vec<u32> = p.h[0].kx.handed().collect();
        assert_eq!(handed, p.h[0].sent[p.h[0].sent.len() - KEEP..]);
        let spis: Vec<u32> = p.h[0].dev.rx_spis().iter().map(|(s, _)| *s).collect();
        let mut want = handed.clone();
        want.sort_unstable();
        assert_eq!(spis, want, "round {round}: exactly the handed SAs");
        older = Some(std::mem::replace(&mut prev, p.h[1].seal(round as u8)));
    }
    p.assert_no_errors();
}

/// (d) The same association bytes delivered twice (in one read, split, or on their own) install the SA once:
/// the duplicate is ignored without an error, so the installed SA keeps its IV counter (installing it again
/// would start over at IV 1 under the same key).
#[test]
fn duplicated_association_is_ignored() {
    let mut p = Pair::both(Version::AesGcm256);
    p.connect();
    let m = p.h[0].outgoing();
    let now = p.now;
    let twice = [m.clone(), m.clone()].concat();
    p.h[1].input(now, &twice);
    assert_eq!(p.h[1].installs, 1);
    let a = p.h[1].seal(1);
    assert_eq!(netveil_psp::xform::peek_iv(&a.sealed), Ok(1));
    // Again, split across reads.
    p.h[1].input(now, &m[..5]);
    p.h[1].input(now, &m[5..]);
    assert_eq!(p.h[1].installs, 1, "a duplicate must not install again");
    p.pump();
    let b = p.h[1].seal(2);
    assert_eq!(
        netveil_psp::xform::peek_iv(&b.sealed),
        Ok(2),
        "the IV counter goes on"
    );
    assert_eq!(p.h[0].open(&a), Ok(()));
    assert_eq!(p.h[0].open(&b), Ok(()));
    // On a later connection too (the peer sending the same association again).
    p.disconnect();
    p.h[1].connected(now);
    p.h[1].input(now, &m);
    assert_eq!(p.h[1].installs, 1);
    p.assert_no_errors();
    // A new association after it installs normally.
    p.h[0].connected(now);
    p.pump();
    assert_eq!(p.h[1].installs, 2);
    p.assert_associated();
}

/// (e) A peer with another PSP version, garbage and oversized input: a protocol error naming the fault, no key
/// bytes in any text; further input is ignored and nothing more is sent until the next connection.
#[test]
fn version_mismatch_and_garbage_are_protocol_errors_without_secrets() {
    let mut p = Pair::new(cfg(Version::AesGcm128, None), cfg(Version::AesGcm256, None));
    p.connect();
    let msgs: Vec<Vec<u8>> = p.h.iter_mut().map(|h| h.outgoing()).collect();
    let keys: Vec<String> = msgs
        .iter()
        .map(|m| hex(assoc::decode(m).unwrap().unwrap().0.key))
        .collect();
    let now = p.now;
    p.h[1].input(now, &msgs[0]);
    p.h[0].input(now, &msgs[1]);
    assert_eq!(
        p.h[0].errors,
        vec![KxError::VersionMismatch {
            ours: Version::AesGcm128,
            peer: Version::AesGcm256
        }]
    );
    assert_eq!(
        p.h[1].errors,
        vec![KxError::VersionMismatch {
            ours: Version::AesGcm256,
            peer: Version::AesGcm128
        }]
    );
    assert_eq!(
        p.h[0].errors[0].to_string(),
        "the peer uses PSP version 1, we are configured for 0"
    );
    assert!(p.h.iter().all(|h| h.tx.is_none()), "nothing installed");
    // After the error: input ignored, rotation sends nothing.
    p.h[1].input(now, &msgs[0]);
    assert_eq!(p.h[1].errors.len(), 1);
    p.h[1].rotate(now);
    assert!(p.h[1].kx.poll_transmit().is_none());

    // Garbage on a fresh connection of matching versions.
    let garbage: Vec<(Vec<u8>, KxError)> = vec![
        (
            b"GET / HTTP/1.1\r\n".to_vec(),
            KxError::Malformed(assoc::DecodeError::UnknownType(b'G')),
        ),
        (
            vec![b'A', 0x10, 0x00],
            KxError::Malformed(assoc::DecodeError::Oversized(0x1000)),
        ),
        (
            vec![0; 1 << 20],
            KxError::Malformed(assoc::DecodeError::UnknownType(0)),
        ),
        (
            [vec![b'A', 0, 22, 0], vec![0x80, 0, 0, 0, 0], vec![7; 17]].concat(),
            KxError::Malformed(assoc::DecodeError::ZeroSpi),
        ),
        (
            [vec![b'A', 0, 10, 0], vec![0, 0, 0, 5, 0], vec![7; 5]].concat(),
            KxError::Malformed(assoc::DecodeError::BadLength),
        ),
    ];
    let mut q = Pair::both(Version::AesGcm128);
    for (bytes, want) in garbage {
        q.connect();
        let good = q.h[0].outgoing();
        let now = q.now;
        // A valid association first, then the garbage, all in one read.
        q.h[1].input(now, &[good.clone(), bytes].concat());
        assert_eq!(q.h[1].errors.pop(), Some(want));
        assert!(q.h[1].errors.is_empty(), "one error per connection");
        assert!(q.h[1].kx.poll_transmit().is_none(), "nothing sent after");
        let text = format!("{} {:?}", want, want);
        assert!(!text.contains(&keys[0]) && !text.contains(&keys[1]));
        let (a, _) = assoc::decode(&good).unwrap().unwrap();
        let key = hex(a.key);
        assert!(!q.h[1].debug.contains(&key), "{}", q.h[1].debug);
        assert!(!format!("{:?}", q.h[1].kx).contains(&key));
        q.disconnect();
    }
    // The machine works again on the next connection.
    q.connect();
    q.pump();
    q.assert_no_errors();
    q.assert_associated();

    // No key in any event's or transmit's Debug.
    for (h, k) in p.h.iter().zip(&keys) {
        assert!(!h.debug.contains(k.as_str()));
    }
    let mut r = Pair::both(Version::AesGcm256);
    r.connect();
    let t = r.h[0].kx.poll_transmit().unwrap();
    let (a, _) = assoc::decode(&t).unwrap().unwrap();
    let key = hex(a.key);
    let dbg = format!("{t:?} {:?}", r.h[0].kx);
    assert!(!dbg.contains(&key), "{dbg}");
    let now = r.now;
    r.h[1].input(now, &t);
    assert!(!r.h[1].debug.contains(&key), "{}", r.h[1].debug);
    assert!(r.h[1].debug.contains("InstallTx"));
}

/// (f) One side restarts (a fresh device and machine): its first SPI has the same value as before (a fresh
/// device counts from 1) but another key; the survivor installs it, keeps at most two receive SAs, and traffic
/// flows both ways. Then the other side restarts.
#[test]
fn peer_restart_reassociates() {
    let mut p = Pair::both(Version::AesGcm128);
    p.connect();
    p.pump();
    p.assert_associated();
    for restarting in [1usize, 0] {
        let survivor = 1 - restarting;
        let old_peer_spi = p.h[survivor].tx_spi().unwrap();
        let installs = p.h[survivor].installs;
        let stale = p.h[survivor].seal(9);
        let c = *p.h[restarting].kx.config();
        p.now += Duration::from_secs(2);
        p.h[restarting] = Host::new(c, p.now, p.seeds.fork());
        p.h[survivor].kx.disconnected();
        p.connect();
        p.pump();
        assert_eq!(p.h[survivor].installs, installs + 1, "re-associated");
        if restarting == 1 {
            assert_eq!(
                p.h[survivor].tx_spi(),
                Some(old_peer_spi),
                "the same SPI value under a new key (installed, not taken for a duplicate)"
            );
        }
        p.assert_associated();
        p.assert_no_errors();
        assert!(p.h[survivor].dev.rx_sa_count() <= KEEP);
        // What the survivor sealed for the side before its restart does not open there now.
        assert!(p.h[restarting].open(&stale).is_err());
    }
}

/// Many transmit threads sharing one SA: every packet gets its own IV.
#[test]
fn shared_transmit_sa_never_repeats_an_iv() {
    let mut p = Pair::both(Version::AesGcm128);
    p.connect();
    p.pump();
    let sa = std::sync::Arc::new(p.h[0].tx.take().unwrap());
    const THREADS: usize = 4;
    const EACH: usize = 2000;
    let ivs: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let sa = sa.clone();
                s.spawn(move || {
                    (0..EACH)
                        .map(|_| {
                            let mut b = PacketBuf::from_slice(&udp4(64, t as u8), 128, 64);
                            sa.encapsulate(&mut b).unwrap();
                            netveil_psp::xform::peek_iv(b.data()).unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = ivs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), THREADS * EACH, "an IV was used twice");
    assert_eq!(sorted, (1..=(THREADS * EACH) as u64).collect::<Vec<_>>());
    assert_eq!(sa.next_iv(), (THREADS * EACH) as u64 + 1);
}
