//! ESP per-packet costs with aes128gcm16: sealing (`encapsulate`) and sealing followed by opening (`classify` and
//! `decapsulate` with the inbound SA) of a 1428-byte IPv4/UDP packet, in tunnel mode (IPv4 and IPv6 outer headers,
//! raw and in UDP) and in transport mode (IPv4, raw and in UDP). Every round trip uses a fresh sequence number, so
//! the anti-replay window accepts each one.
//!
//! The outbound path as the IP engine runs it for a 1400-byte IPv4/UDP packet and a tunnel-mode SA (raw ESP, and
//! ESP in UDP for a socket): the flow key, the path's length check (`on_wire`) and the sealing, the old way (each
//! step parses the IP header again from the bytes: `flow_key`, `on_wire`, `protect_for_sockets`) and the new way
//! (`ip::Headers::parse` once, then `on_wire_parsed` and `protect_for_sockets_parsed`), and the same for an IPv6
//! packet with a Destination Options header in the raw tunnel; and the parsing alone: one `Headers::parse` against
//! the five reads it replaces (`flow_key`, `Layout::before_ipsec`, `dst_addr`, `dscp_ecn_df`, `version`), for IPv4
//! and for IPv6 with a Destination Options header.
//!
//! `cargo bench -p netveil-ipsec --bench esp`. Packets are copied into fresh buffers outside the timed part
//! (`iter_batched_ref`), since the transforms work in place.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use netveil_crypto::rand::OsRng;
use netveil_ipsec::bundle::{self, Sad};
use netveil_ipsec::inbound::{classify, Classified};
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::{esp, EspSuite, InboundSa, Mode, OutboundSa, SaParams, UdpEncap};
use netveil_sa::lifetime::Lifetime;
use netveil_wire::ip::{self, Headers, Layout};
use netveil_wire::{ip_proto, ipv4, ipv6, udp, PacketBuf};

const NOW: u64 = 1000;
const NAT_T: u16 = 4500;
/// Inner packet length (IPv4 + UDP + payload), as a 1500-byte MTU leaves room for after ESP in tunnel mode.
const LEN: usize = 1428;

/// An IPv4/UDP packet 10.0.0.1:4000 -> 10.0.1.2:5000 of `len` bytes.
fn udp4(len: usize) -> Vec<u8> {
    let mut p = vec![0xa5u8; len];
    let payload_len = len - ipv4::MIN_HEADER_LEN - udp::HEADER_LEN;
    ipv4::Repr {
        src: [10, 0, 0, 1].into(),
        dst: [10, 0, 1, 2].into(),
        protocol: ip_proto::UDP,
        payload_len: udp::HEADER_LEN + payload_len,
        ttl: 64,
        dscp_ecn: 0,
        ident: 0x1234,
        dont_frag: true,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut p[..]));
    udp::Repr {
        src_port: 4000,
        dst_port: 5000,
        payload_len,
    }
    .emit(&mut udp::Packet::new_unchecked(
        &mut p[ipv4::MIN_HEADER_LEN..],
    ));
    p
}

/// The outbound and inbound SA of one direction.
fn pair(mode: Mode, encap: bool) -> (OutboundSa, InboundSa) {
    let suite = EspSuite::parse("aes128gcm16", false).unwrap();
    let params = |direction, mode| SaParams {
        name: "bench".into(),
        spi: 0x1000,
        direction,
        suite: Suite::Esp(suite),
        mode,
        enc_key: zeroize::Zeroizing::new((0..suite.enc.key_len()).map(|i| i as u8).collect()),
        auth_key: zeroize::Zeroizing::new(Vec::new()),
        esn: false,
        replay_window: 64,
        lifetime: Lifetime::default(),
        encap: encap.then_some(UdpEncap {
            local_port: NAT_T,
            remote_port: NAT_T,
        }),
        tfc_pad_to: 0,
        first_seq: 1,
    };
    let inbound_mode = match mode {
        Mode::Tunnel { local, remote } => Mode::Tunnel {
            local: remote,
            remote: local,
        },
        m => m,
    };
    (
        OutboundSa::new(params(Direction::Out, mode), NOW, &mut OsRng).unwrap(),
        InboundSa::new(params(Direction::In, inbound_mode), NOW).unwrap(),
    )
}

fn buf(p: &[u8]) -> PacketBuf {
    PacketBuf::from_slice(p, 128, 64)
}

fn open(sa: &InboundSa, p: &mut PacketBuf) {
    match classify(p, NAT_T).unwrap() {
        Classified::Protected(loc) => {
            esp::decapsulate(sa, p, &loc, NOW).unwrap();
        }
        c => panic!("not ESP: {c:?}"),
    }
}

