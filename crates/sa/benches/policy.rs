//! Policy lookup per packet with N CHILD_SA-like rules (one outbound /32 rule per peer host, then the configured
//! catch-all), indexed (`lookup`) beside the linear scan it replaces (`lookup_linear`) in the same run: a flow to
//! the last peer (the scan's worst case) and to a host no rule names (the catch-all).
//!
//! `cargo bench -p netveil-sa --bench policy`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use netveil_sa::policy::{Action, Direction, FlowKey, PolicyDb, PortRange, Rule, Selector};
use std::net::IpAddr;

fn host(i: u32) -> IpAddr {
    IpAddr::from([10, 2, (i / 250) as u8, (i % 250) as u8])
}

fn db(n: u32) -> PolicyDb {
    let lan: ipnet::IpNet = "10.1.0.0/16".parse().unwrap();
    let mut db = PolicyDb::new(Action::Discard);
    for i in 0..n {
        db.push(Rule {
            direction: Direction::Out,
            selector: Selector {
                src: lan,
                dst: ipnet::IpNet::new(host(i), 32).unwrap(),
                proto: None,
                src_ports: PortRange::ANY,
                dst_ports: PortRange::ANY,
            },
            action: Action::Protect(i as usize),
        });
    }
    db.push(Rule {
        direction: Direction::Out,
        selector: Selector {
            src: lan,
            dst: "10.2.0.0/16".parse().unwrap(),
            proto: None,
            src_ports: PortRange::ANY,
            dst_ports: PortRange::ANY,
        },
        action: Action::Bypass,
    });
    db
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy-lookup");
    for n in [10u32, 1000, 10_000] {
        let d = db(n);
        for (what, dst) in [("last-peer", host(n - 1)), ("no-rule", host(60_000))] {
            let k = FlowKey {
                src: "10.1.0.1".parse().unwrap(),
                dst,
                proto: 17,
                src_port: 4000,
                dst_port: 5000,
            };
            g.bench_with_input(
                BenchmarkId::new(format!("indexed/{what}"), n),
                &k,
                |b, k| b.iter(|| d.lookup(Direction::Out, black_box(k))),
            );
            g.bench_with_input(BenchmarkId::new(format!("linear/{what}"), n), &k, |b, k| {
                b.iter(|| d.lookup_linear(Direction::Out, black_box(k)))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
