#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::icmp::{error_quote, too_big, ErrorQuote, TOO_BIG_MAX};
use netveil_wire::{icmpv4, icmpv6, ip, ipv4, ipv6};

fuzz_target!(|data: &[u8]| {
    too_big_invariants(data);
    error_quote_invariants(data);
    headers_invariants(data);
    let flow = ip::flow_key(data);
    let Ok(p) = ip::Packet::new_checked(data) else {
        assert!(flow.is_err());
        return;
    };
    let _ = (
        p.version(),
        p.src_addr(),
        p.dst_addr(),
        p.hop_limit(),
        p.next_header(),
        p.payload(),
    );
    assert!(p.total_len() <= data.len());
    if let Ok(f) = flow {
        assert!(f.l4_offset <= p.total_len());
        assert_eq!(f.src, p.src_addr());
        assert_eq!(f.dst, p.dst_addr());
        if f.src_port != 0 || f.dst_port != 0 {
            assert!(f.l4_offset + 4 <= p.total_len());
        }
    }
});

/// The headers parsed once (`ip::Headers`) are what a packet path read piecemeal before: the view parses exactly
/// where `flow_key` does, with the same error, and then agrees with it and with every free function and layout of
/// the same name.
fn headers_invariants(data: &[u8]) {
    let h = ip::Headers::parse(data);
    assert_eq!(h.map(|h| h.flow()), ip::flow_key(data));
    let Ok(h) = h else { return };
    assert_eq!(ip::version(data), Some(h.version()));
    assert_eq!(ip::addrs(data), Some(h.addrs()));
    assert_eq!(ip::dst_addr(data), Some(h.dst_addr()));
    assert_eq!(ip::dscp_ecn_df(data), h.dscp_ecn_df());
    assert_eq!(ip::own_len(data), Some(h.total_len()));
    assert_eq!(ip::Layout::fixed(data), Ok(h.fixed()));
    assert_eq!(ip::Layout::before_ipsec(data), Ok(h.before_ipsec()));
    let p = ip::Packet::new_checked(data).expect("the view's bytes parse");
    assert_eq!(p.next_header(), h.protocol());
    assert!(h.header_len() <= h.before_ipsec().header_len);
    assert!(h.before_ipsec().header_len <= h.flow().l4_offset);
    assert!(h.flow().l4_offset <= h.total_len() && h.total_len() <= data.len());
}

/// The "too big" error for a packet the IP engine would not seal: none where no error may answer; else a valid
/// IPv4 or IPv6 packet from the packet's destination to its source, whose ICMP message (checksum right) carries
/// the MTU and quotes the packet's beginning, within the size the family allows.
fn too_big_invariants(data: &[u8]) {
    let mtu = 1280 + data.first().copied().unwrap_or(0) as u32;
    let mut out = [0u8; TOO_BIG_MAX];
    let Some(n) = too_big(data, mtu, &mut out) else {
        return;
    };
    let p = ip::Packet::new_checked(data).expect("answered packets parse");
    let (src, dst) = (p.src_addr(), p.dst_addr());
    let flow = ip::flow_key(data).expect("answered packets have a flow key");
    assert!(flow.frag.is_none_or(|f| f.first));
    // The error is read back by the packet it quotes (RFC 4301 6.2): the packet's own flow, wherever the quote
    // holds its headers (always for IPv4: 548 bytes hold any header and the ports).
    match error_quote(&out[..n]) {
        ErrorQuote::Quotes(q) => {
            assert_eq!((q.src, q.dst, q.proto), (src, dst, flow.proto));
            assert_eq!((q.src_port, q.dst_port), (flow.src_port, flow.dst_port));
        }
        other => assert!(p.version() == 6 && other == ErrorQuote::Unreadable, "{other:?}"),
    }
    let q = ip::Packet::new_checked(&out[..n]).expect("the error parses");
    assert_eq!((q.src_addr(), q.dst_addr()), (dst, src));
    assert_eq!(q.total_len(), n);
    if p.version() == 4 {
        assert!(n <= 576);
        let h = ipv4::Packet::new_checked(&out[..n]).unwrap();
        assert!(h.verify_checksum());
        let m = icmpv4::Packet::new_checked(&out[20..n]).unwrap();
        assert!(m.verify_checksum());
        assert_eq!((m.msg_type(), m.msg_code()), (3, 4));
        assert_eq!(u16::from_be_bytes([m.rest_of_header()[2], m.rest_of_header()[3]]) as u32, mtu);
        assert!(data.starts_with(m.payload()));
        assert!(!(flow.proto == 1 && matches!(data[flow.l4_offset], 3 | 4 | 5 | 11 | 12)));
    } else {
        let h = ipv6::Packet::new_checked(&out[..n]).unwrap();
        let (s6, d6) = (h.src_addr(), h.dst_addr());
        let m = icmpv6::Packet::new_checked(&out[40..n]).unwrap();
        assert!(m.verify_checksum(&s6, &d6));
        assert_eq!((m.msg_type(), m.msg_code(), m.mtu()), (2, 0, mtu));
        assert!(data.starts_with(m.payload()));
        assert!(!(flow.proto == 58 && data[flow.l4_offset] < 128));
    }
}

/// What an ICMP error quotes: only for a readable IP packet carrying an ICMP error of its own family (not a later
/// fragment); the quote starts after the 8-byte ICMP header, begins with an IP header of the error's family whose
/// addresses are the ones read, and has ports only where its protocol has them; reversing twice changes nothing.
fn error_quote_invariants(data: &[u8]) {
    let got = error_quote(data);
    let Ok(f) = ip::flow_key(data) else {
        assert_eq!(got, ErrorQuote::NotAnError);
        return;
    };
    let v6 = f.src.is_ipv6();
    let icmp = if v6 { 58 } else { 1 };
    let first = f.frag.is_none_or(|x| x.first);
    let t = data.get(f.l4_offset).copied().filter(|_| f.l4_offset < ip::own_len(data).unwrap());
    let error = f.proto == icmp && first && t.is_some_and(|t| if v6 { t < 128 } else { matches!(t, 3 | 4 | 5 | 11 | 12) });
    assert_eq!(got != ErrorQuote::NotAnError, error, "{got:?}");
    if let ErrorQuote::Quotes(q) = got {
        assert_eq!(q.offset, f.l4_offset + 8);
        let quote = &data[q.offset..ip::own_len(data).unwrap()];
        assert_eq!(ip::version(quote), Some(if v6 { 6 } else { 4 }));
        let (s, d) = if v6 { (8, 24) } else { (12, 16) };
        let n = if v6 { 16 } else { 4 };
        let addr = |at: usize| -> std::net::IpAddr {
            if v6 {
                <[u8; 16]>::try_from(&quote[at..at + n]).unwrap().into()
            } else {
                <[u8; 4]>::try_from(&quote[at..at + n]).unwrap().into()
            }
        };
        assert_eq!((q.src, q.dst), (addr(s), addr(d)));
        if q.src_port != 0 || q.dst_port != 0 {
            assert!(matches!(q.proto, 6 | 17 | 132));
        }
        assert_eq!(q.reversed().reversed(), q);
    }
}
