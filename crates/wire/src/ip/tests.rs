use super::*;
use crate::{ip_proto, ipv4, ipv6, udp, Error, PacketBuf};
use std::net::{IpAddr, SocketAddr};

/// [`Headers`] against the functions it replaces.
mod view;

#[test]
fn dispatch() {
    let v4 = ipv4::tests::SYN;
    let p = Packet::new_checked(&v4[..]).unwrap();
    assert_eq!(p.version(), 4);
    assert_eq!(p.src_addr(), "10.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(p.total_len(), 60);
    assert_eq!(p.next_header(), ip_proto::TCP);
    assert_eq!(p.hop_limit(), 64);
    assert_eq!(p.payload().len(), 40);
    let v6 = ipv6::tests::echo_ext();
    let p = Packet::new_checked(&v6[..]).unwrap();
    assert_eq!(p.version(), 6);
    assert_eq!(p.dst_addr(), "ff02::1".parse::<IpAddr>().unwrap());
    assert_eq!(p.next_header(), 0);
    assert_eq!(Packet::new_checked(&[][..]).err(), Some(Error::Truncated));
    assert_eq!(
        Packet::new_checked(&[0x50u8; 40][..]).err(),
        Some(Error::Malformed)
    );
}

#[test]
fn flow_v4_tcp() {
    let f = flow_key(&ipv4::tests::SYN).unwrap();
    assert_eq!(f.src, "10.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(f.dst, "93.184.216.34".parse::<IpAddr>().unwrap());
    assert_eq!(
        (f.proto, f.src_port, f.dst_port, f.l4_offset),
        (6, 51234, 80, 20)
    );

    assert_eq!(f.frag, None);

    // Later fragment: no ports, and what identifies its packet.
    let mut b = ipv4::tests::SYN;
    b[6] = 0x00;
    b[7] = 0x10;
    let f = flow_key(&b).unwrap();
    assert_eq!((f.proto, f.src_port, f.dst_port), (6, 0, 0));
    let ident = u32::from(u16::from_be_bytes([b[4], b[5]]));
    assert_eq!(
        f.frag,
        Some(Fragment {
            ident,
            first: false
        })
    );
    // First fragment (MF, offset 0): ports, and first.
    let mut b = ipv4::tests::SYN;
    b[6] = 0x20;
    b[7] = 0x00;
    let f = flow_key(&b).unwrap();
    assert_eq!((f.src_port, f.dst_port), (51234, 80));
    assert_eq!(f.frag, Some(Fragment { ident, first: true }));

    // Ports cut off by the total length.
    let mut b = ipv4::tests::SYN;
    b[3] = 23;
    assert_eq!(flow_key(&b).err(), Some(Error::Truncated));
    b[1] = 0;
    b[9] = ip_proto::ICMP;
    let f = flow_key(&b).unwrap();
    assert_eq!(
        (f.proto, f.src_port, f.dst_port, f.l4_offset),
        (1, 0, 0, 20)
    );
}

#[test]
fn flow_v6() {
    let v = ipv6::tests::echo_ext();
    let f = flow_key(&v).unwrap();
    assert_eq!(
        (f.proto, f.src_port, f.dst_port, f.l4_offset),
        (58, 0, 0, 64)
    );

    // Replace ICMPv6 with UDP 1000 -> 2000.
    let mut b = v.clone();
    b[48] = ip_proto::UDP;
    b[64..68].copy_from_slice(&[0x03, 0xe8, 0x07, 0xd0]);
    let f = flow_key(&b).unwrap();
    assert_eq!(
        (f.proto, f.src_port, f.dst_port, f.l4_offset),
        (17, 1000, 2000, 64)
    );
}

#[test]
fn truncation() {
    let v4 = ipv4::tests::SYN;
    for n in 0..v4.len() {
        assert!(flow_key(&v4[..n]).is_err());
    }
    let v6 = ipv6::tests::echo_ext();
    for n in 0..v6.len() {
        assert!(flow_key(&v6[..n]).is_err());
    }
}

/// The headers written in front of a received UDP payload parse back, with a valid IPv4 checksum; addresses
/// rewritten keep the checksum valid; hop limits count down to an error.
#[test]
fn header_synthesis_and_fix_ups() {
    for (src, dst) in [
        ("192.0.2.1:4500", "192.0.2.2:4501"),
        ("[2001:db8::1]:1000", "[2001:db8::2]:1000"),
    ] {
        let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
        let n = ip_udp_header_len(src.ip());
        let mut p = vec![0u8; n + 5];
        p[n..].copy_from_slice(b"hello");
        emit_ip_udp(&mut p[..n], src, dst, 5).unwrap();
        let ip = Packet::new_checked(&p[..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (src.ip(), dst.ip()));
        assert_eq!(ip.next_header(), ip_proto::UDP);
        assert_eq!(ip.total_len(), p.len());
        let u = crate::udp::Packet::new_checked(ip.payload()).unwrap();
        assert_eq!((u.src_port(), u.dst_port()), (src.port(), dst.port()));
        assert_eq!(u.payload(), b"hello");
        if let Packet::V4(h) = &ip {
            assert!(h.verify_checksum());
        }
        // New addresses (of the wrong family: refused).
        let (a, b): (IpAddr, IpAddr) = if src.is_ipv4() {
            (
                "198.51.100.7".parse().unwrap(),
                "198.51.100.8".parse().unwrap(),
            )
        } else {
            (
                "2001:db8:9::7".parse().unwrap(),
                "2001:db8:9::8".parse().unwrap(),
            )
        };
        set_addresses(&mut p, a, b).unwrap();
        let ip = Packet::new_checked(&p[..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (a, b));
        if let Packet::V4(h) = &ip {
            assert!(h.verify_checksum());
        }
        let other: IpAddr = if src.is_ipv4() {
            "2001:db8::1".parse().unwrap()
        } else {
            "192.0.2.1".parse().unwrap()
        };
        assert_eq!(set_addresses(&mut p, other, other), Err(Error::Malformed));
        // 64 hops.
        for _ in 0..63 {
            decrement_hop_limit(&mut p).unwrap();
        }
        if let Packet::V4(h) = Packet::new_checked(&p[..]).unwrap() {
            assert!(h.verify_checksum());
        }
        assert_eq!(decrement_hop_limit(&mut p), Err(HopLimitError::Exceeded));
    }
    assert_eq!(
        emit_ip_udp(
            &mut [0u8; 27],
            "192.0.2.1:1".parse().unwrap(),
            "192.0.2.2:1".parse().unwrap(),
            0
        ),
        Err(Error::Malformed)
    );
    assert_eq!(
        decrement_hop_limit(&mut [0x45, 0, 0]),
        Err(HopLimitError::Malformed)
    );
}

/// An IPv4 header without options, 192.0.2.1 -> 192.0.2.2, TOS 0xb8, DF, ID 0x1234, and `payload`.
fn v4_with(payload: &[u8]) -> Vec<u8> {
    let r = ipv4::Repr {
        src: [192, 0, 2, 1].into(),
        dst: [192, 0, 2, 2].into(),
        protocol: ip_proto::TCP,
        payload_len: payload.len(),
        ttl: 64,
        dscp_ecn: 0xb8,
        ident: 0x1234,
        dont_frag: true,
    };
    let mut v = vec![0u8; r.buffer_len()];
    r.emit(&mut ipv4::Packet::new_unchecked(&mut v[..]));
    v[20..].copy_from_slice(payload);
    v
}

/// Fixed-header reads: version, destination, DSCP/ECN and DF, own length; short or foreign input gives `None`.
#[test]
fn fixed_header_reads() {
    let v4 = v4_with(&[1, 2, 3, 4]);
    assert_eq!(version(&v4), Some(4));
    assert_eq!(dst_addr(&v4), Some("192.0.2.2".parse().unwrap()));
    assert_eq!(dscp_ecn_df(&v4), (0xb8, true));
    assert_eq!(own_len(&v4), Some(24));
    // Padding after the packet is not part of it; a length past the buffer or below 20 is refused.
    let mut padded = v4.clone();
    padded.extend_from_slice(&[0; 7]);
    assert_eq!(own_len(&padded), Some(24));
    assert_eq!(own_len(&v4[..23]), None);
    let mut short = v4.clone();
    short[3] = 19;
    assert_eq!(own_len(&short), None);

    let mut v6 = ipv6::tests::echo_ext();
    v6[0] = 0x6a;
    v6[1] = 0xb0;
    assert_eq!(version(&v6), Some(6));
    assert_eq!(dst_addr(&v6), Some("ff02::1".parse().unwrap()));
    assert_eq!(dscp_ecn_df(&v6), (0xab, false));
    assert_eq!(own_len(&v6), Some(80));

    for bad in [&[][..], &v4[..19], &v6[..39], &[0x55; 40][..]] {
        assert_eq!(dst_addr(bad), None);
        assert_eq!(dscp_ecn_df(bad), (0, false));
        assert_eq!(own_len(bad), None);
    }
    assert_eq!(version(&[]), None);
    assert_eq!(ports(&[0x12, 0x34, 0x00, 0x50, 9]), Some((0x1234, 80)));
    assert_eq!(ports(&[0x12, 0x34, 0x00]), None);
}

/// The IPsec layout steps over the IPv6 extension headers that go before ESP/AH and stops at AH; the fixed
/// layout stops after the fixed header.
#[test]
fn layouts() {
    let syn = ipv4::tests::SYN;
    let want = Layout {
        v6: false,
        header_len: 20,
        next_header_offset: 9,
        next_header: ip_proto::TCP,
        total_len: 60,
        fragment: false,
    };
    assert_eq!(Layout::fixed(&syn), Ok(want));
    assert_eq!(Layout::before_ipsec(&syn), Ok(want));
    let mut frag = syn;
    frag[7] = 1;
    assert!(Layout::before_ipsec(&frag).unwrap().fragment);
    frag[7] = 0;
    frag[6] = 0x20;
    assert!(Layout::fixed(&frag).unwrap().fragment);

    let v6 = ipv6::tests::echo_ext();
    let l = Layout::before_ipsec(&v6).unwrap();
    assert_eq!(
        (l.v6, l.header_len, l.next_header_offset, l.next_header),
        (true, 64, 48, ip_proto::ICMPV6)
    );
    assert_eq!((l.total_len, l.fragment), (80, false));
    let l = Layout::fixed(&v6).unwrap();
    assert_eq!(
        (l.header_len, l.next_header_offset, l.next_header),
        (40, 6, ip_proto::HOPOPT)
    );

    // Fragment -> AH -> UDP: IPsec's header goes after the fragment header; AH is not stepped over.
    let mut v = vec![0u8; 40];
    v[0] = 0x60;
    v[6] = ip_proto::IPV6_FRAG;
    v.extend_from_slice(&[ip_proto::AH, 0, 0, 1, 0, 0, 0, 7]);
    v.extend_from_slice(&[ip_proto::UDP, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    let pl = (v.len() - 40) as u16;
    v[4..6].copy_from_slice(&pl.to_be_bytes());
    let l = Layout::before_ipsec(&v).unwrap();
    assert_eq!(
        (
            l.header_len,
            l.next_header_offset,
            l.next_header,
            l.fragment
        ),
        (48, 40, ip_proto::AH, true)
    );

    // Malformed input: an error, never a panic.
    for n in 0..v6.len() {
        assert!(Layout::before_ipsec(&v6[..n]).is_err());
        assert!(Layout::fixed(&v6[..n]).is_err());
    }
    for n in 0..syn.len() {
        assert!(Layout::before_ipsec(&syn[..n]).is_err());
    }
    let mut bad_ihl = syn;
    bad_ihl[0] = 0x44;
    assert_eq!(Layout::before_ipsec(&bad_ihl), Err(Error::Malformed));
    assert_eq!(Layout::fixed(&bad_ihl), Err(Error::Malformed));
    let mut bad_version = syn;
    bad_version[0] = 0x55;
    assert_eq!(Layout::before_ipsec(&bad_version), Err(Error::Malformed));
    // A Hop-by-Hop header running past the payload.
    let mut cut = v6.clone();
    cut[41] = 9;
    assert_eq!(Layout::before_ipsec(&cut), Err(Error::Truncated));
}

/// Lengths and the IPv4 checksum follow the packet's new length; the next header is written where the layout
/// says; what cannot be fixed is an error.
#[test]
fn fix_header_and_lengths() {
    let mut p = v4_with(&[7; 8]);
    let l = Layout::before_ipsec(&p).unwrap();
    p.extend_from_slice(&[0; 12]);
    l.fix_header(&mut p, ip_proto::ESP).unwrap();
    let h = ipv4::Packet::new_checked(&p[..]).unwrap();
    assert_eq!((h.total_len(), h.protocol()), (40, ip_proto::ESP));
    assert!(h.verify_checksum());

    let mut v6 = ipv6::tests::echo_ext();
    let l = Layout::before_ipsec(&v6).unwrap();
    v6.truncate(70);
    l.fix_header(&mut v6, ip_proto::UDP).unwrap();
    let h = ipv6::Packet::new_checked(&v6[..]).unwrap();
    assert_eq!(h.payload_len(), 30);
    assert_eq!(v6[48], ip_proto::UDP);
    assert_eq!(h.next_header(), ip_proto::HOPOPT);

    let mut big = v4_with(&[]);
    big.resize(65536, 0);
    assert_eq!(fix_lengths(&mut big), Err(Error::Malformed));
    big.truncate(65535);
    assert_eq!(fix_lengths(&mut big), Ok(()));
    let mut big6 = vec![0u8; 40 + 65536];
    big6[0] = 0x60;
    assert_eq!(fix_lengths(&mut big6), Err(Error::Malformed));
    assert_eq!(fix_lengths(&mut big6[..40 + 65535]), Ok(()));
    assert_eq!(fix_lengths(&mut v4_with(&[])[..19]), Err(Error::Truncated));
    assert_eq!(fix_lengths(&mut big6[..39]), Err(Error::Truncated));
    assert_eq!(fix_lengths(&mut []), Err(Error::Malformed));
    assert_eq!(fix_lengths(&mut [0x55; 40]), Err(Error::Malformed));
    let mut ihl = v4_with(&[0; 4]);
    ihl[0] = 0x47; // 28-byte header in a 24-byte packet
    assert_eq!(fix_lengths(&mut ihl), Err(Error::Malformed));
    assert_eq!(
        l.fix_header(&mut v6[..40], ip_proto::UDP),
        Err(Error::Truncated)
    );
}

#[test]
fn repr_round_trip() {
    let v4 = v4_with(&[5; 10]);
    let r = Repr::parse(&Packet::new_checked(&v4[..]).unwrap()).unwrap();
    assert_eq!(
        (r.header_len(), r.payload_len(), r.buffer_len()),
        (20, 10, 30)
    );
    assert_eq!(r.next_header(), ip_proto::TCP);
    assert_eq!(r.src_addr(), "192.0.2.1".parse::<IpAddr>().unwrap());
    let mut out = vec![0u8; 20];
    r.emit(&mut out).unwrap();
    assert_eq!(out, v4[..20]);
    let v6 = ipv6::tests::echo_ext();
    let mut r6 = Repr::parse(&Packet::new_checked(&v6[..]).unwrap()).unwrap();
    assert_eq!(r6.dst_addr(), "ff02::1".parse::<IpAddr>().unwrap());
    let mut out = vec![0u8; 41];
    r6.emit(&mut out).unwrap();
    assert_eq!(out[..40], v6[..40]);
    assert_eq!(r6.emit(&mut out[..39]), Err(Error::Truncated));
    r6.set_payload_len(65536);
    assert_eq!(r6.emit(&mut out), Err(Error::Malformed));
    let mut r = r;
    r.set_payload_len(65516);
    assert_eq!(r.emit(&mut out), Err(Error::Malformed));
    r.set_payload_len(65515);
    r.set_next_header(ip_proto::UDP);
    r.emit(&mut out).unwrap();
    assert_eq!((out[2], out[3], out[9]), (0xff, 0xff, ip_proto::UDP));
}

/// The outer header of a tunnel, with and without UDP, in both families; byte for byte for IPv4.
#[test]
fn push_outer_headers() {
    let inner = v4_with(&[9; 12]);
    let outer4 = Repr::V4(ipv4::Repr {
        src: [198, 51, 100, 1].into(),
        dst: [198, 51, 100, 2].into(),
        protocol: ip_proto::ESP,
        payload_len: 0,
        ttl: 64,
        dscp_ecn: 0x28,
        ident: 0xbeef,
        dont_frag: true,
    });
    let mut b = PacketBuf::from_slice(&inner, 64, 0);
    push_outer(&mut b, outer4, None).unwrap();
    let mut want = vec![
        0x45, 0x28, 0, 52, 0xbe, 0xef, 0x40, 0, 64, 50, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    let c = crate::checksum::checksum(&want);
    want[10..12].copy_from_slice(&c.to_be_bytes());
    want.extend_from_slice(&inner);
    assert_eq!(b.data(), &want[..]);

    let mut b = PacketBuf::from_slice(&inner, 64, 0);
    push_outer(&mut b, outer4, Some((4500, 4501))).unwrap();
    let ip = Packet::new_checked(b.data()).unwrap();
    assert_eq!((ip.next_header(), ip.total_len()), (ip_proto::UDP, 60));
    let u = udp::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        (u.src_port(), u.dst_port(), u.len(), u.checksum()),
        (4500, 4501, 40, 0)
    );
    assert_eq!(u.payload(), &inner[..]);

    let outer6 = Repr::V6(ipv6::Repr {
        src: "2001:db8::1".parse().unwrap(),
        dst: "2001:db8::2".parse().unwrap(),
        next_header: ip_proto::ESP,
        payload_len: 0,
        hop_limit: 64,
        traffic_class: 0x28,
        flow_label: 0,
    });
    let mut b = PacketBuf::from_slice(&inner, 64, 0);
    push_outer(&mut b, outer6, Some((4500, 4500))).unwrap();
    let ip = Packet::new_checked(b.data()).unwrap();
    assert_eq!(
        (ip.next_header(), ip.total_len()),
        (ip_proto::UDP, 40 + 8 + 32)
    );
    assert_eq!(dscp_ecn_df(b.data()), (0x28, false));
    let u = udp::Packet::new_checked(ip.payload()).unwrap();
    assert_ne!(u.checksum(), 0);
    assert!(u.verify_checksum(ip.src_addr(), ip.dst_addr()));
    let mut b = PacketBuf::from_slice(&inner, 64, 0);
    push_outer(&mut b, outer6, None).unwrap();
    assert_eq!(b.len(), 40 + 32);
    assert_eq!(b.data()[6], ip_proto::ESP);

    // Not enough headroom, or too long for the length fields.
    let mut b = PacketBuf::from_slice(&inner, 27, 0);
    assert_eq!(
        push_outer(&mut b, outer4, Some((1, 2))),
        Err(Error::Truncated)
    );
    let mut b = PacketBuf::from_slice(&vec![0u8; 65516], 64, 0);
    assert_eq!(push_outer(&mut b, outer4, None), Err(Error::Malformed));
    let mut b = PacketBuf::from_slice(&vec![0u8; 65528], 64, 0);
    assert_eq!(
        push_outer(&mut b, outer6, Some((1, 2))),
        Err(Error::Malformed)
    );
    let mut b = PacketBuf::from_slice(&vec![0u8; 65535], 64, 0);
    push_outer(&mut b, outer6, None).unwrap();
}

/// Transport-mode UDP headers: checksum zero over IPv4, computed over IPv6 when asked; bad input is an error.
#[test]
fn udp_header_in_place() {
    let mut p = v4_with(&[0xee; 20]);
    emit_udp_header(&mut p, 20, 4500, 4500, true).unwrap();
    let u = udp::Packet::new_checked(&p[20..]).unwrap();
    assert_eq!(
        (u.src_port(), u.dst_port(), u.len(), u.checksum()),
        (4500, 4500, 20, 0)
    );

    let mut v6 = ipv6::tests::echo_ext();
    emit_udp_header(&mut v6, 64, 1000, 2000, true).unwrap();
    let u = udp::Packet::new_checked(&v6[64..]).unwrap();
    assert_eq!((u.src_port(), u.dst_port(), u.len()), (1000, 2000, 16));
    assert!(u.verify_checksum("fe80::1".parse().unwrap(), "ff02::1".parse().unwrap()));
    emit_udp_header(&mut v6, 40, 1000, 2000, false).unwrap();
    assert_eq!(udp::Packet::new_checked(&v6[40..]).unwrap().checksum(), 0);

    assert_eq!(
        emit_udp_header(&mut p, 33, 1, 2, true),
        Err(Error::Truncated)
    );
    assert_eq!(
        emit_udp_header(&mut p, 41, 1, 2, true),
        Err(Error::Truncated)
    );
    assert_eq!(
        emit_udp_header(&mut p, 10, 1, 2, true),
        Err(Error::Malformed)
    );
    assert_eq!(
        emit_udp_header(&mut v6, 20, 1, 2, true),
        Err(Error::Malformed)
    );
    assert_eq!(
        emit_udp_header(&mut [0x55; 40], 20, 1, 2, true),
        Err(Error::Malformed)
    );
    let mut big = v4_with(&[]);
    big.resize(20 + 65536, 0);
    assert_eq!(
        emit_udp_header(&mut big, 20, 1, 2, true),
        Err(Error::Malformed)
    );
}
