//! Diffie-Hellman: RFC 7748 X25519 vectors, RFC 3526 MODP groups checked against an independent oracle (Python's
//! built-in `pow`), agreement between two fresh key pairs, and refusal of invalid peer values.

use netveil_crypto::dh::{Group, KeyPair, MODP_EXPONENT_LEN};
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

/// Fixed private exponents (64 bytes, big-endian).
const XA: &str = "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f40";
const XB: &str = "0b30557a9fc4e90e33587da2c7ec11365b80a5caef14395e83a8cdf2173c6186abd0f51a3f6489aed3f81d42678cb1d6fb20456a8fb4d9fe23486d92b7dc0126";

// Expected values computed with Python's built-in `pow` (an oracle independent of crypto-bigint):
//
//   python3 -c "import sys;p=int(sys.argv[1],16);xa=int(sys.argv[2],16);xb=int(sys.argv[3],16);\
//     n=(p.bit_length()+7)//8*2;print(format(pow(2,xa,p),'0%dx'%n));print(format(pow(pow(2,xb,p),xa,p),'0%dx'%n))" \
//     P XA XB
//
// with P the prime (hex, whitespace removed): the first line is g^xa mod p, the second (g^xb)^xa mod p.

const PUB_A_2048: &str = "
    ca737546c70b3a25a43d745a3e31526b3fc9f28dca1b890fed9c1cc46a1d23022c597a3f9dcc6de91383f788f139e35c
    290558305a7935d242e1ca4d830a0b94abdc8b3f1bc6b0c43c6e8330b29a5f61ae8ac3ebddebbd69206d41fe819e975e
    982b4d290a93c8ecb87ec2c2e363544fe5b9f44af371e15c9f5d3c83e7904001bb9cf1667538acd767c24f2bed29ae16
    5c5e3ad7ca009d9c801eb75febd18c50477ac0ae9562c684efd4d0c696046f8a95603d228c6c407f8d15d6aba62f433c
    6b023e8f2d9722cd34bd355dc2496693ee66a3cdc55d1ee1d7766554428a0b1299b5882359f9de57ca7a3ba3c3ca2d55
    2ac6584a7ce9fd4846140888a7b411f8
";
const SHARED_2048: &str = "
    f409475f31fc31d11fbf17788f1df5b5f393245b6942ed80ff422a3897762c979ccdcc3536cbd6d9294400581597607d
    f11d6848c30b77355bd014d7c908f3f5e536d08bcb0672958ca79ed172f09188d837b0d577f8c71c9064b108c57e7ca7
    e9cffd6dec73d4db86989fa8c22580a731af26db92e8dc051ba4bc3fe7595482c0dda5b5e5b6cf2b16013fbca82bfe1f
    b3e3fae31a9f8b665692a77ab948bc92902cd0b594fab67faea55a394a3188c26f73761cb16a30a18b79639001580257
    c48a2b23e6f41581d9d3e632dadda1c6432fd5d4f829d07e00e0a9f8110b46f48afddea65a8ffd58c58317776f030d9b
    6cd19839fb6b31acb6d3df851052f26c
";
const PUB_A_3072: &str = "
    0526a7a4db46a66b53746f0b8f46c3f3a4ef56c46cf2c5d62b4422d403a1c523eeb3a06a83627dd1efda0859f70e2dd4
    684f314990a9c5c095a5bafaaf678d34419bc9ea80d004b643bc929b7e9cecaec1512be0fd1fc60c457c96980a068f1f
    6b8b2ae6fa785c6c0d04518a69d5fe9b5f4e5fff4b81af98a6530c30e8a1aea532055d561e14917dbbbd7b493e558a6d
    211b6f8485064350340784b577f36ce25409b0863212402cee7cae11553585250347a9328f9611cdac21a7a17ce9c221
    e8703a3ad5a19d4f44c2d08201ee04ebe5182d6cb7b0fd729d1f40ca3ced03cf8d15387e5b3697f07bf842608e63681a
    57d9d5367ccac65a9c09b7c9bc653c3cbfc2b68ba924b3e2e45fae0a9da81a7f590267ed595c31275e49be41504c777b
    61b51231e263ebab488b5abeb5bd4805b719c1ae1301dd3c79a1b6a747885ed8016f109b26f1a415e01b2d1d6358cd39
    859d806be6ee5884d4faad5670e2e5b0588fed47702a28e290599efb7a2b0b257aa30d7d05719622ed53e2610f866fa0
";
const SHARED_3072: &str = "
    78aa83c567baa6eb4ed213967f0d7cc125078aa92d307a3e29aadb84be67346e7b89763f57ea60f0a41d997bf28b0b35
    a6228e8c23d4001ee3f415d4cecd13e74032341f4867b129fb22c00660b461e80d730289a80d80a5695885f3d0fa5ae9
    cd20c9456030f26607f31a1b1e76503e9fb43e77e9e822a00733ad67338a90e0ad81014fba6deaf61e5c9ac2ff5c24de
    cb7ebbdf1ae3a991ce75ae208540360c198216f53e8a5b22e1975777f9137a6dc2c92e084795ebb853b6253a6de0205c
    3dc9940f643221e1582ae7e36ce9afdf11199fcf01c5e7b6b62b9319f4ba2d6303675818427d7099fec3b40eded7471e
    d77d15bf711f2625bbeeb82e9f83d762c910379ddd5a43ad02dfb02221d0487c5348cd2cdadf07571ec875893b520719
    ed0542ae8333517eb83ccfc5472e4478ea4c3d29b803b6b252dae55b2901de6ebe9415849b6ccee1ef21ac5b2aef8da6
    7febb418c226ac17527e0027d1bc10fc36ebf29f481c41eea9c54d16f560f8ec01d622e5c7ca4ac2bb8a9d2c7bbfe5e0
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
        let a = KeyPair::from_private(group, &hx(XA)).unwrap();
        let b = KeyPair::from_private(group, &hx(XB)).unwrap();
        assert_eq!(a.public().len(), group.public_len());
        assert_eq!(hex::encode(a.public()), hex::encode(hx(pub_a)), "{group:?}");
        let z = a.agree(b.public()).unwrap();
        assert_eq!(z.len(), group.shared_len());
        assert_eq!(hex::encode(&*z), hex::encode(hx(shared)), "{group:?}");
        assert_eq!(&*b.agree(a.public()).unwrap(), &*z);
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
    assert!(KeyPair::from_private(Group::Modp2048, &[1; MODP_EXPONENT_LEN - 1]).is_err());
    assert!(KeyPair::from_private(Group::Modp3072, &[1; MODP_EXPONENT_LEN + 1]).is_err());
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