fn transforms(c: &mut Criterion) {
    let (l4, r4): (IpAddr, IpAddr) = (
        "192.0.2.1".parse().unwrap(),
        "198.51.100.2".parse().unwrap(),
    );
    let (l6, r6): (IpAddr, IpAddr) = (
        "2001:db8::1".parse().unwrap(),
        "2001:db8::2".parse().unwrap(),
    );
    let cases = [
        (
            "tunnel4",
            Mode::Tunnel {
                local: l4,
                remote: r4,
            },
            false,
        ),
        (
            "tunnel4-udp",
            Mode::Tunnel {
                local: l4,
                remote: r4,
            },
            true,
        ),
        (
            "tunnel6-udp",
            Mode::Tunnel {
                local: l6,
                remote: r6,
            },
            true,
        ),
        ("transport4", Mode::Transport, false),
        ("transport4-udp", Mode::Transport, true),
    ];
    let clear = udp4(LEN);
    let mut g = c.benchmark_group("esp/aes128gcm16");
    g.throughput(Throughput::Bytes(LEN as u64));
    for (name, mode, encap) in cases {
        let (out, inb) = pair(mode, encap);
        // Once outside the measurement: the round trip gives back the packet.
        let mut p = buf(&clear);
        esp::encapsulate(&out, &mut p, NOW).unwrap();
        open(&inb, &mut p);
        assert_eq!(p.data(), &clear[..]);
        g.bench_function(BenchmarkId::new("seal", name), |b| {
            b.iter_batched_ref(
                || buf(&clear),
                |p| esp::encapsulate(&out, p, NOW).unwrap(),
                BatchSize::SmallInput,
            )
        });
        g.bench_function(BenchmarkId::new("seal+open", name), |b| {
            b.iter_batched_ref(
                || buf(&clear),
                |p| {
                    esp::encapsulate(&out, p, NOW).unwrap();
                    open(&inb, p);
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// The bytes of `p` (IPv4/UDP) as IPv6/UDP with a Destination Options header (8 bytes) in front of UDP.
fn udp6_ext(v4: &[u8]) -> Vec<u8> {
    let l4 = &v4[ipv4::MIN_HEADER_LEN..];
    let mut p = vec![0u8; ipv6::HEADER_LEN];
    ipv6::Repr {
        src: "fd00::1".parse().unwrap(),
        dst: "fd00:1::2".parse().unwrap(),
        next_header: ip_proto::IPV6_OPTS,
        payload_len: 8 + l4.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut p[..]));
    p.extend_from_slice(&[ip_proto::UDP, 0, 1, 4, 0, 0, 0, 0]);
    p.extend_from_slice(l4);
    p
}

/// The IP engine's outbound steps for one packet, the old way: every step parses the header from the bytes.
fn outbound_old(sad: &Sad, sas: &[bundle::OutIdx], p: &mut PacketBuf) {
    let f = ip::flow_key(p.data()).unwrap();
    black_box(&f);
    let w = bundle::on_wire(sad, sas, p.data(), p.len()).unwrap();
    black_box(&w);
    black_box(bundle::protect_for_sockets(sad, sas, p, NOW).unwrap());
}

/// The same steps the new way: the headers parsed once, the view handed to each step.
fn outbound_new(sad: &Sad, sas: &[bundle::OutIdx], p: &mut PacketBuf) {
    let h = Headers::parse(p.data()).unwrap();
    let f = h.flow();
    black_box(&f);
    let w = bundle::on_wire_parsed(sad, sas, &h, p.len()).unwrap();
    black_box(&w);
    black_box(bundle::protect_for_sockets_parsed(sad, sas, p, NOW, &h).unwrap());
}

fn outbound_path(c: &mut Criterion) {
    let (l4, r4): (IpAddr, IpAddr) = (
        "192.0.2.1".parse().unwrap(),
        "198.51.100.2".parse().unwrap(),
    );
    let clear = udp4(1400);
    let mut g = c.benchmark_group("outbound/aes128gcm16/1400");
    g.throughput(Throughput::Bytes(clear.len() as u64));
    let clear6 = udp6_ext(&clear);
    for (name, encap, clear) in [
        ("tunnel4", false, &clear),
        ("tunnel4-udp", true, &clear),
        ("tunnel4 inner ipv6-opts", false, &clear6),
    ] {
        let (out, _) = pair(
            Mode::Tunnel {
                local: l4,
                remote: r4,
            },
            encap,
        );
        let mut sad = Sad::default();
        let sas = [sad.insert_out(out)];
        // Both ways make the same packet (but for the sequence number and what it seals).
        let (mut a, mut b) = (buf(clear), buf(clear));
        outbound_old(&sad, &sas, &mut a);
        outbound_new(&sad, &sas, &mut b);
        assert_eq!(a.len(), b.len());
        g.bench_function(BenchmarkId::new("old: parse per step", name), |b| {
            b.iter_batched_ref(
                || buf(clear),
                |p| outbound_old(&sad, &sas, p),
                BatchSize::SmallInput,
            )
        });
        g.bench_function(BenchmarkId::new("new: headers once", name), |b| {
            b.iter_batched_ref(
                || buf(clear),
                |p| outbound_new(&sad, &sas, p),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    let mut g = c.benchmark_group("parse");
    for (name, p) in [
        ("ipv4-udp", clear.clone()),
        ("ipv6-opts-udp", udp6_ext(&clear)),
    ] {
        let h = Headers::parse(&p).unwrap();
        assert_eq!(Layout::before_ipsec(&p), Ok(h.before_ipsec()));
        assert_eq!(ip::flow_key(&p), Ok(h.flow()));
        g.bench_function(BenchmarkId::new("old: five reads", name), |b| {
            b.iter(|| {
                let p = black_box(&p[..]);
                black_box(ip::flow_key(p).unwrap());
                black_box(Layout::before_ipsec(p).unwrap());
                black_box(ip::dst_addr(p).unwrap());
                black_box(ip::dscp_ecn_df(p));
                black_box(ip::version(p).unwrap());
            })
        });
        g.bench_function(BenchmarkId::new("new: Headers::parse", name), |b| {
            b.iter(|| black_box(Headers::parse(black_box(&p[..])).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, transforms, outbound_path);
criterion_main!(benches);
