//! PSP per-packet costs: tunnel-mode encapsulation and decapsulation (versions 0 and 1, 64- and 1400-byte
//! payloads), the receive SA lookup in a table of 1000 SAs, and the SA key derivation that the SA cache avoids.
//!
//! `cargo bench -p netveil-psp --bench psp`. Packets are copied into fresh buffers outside the timed part
//! (`iter_batched_ref`), since both transforms work in place.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use netveil_crypto::rand::SeededRng;
use netveil_crypto::{new_aead, AeadAlg};
use netveil_psp::{kdf, Device, Mode, RxAssoc, TxConfig, TxSa, Version};
use netveil_wire::PacketBuf;
use zeroize::Zeroizing;

const SAS: usize = 1000;
const PAYLOADS: [usize; 2] = [64, 1400];
const VERSIONS: [(Version, &str); 2] = [(Version::AesGcm128, "v0"), (Version::AesGcm256, "v1")];

/// An IPv4/UDP packet 10.0.0.1:4000 -> 10.0.1.2:5000 with `payload` bytes.
fn udp4(payload: usize) -> Vec<u8> {
    let total = 28 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 1, 2]);
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&4000u16.to_be_bytes());
    p[22..24].copy_from_slice(&5000u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    p[28..].fill(0xa5);
    p
}

fn buf(p: &[u8]) -> PacketBuf {
    PacketBuf::from_slice(p, 128, 64)
}

fn tx_for(a: &RxAssoc) -> TxSa {
    TxSa::with_key(
        &a.key,
        TxConfig {
            spi: a.spi,
            version: a.version,
            mode: Mode::Tunnel,
            crypt_offset_transport: 0,
            crypt_offset_tunnel_v4: 0,
            crypt_offset_tunnel_v6: 0,
            vc: false,
        },
    )
    .unwrap()
}

/// A device with `SAS` receive SAs of `version` and their transmit sides.
fn device(version: Version) -> (Device, Vec<TxSa>) {
    let mut d = Device::with_master_keys(
        Zeroizing::new([1; 32]),
        Zeroizing::new([2; 32]),
        Box::new(SeededRng::new(0)),
    );
    let txs = (0..SAS)
        .map(|_| tx_for(&d.rx_assoc(version).unwrap()))
        .collect();
    (d, txs)
}

fn transforms(c: &mut Criterion) {
    for (version, vname) in VERSIONS {
        let (dev, mut txs) = device(version);
        for payload in PAYLOADS {
            let clear = udp4(payload);
            let mut g = c.benchmark_group(format!("psp/{vname}"));
            g.throughput(Throughput::Bytes(clear.len() as u64));
            let tx = &mut txs[SAS / 2];
            g.bench_function(BenchmarkId::new("encapsulate", payload), |b| {
                b.iter_batched_ref(
                    || buf(&clear),
                    |p| tx.encapsulate(p).unwrap(),
                    BatchSize::SmallInput,
                )
            });
            let mut p = buf(&clear);
            tx.encapsulate(&mut p).unwrap();
            let sealed = p.data().to_vec();
            g.bench_function(BenchmarkId::new("decapsulate", payload), |b| {
                b.iter_batched_ref(
                    || buf(&sealed),
                    |p| dev.decapsulate(p).unwrap(),
                    BatchSize::SmallInput,
                )
            });
            g.finish();
        }
    }
}

fn lookup(c: &mut Criterion) {
    let (dev, txs) = device(Version::AesGcm128);
    // One sealed packet per SA, visited in a scattered order.
    let pkts: Vec<Vec<u8>> = (0..SAS)
        .map(|i| {
            let mut p = buf(&udp4(64));
            txs[(i * 617) % SAS].encapsulate(&mut p).unwrap();
            p.data().to_vec()
        })
        .collect();
    let mut i = 0;
    c.bench_function("psp/lookup/1000-sas", |b| {
        b.iter(|| {
            i = (i + 1) % SAS;
            dev.lookup(black_box(&pkts[i])).unwrap().spi()
        })
    });
}

fn derive(c: &mut Criterion) {
    let master = [0x5a; 32];
    for (version, vname) in VERSIONS {
        let alg = if version.key_len() == 16 {
            AeadAlg::AesGcm128 { tag_len: 16 }
        } else {
            AeadAlg::AesGcm256 { tag_len: 16 }
        };
        let mut spi = 1u32;
        c.bench_function(&format!("psp/kdf/derive/{vname}"), |b| {
            b.iter(|| {
                spi = spi.wrapping_add(1);
                kdf::derive(&master, black_box(spi), version)
            })
        });
        c.bench_function(&format!("psp/kdf/derive+schedule/{vname}"), |b| {
            b.iter(|| {
                spi = spi.wrapping_add(1);
                let key = kdf::derive(&master, black_box(spi), version);
                new_aead(alg, &key).unwrap()
            })
        });
    }
}

criterion_group!(benches, transforms, lookup, derive);
criterion_main!(benches);
