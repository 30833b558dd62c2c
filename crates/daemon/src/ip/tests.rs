use super::policy::*;
use super::*;
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
