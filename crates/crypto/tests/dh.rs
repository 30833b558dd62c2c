//! Diffie-Hellman: RFC 7748 X25519 vectors, RFC 3526 MODP groups checked against an independent oracle (Python's
//! built-in `pow`), agreement between two fresh key pairs, and refusal of invalid peer values.

use netveil_crypto::dh::{Group, KeyPair};
use netveil_crypto::rand::OsRng;
use netveil_crypto::KeyError;

/// Hex decoding that ignores whitespace.
fn hx(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    hex::decode(s).expect("bad hex in test vector")
}

fn x25519(scalar: &[u8], u: &[u8]) -> Vec<u8> {
    KeyPair::from_private(Group::X25519, scalar)
        .unwrap()
        .agree(u)
        .unwrap()
        .to_vec()
}

// ------------------------------------------------------------------------------------------------------------
// X25519 (RFC 7748)
// ------------------------------------------------------------------------------------------------------------

#[test]
fn rfc7748_section_5_2_vectors() {
    assert_eq!(
        hex::encode(x25519(
            &hx("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"),
            &hx("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"),
        )),
        "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
    );
    // The u-coordinate has its top bit set: it must be masked.
    assert_eq!(
        hex::encode(x25519(
            &hx("4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d"),
            &hx("e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493"),
        )),
        "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957"
    );
}

#[test]
fn rfc7748_section_5_2_iterated() {
    let mut k = [0u8; 32];
    k[0] = 9;
    let mut u = k;
    for i in 1..=1000 {
        let r: [u8; 32] = x25519(&k, &u).try_into().unwrap();
        u = k;
        k = r;
        if i == 1 {
            assert_eq!(
                hex::encode(k),
                "422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079"
            );
        }
    }
    assert_eq!(
        hex::encode(k),
        "684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51"
    );
}

#[test]
fn rfc7748_section_6_1_alice_and_bob() {
    let alice = KeyPair::from_private(
        Group::X25519,
        &hx("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"),
    )
    .unwrap();
    let bob = KeyPair::from_private(
        Group::X25519,
        &hx("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"),
    )
    .unwrap();
    assert_eq!(
        hex::encode(alice.public()),
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    );
    assert_eq!(
        hex::encode(bob.public()),
        "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
    );
    let k = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
    assert_eq!(hex::encode(&*alice.agree(bob.public()).unwrap()), k);
    assert_eq!(hex::encode(&*bob.agree(alice.public()).unwrap()), k);
}

