use super::*;

fn ike(s: &str) -> Proposal {
    Proposal::parse(Protocol::Ike, s).unwrap()
}
fn esp(s: &str) -> Proposal {
    Proposal::parse(Protocol::Esp, s).unwrap()
}

#[test]
fn parses_the_issue_examples_and_prints_them_back() {
    let cases: &[(Protocol, &str, &str, &str)] = &[
        (
            Protocol::Ike,
            "aes256gcm16-prfsha384-ecp384",
            "aes256gcm16-prfsha384-ecp384",
            "IKE:AES_GCM_16_256/PRF_HMAC_SHA2_384/ECP_384",
        ),
        (
            Protocol::Ike,
            "aes128-sha256-x25519",
            "aes128-sha256-prfsha256-x25519",
            "IKE:AES_CBC_128/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/CURVE_25519",
        ),
        (
            Protocol::Ike,
            "aes128gcm16-prfsha256-x25519-ke1_mlkem768",
            "aes128gcm16-prfsha256-x25519-ke1_mlkem768",
            "IKE:AES_GCM_16_128/PRF_HMAC_SHA2_256/CURVE_25519/KE1_ML_KEM_768",
        ),
        (
            Protocol::Ike,
            "aes256-sha256-modp2048",
            "aes256-sha256-prfsha256-modp2048",
            "IKE:AES_CBC_256/HMAC_SHA2_256_128/PRF_HMAC_SHA2_256/MODP_2048",
        ),
        (
            Protocol::Ike,
            "aes128-sha1-modp2048",
            "aes128-sha1-prfsha1-modp2048",
            "IKE:AES_CBC_128/HMAC_SHA1_96/PRF_HMAC_SHA1/MODP_2048",
        ),
        (
            Protocol::Esp,
            "3des-sha1",
            "3des-sha1",
            "ESP:3DES_CBC/HMAC_SHA1_96/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes128gcm16",
            "aes128gcm16",
            "ESP:AES_GCM_16_128/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes128-sha1",
            "aes128-sha1",
            "ESP:AES_CBC_128/HMAC_SHA1_96/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes256-sha256",
            "aes256-sha256",
            "ESP:AES_CBC_256/HMAC_SHA2_256_128/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes128gcm16-esn",
            "aes128gcm16-esn",
            "ESP:AES_GCM_16_128/EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes128gcm16-esn-noesn",
            "aes128gcm16-esn-noesn",
            "ESP:AES_GCM_16_128/EXT_SEQ/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "chacha20poly1305-x25519",
            "chacha20poly1305-x25519",
            "ESP:CHACHA20_POLY1305/CURVE_25519/NO_EXT_SEQ",
        ),
        (
            Protocol::Esp,
            "aes128-aes256-sha256-sha1-ecp256-modp3072",
            "aes128-aes256-sha256-sha1-ecp256-modp3072",
            "ESP:AES_CBC_128/AES_CBC_256/HMAC_SHA2_256_128/HMAC_SHA1_96/ECP_256/MODP_3072/NO_EXT_SEQ",
        ),
    ];
    for &(proto, text, printed, log) in cases {
        let p = Proposal::parse(proto, text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(p.to_string(), printed, "{text}");
        assert_eq!(p.log_name(), log, "{text}");
        assert_eq!(Proposal::parse(proto, printed).unwrap(), p, "{text}");
        assert_eq!(
            Proposal::from_transforms(proto, &p.transforms()).unwrap(),
            p,
            "{text}"
        );
    }
}

#[test]
fn transform_ids_are_the_iana_numbers() {
    let p = ike("aes256gcm16-prfsha384-ecp384-ke1_mlkem768");
    let t: Vec<(u8, u16, Option<u16>)> = p
        .transforms()
        .iter()
        .map(|t| (t.ty.number(), t.id, t.key_bits))
        .collect();
    assert_eq!(
        t,
        [
            (1, 20, Some(256)),
            (2, 6, None),
            (4, 20, None),
            (6, 36, None)
        ]
    );
    let p = esp("aes128-3des-sha1-sha256-sha384-sha512-modp2048-modp3072-x25519-esn");
    let t: Vec<(u8, u16, Option<u16>)> = p
        .transforms()
        .iter()
        .map(|t| (t.ty.number(), t.id, t.key_bits))
        .collect();
    assert_eq!(
        t,
        [
            (1, 12, Some(128)),
            (1, 3, None),
            (3, 2, None),
            (3, 12, None),
            (3, 13, None),
            (3, 14, None),
            (4, 14, None),
            (4, 15, None),
            (4, 31, None),
            (5, 1, None)
        ]
    );
    assert_eq!(
        ike("aes128gcm16-prfsha1-prfsha512-x25519").transforms()[1..3]
            .iter()
            .map(|t| t.id)
            .collect::<Vec<_>>(),
        [2, 7]
    );
    assert!(Encr::TripleDes.is_legacy() && !Encr::AesCbc128.is_legacy());
    assert_eq!(
        Integ::ALL.map(|i| (i.key_len(), i.icv_len())),
        [(20, 12), (32, 16), (48, 24), (64, 32)]
    );
}

#[test]
fn errors_name_the_offending_token() {
    let err = |proto, s| Proposal::parse(proto, s).unwrap_err().to_string();
    assert_eq!(
        err(Protocol::Ike, "aes256-sha257-x25519"),
        "unknown algorithm keyword 'sha257'"
    );
    assert_eq!(
        err(Protocol::Ike, "aes256gcm16-prfsha256-x25519-ke8_mlkem768"),
        "unknown algorithm keyword 'ke8_mlkem768'"
    );
    assert_eq!(
        err(Protocol::Ike, "aes256gcm16-prfsha256-x25519-ke1_mlkem769"),
        "unknown algorithm keyword 'ke1_mlkem769'"
    );
    assert_eq!(
        err(Protocol::Esp, "aes128-sha1-prfsha1"),
        "'prfsha1' is not allowed in an ESP proposal"
    );
    assert_eq!(
        err(Protocol::Ike, "aes128-sha1-x25519-esn"),
        "'esn' is not allowed in an IKE proposal"
    );
    assert_eq!(
        err(Protocol::Esp, "aes128gcm16-aes128"),
        "'aes128': AEAD and non-AEAD encryption in one proposal"
    );
    assert_eq!(
        err(Protocol::Esp, "aes128gcm16-sha256"),
        "'sha256': an AEAD proposal takes no integrity algorithm"
    );
    assert_eq!(
        err(Protocol::Esp, "aes128"),
        "a non-AEAD proposal needs an integrity algorithm"
    );
    assert_eq!(
        err(Protocol::Ike, "aes128gcm16-x25519"),
        "an IKE proposal needs a PRF"
    );
    assert_eq!(
        err(Protocol::Ike, "aes128-sha256"),
        "an IKE proposal needs a key exchange method"
    );
    assert_eq!(
        err(Protocol::Esp, "sha256"),
        "a proposal needs an encryption algorithm"
    );
    assert_eq!(
        err(Protocol::Esp, "aes128gcm16-ke1_mlkem768"),
        "additional key exchange 1 without a key exchange"
    );
    assert_eq!(err(Protocol::Esp, ""), "empty proposal");
    let x: &[Ke] = &[Ke::Curve25519];
    assert_eq!(
        Proposal::new(
            Protocol::Esp,
            &[Encr::AesGcm16_128],
            &[],
            &[],
            x,
            &[x; 8],
            &[]
        ),
        Err(ProposalError::TooManyAddKe(8))
    );
    assert_eq!(
        err(Protocol::Esp, "aes128--sha1"),
        "unknown algorithm keyword ''"
    );
}

#[test]
fn unknown_transforms_are_refused() {
    let t = |ty, id, key_bits| Transform { ty, id, key_bits };
    for bad in [
        t(TransformType::Encr, 12, Some(192)),
        t(TransformType::Encr, 12, None),
        t(TransformType::Encr, 20, Some(64)),
        t(TransformType::Prf, 4, None),
        t(TransformType::Integ, 12, Some(128)),
        t(TransformType::Ke, 2, None),
        t(TransformType::Esn, 2, None),
        t(TransformType::AddKe(8), 36, None),
    ] {
        let mut list = ike("aes128-sha256-x25519").transforms();
        list.push(bad);
        assert!(
            matches!(
                Proposal::from_transforms(Protocol::Ike, &list),
                Err(ProposalError::UnknownTransform { .. })
            ),
            "{bad:?}"
        );
    }
    assert_eq!(TransformType::from_number(13), None);
    assert_eq!(
        TransformType::from_number(12),
        Some(TransformType::AddKe(7))
    );
}

#[test]
fn selection_follows_the_chosen_order() {
    let ours = [
        ike("aes256gcm16-prfsha384-ecp384"),
        ike("aes128-aes256-sha256-sha1-x25519-modp2048"),
    ];
    let peer = [
        ike("aes128-sha1-modp2048"),
        ike("aes256-aes128-sha1-sha256-modp2048-x25519"),
    ];
    let s = select(&ours, &peer, Preference::Ours).unwrap();
    assert_eq!((s.ours, s.peer), (1, 0));
    assert_eq!(s.chosen.to_string(), "aes128-sha1-prfsha1-modp2048");
    assert!(s.chosen.is_single());
    // Against the peer's second proposal alone: our order within the types.
    let s = select(&ours, &peer[1..], Preference::Ours).unwrap();
    assert_eq!(s.chosen.to_string(), "aes128-sha256-prfsha256-x25519");
    let s = select(&ours, &peer[1..], Preference::Peer).unwrap();
    assert_eq!(s.chosen.to_string(), "aes256-sha1-prfsha1-modp2048");
    let s = select(&ours, &peer, Preference::Peer).unwrap();
    assert_eq!((s.ours, s.peer), (1, 0));
    // No common key exchange: nothing.
    assert_eq!(
        select(&[ike("aes128-sha1-ecp256")], &peer, Preference::Ours),
        None
    );
    // ESP: PFS on one side only does not match; ESN must be common.
    assert_eq!(
        select(
            &[esp("aes128gcm16-x25519")],
            &[esp("aes128gcm16")],
            Preference::Ours
        ),
        None
    );
    assert_eq!(
        select(
            &[esp("aes128gcm16-esn")],
            &[esp("aes128gcm16")],
            Preference::Ours
        ),
        None
    );
    let s = select(
        &[esp("aes128gcm16-esn-noesn")],
        &[esp("aes128gcm16")],
        Preference::Ours,
    )
    .unwrap();
    assert_eq!(s.chosen.log_name(), "ESP:AES_GCM_16_128/NO_EXT_SEQ");
    // Protocols never match each other.
    assert_eq!(
        select(
            &[esp("aes128-sha1")],
            &[ike("aes128-sha1-modp2048")],
            Preference::Ours
        ),
        None
    );
    // Additional key exchanges are matched slot by slot.
    let pq = ike("aes128gcm16-prfsha256-x25519-ke1_mlkem768");
    assert!(select(
        std::slice::from_ref(&pq),
        std::slice::from_ref(&pq),
        Preference::Ours
    )
    .is_some());
    assert_eq!(
        select(
            &[pq],
            &[ike("aes128gcm16-prfsha256-x25519")],
            Preference::Ours
        ),
        None
    );
}
