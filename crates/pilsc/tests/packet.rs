//! The packet transform: known answers from an independent implementation of the documented layout
//! (`testdata/vectors.py`, Python's `cryptography`: AES, ChaCha20, 3DES, Blowfish; RC5's own known answers are
//! in the crypto crate's tests), the round trip for every algorithm, mode and protocol, and
//! what is refused: tampering (authenticated), replays, counters at their end, fragments, packets without room,
//! double marking, the other mode or key, too many sources. Confidentiality only accepts a tamper that keeps the
//! transport checksum, as documented.

use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{
    key_id, marking, Mode, OpenError, Opener, SealError, Sealer, LEGACY_PACKETS,
};
use netveil_wire::checksum;

const HEAD: usize = 64;
const COUNTER: u64 = 0x0102030405060708;

fn hx(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

/// The clear packet of testdata/vectors.py: UDP 192.0.2.1:5353 -> 198.51.100.7:53, 32 bytes of data.
const CLEAR: &str = "4500003c1234400040113c41c0000201c633640714e900350028e02f50494c5343206b6e6f776e20616e737765723a\
                     203332206279746573202e2e2e";

/// (cipher, key, mode, key id, counter, sealed packet) from testdata/vectors.py.
type Vector = (Cipher, Vec<u8>, Mode, u16, u64, &'static str);

fn vectors() -> Vec<Vector> {
    let k16: Vec<u8> = (0..16).collect();
    let k32: Vec<u8> = (0..32).collect();
    let kc: Vec<u8> = (32..64).collect();
    let k3: Vec<u8> = (64..88).collect();
    let kb: Vec<u8> = (88..104).collect();
    const C64: u64 = 0x060708;
    vec![
        (Cipher::TripleDes, k3.clone(), Mode::Confidential, 0x3a9f, C64,
         "48000048123440004011757bc0000201c6336407820c3a9f0000000000060708e79d98f7b74c48010cbc98cbd28d22a91b1dd2e350ba4c2df6d21b1725bb30a6bd3ec19cfa2d9304"),
        (Cipher::TripleDes, k3, Mode::Authenticated, 0x3a9f, C64,
         "4c000058123440004011be35c0000201c6336407821c3a9f00000000000607085cad730cfff197fedf368e58b2ca2b21e79d98f7b74c48010cbc98cbd28d22a91b1dd2e350ba4c2df6d21b1725bb30a6bd3ec19cfa2d9304"),
        (Cipher::Blowfish, kb.clone(), Mode::Confidential, 0x9a52, C64,
         "4800004812344000401115c8c0000201c6336407820c9a5200000000000607085d32cd7fbff5c469e4a3b2d278de3644d54ec3a62c9318dc837dee912df3ec9f22a28109bd2928b0"),
        (Cipher::Blowfish, kb, Mode::Authenticated, 0x9a52, C64,
         "4c0000581234400040112077c0000201c6336407821c9a520000000000060708608a053c13b6d74fc5b855f2baf9c9bf5d32cd7fbff5c469e4a3b2d278de3644d54ec3a62c9318dc837dee912df3ec9f22a28109bd2928b0"),
        (Cipher::Aes128, k16.clone(), Mode::Confidential, 0x124c, COUNTER,
         "4800004812344000401194c8c0000201c6336407820c124c0102030405060708497f90934971f668a0eeff7156cce03aa1275ae66ad4079d4874049450b469ba498cafb5da309cd5"),
        (Cipher::Aes128, k16, Mode::Authenticated, 0x124c, COUNTER,
         "4c00005812344000401171aac0000201c6336407821c124c0102030405060708a96c54c31a6a25cee44297ca341b306d497f90934971f668a0eeff7156cce03aa1275ae66ad4079d4874049450b469ba498cafb5da309cd5"),
        (Cipher::Aes256, k32.clone(), Mode::Confidential, 0x6c16, COUNTER,
         "480000481234400040113afec0000201c6336407820c6c16010203040506070862e3aeef56fcafd14958ac6ac1d4997d62f4c6ec747f9432eec1d620689d2e07353fe836b5af6805"),
        (Cipher::Aes256, k32, Mode::Authenticated, 0x6c16, COUNTER,
         "4c000058123440004011b8dac0000201c6336407821c6c1601020304050607083d6c8c0c9c4deed39261c3a9935a400362e3aeef56fcafd14958ac6ac1d4997d62f4c6ec747f9432eec1d620689d2e07353fe836b5af6805"),
        (Cipher::ChaCha20, kc.clone(), Mode::Confidential, 0x23f9, COUNTER,
         "48000048123440004011831bc0000201c6336407820c23f90102030405060708417b74362189ac1029319ea66b899ba84f440a0b56c5b19836a0e19be0fdf5055359a22be37200cf"),
        (Cipher::ChaCha20, kc, Mode::Authenticated, 0x23f9, COUNTER,
         "4c000058123440004011dad2c0000201c6336407821c23f9010203040506070895bfff2f2b1916bdc50ef3e1f8d01ba1417b74362189ac1029319ea66b899ba84f440a0b56c5b19836a0e19be0fdf5055359a22be37200cf"),
    ]
}

/// `pkt` placed after `HEAD` bytes of headroom.
fn framed(pkt: &[u8]) -> Vec<u8> {
    let mut b = vec![0xee; HEAD];
    b.extend_from_slice(pkt);
    b
}

fn seal(s: &mut Sealer, pkt: &[u8]) -> Result<Vec<u8>, SealError> {
    let mut b = framed(pkt);
    let (start, len) = s.seal(&mut b, HEAD, pkt.len())?;
    Ok(b[start..start + len].to_vec())
}

fn open(o: &mut Opener, pkt: &[u8]) -> Result<Vec<u8>, OpenError> {
    let mut b = framed(pkt);
    let (start, len) = o.open(&mut b, HEAD, pkt.len())?;
    Ok(b[start..start + len].to_vec())
}

#[test]
fn known_answers_from_an_independent_implementation() {
    for (cipher, key, mode, id, counter, sealed) in vectors() {
        assert_eq!(key_id(&key), id);
        let mut s = Sealer::new(cipher, mode, &key, counter, u64::MAX).unwrap();
        let got = seal(&mut s, &hx(CLEAR)).unwrap();
        assert_eq!(hex::encode(&got), sealed, "{cipher} {mode:?}");
        assert_eq!(s.next_counter(), counter + 1);
        let mut o = Opener::new(cipher, mode, &key, 1024, 16).unwrap();
        assert_eq!(
            hex::encode(open(&mut o, &got).unwrap()),
            CLEAR,
            "{cipher} {mode:?}"
        );
    }
}

/// An IPv4 packet with valid checksums: `proto` 6 (TCP, 20-byte header), 17 (UDP) or 1 (ICMP echo), `data`
/// after the transport header, `options` in the IP header.
fn packet(proto: u8, data: &[u8], options: &[u8]) -> Vec<u8> {
    let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut t = match proto {
        6 => {
            let mut t = vec![0u8; 20];
            t[..4].copy_from_slice(&[0x9c, 0x40, 0x00, 0x16]);
            t[12] = 5 << 4;
            t
        }
        17 => vec![0x13, 0x88, 0x00, 0x35, 0, 0, 0, 0],
        _ => vec![8, 0, 0, 0, 0x12, 0x34, 0, 1],
    };
    t.extend_from_slice(data);
    if proto == 17 {
        let l = t.len() as u16;
        t[4..6].copy_from_slice(&l.to_be_bytes());
    }
    let at = match proto {
        6 => 16,
        17 => 6,
        _ => 2,
    };
    let c = if proto == 1 {
        checksum::checksum(&t)
    } else {
        let ph = checksum::pseudo_header(&src, &dst, proto, t.len() as u32);
        checksum::finish(checksum::sum(ph, &t))
    };
    t[at..at + 2].copy_from_slice(&c.to_be_bytes());
    let hl = 20 + options.len();
    let mut h = vec![0u8; hl];
    h[0] = 0x40 | (hl / 4) as u8;
    h[2..4].copy_from_slice(&((hl + t.len()) as u16).to_be_bytes());
    h[6] = 0x40;
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    h[20..].copy_from_slice(options);
    let c = checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&t);
    h
}

fn key(c: Cipher) -> Vec<u8> {
    (0..*c.key_len().start() as u8).map(|i| i ^ 0x5a).collect()
}

const BUILT: [Cipher; 6] = Cipher::ALL;
const MODES: [Mode; 2] = [Mode::Confidential, Mode::Authenticated];

#[test]
fn round_trips_for_every_algorithm_mode_and_protocol() {
    for c in BUILT {
        for mode in MODES {
            let mut s = Sealer::new(c, mode, &key(c), 1, u64::MAX).unwrap();
            let mut o = Opener::new(c, mode, &key(c), 64, 16).unwrap();
            for proto in [6, 17, 1] {
                for (data, opts) in [(&b""[..], &[][..]), (&[0xab; 1400][..], &[][..])] {
                    let clear = packet(proto, data, opts);
                    let wire = seal(&mut s, &clear).unwrap();
                    let ol = mode.option_len();
                    assert_eq!(wire.len(), clear.len() + ol);
                    // The header: checksum right, IHL and length grown, addresses and protocol kept.
                    assert_eq!(checksum::checksum(&wire[..(wire[0] as usize & 15) * 4]), 0);
                    assert_eq!((wire[0] & 15) as usize * 4, 20 + opts.len() + ol);
                    assert_eq!(wire[9], proto);
                    assert_eq!(wire[12..20], clear[12..20]);
                    // The option after the existing ones; the payload is ciphertext of the same length.
                    let m = marking(&wire).unwrap().unwrap();
                    assert_eq!((m.key_id, m.mode), (key_id(&key(c)), mode));
                    assert_eq!(wire[20..20 + opts.len()], *opts);
                    assert_eq!(wire[20 + opts.len()], 130);
                    let hl = 20 + opts.len();
                    assert_ne!(wire[hl + ol..], clear[hl..], "{c} {mode:?} {proto}");
                    assert_eq!(open(&mut o, &wire).unwrap(), clear, "{c} {mode:?} {proto}");
                }
            }
        }
    }
}

#[test]
fn replays_are_refused_and_the_window_moves_only_after_authentication() {
    for c in BUILT {
        for mode in MODES {
            let mut s = Sealer::new(c, mode, &key(c), 1, u64::MAX).unwrap();
            let mut o = Opener::new(c, mode, &key(c), 64, 16).unwrap();
            let p1 = seal(&mut s, &packet(17, b"one", &[])).unwrap();
            let p2 = seal(&mut s, &packet(17, b"two", &[])).unwrap();
            assert!(open(&mut o, &p2).is_ok());
            assert!(open(&mut o, &p1).is_ok(), "out of order within the window");
            assert_eq!(open(&mut o, &p1), Err(OpenError::Replay));
            assert_eq!(open(&mut o, &p2), Err(OpenError::Replay));
            // A forgery far ahead (its counter rewritten) is refused and does not move the window.
            let mut f = seal(&mut s, &packet(17, b"three", &[])).unwrap();
            f[24..32].copy_from_slice(&(1u64 << 20).to_be_bytes());
            // Authenticated: the tag (never the checksum); confidential: the decrypted checksum.
            let want = match mode {
                Mode::Authenticated => OpenError::Auth,
                Mode::Confidential => OpenError::Checksum,
            };
            assert_eq!(open(&mut o, &f), Err(want), "{c} {mode:?}");
            let p4 = seal(&mut s, &packet(17, b"four", &[])).unwrap();
            assert!(open(&mut o, &p4).is_ok(), "{c} {mode:?}");
            // Beyond what a 64-bit block cipher's nonce holds: refused before decryption (it would not decrypt to
            // anything: a forgery there must not pass as a packet of zeros with no UDP checksum).
            let mut big = p4.clone();
            big[24..32].copy_from_slice(&LEGACY_PACKETS.to_be_bytes());
            if c.legacy() {
                assert_eq!(open(&mut o, &big), Err(OpenError::Replay), "{c} {mode:?}");
            }
            // Counter 0 is never sent.
            let mut z = p4.clone();
            z[24..32].copy_from_slice(&[0; 8]);
            assert_eq!(open(&mut o, &z), Err(OpenError::Replay));
        }
    }
}

/// Every algorithm, the AEADs and the 64-bit block ciphers' HMAC-SHA-256-128 alike: a change to any authenticated
/// byte is refused as an authentication failure (never as a bad checksum: the tag is checked first, and for the
/// HMAC ciphers before anything is decrypted), and the genuine packet still opens after it (the window did not
/// move).
#[test]
fn authenticated_mode_refuses_every_tamper() {
    for c in BUILT {
        let mut s = Sealer::new(c, Mode::Authenticated, &key(c), 1, u64::MAX).unwrap();
        for proto in [6, 17, 1] {
            let wire = seal(&mut s, &packet(proto, b"GET / HTTP/1.0\r\n\r\n", &[])).unwrap();
            // The first byte of the transport header, the last of the payload, the tag (option bytes 32..48), the
            // source, the destination, the protocol, the counter (the nonce; within the window).
            for (at, bit) in [
                (48, 1),
                (wire.len() - 1, 0x80),
                (32, 0x10),
                (47, 1),
                (12, 1),
                (19, 1),
                (9, 1),
                (31, 0x10),
            ] {
                let mut o = Opener::new(c, Mode::Authenticated, &key(c), 64, 16).unwrap();
                let mut t = wire.clone();
                t[at] ^= bit;
                assert_eq!(
                    open(&mut o, &t),
                    Err(OpenError::Auth),
                    "{c} proto {proto}: byte {at} flipped"
                );
                assert!(
                    open(&mut o, &wire).is_ok(),
                    "{c} proto {proto}: byte {at}: the genuine packet after the tamper"
                );
            }
            // The key id names another key: refused before any crypto.
            let mut o = Opener::new(c, Mode::Authenticated, &key(c), 64, 16).unwrap();
            let mut t = wire.clone();
            t[22] ^= 1;
            assert_eq!(open(&mut o, &t), Err(OpenError::WrongKey), "{c}");
        }
    }
}

/// `wire` (a sealed packet) with `opt` inserted into its header at `at` (20: before option 130, 20 + the option's
/// length: after it), its header length, total length and checksum mended: what an attacker on the path sends.
fn with_option(wire: &[u8], at: usize, opt: &[u8]) -> Vec<u8> {
    let mut t = wire[..at].to_vec();
    t.extend_from_slice(opt);
    t.extend_from_slice(&wire[at..]);
    let hl = (wire[0] as usize & 15) * 4 + opt.len();
    t[0] = 0x40 | (hl / 4) as u8;
    let tl = (t.len() as u16).to_be_bytes();
    t[2] = tl[0];
    t[3] = tl[1];
    t[10] = 0;
    t[11] = 0;
    let c = checksum::checksum(&t[..hl]);
    t[10..12].copy_from_slice(&c.to_be_bytes());
    t
}

/// A protected packet carries option 130 and nothing else, in both modes: a packet with other options is not
/// sealed; a sealed one with an option inserted before or after ours (router alert, a NOP word, record route) is
/// not opened, and not counted against the window: the genuine packet opens after it.
#[test]
fn other_options_are_refused_in_both_directions() {
    let ra = [0x94, 4, 0, 0];
    let nops = [1, 1, 1, 1];
    let rr = [1, 7, 7, 4, 0, 0, 0, 0];
    for c in BUILT {
        for mode in MODES {
            let mut s = Sealer::new(c, mode, &key(c), 1, u64::MAX).unwrap();
            for opts in [&ra[..], &nops[..], &rr[..]] {
                assert_eq!(
                    seal(&mut s, &packet(17, b"x", opts)),
                    Err(SealError::Options),
                    "{c} {mode:?} {opts:?}"
                );
            }
            let mut o = Opener::new(c, mode, &key(c), 64, 16).unwrap();
            for proto in [6, 17, 1] {
                let wire = seal(&mut s, &packet(proto, b"PAYLOAD", &[])).unwrap();
                for at in [20, 20 + mode.option_len()] {
                    for opt in [&ra[..], &nops[..], &rr[..]] {
                        let t = with_option(&wire, at, opt);
                        assert_eq!(
                            open(&mut o, &t),
                            Err(OpenError::Options),
                            "{c} {mode:?} proto {proto}: {opt:?} at {at}"
                        );
                    }
                }
                assert_eq!(
                    open(&mut o, &wire).unwrap(),
                    packet(proto, b"PAYLOAD", &[]),
                    "{c} {mode:?}"
                );
            }
        }
    }
}

#[test]
fn confidentiality_only_accepts_a_tamper_that_keeps_the_checksum() {
    let c = Cipher::Aes128;
    let mut s = Sealer::new(c, Mode::Confidential, &key(c), 1, u64::MAX).unwrap();
    let clear = packet(17, b"pay 100 to alice", &[]);
    let wire = seal(&mut s, &clear).unwrap();
    let data = 20 + 12 + 8;
    // One bit flipped: the UDP checksum fails, refused.
    let mut o = Opener::new(c, Mode::Confidential, &key(c), 64, 16).unwrap();
    let mut t = wire.clone();
    t[data] ^= 0x01;
    assert_eq!(open(&mut o, &t), Err(OpenError::Checksum));
    // The same bit of two 16-bit words, one set and one clear in the clear text: the one's-complement sum is
    // unchanged and the tamper goes through, as the paper's mode has no integrity.
    let w = |i: usize| u16::from_be_bytes([clear[28 + i], clear[28 + i + 1]]);
    let (i, j, bit) = (0..8)
        .flat_map(|i| (0..8).map(move |j| (2 * i, 2 * j)))
        .flat_map(|(i, j)| (0..16).map(move |b| (i, j, b)))
        .find(|&(i, j, b)| i != j && w(i) & (1 << b) != 0 && w(j) & (1 << b) == 0)
        .unwrap();
    let mut t = wire.clone();
    for k in [i, j] {
        let v = u16::from_be_bytes([t[data + k], t[data + k + 1]]) ^ (1 << bit);
        t[data + k..data + k + 2].copy_from_slice(&v.to_be_bytes());
    }
    let got = open(&mut o, &t).unwrap();
    assert_ne!(got, clear);
    assert_eq!(got.len(), clear.len());
}

#[test]
fn what_is_refused() {
    let c = Cipher::ChaCha20;
    let m = Mode::Authenticated;
    let mut s = Sealer::new(c, m, &key(c), 1, 3).unwrap();
    let p = packet(17, b"x", &[]);
    // Counters 1 and 2, then the end: never a wrap.
    assert!(seal(&mut s, &p).is_ok() && seal(&mut s, &p).is_ok());
    assert_eq!(seal(&mut s, &p), Err(SealError::Exhausted));
    let mut s = Sealer::new(c, m, &key(c), 1, u64::MAX).unwrap();
    // A fragment, a length that would pass 65,535, already marked, too little headroom, not IPv4.
    let mut frag = p.clone();
    frag[6] = 0x20;
    frag[10..12].copy_from_slice(&[0, 0]);
    assert_eq!(seal(&mut s, &frag), Err(SealError::Fragment));
    let most = packet(17, &vec![7; 65535 - 28], &[]);
    assert_eq!(seal(&mut s, &most), Err(SealError::NoRoom));
    assert!(seal(&mut s, &packet(17, &vec![7; 65535 - 28 - 28], &[])).is_ok());
    let wire = seal(&mut s, &p).unwrap();
    assert_eq!(seal(&mut s, &wire), Err(SealError::Marked));
    let mut b = p.clone();
    assert_eq!(s.seal(&mut b, 0, p.len()), Err(SealError::Headroom));
    assert_eq!(seal(&mut s, &p[..10]), Err(SealError::Malformed));
    let mut v6 = p.clone();
    v6[0] = 0x65;
    assert_eq!(seal(&mut s, &v6), Err(SealError::Malformed));
    // The other mode's option, an unmarked packet, a fragment, truncated input.
    let mut o = Opener::new(c, Mode::Confidential, &key(c), 64, 16).unwrap();
    assert_eq!(open(&mut o, &wire), Err(OpenError::WrongMode));
    assert_eq!(open(&mut o, &p), Err(OpenError::Unmarked));
    assert_eq!(open(&mut o, &wire[..30]), Err(OpenError::Malformed));
    let mut o = Opener::new(c, m, &key(c), 64, 16).unwrap();
    let mut f = wire.clone();
    f[6] = 0x20;
    assert_eq!(open(&mut o, &f), Err(OpenError::Fragment));
    // Sources beyond the bound are refused (not let in without a window); those it has keep working.
    let mut o = Opener::new(c, m, &key(c), 64, 1).unwrap();
    assert!(open(&mut o, &wire).is_ok());
    let mut other = p.clone();
    other[15] = 9;
    let c2 = checksum::checksum(&{
        let mut h = other[..20].to_vec();
        h[10..12].copy_from_slice(&[0, 0]);
        h
    });
    other[10..12].copy_from_slice(&c2.to_be_bytes());
    // UDP checksum 0 (none) so that the changed source does not matter to it.
    other[26..28].copy_from_slice(&[0, 0]);
    let w2 = seal(&mut s, &other).unwrap();
    assert_eq!(open(&mut o, &w2), Err(OpenError::TooManySources));
    let w3 = seal(&mut s, &p).unwrap();
    assert!(open(&mut o, &w3).is_ok());
    // The 64-bit block ciphers stop at LEGACY_PACKETS per key, whatever end they are given.
    for c in [Cipher::TripleDes, Cipher::Rc5, Cipher::Blowfish] {
        let mut s = Sealer::new(c, m, &key(c), LEGACY_PACKETS - 1, u64::MAX).unwrap();
        assert!(seal(&mut s, &p).is_ok());
        assert_eq!(seal(&mut s, &p), Err(SealError::Exhausted), "{c}");
    }
}

/// Seals `pkt` with `a` from the bytes and with `b` (alike) from its headers parsed once
/// ([`Sealer::seal_parsed`]): the same result, the same bytes. `None` where the headers do not parse (the engine
/// drops such a packet before it would seal).
fn seal_both(a: &mut Sealer, b: &mut Sealer, pkt: &[u8]) -> Option<Result<Vec<u8>, SealError>> {
    let h = netveil_wire::ip::Headers::parse(pkt).ok()?;
    let x = seal(a, pkt);
    let mut buf = framed(pkt);
    let y = b
        .seal_parsed(&mut buf, HEAD, pkt.len(), &h)
        .map(|(s, l)| buf[s..s + l].to_vec());
    assert_eq!(x, y, "{pkt:02x?}");
    Some(x)
}

/// Opens `pkt` with `a` ([`Opener::open_with`]) and with `b` (alike) from its marking read once
/// ([`Opener::open_marked`]): the same result, the same bytes.
fn open_both(a: &mut Opener, b: &mut Opener, pkt: &[u8]) -> Result<Vec<u8>, OpenError> {
    let x = open(a, pkt);
    let y = match marking(pkt) {
        Err(e) => Err(e),
        Ok(None) => Err(OpenError::Unmarked),
        Ok(Some(m)) => {
            let mut buf = framed(pkt);
            b.open_marked(
                &mut buf,
                HEAD,
                pkt.len(),
                &m,
                &mut netveil_pilsc::packet::NoFloors,
            )
            .map(|(s, l)| buf[s..s + l].to_vec())
        }
    };
    assert_eq!(x, y, "{pkt:02x?}");
    x
}

/// The headers parsed once seal and open as the bytes do: every algorithm, mode and protocol, sizes, and what is
/// refused (fragments, options, marked twice, other options inserted, tampering, replays, the other mode).
#[test]
fn parsed_headers_seal_and_open_as_the_bytes_do() {
    let ra = [0x94, 4, 0, 0];
    for c in BUILT {
        for mode in MODES {
            let new_sealer = || Sealer::new(c, mode, &key(c), 1, u64::MAX).unwrap();
            let new_opener = || Opener::new(c, mode, &key(c), 64, 16).unwrap();
            let (mut sa, mut sb) = (new_sealer(), new_sealer());
            let (mut oa, mut ob) = (new_opener(), new_opener());
            let other = if mode == Mode::Confidential {
                Mode::Authenticated
            } else {
                Mode::Confidential
            };
            let mut oc = Opener::new(c, other, &key(c), 64, 16).unwrap();
            let mut od = Opener::new(c, other, &key(c), 64, 16).unwrap();
            for proto in [6, 17, 1] {
                for data in [&b""[..], &b"x"[..], &[0xab; 1400][..]] {
                    let clear = packet(proto, data, &[]);
                    let wire = seal_both(&mut sa, &mut sb, &clear).unwrap().unwrap();
                    assert_eq!(open_both(&mut oa, &mut ob, &wire), Ok(clear.clone()));
                    assert_eq!(open_both(&mut oa, &mut ob, &wire), Err(OpenError::Replay));
                    assert_eq!(
                        open_both(&mut oc, &mut od, &wire),
                        Err(OpenError::WrongMode)
                    );
                    assert_eq!(
                        seal_both(&mut sa, &mut sb, &wire),
                        Some(Err(SealError::Marked))
                    );
                    let wire = seal_both(&mut sa, &mut sb, &clear).unwrap().unwrap();
                    let mut t = wire.clone();
                    let last = t.len() - 1;
                    t[last] ^= 0x40;
                    let _ = open_both(&mut oa, &mut ob, &t);
                    let t = with_option(&wire, 20, &ra);
                    assert_eq!(open_both(&mut oa, &mut ob, &t), Err(OpenError::Options));
                    let mut f = wire.clone();
                    f[6] = 0x20;
                    assert_eq!(open_both(&mut oa, &mut ob, &f), Err(OpenError::Fragment));
                    assert!(open_both(&mut oa, &mut ob, &wire).is_ok());
                    assert_eq!(
                        open_both(&mut oa, &mut ob, &wire[..25]),
                        Err(OpenError::Malformed)
                    );
                    assert_eq!(
                        open_both(&mut oa, &mut ob, &clear),
                        Err(OpenError::Unmarked)
                    );
                }
                let mut frag = packet(proto, b"x", &[]);
                frag[6] = 0x20;
                assert_eq!(
                    seal_both(&mut sa, &mut sb, &frag),
                    Some(Err(SealError::Fragment))
                );
                for opts in [&ra[..], &[1, 1, 1, 1][..], &[130, 4, 0, 0][..]] {
                    let p = packet(proto, b"x", opts);
                    let want = if opts[0] == 130 {
                        SealError::Marked
                    } else {
                        SealError::Options
                    };
                    assert_eq!(seal_both(&mut sa, &mut sb, &p), Some(Err(want)));
                }
            }
            assert_eq!(sa.next_counter(), sb.next_counter());
        }
    }
}