#[test]
fn x25519_refuses_low_order_points_and_wrong_lengths() {
    let kp = KeyPair::generate(Group::X25519, &mut OsRng);
    assert_eq!(kp.public().len(), 32);
    let low_order = [
        hx("0000000000000000000000000000000000000000000000000000000000000000"),
        hx("0100000000000000000000000000000000000000000000000000000000000000"),
        // A point of order 8.
        hx("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
        // p - 1, p (= 0) and p + 1 (= 1), the last two non-canonical: all of low order.
        hx("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        hx("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
        hx("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"),
    ];
    for p in &low_order {
        assert!(kp.agree(p).is_err(), "{}", hex::encode(p));
    }
    for len in [0, 31, 33, 64] {
        assert!(kp.agree(&vec![9u8; len]).is_err());
    }
    let peer = KeyPair::generate(Group::X25519, &mut OsRng);
    assert_eq!(
        &*kp.agree(peer.public()).unwrap(),
        &*peer.agree(kp.public()).unwrap()
    );
}

// ------------------------------------------------------------------------------------------------------------
// MODP (RFC 3526 groups 14 and 15)
// ------------------------------------------------------------------------------------------------------------

/// RFC 3526 §3, the 2048-bit prime (re-derived from its formula `2^2048 - 2^1984 - 1 + 2^64 * ([2^1918 pi] +
/// 124476)` with exact integer arithmetic in Python and checked to be a safe prime).
const P2048: &str = "
    FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD
    EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED
    EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F
    83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B
    E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510
    15728E5A8AACAA68FFFFFFFFFFFFFFFF
";

/// RFC 3526 §4, the 3072-bit prime (`2^3072 - 2^3008 - 1 + 2^64 * ([2^2942 pi] + 1690314)`).
const P3072: &str = "
    FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD
    EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED
    EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F
    83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B
    E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6955817183995497CEA956AE515D2261898FA0510
    15728E5A8AAAC42DAD33170D04507A33A85521ABDF1CBA64ECFB850458DBEF0A8AEA71575D060C7DB3970F85A6E1E4C7
    ABF5AE8CDB0933D71E8C94E04A25619DCEE3D2261AD2EE6BF12FFA06D98A0864D87602733EC86A64521F2B18177B200C
    BBE117577A615D6C770988C0BAD946E208E24FA074E5AB3143DB5BFCE0FD108E4B82D120A93AD2CAFFFFFFFFFFFFFFFF
";

/// Fixed private exponents (big-endian): each group takes the first `Group::private_len` bytes (40 for group 14,
/// 56 for group 15).
const XA: &str = "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40";
const XB: &str = "0b30557a9fc4e90e33587da2c7ec11365b80a5caef14395e83a8cdf2173c6186abd0f51a3f6489aed3f81d42678cb1d6fb20456a8fb4d9fe23486d92b7dc0126";

// Expected values computed with Python's built-in `pow` (an oracle independent of crypto-bigint):
//
//   python3 -c "import sys;p=int(sys.argv[1],16);xa=int(sys.argv[2],16);xb=int(sys.argv[3],16);\
//     n=(p.bit_length()+7)//8*2;print(format(pow(2,xa,p),'0%dx'%n));print(format(pow(pow(2,xb,p),xa,p),'0%dx'%n))" \
//     P XA XB
//
// with XA and XB cut to the group's exponent length
// and P the prime (hex, whitespace removed): the first line is g^xa mod p, the second (g^xb)^xa mod p.

const PUB_A_2048: &str = "
    f0cdbd67b9f7aa420ec897f258819be9496e9a0a5726c89df16dd7f451c98e45fb7738b946ffcc3743438f668c562d06
    c65d330de82a1078bf6f9292fdc86bec74ac0c26640704012785c1611d3c4f3ec28877eff3f5b11ce33a905b731dafca
    c4daf7e440d201db0ec4888a4e080572c92c1db2886612a28b6ab995987c8767b6a3f577e277713abefe80b9948bd5b7
    1b931d19185d503acf998c6e4b1cdaa3bc6b1ba20c71e6aceab8bdbf477c4706bea69f095f7687f47e93f99695fe582c
    7cab8d33f0267dbf4aab867f3a7f7a7f626e520129cd0fa3c7dc290f59217de17293bef38ae9b3bd3829226a08f611a9
    077a9acf31a954332f5a54d6eb7d524b
";
const SHARED_2048: &str = "
    e3e9c4d8e0ba5789b121816d0122c8b8574ba85d95be6cc9360f0e4fa0f5610ec646aa8da5a30661378b7c650360329d
    38b0710c1ac1e0ba29cc5c6fdb4b5fd804e66f8af4fc5cbef694da35c1382533a237c35e3b0e6dd14948a320b4535821
    089dbe5c3925bb9cafdef686984fe1c18544244c8feab3bb74189231b6a96b5e7f1a55b625663623afd8b4c71790bca2
    218c7a6ef6f0609060aced50ec5ba361ce8f183807fa2931338a68dc4961590bd6486ea5b07009cfd484523d09018847
    e4ec5914adb0eaf823e0e059c5a6128f36c27b3fe09ffc4a52eb5e35d7ae97b0e96360c2a00d771cf68b941b4c150e38
    b747178196d2e80753956864e94c2360
";
const PUB_A_3072: &str = "
    7d7010a74da2fbc2786136f1d0ecb1b3d9d00ba22f7c6a50b76fb9b51b5d3f51954fd6aeafd472eef87adb835ae2474b
    8e2b3ddf07c5d4ddcb7674fe70221854d1cc6b3873ccaed1bf7ce9c2ad88907c286dd90aa84771bc93b0dc1f622a2f4f
    3736d2e59eb18ae892f98bbacee7d8f99f0294235db0061f757927fcbcda4ee49977631a96f1722c4b8fe329a56b2c8f
    14485216e986b19a04679ca4bdf339ec09cbc1de6c0663e7e486185497aea51fe818402cf3dedf6fda2574090281f7f5
    df01b5848102bd9dcf45780443bcaa41c4a981379f08980dd87187c08d3656dcf6a1e98426e0d58782327653b9dec9d7
    94f72955f61575b8d18b18c257239ef620ac0790eb84ab82134ec9301b8dcc7e5175a1942dc009238d87f4cb510db37a
    a504012de70292fb15f5841d8a9c0f7472fed0ef505f7dfbdc9b8c2b2372740cdaa7792fde7c3695e0e61e6fdf3053f5
    898a81e444972abf8f60032d3579f8d0750124a3c7d7f746bcfde682b2f0f647a3d14933feb935ee48eb400f9117278c
";
const SHARED_3072: &str = "
    73281cb89eecf8a7e63e7411d614ddc6b75c85badf237c2a8ad6fed2bf793d65ff2f03a2870aa8220589af1c1b887fd3
    371a26ec9bb1aa882244734109e32b79515b85a65ca89ca49554c82a68ff2ac5ec7a300dc1e956086278fd71480bd9be
    f94f6b328d142910f44a14c411add423a5f4eeac056f42e27ed466ae24a8386294e271841e8f33806f38a37f751a759b
    92a50a57f076c91eca71aec2557a04040793816a2cbe0ec8e0243c159536a0a7b40978d563f0cde58e20d2b3e7621fa7
    158f44fe42da6fe6253e1061e83563348a38e73cf053ffa651c300ee1d6b2f0852af82861dda925c717fb816e05d1df9
    b59b53b41d43ac686098e1df3d776b581647f8f54e099d6cc3604e226d4333ee8dd780e9b1806933a5a3f700b4d92cc9
    7b2351ce4295f9e6f2c5954f63d4d5f0c65f973d3a08102f0e9c8e712839300adfa1ad0ec25675f429454eec0d126c7c
    65e9c88bf3d2c3a3a25de7aa87862abb05947c575b99e21c76714031430e14c18d12efe93588b084b82f1ff015a408f1
";

/// `g^x` for the largest exponent of each group (every bit set: 320 and 448 bits), with the same oracle:
/// `pow(2, 2**bits - 1, p)`. Every digit of the comb's table is at its last entry.
const PUB_MAX_2048: &str = "
    b779d89fb8d687d214468784e7d1ebc62c7881934223d02f6cf97c2c0770bc620467a183c514079d8c928e64c6b2780b
    d8459ad23becf23f19b81b97a1ee45f61790bcbb81642d5b1457cb810f75f7f1c53c58d8aded024c8f9db821c00de73c
    50cdc815a21c3d0e8cc19fd5f01c2e1ae2a7468e1ea617c75b8206b1a3d81f91b13b6d483234cbd87641a3e783add682
    3aa056ccfa57fc12a1ff26ebfc5d54e7aa5b721c30aaa8e2d5e3464c106fd3207973e84d576884e6180528c2f565767f
    c064649ae2febbe9d37535d417cad1c70443762a1c92487327b019be99fec70b6843d7bbad9915ea7c7a5e989232f8c3
    841ec2876ca4d96765c1a9475791c144
";
const PUB_MAX_3072: &str = "
    939ee304fb471ec7ea90650392d8bee56c92e93310c732ed0553dec9c062062403b3852009ddb401625312fc8c0e02db
    7d012b6acffb7ecdc9ca36edc22a9e19af78c652665b245b72e9c5339b5fda86470f570c95c09e131f3a14f3feadc28a
    2c0dee3e9cf330d11505a6ec4282cf0a860cf6e6f89d84cc40e6cd689355b1b23ac394f8725b79d48e87d90716c2b6ef
    712a931941baa3064ef52b13999a42ff3c5c267c5e4096653b149014381aeab9a719efd2228ab4c3864e4e578c715560
    b7e3146c464b07ad372ea264f980e5b78e6a6d24e5fb9473a828a7b4a0a397b3828b748651546abfd690892fc0404b83
    31eaee5eca6a07e5153378371652855fa2f74916f086e678fc0225fa8494ef7082ac5029f2ed60eaff0b24242193616a
    8a86f7beac778f8a2b61ab54ddc751a3d390e723b44af4e2f00779fa16ae447778048d492668eea55547cf72220419c6
    03ba3d4c07c7175d69a92bab789481aa36d14368d814c825dfa4e011be1ea6dbd4ec2f7ff5bcfe2e847b65a61f360d8a
";

#[test]
fn modp_primes_are_rfc3526() {
    assert_eq!(Group::Modp2048.modp_prime().unwrap(), hx(P2048));
    assert_eq!(Group::Modp3072.modp_prime().unwrap(), hx(P3072));
    assert_eq!(Group::X25519.modp_prime(), None);
}

#[test]
fn modp_known_answers_from_python_pow() {
    for (group, pub_a, shared) in [
        (Group::Modp2048, PUB_A_2048, SHARED_2048),
        (Group::Modp3072, PUB_A_3072, SHARED_3072),
    ] {
        let n = group.private_len();
        let a = KeyPair::from_private(group, &hx(XA)[..n]).unwrap();
        let b = KeyPair::from_private(group, &hx(XB)[..n]).unwrap();
        assert_eq!(a.public().len(), group.public_len());
        assert_eq!(hex::encode(a.public()), hex::encode(hx(pub_a)), "{group:?}");
        let z = a.agree(b.public()).unwrap();
        assert_eq!(z.len(), group.shared_len());
        assert_eq!(hex::encode(&*z), hex::encode(hx(shared)), "{group:?}");
        assert_eq!(&*b.agree(a.public()).unwrap(), &*z);
    }
    for (group, pub_max) in [
        (Group::Modp2048, PUB_MAX_2048),
        (Group::Modp3072, PUB_MAX_3072),
    ] {
        let max = KeyPair::from_private(group, &vec![0xff; group.private_len()]).unwrap();
        assert_eq!(
            hex::encode(max.public()),
            hex::encode(hx(pub_max)),
            "{group:?}"
        );
    }
}

/// The public value (the fixed-base comb) and the shared secret with the peer value 2 (crypto-bigint's windowed
/// exponentiation of a variable base) are both `2^x`: the two paths agree for random exponents, for exponents
/// with a single digit set in each position (each table row, each entry), and for zero digits between.
#[test]
fn modp_comb_agrees_with_the_windowed_exponentiation() {
    let mut rng = OsRng;
    for group in [Group::Modp2048, Group::Modp3072] {
        let two = be(group, &[2]);
        let n = group.private_len();
        let mut exps: Vec<Vec<u8>> = (0..24)
            .map(|_| {
                let mut x = vec![0u8; n];
                netveil_crypto::rand::Rng::fill(&mut rng, &mut x);
                x
            })
            .collect();
        for byte in 0..n {
            for v in [0x01, 0x10, 0x0f, 0xf0, 0x9c] {
                let mut x = vec![0u8; n];
                x[byte] = v;
                exps.push(x);
            }
        }
        for x in &exps {
            let k = KeyPair::from_private(group, x).unwrap();
            assert_eq!(
                hex::encode(k.public()),
                hex::encode(&*k.agree(&two).unwrap()),
                "{group:?} x = {}",
                hex::encode(x)
            );
        }
    }
}

#[test]
fn modp_two_parties_agree() {
    for group in [Group::Modp2048, Group::Modp3072] {
        let a = KeyPair::generate(group, &mut OsRng);
        let b = KeyPair::generate(group, &mut OsRng);
        assert_eq!(a.public().len(), group.public_len());
        assert_ne!(a.public(), b.public());
        let za = a.agree(b.public()).unwrap();
        let zb = b.agree(a.public()).unwrap();
        assert_eq!(za.len(), group.shared_len());
        assert_eq!(&*za, &*zb);
    }
}

/// `v` (a small value or p - k) as a big-endian value of the group's length.
fn be(group: Group, v: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; group.public_len()];
    let n = out.len();
    out[n - v.len()..].copy_from_slice(v);
    out
}

fn sub_small(p: &[u8], k: u8) -> Vec<u8> {
    let mut out = p.to_vec();
    let mut borrow = k as u16;
    for b in out.iter_mut().rev() {
        let (v, under) = (*b as u16).overflowing_sub(borrow);
        *b = v as u8;
        borrow = if under { 1 } else { 0 };
        if borrow == 0 {
            break;
        }
    }
    out
}

#[test]
fn modp_refuses_invalid_public_values() {
    for group in [Group::Modp2048, Group::Modp3072] {
        let kp = KeyPair::generate(group, &mut OsRng);
        let p = group.modp_prime().unwrap();
        let bad = [
            be(group, &[0]),
            be(group, &[1]),
            sub_small(&p, 1),
            p.clone(),
            vec![0xff; group.public_len()],
        ];
        for v in &bad {
            assert!(
                matches!(kp.agree(v), Err(KeyError::Unusable(_))),
                "{group:?} accepted {}",
                hex::encode(v)
            );
        }
        // Wrong lengths, even with a valid value inside.
        let good = KeyPair::generate(group, &mut OsRng);
        let mut long = vec![0u8];
        long.extend_from_slice(good.public());
        assert!(kp.agree(&long).is_err());
        assert!(kp.agree(&good.public()[1..]).is_err());
        assert!(kp.agree(&[]).is_err());
        // The extremes of the valid range are accepted: 2 and p - 2.
        assert!(kp.agree(&be(group, &[2])).is_ok());
        assert!(kp.agree(&sub_small(&p, 2)).is_ok());
    }
}

#[test]
fn private_key_lengths_are_checked() {
    assert!(KeyPair::from_private(Group::X25519, &[1; 31]).is_err());
    assert_eq!(
        (Group::Modp2048.private_len(), Group::Modp3072.private_len()),
        (40, 56)
    );
    assert!(KeyPair::from_private(Group::Modp2048, &[1; 39]).is_err());
    assert!(KeyPair::from_private(Group::Modp2048, &[1; 41]).is_err());
    assert!(KeyPair::from_private(Group::Modp3072, &[1; 57]).is_err());
    for g in Group::ALL {
        assert_eq!(KeyPair::generate(g, &mut OsRng).group(), g);
        // Debug shows no secret.
        let d = format!(
            "{:?}",
            KeyPair::from_private(g, &vec![0x5a; g.private_len()]).unwrap()
        );
        assert!(!d.contains("5a"), "{d}");
    }
}
