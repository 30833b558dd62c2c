#![no_main]

use std::net::{IpAddr, Ipv6Addr};

use libfuzzer_sys::fuzz_target;
use netveil_wire::{icmpv4, icmpv6, tcp, udp};

fuzz_target!(|data: &[u8]| {
    let a4: IpAddr = "192.0.2.1".parse().unwrap();
    let a6: IpAddr = "2001:db8::1".parse().unwrap();
    let v6 = Ipv6Addr::LOCALHOST;

    if let Ok(p) = udp::Packet::new_checked(data) {
        let _ = (
            p.src_port(),
            p.dst_port(),
            p.len(),
            p.checksum(),
            p.payload(),
        );
        let _ = (p.verify_checksum(a4, a4), p.verify_checksum(a6, a6));
        if let Ok(r) = udp::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            let mut q = udp::Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut q);
            q.payload_mut().copy_from_slice(p.payload());
            q.fill_checksum(a4, a6);
            assert!(q.verify_checksum(a4, a6));
            let q = udp::Packet::new_checked(&buf[..]).expect("emitted datagram parses");
            assert_eq!(udp::Repr::parse(&q), Ok(r));
        }
    }

    if let Ok(p) = tcp::Packet::new_checked(data) {
        let _ = (
            p.src_port(),
            p.dst_port(),
            p.seq_number(),
            p.ack_number(),
            p.header_len(),
            p.flags(),
        );
        let _ = (
            p.syn(),
            p.ack(),
            p.fin(),
            p.rst(),
            p.window_len(),
            p.checksum(),
            p.urgent_at(),
        );
        let _ = (p.options(), p.payload(), p.verify_checksum(a4, a4));
        if let Ok(r) = tcp::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            let mut q = tcp::Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut q);
            q.payload_mut().copy_from_slice(p.payload());
            q.fill_checksum(a6, a6);
            assert!(q.verify_checksum(a6, a6));
            let q = tcp::Packet::new_checked(&buf[..]).expect("emitted segment parses");
            assert_eq!(tcp::Repr::parse(&q), Ok(r));
        }
    }

    if let Ok(p) = icmpv4::Packet::new_checked(data) {
        let _ = (
            p.msg_type(),
            p.msg_code(),
            p.checksum(),
            p.rest_of_header(),
            p.echo_ident(),
            p.echo_seq_no(),
        );
        let _ = (p.is_echo(), p.payload(), p.verify_checksum());
        if let Ok(r) = icmpv4::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut icmpv4::Packet::new_unchecked(&mut buf[..]));
            let q = icmpv4::Packet::new_checked(&buf[..]).expect("emitted message parses");
            assert!(q.verify_checksum());
            assert_eq!(q.payload(), r.payload);
        }
    }

    if let Ok(p) = icmpv6::Packet::new_checked(data) {
        let _ = (
            p.msg_type(),
            p.msg_code(),
            p.checksum(),
            p.rest_of_header(),
            p.echo_ident(),
            p.echo_seq_no(),
        );
        let _ = (
            p.is_echo(),
            p.payload(),
            p.mtu(),
            p.verify_checksum(&v6, &v6),
        );
        if let Ok(r) = icmpv6::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut icmpv6::Packet::new_unchecked(&mut buf[..]), &v6, &v6);
            let q = icmpv6::Packet::new_checked(&buf[..]).expect("emitted message parses");
            assert!(q.verify_checksum(&v6, &v6));
            assert_eq!(icmpv6::Repr::parse(&q), Ok(r));
        }
    }
});
