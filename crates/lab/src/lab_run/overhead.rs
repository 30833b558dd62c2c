//! `overhead`: the bytes each protocol adds per packet, read from captures, beside the PILSC study's Table 8 and each
//! protocol's formula.

use std::path::Path;
use std::time::Duration;

use super::paths::{with_strongswan_on, L2SEC_NULL_PATH};
use crate::lab::{HostPair, Lab, Mode, TwoHosts};
use crate::lab_report::Cell;
use crate::{Error, Result};

const PILSC_TABLE8: &str = "PILSC, Table 8";

/// Bytes ESP adds with AES-128-CBC and HMAC-SHA1-96 to `payload` bytes (RFC 4303: SPI and sequence 8, IV 16,
/// padding to the block with the 2 trailer bytes, ICV 12).
pub fn esp_cbc_sha1_overhead(payload: usize) -> usize {
    let pad = (16 - (payload + 2) % 16) % 16;
    8 + 16 + pad + 2 + 12
}

/// Bytes PSP adds in tunnel mode as netveil runs it (outer IPv4 20, UDP 8, PSP header 16 with its IV, ICV 16; no
/// virtualization cookie).
pub const PSP_TUNNEL_OVERHEAD: usize = 20 + 8 + 16 + 16;

/// Bytes WireGuard adds to an inner packet of `inner` bytes (outer IPv4 20, UDP 8, the transport message's header
/// 16, padding of the plaintext to 16 bytes, Poly1305 tag 16).
pub fn wireguard_overhead(inner: usize) -> usize {
    20 + 8 + 16 + (16 - inner % 16) % 16 + 16
}

/// Bytes ESP-in-UDP adds in tunnel mode with AES-GCM-128 to an inner packet of `inner` bytes (outer IPv4 20, UDP
/// 8, SPI and sequence 8, IV 8, padding to 4 bytes with the 2 trailer bytes, ICV 16; RFC 3948, 4303, 4106).
pub fn esp_gcm_udp_tunnel_overhead(inner: usize) -> usize {
    20 + 8 + 8 + 8 + (4 - (inner + 2) % 4) % 4 + 2 + 16
}

/// Bytes AH adds with HMAC-SHA1-96 (RFC 4302: 12-byte header and a 12-byte ICV, a multiple of 4 for IPv4).
pub const AH_SHA1_OVERHEAD: usize = 24;

/// Bytes ESP adds without encryption to `payload` bytes (RFC 4303: SPI and sequence 8, no IV, padding to 4 bytes
/// with the 2 trailer bytes, then an ICV of `icv` bytes: 12 for HMAC-SHA1-96, 0 for none).
pub fn esp_null_overhead(payload: usize, icv: usize) -> usize {
    let pad = (4 - (payload + 2) % 4) % 4;
    8 + pad + 2 + icv
}

/// Bytes l2sec (version 1, an AEAD suite, unicast, no optional fields) adds to an Ethernet frame: its EtherType 2
/// (the frame's own moves into the encrypted section), the clear header 6 (flags, key id, sequence number), the pad
/// size 1 and a 16-byte ICV.
pub const L2SEC_AEAD_OVERHEAD: usize = 2 + 6 + 1 + 16;

/// Bytes l2sec's null suite (the L2 study's noENC-noHMAC) adds: its EtherType 2, the version-0 clear header 5
/// (flags, sequence number), the pad size 1; no padding, no ICV.
pub const L2SEC_NULL_OVERHEAD: usize = 2 + 5 + 1;

