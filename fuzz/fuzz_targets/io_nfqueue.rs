#![no_main]

//! The netfilter-queue message parser (`io::nfqueue::parse_packet`) on arbitrary bytes: it never panics, and a
//! packet it finds lies inside the message, after the netlink headers (room to grow forward in place), with its
//! attribute's length.

use libfuzzer_sys::fuzz_target;
use netveil_io::nfqueue::parse_packet;

fuzz_target!(|data: &[u8]| {
    if let Some((_, r)) = parse_packet(data) {
        assert!(r.start <= r.end && r.end <= data.len());
        // nlmsghdr (16) + nfgenmsg (4) + the payload attribute's header (4), at least.
        assert!(r.start >= 24);
        let attr_len = u16::from_ne_bytes([data[r.start - 4], data[r.start - 3]]) as usize;
        assert_eq!(attr_len, r.end - r.start + 4);
    }
});
