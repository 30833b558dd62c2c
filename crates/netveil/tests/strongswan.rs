//! strongSwan as a live peer: two Debian charons (5.9.x, kernel-libipsec) in network namespaces, driven by
//! `netveil_lab::strongswan`. These tests prove the lab harness that netveil's IKEv2 interop tests and
//! `netveil bench --ike` will stand on: configurations charon accepts, establishment with PSK and certificates,
//! traffic through the tunnel, SA listings parsed into typed values, failures visible in the log, setup timing.
//!
//! They need root and strongSwan (.ci/setup installs it). Without either they are skipped (`netveil_testkit::skip`:
//! they print why and pass, except under CI, `CI=true`, where that is a failure). They run one at a time (charon handshakes are CPU-bound).

use netveil_lab::lab::{self, Lab};
use netveil_lab::strongswan::{
    self, CharonOptions, ChildState, IkeState, KeyType, Pki, SwanAuth, SwanPair, SwanPsk, Unique,
};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

const PSK: &str = "netveil-lab-psk-0123456789";
const T: Duration = Duration::from_secs(10);

/// The serial lock, or None when these tests cannot run here (skipped through `netveil_testkit::skip`, which
/// fails them under CI).
fn prerequisites(test: &str) -> Option<MutexGuard<'static, ()>> {
    if !netveil_testkit::require_root(test)
        || !netveil_testkit::require(test, strongswan::missing())
    {
        return None;
    }
    assert!(lab::have_tool("ping"), "'ping' is missing: run .ci/setup");
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

fn psk() -> SwanAuth {
    SwanAuth::Psk(SwanPsk::new(PSK).unwrap())
}

/// A pair with connection `site` (IKE `ike`, child `net` with `esp`) loaded on both sides, auth per side.
fn pair(lab: &mut Lab, auth: [SwanAuth; 2], ike: &str, esp: &str) -> SwanPair {
    let p = SwanPair::up(lab, &CharonOptions::default()).unwrap_or_else(|e| panic!("setup: {e}"));
    let [a, b] = auth;
    let ca = SwanPair::conn(0, "site", a, ike, "net", esp);
    let cb = SwanPair::conn(1, "site", b, ike, "net", esp);
    p.load([&[ca], &[cb]])
        .unwrap_or_else(|e| panic!("load: {e}"));
    p
}

fn ping(lab: &Lab, p: &SwanPair, count: u32) -> std::result::Result<String, String> {
    let c = count.to_string();
    let src = SwanPair::inner(0).to_string();
    let dst = SwanPair::inner(1).to_string();
    lab.exec_ok(
        &p.ns[0],
        &[
            "ping", "-n", "-c", &c, "-i", "0.2", "-W", "2", "-I", &src, &dst,
        ],
    )
    .map_err(|e| e.to_string())
}

