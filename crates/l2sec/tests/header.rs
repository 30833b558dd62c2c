//! The clear header: byte-exact layouts, every flag combination of both versions round-trips through
//! emit/parse, truncated and unknown-version headers are refused, and accessors never panic after the check.

use netveil_l2sec::header::{
    header_len, Header, Repr, Version, FLAG_ENC, FLAG_EPOCH, FLAG_MASK, FLAG_RESERVED, FLAG_SIG,
    FLAG_SN, FLAG_TS,
};

fn repr(version: Version, flags: u8) -> Repr {
    Repr {
        version,
        reserved: version == Version::V0 && flags & FLAG_RESERVED != 0,
        epoch: (version == Version::V1 && flags & FLAG_EPOCH != 0).then_some(0x0102_0304_0506_0708),
        signed: flags & FLAG_SIG != 0,
        encrypted: flags & FLAG_ENC != 0,
        key_id: if version == Version::V1 { 0xa5 } else { 0 },
        seq: 0x1122_3344,
        security_number: (flags & FLAG_SN != 0).then_some(0x00ab_cdef),
        timestamp: (flags & FLAG_TS != 0).then_some(0x5566_7788),
    }
}

#[test]
fn byte_exact_layouts() {
    // Version 0, all optional fields: flags, seq, SN, TS.
    let r = repr(Version::V0, FLAG_SN | FLAG_TS | FLAG_ENC);
    let mut b = vec![0xeeu8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(
        b,
        [0x19, 0x11, 0x22, 0x33, 0x44, 0xab, 0xcd, 0xef, 0x55, 0x66, 0x77, 0x88]
    );
    // Version 0, timestamp without security number follows the sequence number directly.
    let r = repr(Version::V0, FLAG_TS | FLAG_SIG);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(b, [0x0a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    // Version 0 defaults: encryption only.
    let r = repr(Version::V0, FLAG_ENC);
    let mut b = vec![0u8; 5];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(b, [0x01, 0x11, 0x22, 0x33, 0x44]);
    // Version 1: key id after the flags byte.
    let r = repr(Version::V1, FLAG_SN | FLAG_TS | FLAG_SIG | FLAG_ENC);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(
        b,
        [0x3b, 0xa5, 0x11, 0x22, 0x33, 0x44, 0xab, 0xcd, 0xef, 0x55, 0x66, 0x77, 0x88]
    );
    let r = repr(Version::V1, FLAG_ENC);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(b, [0x21, 0xa5, 0x11, 0x22, 0x33, 0x44]);
    // Version 1 with EP: the 8-byte epoch follows the sequence number, before SN and TS.
    let r = repr(Version::V1, FLAG_EPOCH | FLAG_ENC);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(
        b,
        [0x25, 0xa5, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8]
    );
    let r = repr(
        Version::V1,
        FLAG_SN | FLAG_TS | FLAG_EPOCH | FLAG_SIG | FLAG_ENC,
    );
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(
        b,
        [
            0x3f, 0xa5, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8, 0xab, 0xcd, 0xef, 0x55,
            0x66, 0x77, 0x88
        ]
    );
    let h = Header::new_checked(&b[..]).unwrap();
    assert_eq!(h.epoch(), Some(0x0102_0304_0506_0708));
    assert_eq!(h.security_number(), Some(0x00ab_cdef));
    assert_eq!(h.timestamp(), Some(0x5566_7788));
    // Version 0: the bit is reserved and takes no room.
    let r = repr(Version::V0, FLAG_RESERVED | FLAG_ENC);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut Header::new_unchecked(&mut b[..]));
    assert_eq!(b, [0x05, 0x11, 0x22, 0x33, 0x44]);
    let h = Header::new_checked(&b[..]).unwrap();
    assert!(h.reserved() && !h.has_epoch() && h.epoch().is_none());
}

#[test]
fn every_flag_combination_round_trips() {
    for version in [Version::V0, Version::V1] {
        for flags in 0..=FLAG_MASK {
            let r = repr(version, flags);
            assert_eq!(r.flags(), flags);
            let want = version.base_len()
                + if version == Version::V1 && flags & FLAG_EPOCH != 0 {
                    8
                } else {
                    0
                }
                + if flags & FLAG_SN != 0 { 3 } else { 0 }
                + if flags & FLAG_TS != 0 { 4 } else { 0 };
            assert_eq!(r.buffer_len(), want);
            assert_eq!(header_len(version, flags), want);
            let mut b = vec![0u8; want + 5];
            r.emit(&mut Header::new_unchecked(&mut b[..]));
            assert_eq!(b[0], (version.number() << 5) | flags);
            let h = Header::new_checked(&b[..]).unwrap();
            assert_eq!(h.header_len(), want);
            assert_eq!(h.version(), version);
            assert_eq!(h.flags(), flags);
            assert_eq!(h.seq(), 0x1122_3344);
            assert_eq!(Repr::parse(&h).unwrap(), r);
            assert!(
                b[want..].iter().all(|&x| x == 0),
                "emit wrote past the header"
            );
            // Exactly-sized buffers work, one byte less is truncated.
            assert!(Header::new_checked(&b[..want]).is_ok());
            for n in 0..want {
                assert_eq!(
                    Header::new_checked(&b[..n]).unwrap_err(),
                    netveil_wire::Error::Truncated
                );
            }
        }
    }
}

#[test]
fn setters_and_security_number_truncation() {
    let mut b = [0u8; 21];
    let mut h = Header::new_unchecked(&mut b[..]);
    h.set_version_flags(Version::V1, 0xff);
    assert_eq!(h.flags(), FLAG_MASK);
    h.set_key_id(9);
    h.set_seq(0xdead_beef);
    h.set_epoch(u64::MAX - 1);
    h.set_security_number(0x0112_3456);
    h.set_timestamp(42);
    let h = Header::new_checked(&b[..]).unwrap();
    assert_eq!(h.key_id(), 9);
    assert_eq!(h.seq(), 0xdead_beef);
    assert_eq!(h.epoch(), Some(u64::MAX - 1));
    assert_eq!(h.security_number(), Some(0x0012_3456));
    assert_eq!(h.timestamp(), Some(42));
    assert!(h.has_epoch() && !h.reserved() && h.signed() && h.encrypted());
    assert!(Header::new_checked(&b[..20]).is_err());
    // Version 0 has no key id: the setter leaves the sequence number alone.
    let mut b = [0u8; 5];
    let mut h = Header::new_unchecked(&mut b[..]);
    h.set_version_flags(Version::V0, FLAG_ENC);
    h.set_seq(7);
    h.set_key_id(0xff);
    assert_eq!(h.seq(), 7);
    assert_eq!(h.key_id(), 0);
}

#[test]
fn unknown_versions_are_malformed() {
    for v in 2u8..8 {
        let b = [(v << 5) | FLAG_ENC, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let h = Header::new_unchecked(&b[..]);
        assert_eq!(h.version_number(), v);
        assert_eq!(
            Header::new_checked(&b[..]).unwrap_err(),
            netveil_wire::Error::Malformed
        );
        assert!(Repr::parse(&Header::new_unchecked(&b[..])).is_err());
    }
}

#[test]
fn accessors_never_panic_after_the_check() {
    for first in 0..=255u8 {
        for len in 0..24 {
            let mut b = vec![0xa5u8; len];
            if let Some(x) = b.first_mut() {
                *x = first;
            }
            if let Ok(h) = Header::new_checked(&b[..]) {
                let _ = (
                    h.version(),
                    h.flags(),
                    h.key_id(),
                    h.seq(),
                    h.security_number(),
                    h.timestamp(),
                    h.epoch(),
                    h.header_len(),
                );
                assert!(h.header_len() <= len);
                assert!(Repr::parse(&h).is_ok());
            }
        }
    }
}