/// What the `overhead` experiment's formula predicts for a path of `bench::pilsc::net::overhead_rows` (`pilsc
/// confidential`, `esp tunnel aes128-sha1`, ...; pings of `data` bytes: ICMP header 8, inner IPv4 header 20).
pub fn expected_overhead(row: &str, data: usize) -> Option<usize> {
    let transport = esp_cbc_sha1_overhead(8 + data);
    let tunnel = 20 + esp_cbc_sha1_overhead(20 + 8 + data);
    Some(match row {
        r if r.starts_with("pilsc confidential") => 12,
        r if r.starts_with("pilsc authenticated") => 28,
        r if r.starts_with("esp tunnel") => tunnel,
        r if r.starts_with("esp+ah tunnel") => tunnel + AH_SHA1_OVERHEAD,
        r if r.starts_with("esp transport null-sha1") => esp_null_overhead(8 + data, 12),
        r if r.starts_with("esp+ah transport null-null + sha1") => {
            esp_null_overhead(8 + data, 0) + AH_SHA1_OVERHEAD
        }
        r if r.starts_with("esp transport") => transport,
        r if r.starts_with("esp+ah transport") => transport + AH_SHA1_OVERHEAD,
        r if r.starts_with("psp tunnel") => PSP_TUNNEL_OVERHEAD,
        r if r.starts_with("wireguard-go") => wireguard_overhead(20 + 8 + data),
        r if r.starts_with("strongswan esp-in-udp tunnel aes128gcm16") => {
            esp_gcm_udp_tunnel_overhead(20 + 8 + data)
        }
        r if r.starts_with("ah transport") => AH_SHA1_OVERHEAD,
        r if r.starts_with("l2sec null-null") => L2SEC_NULL_OVERHEAD,
        r if r.starts_with("l2sec") => L2SEC_AEAD_OVERHEAD,
        _ => return None,
    })
}

/// The strongSwan peer's row of `overhead`.
const STRONGSWAN_OVERHEAD_PATH: &str = "strongswan esp-in-udp tunnel aes128gcm16 (libipsec)";

fn overhead_cell(path: &str, r: Result<f64>, paper: Option<f64>) -> Cell {
    let c = match r {
        Ok(v) => Cell::measured("overhead", path, "overhead", "B/packet", vec![v]),
        Err(e) => Cell::missing(
            "overhead",
            path,
            "overhead",
            "B/packet",
            &format!("did not run: {e}"),
        ),
    };
    let c = match paper {
        Some(p) => c.paper(p, PILSC_TABLE8),
        None => c,
    };
    match expected_overhead(path, crate::bench::pilsc::net::PING_DATA) {
        Some(e) => c.expected(e as f64),
        None => c,
    }
}

