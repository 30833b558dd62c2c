//! PILSC's packet transform on hostile input: arbitrary bytes opened in both modes never panic, and what opens had
//! option 130 as its only option, has lost exactly it and has a right header checksum; valid packets of any
//! protocol and payload seal, open again to themselves (authenticated mode), and any change to a sealed packet's
//! authenticated parts is refused; a packet with other options is not sealed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_pilsc::cipher::Cipher;
use netveil_pilsc::packet::{Mode, Opener, SealError, Sealer};
use netveil_wire::checksum;

const HEAD: usize = 64;

fn cipher(b: u8) -> Cipher {
    Cipher::ALL[b as usize % Cipher::ALL.len()]
}

fn key(c: Cipher) -> Vec<u8> {
    vec![0x42; *c.key_len().start()]
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let c = cipher(sel >> 2);
    let mode = if sel & 1 == 0 { Mode::Confidential } else { Mode::Authenticated };
    let mut o = Opener::new(c, mode, &key(c), 64, 4).unwrap();
    if sel & 2 == 0 {
        let mut b = vec![0u8; HEAD];
        b.extend_from_slice(rest);
        if let Ok((s, l)) = o.open(&mut b, HEAD, rest.len()) {
            let tl = u16::from_be_bytes([rest[2], rest[3]]) as usize;
            assert_eq!(l + mode.option_len(), tl);
            assert_eq!((rest[0] as usize & 15) * 4, 20 + mode.option_len(), "other options were opened");
            let hl = (b[s] as usize & 15) * 4;
            assert_eq!(checksum::checksum(&b[s..s + hl]), 0);
        }
        return;
    }
    // rest = [edit position hi, lo, xor, protocol, NOP option words, source (4), destination (4), payload...]:
    // a valid IPv4 packet (the checksum of its transport header may be anything).
    if rest.len() < 13 {
        return;
    }
    let (edit, rest) = rest.split_at(3);
    let (proto, nops, addrs, payload) = (rest[0], (rest[1] % 4) as usize, &rest[2..10], &rest[10..]);
    let hl = 20 + 4 * nops;
    let mut pkt = vec![0x40 | (hl / 4) as u8, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, proto, 0, 0];
    pkt.extend_from_slice(addrs);
    pkt.resize(hl, 1);
    pkt.extend_from_slice(&payload[..payload.len().min(1400)]);
    let tl = pkt.len();
    pkt[2..4].copy_from_slice(&(tl as u16).to_be_bytes());
    let hc = checksum::checksum(&pkt[..hl]);
    pkt[10..12].copy_from_slice(&hc.to_be_bytes());
    let mut s = Sealer::new(c, mode, &key(c), 1, u64::MAX).unwrap();
    let mut b = vec![0u8; HEAD];
    b.extend_from_slice(&pkt);
    if nops > 0 {
        assert_eq!(s.seal(&mut b, HEAD, pkt.len()), Err(SealError::Options), "a packet with options sealed");
        return;
    }
    let (start, len) = s.seal(&mut b, HEAD, pkt.len()).expect("a valid packet without options seals");
    let sealed = b[start..start + len].to_vec();
    assert_eq!(len, tl + mode.option_len());
    let want = pkt;
    if mode == Mode::Authenticated {
        let mut b2 = vec![0u8; HEAD];
        b2.extend_from_slice(&sealed);
        let (s2, l2) = o.open(&mut b2, HEAD, sealed.len()).expect("a sealed packet opens");
        assert_eq!(&b2[s2..s2 + l2], &want[..], "opened to other bytes");
        // One change at an authenticated place (addresses, protocol, the option's key id and counter, the tag,
        // the payload) is refused.
        let pos = u16::from_be_bytes([edit[0], edit[1]]) as usize % sealed.len();
        let shl = (sealed[0] as usize & 15) * 4;
        let covered = (9..10).contains(&pos) || (12..20).contains(&pos) || pos >= shl - 26;
        if edit[2] != 0 && covered {
            let mut t = sealed.clone();
            t[pos] ^= edit[2];
            let mut o2 = Opener::new(c, mode, &key(c), 64, 4).unwrap();
            let mut b3 = vec![0u8; HEAD];
            b3.extend_from_slice(&t);
            assert!(o2.open(&mut b3, HEAD, t.len()).is_err(), "a change at byte {pos} was accepted");
        }
    }
});
