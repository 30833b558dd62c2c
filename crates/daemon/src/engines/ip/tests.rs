use super::pmtu::PathMtu;
use super::policy::*;
use super::*;
use crate::engines::ip::config::Config;
use crate::engines::ip::drop::Drop;
use netveil_io::PacketBuf;
use netveil_wire::ip_proto;

#[test]
fn ttl_decrement_keeps_the_ipv4_checksum_valid() {
    let mut h = [
        0x45, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 198, 51, 100, 1,
        198, 51, 100, 2,
    ];
    let c = netveil_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    for ttl in (2..=64).rev() {
        assert_eq!(h[8], ttl);
        decrement_ttl(&mut h).unwrap();
        assert_eq!(netveil_wire::checksum::checksum(&h), 0, "ttl {ttl}");
    }
    assert_eq!(decrement_ttl(&mut h), Err(Drop::TtlExceeded));
    let mut v6 = [0u8; 40];
    v6[0] = 0x60;
    v6[7] = 2;
    decrement_ttl(&mut v6).unwrap();
    assert_eq!(v6[7], 1);
    assert_eq!(decrement_ttl(&mut v6), Err(Drop::TtlExceeded));
}

/// An IPv4 UDP fragment 198.51.100.1 -> 198.51.100.2, identification 0x4242.
fn fragment(offset8: u16, more: bool, payload: &[u8]) -> PacketBuf {
    let mut h = vec![
        0x45, 0, 0, 0, 0x42, 0x42, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    let len = (20 + payload.len()) as u16;
    h[2..4].copy_from_slice(&len.to_be_bytes());
    let fo = offset8 | if more { 0x2000 } else { 0 };
    h[6..8].copy_from_slice(&fo.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    PacketBuf::from_slice(&h, HEADROOM, TAILROOM)
}

/// RFC 4301 section 7: later fragments (no ports) of a packet that a port-selective policy protects are
/// protected too, never bypassed in clear; without their first fragment they are dropped.
#[test]
fn later_fragments_follow_their_first_fragment() {
    let cfg = Config::parse(
        r#"
[interface]
default_policy = "bypass"
[[sa]]
name = "out"
direction = "out"
spi = 0x1001
local = "192.0.2.1"
remote = "192.0.2.2"
suite = "aes128gcm16"
enc_key = "00112233445566778899aabbccddeeff01020304"
[[policy]]
direction = "out"
src = "198.51.100.1/32"
dst = "198.51.100.2/32"
proto = "udp"
dst_ports = 5000
action = "protect"
sas = ["out"]
"#,
    )
    .unwrap();
    let sh = Shared::new(cfg).unwrap();
    let snap = sh.db.load();
    let mut frags = FragCache::default();
    let proto = |b: &PacketBuf| b.data()[9];
    // First fragment: UDP header to port 5000 and data.
    let mut udp = vec![0x13, 0x88, 0x13, 0x88, 0x05, 0xdc, 0, 0];
    udp.extend_from_slice(&[7u8; 1472]);
    let mut first = fragment(0, true, &udp);
    assert_eq!(
        sh.process_out(&snap, &mut first, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
    assert_eq!(proto(&first), ip_proto::ESP);
    let mut later = fragment(185, false, &[8u8; 20]);
    assert_eq!(
        sh.process_out(&snap, &mut later, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
    assert_eq!(
        proto(&later),
        ip_proto::ESP,
        "a later fragment left unprotected"
    );
    // A later fragment of a packet whose first fragment was not seen: dropped, not bypassed.
    let mut orphan = fragment(185, false, &[8u8; 20]);
    orphan.data_mut()[4] = 0x11;
    assert_eq!(
        sh.process_out(&snap, &mut orphan, 0, &mut FragCache::default()),
        Err(Drop::FragmentNoState)
    );
    // Forgotten after the reassembly timeout.
    let mut late = fragment(185, false, &[8u8; 20]);
    assert_eq!(
        sh.process_out(&snap, &mut late, FRAG_SECONDS + 1, &mut frags),
        Err(Drop::FragmentNoState)
    );
    // Unfragmented traffic to another port is bypassed as configured.
    let mut other = vec![0x13, 0x88, 0x00, 0x35, 0, 12, 0, 0, 1, 2, 3, 4];
    other.truncate(12);
    let mut p = fragment(0, false, &other);
    assert_eq!(
        sh.process_out(&snap, &mut p, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
    assert_eq!(proto(&p), ip_proto::UDP);
}

/// The socket-filter rule of a window: a floor twice the window below the top, and a ceiling only in a storm
/// and only once the window has a top (a sender far ahead of a window that saw nothing is never refused).

#[test]
fn flow_key_reads_ports_behind_ipv6_extension_headers() {
    let mut p = vec![0x60, 0, 0, 0, 0, 16, 0 /* hop-by-hop */, 64];
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    p.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: next header UDP, PadN
    p.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 8, 0, 0]);
    let k = flow_key(&p).unwrap();
    assert_eq!((k.proto, k.src_port, k.dst_port), (17, 5000, 53));
}

/// An IPv4 UDP packet 198.51.100.1:4000 -> 198.51.100.2:5000 with `n` bytes of payload.
fn udp_packet(n: usize) -> PacketBuf {
    let mut h = vec![
        0x45, 0, 0, 0, 0x42, 0x42, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    let len = (28 + n) as u16;
    h[2..4].copy_from_slice(&len.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&[0x0f, 0xa0, 0x13, 0x88]);
    h.extend_from_slice(&((8 + n) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend(std::iter::repeat_n(7u8, n));
    PacketBuf::from_slice(&h, HEADROOM, TAILROOM)
}

/// The record `process_out` gives the sender says where each packet goes, with nothing left to look up or parse:
/// ESP in UDP of a tunnel between the SA's ends, of transport mode from the packet's source to its destination
/// (the buffer holds only the datagram's payload, the ESP packet: no IP or UDP header written to be read back),
/// raw ESP in the outer family of the tunnel (IPv6 around an IPv4 packet), bypassed traffic in its own family.
#[test]
fn outbound_records_carry_where_each_packet_goes() {
    let sa = |name: &str, spi: u32, extra: &str| {
        format!(
            "[[sa]]\nname = \"{name}\"\ndirection = \"out\"\nspi = {spi:#x}\nsuite = \"aes128gcm16\"\n\
             enc_key = \"00112233445566778899aabbccddeeff01020304\"\n{extra}\n"
        )
    };
    let pol = |port: u16, sa: &str| {
        format!(
            "[[policy]]\ndirection = \"out\"\nsrc = \"198.51.100.1/32\"\ndst = \"198.51.100.2/32\"\nproto = \"udp\"\n\
             src_ports = {port}\naction = \"protect\"\nsas = [\"{sa}\"]\n"
        )
    };
    let text = format!(
        "[interface]\ndefault_policy = \"bypass\"\n{}{}{}{}{}{}",
        sa(
            "tun-udp",
            0x1001,
            "local = \"192.0.2.1\"\nremote = \"192.0.2.2\"\nencap = \"udp\""
        ),
        sa(
            "tr-udp",
            0x1002,
            "mode = \"transport\"\nlocal = \"198.51.100.1\"\nremote = \"198.51.100.2\"\nencap = \"udp\""
        ),
        sa(
            "tun6",
            0x1003,
            "local = \"2001:db8::1\"\nremote = \"2001:db8::2\""
        ),
        pol(4000, "tun-udp"),
        pol(4001, "tr-udp"),
        pol(4002, "tun6"),
    );
    let sh = Shared::new(Config::parse(&text).unwrap()).unwrap();
    let snap = sh.db.load();
    let mut frags = FragCache::default();
    let with_sport = |sport: u16| {
        let mut p = udp_packet(100);
        p.data_mut()[20..22].copy_from_slice(&sport.to_be_bytes());
        // The UDP checksum is 0 (none): no fix-up needed.
        p
    };
    let v4 = |a: [u8; 4]| std::net::IpAddr::from(a);

    let mut p = with_sport(4000);
    assert_eq!(
        sh.process_out(&snap, &mut p, 0, &mut frags),
        Ok(TxRecord::NatT(Datagram {
            src: v4([192, 0, 2, 1]),
            sport: 4500,
            to: (v4([192, 0, 2, 2]), 4500).into(),
        }))
    );
    assert_eq!(
        &p.data()[..4],
        &0x1001u32.to_be_bytes(),
        "the ESP packet alone"
    );

    let mut p = with_sport(4001);
    assert_eq!(
        sh.process_out(&snap, &mut p, 0, &mut frags),
        Ok(TxRecord::NatT(Datagram {
            src: v4([198, 51, 100, 1]),
            sport: 4500,
            to: (v4([198, 51, 100, 2]), 4500).into(),
        }))
    );
    assert_eq!(
        &p.data()[..4],
        &0x1002u32.to_be_bytes(),
        "the ESP packet alone"
    );
    // SPI, sequence number, IV (8), the UDP datagram (108), padding (2), pad length and next header, ICV (16).
    assert_eq!(p.len(), 8 + 8 + 108 + 2 + 2 + 16);

    let mut p = with_sport(4002);
    assert_eq!(
        sh.process_out(&snap, &mut p, 0, &mut frags),
        Ok(TxRecord::Raw6)
    );
    assert_eq!(netveil_wire::ip::version(p.data()), Some(6));

    let mut p = with_sport(4003);
    assert_eq!(
        sh.process_out(&snap, &mut p, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
}

/// Path MTU: a packet that sealed would not fit the route to its peer is refused, not sealed (no sequence number
/// used), and its sender gets "fragmentation needed" with the largest size that fits, from the packet's
/// destination; a packet that fits, or an IPv4 packet without DF through ESP in UDP (the datagram socket fragments
/// it), goes on; the messages are rate-limited per second.
#[test]
fn a_packet_too_big_for_its_path_is_refused_and_its_sender_told_the_size_that_fits() {
    let text = "[interface]\ndefault_policy = \"bypass\"\n\
        [[sa]]\nname = \"raw\"\ndirection = \"out\"\nspi = 0x1001\nsuite = \"aes128-sha1\"\n\
        enc_key = \"00112233445566778899aabbccddeeff\"\nauth_key = \"0102030405060708090a0b0c0d0e0f1011121314\"\n\
        local = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
        [[sa]]\nname = \"udp\"\ndirection = \"out\"\nspi = 0x1002\nsuite = \"aes128gcm16\"\n\
        enc_key = \"00112233445566778899aabbccddeeff01020304\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.3\"\n\
        encap = \"udp\"\n\
        [[policy]]\ndirection = \"out\"\nsrc = \"198.51.100.1/32\"\ndst = \"198.51.100.2/32\"\nproto = \"udp\"\n\
        src_ports = 4000\naction = \"protect\"\nsas = [\"raw\"]\n\
        [[policy]]\ndirection = \"out\"\nsrc = \"198.51.100.1/32\"\ndst = \"198.51.100.2/32\"\nproto = \"udp\"\n\
        src_ports = 4001\naction = \"protect\"\nsas = [\"udp\"]\n";
    let sh = Shared::new(Config::parse(text).unwrap()).unwrap();
    let snap = sh.db.load();
    let mut frags = FragCache::default();
    let mtu = 1400;
    let mut pmtu = PathMtu::fixed(&[
        ("192.0.2.2".parse().unwrap(), mtu),
        ("192.0.2.3".parse().unwrap(), mtu),
    ]);
    let packet = |n: usize, sport: u16, df: bool| {
        let mut p = udp_packet(n);
        let d = p.data_mut();
        d[20..22].copy_from_slice(&sport.to_be_bytes());
        if df {
            d[6] = 0x40;
            d[10..12].copy_from_slice(&[0, 0]);
            let c = netveil_wire::checksum::checksum(&d[..20]);
            d[10..12].copy_from_slice(&c.to_be_bytes());
        }
        p
    };
    // AES-CBC with HMAC-SHA1-96 in tunnel mode over IPv4: 20 + 8 + 16 (IV) + the packet padded with its 2 trailer
    // bytes to 16 + 12 (ICV). The largest packet within 1,400: 1,342 (1,344 padded).
    let on_wire = |n: usize| 20 + 8 + 16 + (n + 2).div_ceil(16) * 16 + 12;
    assert!(on_wire(1342) <= 1400 && on_wire(1343) > 1400);
    let mut out = |p: &mut PacketBuf, pmtu: &mut PathMtu| {
        sh.process_out_on_path(&snap, p, 0, &mut frags, pmtu)
    };

    // Fits: sealed and sent.
    let mut p = packet(1342 - 28, 4000, true);
    assert_eq!(out(&mut p, &mut pmtu), Ok(TxRecord::Raw4));
    assert_eq!(p.len(), 1400);
    // One byte more: refused, untouched, and answered.
    let mut p = packet(1343 - 28, 4000, true);
    let orig = p.data().to_vec();
    assert_eq!(out(&mut p, &mut pmtu), Err(Drop::TooBigForPath));
    assert_eq!(p.data(), &orig[..], "not sealed");
    let mut msgs = Vec::new();
    pmtu.flush(|m| msgs.push(m.to_vec()));
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    let ip = netveil_wire::ipv4::Packet::new_checked(&m[..]).unwrap();
    assert_eq!(ip.src_addr(), std::net::Ipv4Addr::new(198, 51, 100, 2));
    assert_eq!(ip.dst_addr(), std::net::Ipv4Addr::new(198, 51, 100, 1));
    assert_eq!((m[20], m[21]), (3, 4), "fragmentation needed");
    assert_eq!(
        u16::from_be_bytes([m[26], m[27]]),
        1342,
        "the size that fits"
    );
    assert_eq!(&m[28..56], &orig[..28], "the packet quoted");
    // The sequence number the refused packet did not use goes to the next one.
    let mut p = packet(100, 4000, true);
    out(&mut p, &mut pmtu).unwrap();
    assert_eq!(&p.data()[20..28], &[0, 0, 0x10, 0x01, 0, 0, 0, 2]);
    // Without DF through raw ESP: refused and answered too (the kernel would not send it).
    let mut p = packet(1343 - 28, 4000, false);
    assert_eq!(out(&mut p, &mut pmtu), Err(Drop::TooBigForPath));
    // Through ESP in UDP: with DF refused (the largest fit: 20 + 8 (UDP) + 8 + 8 (IV) + padded to 4 + 16 (ICV)),
    // without DF left to the socket, which fragments the datagram.
    let mut p = packet(1400 - 28, 4001, true);
    assert_eq!(out(&mut p, &mut pmtu), Err(Drop::TooBigForPath));
    let mut p = packet(1400 - 28, 4001, false);
    assert!(matches!(out(&mut p, &mut pmtu), Ok(TxRecord::NatT(_))));
    let mut msgs = Vec::new();
    pmtu.flush(|m| msgs.push(m.to_vec()));
    assert_eq!(msgs.len(), 2);
    let fit = u16::from_be_bytes([msgs[1][26], msgs[1][27]]) as usize;
    let udp_on_wire = |n: usize| 20 + 8 + 8 + 8 + (n + 2).div_ceil(4) * 4 + 16;
    assert!(
        udp_on_wire(fit) <= 1400 && udp_on_wire(fit + 1) > 1400,
        "{fit}"
    );
    // At most ICMP_PER_S messages per second (3 sent in this one so far): the rest are refused without one; the
    // next second answers again.
    for _ in 0..super::pmtu::ICMP_PER_S + 5 {
        let mut p = packet(1343 - 28, 4000, true);
        assert_eq!(out(&mut p, &mut pmtu), Err(Drop::TooBigForPath));
    }
    let mut n = 0;
    pmtu.flush(|_| n += 1);
    assert_eq!(n, super::pmtu::ICMP_PER_S - 3);
    let mut p = packet(1343 - 28, 4000, true);
    assert_eq!(
        sh.process_out_on_path(&snap, &mut p, 1, &mut frags, &mut pmtu),
        Err(Drop::TooBigForPath)
    );
    let mut n = 0;
    pmtu.flush(|_| n += 1);
    assert_eq!(n, 1);
}

/// The ICMP error `from` sends back to `to` (type 3 code 3, port unreachable) about `quoted`, quoted whole.
fn port_unreachable(from: [u8; 4], to: [u8; 4], quoted: &[u8]) -> PacketBuf {
    let mut m = vec![3, 3, 0, 0, 0, 0, 0, 0];
    m.extend_from_slice(quoted);
    let c = netveil_wire::checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, 1, 0, 0];
    h.extend_from_slice(&from);
    h.extend_from_slice(&to);
    let len = (20 + m.len()) as u16;
    h[2..4].copy_from_slice(&len.to_be_bytes());
    let c = netveil_wire::checksum::checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&m);
    PacketBuf::from_slice(&h, HEADROOM, TAILROOM)
}

/// RFC 4301 section 6.2: an ICMP error is decided by the flow of the packet it quotes. Our "port unreachable" for a
/// datagram of the peer's port-selective protected flow (it quotes the decrypted datagram) goes through that
/// policy's SA, not the bypass default; one about an unprotected flow is bypassed; one whose quote cannot be read
/// is dropped. Coming in decapsulated, the peer's error about our protected flow passes the inbound check of the
/// SA it came through, and one about an unprotected flow does not.
#[test]
fn icmp_errors_follow_the_flow_they_quote() {
    let text = "[interface]\ndefault_policy = \"bypass\"\n\
        [[sa]]\nname = \"out\"\ndirection = \"out\"\nspi = 0x1001\nsuite = \"aes128gcm16\"\n\
        enc_key = \"00112233445566778899aabbccddeeff01020304\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
        [[sa]]\nname = \"in\"\ndirection = \"in\"\nspi = 0x2001\nsuite = \"aes128gcm16\"\n\
        enc_key = \"00112233445566778899aabbccddeeff01020305\"\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
        [[policy]]\nname = \"out\"\ndirection = \"out\"\nsrc = \"198.51.100.1/32\"\ndst = \"198.51.100.2/32\"\n\
        proto = \"udp\"\ndst_ports = 5000\naction = \"protect\"\nsas = [\"out\"]\n\
        [[policy]]\nname = \"in\"\ndirection = \"in\"\nsrc = \"198.51.100.2/32\"\ndst = \"198.51.100.1/32\"\n\
        proto = \"udp\"\nsrc_ports = 5000\naction = \"protect\"\nsas = [\"in\"]\n";
    let sh = Shared::new(Config::parse(text).unwrap()).unwrap();
    let snap = sh.db.load();
    let mut frags = FragCache::default();
    let (us, peer) = ([198, 51, 100, 1], [198, 51, 100, 2]);
    // A datagram 198.51.100.1:4000 -> .2:5000, and the peer's reply from 5000 (to which we answer).
    let ours = udp_packet(40).data().to_vec();
    let mut theirs = ours.clone();
    theirs[12..16].copy_from_slice(&peer);
    theirs[16..20].copy_from_slice(&us);
    theirs[20..24].copy_from_slice(&[0x13, 0x88, 0x0f, 0xa0]);
    let to_port = |sport: u16| {
        let mut q = theirs.clone();
        q[20..22].copy_from_slice(&sport.to_be_bytes());
        q
    };
    // Going out: about the peer's protected reply, through the SA (ESP); about its port 53, bypassed (ICMP).
    let mut e = port_unreachable(us, peer, &to_port(5000));
    assert_eq!(
        sh.process_out(&snap, &mut e, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
    assert_eq!(e.data()[9], ip_proto::ESP, "the error left unprotected");
    let mut e = port_unreachable(us, peer, &to_port(53));
    assert_eq!(
        sh.process_out(&snap, &mut e, 0, &mut frags),
        Ok(TxRecord::Raw4)
    );
    assert_eq!(e.data()[9], ip_proto::ICMP);
    // A quote cut before the ports: dropped.
    let mut e = port_unreachable(us, peer, &to_port(5000)[..22]);
    assert_eq!(
        sh.process_out(&snap, &mut e, 0, &mut frags),
        Err(Drop::Ipsec(netveil_ipsec::Drop::Malformed))
    );
    // Coming in through the inbound SA: the peer's error about our datagram to its port 5000 passes the policy
    // check; about our datagram to its port 53, not.
    let through_in = |p: &crate::engines::ip::db::SnapPolicy| p.rule.name == "in";
    let e = port_unreachable(peer, us, &ours);
    assert_eq!(
        sh.check_in(&snap, e.data(), 0, &mut frags, through_in),
        Ok(())
    );
    let mut other = ours.clone();
    other[22..24].copy_from_slice(&53u16.to_be_bytes());
    let e = port_unreachable(peer, us, &other);
    assert_eq!(
        sh.check_in(&snap, e.data(), 0, &mut frags, through_in),
        Err(Drop::PolicyMismatch)
    );
}