pub(super) fn overhead(bin: &Path) -> Vec<Cell> {
    use crate::bench::pilsc::net::ping_overhead;
    crate::say!("overhead: PILSC, ESP and ESP+AH from captures");
    let mut cells = match crate::bench::pilsc::net::overhead_rows(bin) {
        // ("esp tunnel overhead aes128-sha1" is the path "esp tunnel aes128-sha1".)
        Ok(rows) => rows
            .into_iter()
            .map(|r| overhead_cell(&r.row.replacen(" overhead", "", 1), Ok(r.value), r.paper))
            .collect(),
        Err(e) => vec![Cell::missing(
            "overhead",
            "pilsc, esp, esp+ah",
            "overhead",
            "B/packet",
            &format!("did not run: {e}"),
        )],
    };
    crate::say!("overhead: PSP");
    let psp = (|| {
        let mut lab = Lab::new("nvlab")?.with_netveil(bin);
        let h = TwoHosts::up(&mut lab, &HostPair::psp("aes-gcm-128"))?;
        h.wait_psp_associated(Duration::from_secs(15))?;
        let ns = [h.ns[0].clone(), h.ns[1].clone()];
        ping_overhead(
            &lab,
            &ns,
            h.addrs[0].outer,
            &h.addrs[1].inner.to_string(),
            17,
        )
    })();
    cells.push(overhead_cell("psp tunnel aes-gcm-128", psp, None));
    // AH alone; then authentication by ESP and by AH, each with ESP's framing and no encryption (the IPsec web
    // study's ESP-3DES-SHA1 against ESP-3DES + AH-SHA1, null in place of 3DES). Protocol: the outer header's, AH
    // where the pair has it (a bundle's outermost), else ESP.
    let esp = |suite: &str, ah: Option<&str>| HostPair {
        mode: Mode::Transport,
        allow_null_null: suite == "null-null",
        bundle_ah: ah.map(str::to_string),
        ..HostPair::esp(suite)
    };
    let ah_alone = HostPair {
        suite: "sha1".into(),
        protocol: crate::lab::Protocol::Ah,
        mode: Mode::Transport,
        ..HostPair::default()
    };
    for (path, pair, proto) in [
        ("ah transport sha1", ah_alone, 51),
        ("esp transport null-sha1", esp("null-sha1", None), 50),
        (
            "esp+ah transport null-null + sha1",
            esp("null-null", Some("sha1")),
            51,
        ),
    ] {
        crate::say!("overhead: {path}");
        let r = (|| {
            let mut lab = Lab::new("nvlab")?.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, &pair)?;
            let ns = [h.ns[0].clone(), h.ns[1].clone()];
            ping_overhead(
                &lab,
                &ns,
                h.addrs[0].outer,
                &h.addrs[1].outer.to_string(),
                proto,
            )
        })();
        cells.push(overhead_cell(path, r, None));
    }
    for (path, suite) in [
        ("l2sec aes128gcm", "aes128gcm"),
        (L2SEC_NULL_PATH, "null-null"),
    ] {
        crate::say!("overhead: {path}");
        cells.push(overhead_cell(path, l2sec_overhead(bin, suite), None));
    }
    let wg = match crate::bench::find_wireguard_go() {
        Some(wg_go) => {
            crate::say!("overhead: wireguard-go");
            crate::bench::with_wireguard_go(&wg_go, |lab, h| {
                let ns = [h.ns[0].clone(), h.ns[1].clone()];
                ping_overhead(
                    lab,
                    &ns,
                    h.addrs[0].outer,
                    &h.addrs[1].inner.to_string(),
                    17,
                )
            })
        }
        None => Err(super::tools::wireguard_go_missing()),
    };
    cells.push(overhead_cell("wireguard-go", wg, None));
    let swan = match crate::strongswan::missing_tool() {
        None => {
            crate::say!("overhead: {STRONGSWAN_OVERHEAD_PATH}");
            with_strongswan_on(&HostPair::default(), |lab, h, _| {
                ping_overhead(
                    lab,
                    &h.ns,
                    h.addrs[0].outer,
                    &h.addrs[1].inner.to_string(),
                    17,
                )
            })
        }
        Some(e) => Err(e),
    };
    cells.push(overhead_cell(STRONGSWAN_OVERHEAD_PATH, swan, None));
    cells
}

/// Bytes l2sec with `suite` adds per frame: pings of [`crate::bench::pilsc::net::PING_DATA`] bytes from one station
/// to another on the bridge, the second station's link captured; the median length of the first station's frames
/// less the clear frame's (Ethernet 14, IPv4 20, ICMP 8, data).
fn l2sec_overhead(bin: &Path, suite: &str) -> Result<f64> {
    use crate::lan::{L2Opts, Lan};
    let data = crate::bench::pilsc::net::PING_DATA;
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let lan = Lan::build(&mut lab, &["h1", "h2"])?;
    let _d = lan.protect(&lab, &["h1", "h2"], &L2Opts::suite(suite))?;
    let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
    let dst = h2.ip.to_string();
    // The session and the neighbour entry first: only pings are captured then.
    lab.exec_ok(&h1.ns, &["ping", "-n", "-c", "1", "-W", "2", &dst])?;
    let mac = h1.mac.map(|b| format!("{b:02x}")).join(":");
    let mut cap = lab.capture(&h2.ns, "eth0", "l2.pcap", 256, &["ether", "src", &mac])?;
    let size = data.to_string();
    lab.exec_ok(
        &h1.ns,
        &[
            "ping", "-n", "-c", "7", "-i", "0.05", "-s", &size, "-W", "1", &dst,
        ],
    )?;
    std::thread::sleep(Duration::from_millis(100));
    let path = cap.stop()?;
    let p = netveil_pcap::read_file(&path).map_err(Error::file(&path))?;
    let clear = (14 + 20 + 8 + data) as f64;
    let mut v: Vec<f64> = p
        .records
        .iter()
        .map(|r| f64::from(r.orig_len) - clear)
        .collect();
    if v.is_empty() {
        return Err(Error::measurement(
            "l2sec overhead",
            "no l2sec frame captured",
        ));
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}
