//! Diffie-Hellman per operation: a key pair's generation (the public value `g^x`; for MODP the fixed-base comb)
//! and the agreement (`y^x`; for MODP crypto-bigint's windowed exponentiation of a variable base, the same
//! exponent length), every group side by side in the same run. For MODP the two rows are the comb and the generic
//! exponentiation it replaces for `g^x`.
//!
//! `cargo bench -p netveil-crypto --bench dh`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use netveil_crypto::dh::{Group, KeyPair};
use netveil_crypto::rand::OsRng;

fn dh(c: &mut Criterion) {
    let mut g = c.benchmark_group("dh");
    for group in Group::ALL {
        let peer = KeyPair::generate(group, &mut OsRng);
        let ours = KeyPair::generate(group, &mut OsRng);
        g.bench_function(format!("{group:?} generate"), |b| {
            b.iter(|| black_box(KeyPair::generate(group, &mut OsRng)))
        });
        g.bench_function(format!("{group:?} agree"), |b| {
            b.iter(|| black_box(ours.agree(black_box(peer.public())).unwrap()))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = dh
}
criterion_main!(benches);
