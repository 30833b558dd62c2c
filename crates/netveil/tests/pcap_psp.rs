//! `netveil pcap psp-encrypt` / `psp-decrypt` on the reference vectors (testdata/psp): for every encryption
//! configuration and its cleartext captures, encrypting then decrypting gives the capture back byte for byte
//! (records and timestamps, so `tcpdump -xx` dumps are identical), and a tampered PSP packet is refused.

use netveil_pcap::{parse, serialize, LinkType, Pcap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/psp")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("netveil-pcap-psp-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `netveil pcap VERB -c CFG -i IN -o OUT [extra]`; returns success and stderr.
fn run(verb: &str, cfg: &Path, input: &Path, output: &Path, extra: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_netveil"))
        .args(["pcap", verb, "-c"])
        .arg(cfg)
        .arg("-i")
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn load(p: &Path) -> Pcap {
    parse(&std::fs::read(p).unwrap()).unwrap()
}

/// The bytes of a `tcpdump -xx` dump.
fn dump_bytes(txt: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in txt.lines().filter(|l| l.trim_start().starts_with("0x")) {
        for word in line.split_once(':').unwrap().1.split_whitespace() {
            for i in (0..word.len()).step_by(2) {
                out.push(u8::from_str_radix(&word[i..i + 2], 16).unwrap());
            }
        }
    }
    out
}

fn encrypt_cfgs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(testdata().join("cfg"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("encrypt_"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 14);
    v
}

#[test]
fn every_config_round_trips_through_the_cli() {
    let dir = tmpdir("roundtrip");
    let dec_cfg = testdata().join("cfg/decrypt.cfg");
    for cfg in encrypt_cfgs() {
        let pcaps: &[&str] = if cfg.ends_with("_empty.cfg") {
            &["v4_cleartext_empty", "v6_cleartext_empty"]
        } else {
            &["v4_cleartext", "v6_cleartext"]
        };
        for pcap in pcaps {
            let ctx = format!("{cfg} on {pcap}");
            let input = testdata().join(format!("pcap/{pcap}.pcap"));
            let enc = dir.join(format!("{cfg}-{pcap}-enc.pcap"));
            let dec = dir.join(format!("{cfg}-{pcap}-dec.pcap"));
            let (ok, err) = run(
                "psp-encrypt",
                &testdata().join("cfg").join(&cfg),
                &input,
                &enc,
                &[],
            );
            assert!(ok, "{ctx}: encrypt: {err}");
            let clear = load(&input);
            let e = load(&enc);
            assert_eq!(e.link, LinkType::Ethernet, "{ctx}");
            assert_eq!(e.records.len(), 1, "{ctx}");
            let f = &e.records[0].data;
            assert_eq!(
                &f[..12],
                &clear.records[0].data[..12],
                "{ctx}: MAC addresses kept"
            );
            assert_eq!(e.records[0].ts_sec, clear.records[0].ts_sec, "{ctx}");
            assert_eq!(e.records[0].ts_frac, clear.records[0].ts_frac, "{ctx}");
            // UDP to port 1000 with checksum 0, IV 1.
            let ip = &f[14..];
            let ihl = if ip[0] >> 4 == 4 { 20 } else { 40 };
            assert_eq!(&ip[ihl + 2..ihl + 4], &1000u16.to_be_bytes(), "{ctx}");
            assert_eq!(&ip[ihl + 6..ihl + 8], &[0, 0], "{ctx}");
            assert_eq!(&ip[ihl + 8 + 8..ihl + 8 + 16], &1u64.to_be_bytes(), "{ctx}");

            let (ok, err) = run("psp-decrypt", &dec_cfg, &enc, &dec, &[]);
            assert!(ok, "{ctx}: decrypt: {err}");
            let d = load(&dec);
            assert_eq!(d.link, clear.link, "{ctx}");
            assert_eq!(d.records, clear.records, "{ctx}: records differ");
            let dump =
                std::fs::read_to_string(testdata().join(format!("pcap/{pcap}_pcap.txt"))).unwrap();
            assert_eq!(
                d.records[0].data,
                dump_bytes(&dump),
                "{ctx}: tcpdump -xx dump differs"
            );

            // Tampering with the PSP part (header, first and last payload byte, ICV) is refused.
            let psp_at = 14 + ihl + 8;
            for at in [
                psp_at,
                psp_at + 2,
                psp_at + 4,
                psp_at + 15,
                psp_at + 16,
                f.len() - 17,
                f.len() - 1,
            ] {
                let mut bad = e.clone();
                bad.records[0].data[at] ^= 0x10;
                let bad_in = dir.join(format!("{cfg}-{pcap}-bad.pcap"));
                std::fs::write(&bad_in, serialize(&bad)).unwrap();
                let out = dir.join("bad-out.pcap");
                let (ok, err) = run("psp-decrypt", &dec_cfg, &bad_in, &out, &[]);
                assert!(!ok, "{ctx}: byte {at} tampered, accepted");
                assert!(err.contains("dropped 1"), "{ctx}: {err}");
                let (ok, _) = run("psp-decrypt", &dec_cfg, &bad_in, &out, &["--allow-drops"]);
                assert!(ok);
                assert!(load(&out).records.is_empty(), "{ctx}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn iv_counts_per_packet_and_clear_packets_are_skipped_on_decrypt() {
    let dir = tmpdir("iv");
    let mut two = load(&testdata().join("pcap/v4_cleartext.pcap"));
    let v6 = load(&testdata().join("pcap/v6_cleartext.pcap"));
    two.records.push(v6.records[0].clone());
    let input = dir.join("two.pcap");
    std::fs::write(&input, serialize(&two)).unwrap();
    let enc = dir.join("enc.pcap");
    let cfg = testdata().join("cfg/encrypt_tunnel_crypt_off_128.cfg");
    assert!(run("psp-encrypt", &cfg, &input, &enc, &[]).0);
    let e = load(&enc);
    for (i, r) in e.records.iter().enumerate() {
        let ihl = if r.data[14] >> 4 == 4 { 20 } else { 40 };
        let iv = &r.data[14 + ihl + 16..14 + ihl + 24];
        assert_eq!(iv, &(i as u64 + 1).to_be_bytes());
    }
    // A mix of PSP and clear packets: the clear ones are passed over, not dropped.
    let mut mixed = e.clone();
    mixed.records.push(two.records[0].clone());
    let mixed_in = dir.join("mixed.pcap");
    std::fs::write(&mixed_in, serialize(&mixed)).unwrap();
    let dec = dir.join("dec.pcap");
    let (ok, err) = run(
        "psp-decrypt",
        &testdata().join("cfg/decrypt.cfg"),
        &mixed_in,
        &dec,
        &[],
    );
    assert!(ok, "{err}");
    assert!(err.contains("skipped 1 (not-psp 1)"), "{err}");
    assert_eq!(load(&dec).records, two.records);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_configurations_are_usage_errors() {
    let dir = tmpdir("badcfg");
    let input = testdata().join("pcap/v4_cleartext.pcap");
    let out = dir.join("out.pcap");
    // A decryption configuration lacks the SA.
    let o = Command::new(env!("CARGO_BIN_EXE_netveil"))
        .args(["pcap", "psp-encrypt", "-c"])
        .arg(testdata().join("cfg/decrypt.cfg"))
        .arg("-i")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("decrypt.cfg"));
    let (ok, err) = run("psp-decrypt", &dir.join("missing.cfg"), &input, &out, &[]);
    assert!(!ok && err.contains("missing.cfg"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
