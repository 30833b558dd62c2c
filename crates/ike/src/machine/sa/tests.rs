use super::*;

#[test]
fn a_chosen_proposal_comes_back_whole() {
    for (protocol, s) in [
        (Protocol::Ike, "aes128gcm16-prfsha256-x25519"),
        (Protocol::Ike, "aes128-sha256-modp2048"),
        (Protocol::Ike, "aes256-sha384-prfsha512-ecp384"),
        (Protocol::Ike, "aes256gcm16-prfsha384-x25519-ke1_mlkem768"),
        (Protocol::Esp, "aes128gcm16"),
        (Protocol::Esp, "aes256-sha256-modp3072-esn"),
        (Protocol::Esp, "chacha20poly1305-noesn"),
    ] {
        let p = Proposal::parse(protocol, s).unwrap();
        assert!(p.is_single(), "{s}");
        let c = Chosen::new(&p);
        assert_eq!(c.proposal().as_ref(), Some(&p), "{s}");
        assert_eq!(c.proposal().unwrap().to_string(), p.to_string());
    }
    assert!(std::mem::size_of::<Chosen>() <= 16);
}