#[test]
fn psk_x25519_aes_gcm_establishes_pings_and_lists_algorithms() {
    let Some(_g) = prerequisites("psk_x25519_aes_gcm") else {
        return;
    };
    let mut lab = Lab::new("nvss").unwrap();
    let p = pair(
        &mut lab,
        [psk(), psk()],
        "aes128-sha256-x25519",
        "aes128gcm16",
    );
    let [a, b] = &p.charons;

    // No child yet: the inner addresses are not reachable (no route), so the ping below can only pass through
    // the tunnel.
    assert!(ping(&lab, &p, 1).is_err(), "ping succeeded before any SA");

    a.initiate("net", T).unwrap_or_else(|e| panic!("{e}"));
    let (ike_a, child_a) = a
        .wait_child_installed("net", T)
        .unwrap_or_else(|e| panic!("{e}"));
    let (ike_b, child_b) = b
        .wait_child_installed("net", T)
        .unwrap_or_else(|e| panic!("{e}"));

    // The negotiated algorithms, as both sides list them.
    for (ike, child, initiator) in [(&ike_a, &child_a, true), (&ike_b, &child_b, false)] {
        assert_eq!(ike.state, IkeState::Established);
        assert_eq!(ike.initiator, initiator);
        assert_eq!(ike.algorithms.encr.as_deref(), Some("AES_CBC"), "{ike:?}");
        assert_eq!(ike.algorithms.encr_keysize, Some(128), "{ike:?}");
        assert_eq!(
            ike.algorithms.integ.as_deref(),
            Some("HMAC_SHA2_256_128"),
            "{ike:?}"
        );
        assert_eq!(
            ike.algorithms.prf.as_deref(),
            Some("PRF_HMAC_SHA2_256"),
            "{ike:?}"
        );
        assert_eq!(
            ike.algorithms.dh_group.as_deref(),
            Some("CURVE_25519"),
            "{ike:?}"
        );
        assert_eq!(child.state, ChildState::Installed);
        assert_eq!(child.protocol, "ESP");
        assert_eq!(child.mode, "TUNNEL");
        assert!(child.encap, "libipsec children are ESP-in-UDP: {child:?}");
        assert_eq!(
            child.algorithms.encr.as_deref(),
            Some("AES_GCM_16"),
            "{child:?}"
        );
        assert_eq!(child.algorithms.encr_keysize, Some(128), "{child:?}");
        assert_eq!(
            child.algorithms.integ, None,
            "an AEAD has no integrity transform: {child:?}"
        );
        assert_eq!(
            ike.remote_port,
            Some(4500),
            "NAT-T port after IKE_SA_INIT: {ike:?}"
        );
    }
    assert_eq!(ike_a.local_id, "a.lab.test");
    assert_eq!(ike_a.remote_id, "b.lab.test");
    assert_eq!(child_a.local_ts, vec!["198.51.100.1/32"]);
    assert_eq!(child_a.remote_ts, vec!["198.51.100.2/32"]);
    // The same SA seen from both ends: IKE SPIs equal, each side's inbound SPI is the other's outbound one.
    assert_eq!(
        (ike_a.initiator_spi, ike_a.responder_spi),
        (ike_b.initiator_spi, ike_b.responder_spi)
    );
    assert!(ike_a.initiator_spi != 0 && ike_a.responder_spi != 0);
    assert_eq!(child_a.spi_in, child_b.spi_out);
    assert_eq!(child_a.spi_out, child_b.spi_in);
    assert_ne!(child_a.spi_in, child_a.spi_out);

    // Traffic through the libipsec tunnel, counted by the child on both sides.
    let out =
        ping(&lab, &p, 3).unwrap_or_else(|e| panic!("ping through the tunnel: {e}{}", p.logs(30)));
    assert!(out.contains("3 received"), "{out}");
    let after_a = a.list_sas().unwrap();
    let after_b = b.list_sas().unwrap();
    let ca = after_a[0].child("net").unwrap();
    let cb = after_b[0].child("net").unwrap();
    assert!(ca.packets_out >= 3 && ca.packets_in >= 3, "{ca:?}");
    assert!(cb.packets_out >= 3 && cb.packets_in >= 3, "{cb:?}");

    // Terminate: a DELETE removes the SAs on both sides.
    a.terminate("site", T).unwrap_or_else(|e| panic!("{e}"));
    assert!(a.list_sas().unwrap().is_empty());
    let t0 = std::time::Instant::now();
    while !b.list_sas().unwrap().is_empty() {
        assert!(
            t0.elapsed() < T,
            "responder kept its SAs after DELETE{}",
            p.logs(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        ping(&lab, &p, 1).is_err(),
        "ping succeeded after the DELETE"
    );
}

#[test]
fn certificates_from_pki_establish_ecdsa_and_rsa() {
    let Some(_g) = prerequisites("certificates_from_pki") else {
        return;
    };
    for (kt, want_log) in [(KeyType::EcdsaP256, "ECDSA"), (KeyType::Rsa(2048), "RSA")] {
        let mut lab = Lab::new("nvss").unwrap();
        let pki = Pki::new(&lab.dir().join(format!("pki-{want_log}")), kt)
            .unwrap_or_else(|e| panic!("pki: {e}"));
        let cred_a = pki.issue("a.lab.test").unwrap_or_else(|e| panic!("{e}"));
        let cred_b = pki.issue("b.lab.test").unwrap_or_else(|e| panic!("{e}"));
        // FQDN ids (the certificates' subjectAltNames) with ECDSA, DN ids (their subjects, rendered unquoted with
        // '=' and checked by charon against the certificate) with RSA.
        let ids = match kt {
            KeyType::EcdsaP256 => ["a.lab.test", "b.lab.test"],
            _ => ["CN=a.lab.test", "CN=b.lab.test"],
        };
        let p = SwanPair::up(&mut lab, &CharonOptions::default())
            .unwrap_or_else(|e| panic!("setup: {e}"));
        let mut conns = [
            SwanPair::conn(
                0,
                "site",
                SwanAuth::Pubkey(cred_a),
                "aes128-sha256-ecp256",
                "net",
                "aes128-sha256",
            ),
            SwanPair::conn(
                1,
                "site",
                SwanAuth::Pubkey(cred_b),
                "aes128-sha256-ecp256",
                "net",
                "aes128-sha256",
            ),
        ];
        for (i, c) in conns.iter_mut().enumerate() {
            c.local_id = ids[i].into();
            c.remote_id = ids[1 - i].into();
        }
        p.load([&conns[..1], &conns[1..]])
            .unwrap_or_else(|e| panic!("load: {e}"));
        let [a, b] = &p.charons;
        a.initiate("net", T)
            .unwrap_or_else(|e| panic!("{kt:?}: {e}"));
        let (ike, child) = a
            .wait_child_installed("net", T)
            .unwrap_or_else(|e| panic!("{e}"));
        b.wait_child_installed("net", T)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            ike.algorithms.dh_group.as_deref(),
            Some("ECP_256"),
            "{ike:?}"
        );
        assert_eq!(
            child.algorithms.encr.as_deref(),
            Some("AES_CBC"),
            "{child:?}"
        );
        assert_eq!(
            child.algorithms.integ.as_deref(),
            Some("HMAC_SHA2_256_128"),
            "{child:?}"
        );
        // Each side authenticated the other with its certificate's key (charon logs the signature scheme).
        let la = a.log();
        let lb = b.log();
        assert_eq!(
            (ike.local_id.as_str(), ike.remote_id.as_str()),
            (ids[0], ids[1])
        );
        for (log, peer) in [(&la, ids[1]), (&lb, ids[0])] {
            let line = log
                .lines()
                .find(|l| {
                    l.contains(&format!("authentication of '{peer}' with"))
                        && l.contains("successful")
                })
                .unwrap_or_else(|| {
                    panic!(
                        "{kt:?}: no successful authentication of {peer}{}",
                        p.logs(40)
                    )
                });
            assert!(line.contains(want_log), "{kt:?}: {line}");
            assert!(!line.contains("pre-shared"), "{line}");
        }
        assert!(
            la.contains("using trusted ca certificate \"CN=netveil lab CA\""),
            "{kt:?}: the peer's certificate was not checked against the lab CA{}",
            a.log_tail(60)
        );
        let out = ping(&lab, &p, 2).unwrap_or_else(|e| panic!("{kt:?} ping: {e}{}", p.logs(30)));
        assert!(out.contains("2 received"), "{out}");
    }
}

#[test]
fn wrong_psk_fails_and_the_logs_say_so() {
    let Some(_g) = prerequisites("wrong_psk") else {
        return;
    };
    let mut lab = Lab::new("nvss").unwrap();
    let p = pair(
        &mut lab,
        [
            psk(),
            SwanAuth::Psk(SwanPsk::new("a-different-psk-9876543210").unwrap()),
        ],
        "aes128-sha256-x25519",
        "aes128gcm16",
    );
    let [a, b] = &p.charons;
    let err = a
        .initiate("net", T)
        .expect_err("initiate with a wrong PSK succeeded")
        .to_string();
    // The responder cannot verify the initiator's AUTH and answers AUTHENTICATION_FAILED; the initiator's
    // initiate fails with it.
    assert!(
        b.log().contains("MAC mismatched"),
        "responder log does not name the PSK mismatch{}",
        b.log_tail(40)
    );
    assert!(
        a.log()
            .contains("received AUTHENTICATION_FAILED notify error"),
        "initiator log does not say authentication failed{}",
        a.log_tail(40)
    );
    assert!(err.contains("AUTHENTICATION_FAILED"), "{err}");
    assert!(
        a.list_sas().unwrap().iter().all(|s| s.children.is_empty()),
        "a child after a failed authentication"
    );
    // The PSK is not in the logs (level 1-2; level 4 would print it).
    assert!(!a.log().contains(PSK) && !b.log().contains(PSK));
    assert!(ping(&lab, &p, 1).is_err());
}

#[test]
fn handshake_ms_20_psk_x25519() {
    let Some(_g) = prerequisites("handshake_ms") else {
        return;
    };
    let mut lab = Lab::new("nvss").unwrap();
    let opts = CharonOptions {
        // As a bench would run it: errors only in the log.
        log_level: 0,
        log_subsystems: Vec::new(),
        ..CharonOptions::default()
    };
    let p = SwanPair::up(&mut lab, &opts).unwrap_or_else(|e| panic!("setup: {e}"));
    let conn = |side| {
        SwanPair::conn(
            side,
            "site",
            psk(),
            "aes128-sha256-x25519",
            "net",
            "aes128gcm16",
        )
    };
    p.load([&[conn(0)], &[conn(1)]])
        .unwrap_or_else(|e| panic!("{e}"));
    let a = &p.charons[0];
    let mut ms = a
        .handshake_ms("site", "net", 20)
        .unwrap_or_else(|e| panic!("{e}{}", p.logs(30)));
    assert_eq!(ms.len(), 20);
    // Each round was set up and torn down: nothing left.
    assert!(a.list_sas().unwrap().is_empty());
    ms.sort_by(f64::total_cmp);
    println!(
        "strongswan ike psk-x25519: IKE SA + first child (initiate request to child installed, initiator): \
         median {:.2} ms, min {:.2}, max {:.2} (n=20)",
        ms[10], ms[0], ms[19]
    );
}

#[test]
fn handshakes_per_second_parallel_psk_x25519() {
    let Some(_g) = prerequisites("handshakes_per_second") else {
        return;
    };
    let mut lab = Lab::new("nvss").unwrap();
    let opts = CharonOptions {
        log_level: 0,
        log_subsystems: Vec::new(),
        // Every initiate a new IKE SA, none replacing another; no COOKIEs or drops at 16 half-open SAs from one
        // address.
        reuse_ikesa: false,
        dos_protection: false,
        ..CharonOptions::default()
    };
    let p = SwanPair::up(&mut lab, &opts).unwrap_or_else(|e| panic!("setup: {e}"));
    let conn = |side| {
        let mut c = SwanPair::conn(
            side,
            "site",
            psk(),
            "aes128-sha256-x25519",
            "net",
            "aes128gcm16",
        );
        c.unique = Unique::Never;
        c
    };
    p.load([&[conn(0)], &[conn(1)]])
        .unwrap_or_else(|e| panic!("{e}"));
    let [a, b] = &p.charons;
    let total = 200;
    let rate = a
        .handshakes_per_s("net", total, 16)
        .unwrap_or_else(|e| panic!("{e}{}", p.logs(30)));
    // Every initiation made its own IKE SA with its child, on both sides.
    for (c, side) in [(a, "initiator"), (b, "responder")] {
        let sas = c.list_sas().unwrap();
        let up = sas
            .iter()
            .filter(|s| {
                s.state == IkeState::Established
                    && s.child("net")
                        .is_some_and(|c| c.state == ChildState::Installed)
            })
            .count();
        assert_eq!(
            up, total,
            "{side}: {up} of {total} IKE SAs with an installed child"
        );
    }
    println!(
        "strongswan ike psk-x25519: {rate:.0} handshakes/s (IKE SA + first child, {total} initiations, 16 at a time, \
         first request to last child installed on the initiator)"
    );
    a.terminate("site", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// What the later interop tests will ask of this charon build and plugin list: every DH group of the issue that
/// strongSwan 5.9.8 has (MODP 14 and 15, ECP 19 and 20, Curve25519) in IKE_SA_INIT, and the four ESP suites
/// (AES-GCM-16-128, AES-128-CBC/HMAC-SHA1-96, AES-256-CBC/HMAC-SHA2-256-128, 3DES/HMAC-SHA1-96) as children.
/// The responder has one connection and one child listing them all (charon picks the child by traffic
/// selectors first).
#[test]
fn proposals_for_the_interop_tests_negotiate() {
    let Some(_g) = prerequisites("proposals") else {
        return;
    };
    let mut lab = Lab::new("nvss").unwrap();
    let p =
        SwanPair::up(&mut lab, &CharonOptions::default()).unwrap_or_else(|e| panic!("setup: {e}"));
    let groups = [
        ("modp2048", "MODP_2048"),
        ("modp3072", "MODP_3072"),
        ("ecp256", "ECP_256"),
        ("ecp384", "ECP_384"),
        ("x25519", "CURVE_25519"),
    ];
    let esp = [
        ("gcm", "aes128gcm16", "AES_GCM_16", 128, None),
        ("cbc", "aes128-sha1", "AES_CBC", 128, Some("HMAC_SHA1_96")),
        (
            "cbc256",
            "aes256-sha256",
            "AES_CBC",
            256,
            Some("HMAC_SHA2_256_128"),
        ),
        ("tdes", "3des-sha1", "3DES_CBC", 0, Some("HMAC_SHA1_96")),
    ];
    let mut a_conns = Vec::new();
    for (g, _) in groups {
        a_conns.push(SwanPair::conn(
            0,
            &format!("ike-{g}"),
            psk(),
            &format!("aes128-sha256-{g}"),
            g,
            "aes128gcm16",
        ));
    }
    let mut esp_conn = SwanPair::conn(
        0,
        "esp",
        psk(),
        "aes128-sha256-x25519",
        "gcm",
        "aes128gcm16",
    );
    for (name, prop, ..) in &esp[1..] {
        let mut c = esp_conn.children[0].clone();
        c.name = (*name).into();
        c.esp_proposals = (*prop).into();
        esp_conn.children.push(c);
    }
    a_conns.push(esp_conn);
    let all_ike: Vec<String> = groups
        .iter()
        .map(|(g, _)| format!("aes128-sha256-{g}"))
        .collect();
    let all_esp: Vec<&str> = esp.iter().map(|e| e.1).collect();
    let b_conn = SwanPair::conn(
        1,
        "all",
        psk(),
        &all_ike.join(", "),
        "all",
        &all_esp.join(", "),
    );
    p.load([&a_conns, &[b_conn]])
        .unwrap_or_else(|e| panic!("{e}"));
    let [a, _] = &p.charons;

    for (g, want) in groups {
        a.initiate(g, T).unwrap_or_else(|e| panic!("{g}: {e}"));
        let sas = a.list_sas().unwrap();
        let ike = sas
            .iter()
            .find(|s| s.name == format!("ike-{g}"))
            .unwrap_or_else(|| panic!("{g}: no IKE SA in {sas:?}"));
        assert_eq!(ike.algorithms.dh_group.as_deref(), Some(want), "{ike:?}");
        assert_eq!(
            ike.child(g).map(|c| c.state.clone()),
            Some(ChildState::Installed)
        );
        a.terminate(&format!("ike-{g}"), T)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for (name, ..) in &esp {
        a.initiate(name, T)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let sas = a.list_sas().unwrap();
    assert_eq!(sas.len(), 1, "the children share one IKE SA: {sas:?}");
    for (name, _, encr, keysize, integ) in esp {
        let c = sas[0]
            .child(name)
            .unwrap_or_else(|| panic!("no child {name}: {sas:?}"));
        assert_eq!(c.state, ChildState::Installed);
        assert_eq!(c.algorithms.encr.as_deref(), Some(encr), "{c:?}");
        if keysize > 0 {
            assert_eq!(c.algorithms.encr_keysize, Some(keysize), "{c:?}");
        }
        assert_eq!(c.algorithms.integ.as_deref(), integ, "{c:?}");
    }
}
