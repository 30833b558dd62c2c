use super::overhead::*;
use super::rtt::*;

#[test]
fn the_overhead_formulas_are_the_rfcs() {
    // 100-byte pings: ESP transport protects 108 bytes (pad 2 to 112 with the trailer), tunnel 128 (pad 14).
    assert_eq!(
        expected_overhead("esp transport aes128-sha1", 100),
        Some(40)
    );
    assert_eq!(expected_overhead("esp tunnel aes128-sha1", 100), Some(72));
    assert_eq!(
        expected_overhead("esp+ah tunnel aes128-sha1 + ah sha1", 100),
        Some(96)
    );
    assert_eq!(
        expected_overhead("esp+ah transport aes128-sha1 + ah sha1", 100),
        Some(64)
    );
    assert_eq!(expected_overhead("pilsc confidential", 100), Some(12));
    assert_eq!(expected_overhead("pilsc authenticated", 100), Some(28));
    assert_eq!(expected_overhead("psp tunnel aes-gcm-128", 100), Some(60));
    // A 128-byte inner packet needs no WireGuard padding; 129 bytes pad to 144.
    assert_eq!(expected_overhead("wireguard-go", 100), Some(60));
    assert_eq!(wireguard_overhead(129), 75);
    assert_eq!(expected_overhead("ah transport sha1", 100), Some(24));
    // ESP without encryption: 108 bytes pad 2 to 112 with the trailer; its ICV 12, or AH's 24 in its place.
    assert_eq!(expected_overhead("esp transport null-sha1", 100), Some(24));
    assert_eq!(
        expected_overhead("esp+ah transport null-null + sha1", 100),
        Some(36)
    );
    assert_eq!(esp_null_overhead(2, 0), 10);
    assert_eq!(esp_null_overhead(3, 12), 25);
    assert_eq!(expected_overhead("l2sec aes128gcm", 100), Some(25));
    // ESP-in-UDP with AES-GCM: a 128-byte inner packet pads 2 (to 4 with the trailer), 129 bytes pad 1.
    assert_eq!(
        expected_overhead("strongswan esp-in-udp tunnel aes128gcm16 (libipsec)", 100),
        Some(64)
    );
    assert_eq!(esp_gcm_udp_tunnel_overhead(129), 63);
    // The padding follows the size: a payload that fills the block to the trailer pads nothing.
    assert_eq!(esp_cbc_sha1_overhead(14), 38);
    assert_eq!(esp_cbc_sha1_overhead(15), 53);
    assert_eq!(expected_overhead("something else", 100), None);
}

#[test]
fn arping_replies_are_read() {
    let out = "ARPING 10.99.0.1 from 10.99.0.2 vb\nUnicast reply from 10.99.0.1 [3E:6E:68:AB:FF:48]  0.532ms\n\
               Unicast reply from 10.99.0.1 [3E:6E:68:AB:FF:48]  1.5ms\nSent 2 probes (1 broadcast(s))\n\
               Received 2 response(s)\n";
    assert_eq!(parse_arping(out), vec![0.532, 1.5]);
    assert!(parse_arping("Sent 5 probes\nReceived 0 response(s)").is_empty());
}

#[test]
fn sizes_are_the_studys() {
    let s = ping_sizes(false);
    assert_eq!((s.len(), s[0], s[15]), (16, 64, 1024));
    assert!(ping_sizes(true).iter().all(|b| s.contains(b)));
}
