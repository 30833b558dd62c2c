//! Helpers shared by the integration tests: the vectors under testdata/psp and a minimal pcap reader.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/psp")
}

pub fn read(rel: &str) -> Vec<u8> {
    std::fs::read(testdata().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

pub fn read_text(rel: &str) -> String {
    String::from_utf8(read(rel)).unwrap()
}

/// The frames of a little-endian microsecond pcap file.
pub fn pcap_frames(b: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    let mut out = Vec::new();
    let mut at = 24;
    while at < b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    out
}

/// The bytes of a `tcpdump -xx` dump (one packet).
pub fn dump_bytes(txt: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in txt.lines().filter(|l| l.trim_start().starts_with("0x")) {
        let hex = line.split_once(':').unwrap().1;
        for word in hex.split_whitespace() {
            for i in (0..word.len()).step_by(2) {
                out.push(u8::from_str_radix(&word[i..i + 2], 16).unwrap());
            }
        }
    }
    out
}

/// The encryption configurations (file names) of the vectors.
pub fn encrypt_cfgs() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(testdata().join("cfg"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("encrypt_"))
        .collect();
    v.sort();
    assert_eq!(v.len(), 14);
    v
}

/// The cleartext pcaps a configuration applies to.
pub fn pcaps_for(cfg: &str) -> [&'static str; 2] {
    if cfg.ends_with("_empty.cfg") {
        ["v4_cleartext_empty", "v6_cleartext_empty"]
    } else {
        ["v4_cleartext", "v6_cleartext"]
    }
}
