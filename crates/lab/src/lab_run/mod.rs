//! `netveil lab`: the studies' experiments in network namespaces, one command, a report with the papers' numbers
//! beside ours ([`crate::lab_report`]). What it runs today (the rest of the studies' matrix joins experiment by
//! experiment):
//!
//! - `ping-rtt`: ICMP round-trip time at payloads of 64 to 1,024 bytes in 64-byte steps (`--quick`: 64, 512 and
//!   1,024), 100 pings per size (`--quick`: 10), as the bare-PC IPsec study's Fig. 8, through the clear veth, netveil
//!   ESP (AES-GCM-128) in tunnel and transport mode (and the tunnel keyed by netveil's IKEv2), PSP (AES-GCM-128),
//!   wireguard-go when it is installed and strongSwan at both ends (charon with kernel-libipsec) when it is
//!   installed; and each path's increase over clear at each size, beside the study's "over 100%". Then,
//!   as the L2 study's Fig. 6.6, a station pinging another on a plain bridge and through l2sec (AES-GCM-128), with
//!   l2sec's increase over the bridge beside the study's +117%, and the same for ARP round trips (arping) beside its
//!   +100.71%.
//! - `overhead`: bytes added per packet, read from a capture of 100-byte pings, for PILSC in both modes, ESP and
//!   ESP+AH (AES-128-CBC, HMAC-SHA1-96) in tunnel and transport mode, AH alone (transport), PSP (tunnel,
//!   AES-GCM-128), l2sec (AES-GCM-128, per Ethernet frame) and wireguard-go, and ESP's authentication against AH's
//!   (both without encryption), beside the PILSC study's Table 8 and each protocol's formula (`expected`).
//! - `loss`: goodput under 0 to 25% packet loss, iperf3 UDP and TCP and TLS downloads, as the PSP study's Figs.
//!   4.4 and 4.5 ([`crate::lab_loss`]).
//! - `delay`: the round-trip time of a 500-byte ping against added link delay (`netveil delay` on the router
//!   between the hosts; this kernel has no netem), as the PSP study's Figs. 4.6 and 4.7 ([`crate::lab_delay`]).
//! - `http`: files of 1 KB to 10 MB, text and random, from nginx with curl through each path: bytes, packets and
//!   time per download, and the bytes over clear ([`crate::lab_http`]).
//! - `smtp`: the same files as e-mail attachments, curl to a Postfix, with the same cells
//!   ([`crate::lab_smtp`]).
//! - `mtu`: HTTP downloads through netveil's ESP tunnel with its interface MTU below, at and above the ideal
//!   one, as the IPsec web/email study's MTU sweep ([`crate::lab_mtu`]).
//! - `pilsc`: the PILSC study's transfers of 1 KB to 10 MB without and through PILSC (both modes) and of 1 MB
//!   against the number of rules ([`crate::lab_pilsc`]).
//! - `iperf`: the L2 study's Iperf-TCP and Iperf-UDP tests over the plain bridge, l2sec's null suite (its
//!   noENC-noHMAC category) and l2sec with full crypto: throughput beside the bridge's, UDP loss and jitter, CPU and
//!   memory of l2sec's daemons, duplicate ACKs ([`crate::lab_iperf`]).
//! - `scp`: the L2 study's SCP copy (OpenSSH) of a file of zeros over the plain bridge and through l2sec: time,
//!   rate, CPU and memory of scp, sshd and l2sec's daemons ([`crate::lab_scp`]).
//! - `voip`: the L2 study's VoIP calls (SIPp, G.711 RTP both ways) over the plain bridge and through l2sec: calls
//!   that succeeded, RTP loss and RFC 3550 jitter, transfer rate, CPU and memory of SIPp and l2sec's daemons
//!   ([`crate::lab_voip`]).
//! - `ops`: netveil's own time per ESP operation (SA lookup, anti-replay, integrity, decryption; SA lookup,
//!   encryption, MAC) against the packet size, as the bare-PC IPsec study's Figs. 6 and 7, and PSP's per stage
//!   beside the PSP study's Fig. 4.8; in process, no namespaces ([`crate::lab_ops`]).
//!
//! Each path gets a fresh lab (its own namespaces, unique names, torn down when the path is done, also when it
//! fails): two hosts on a veth pair, or with a router between them where the experiment sets link conditions
//! (`loss`, `delay`: [`crate::lab::Router`]), or stations on a bridge for l2sec; a path that cannot run gives cells
//! without value that say why.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bench::ping as bench_ping;
use crate::lab::{HostPair, Lab, Mode, TwoHosts};
use crate::lab_report::{self, Cell, Report};
use crate::{Error, Result};

/// The experiments, in the order they run.
pub const EXPERIMENTS: [&str; 12] = [
    "ping-rtt", "overhead", "loss", "delay", "http", "smtp", "mtu", "pilsc", "iperf", "scp",
    "voip", "ops",
];

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    /// A small matrix (for CI: under a few minutes).
    #[arg(long)]
    pub quick: bool,
    /// Experiments to run, comma-separated (default: all): ping-rtt, overhead, loss, delay, http, smtp, mtu, pilsc,
    /// iperf, scp, voip, ops.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Where the report goes (report.json, report.csv, report.md, index.html and one SVG per figure).
    #[arg(long)]
    pub out: PathBuf,
    /// The netveil binary whose daemons run (default: this one).
    #[arg(long)]
    pub netveil_bin: Option<PathBuf>,
    /// An earlier run's report.json: after this run, what changed, cell by cell (printed, and DIR/compare.md).
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Install what the experiments need and is missing first (Debian packages with apt-get; wireguard-go with
    /// `go install` when Go is there). Without it, a missing required tool stops the run, naming its package.
    #[arg(long)]
    pub install: bool,
}

/// The bare-PC IPsec study's statement on ping response time (its Fig. 8 gives no absolute numbers).
const BARE_PC_FIG8: &str = "bare-PC IPsec, Fig. 8: over 100% on every path, both modes (from text)";
const PILSC_TABLE8: &str = "PILSC, Table 8";
/// The L2 study's ICMP figure for its protocol with full crypto (its figure gives no absolute times).
const L2_FIG66: &str =
    "L2 study, Fig. 6.6: ICMP RTT +117% over plain Ethernet, full crypto (from text)";

/// The payload sizes of `ping-rtt`.
pub fn ping_sizes(quick: bool) -> Vec<u32> {
    if quick {
        vec![64, 512, 1024]
    } else {
        (1..=16).map(|i| i * 64).collect()
    }
}

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

/// The L2 study's name of its no-crypto category, for the path names of l2sec's null suite.
pub const L2SEC_NULL_PATH: &str = "l2sec null-null (noENC-noHMAC)";

/// What the `overhead` experiment's formula predicts for a path of `bench_pilsc_net::overhead_rows` (`pilsc
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

/// The paths of `ping-rtt` that netveil's daemons carry: (name, host pair).
fn netveil_paths() -> Vec<(&'static str, HostPair)> {
    let transport = HostPair {
        mode: Mode::Transport,
        ..HostPair::esp("aes128gcm16")
    };
    vec![
        (
            "netveil esp aes128gcm16 tunnel",
            HostPair::esp("aes128gcm16"),
        ),
        ("netveil esp aes128gcm16 transport", transport),
        ("netveil psp aes-gcm-128", HostPair::psp("aes-gcm-128")),
    ]
}

/// The round-trip cells of one path: per size, the median over the pings (each ping a repetition).
fn rtt_cells(path: &str, r: Result<Vec<bench_ping::PingStat>>, sizes: &[u32]) -> Vec<Cell> {
    match r {
        Ok(stats) => stats
            .into_iter()
            .map(|s| {
                Cell::measured(
                    "ping-rtt",
                    path,
                    &format!("rtt {} B", s.bytes),
                    "ms",
                    s.times,
                )
            })
            .collect(),
        Err(e) => sizes
            .iter()
            .map(|b| {
                Cell::missing(
                    "ping-rtt",
                    path,
                    &format!("rtt {b} B"),
                    "ms",
                    &format!("the path did not run: {e}"),
                )
            })
            .collect(),
    }
}

fn pings(
    lab: &Lab,
    ns: &str,
    dst: &str,
    sizes: &[u32],
    count: u32,
) -> Result<Vec<bench_ping::PingStat>> {
    sizes
        .iter()
        .map(|&b| bench_ping::ping(lab, ns, dst, b, count))
        .collect()
}

fn ping_rtt(bin: &Path, quick: bool) -> Vec<Cell> {
    let sizes = ping_sizes(quick);
    let count = if quick { 10 } else { 100 };
    let mut cells = Vec::new();
    crate::say!("ping-rtt: clear veth");
    let clear = (|| {
        let mut lab = Lab::new("nvlab")?;
        let h = TwoHosts::topology(&mut lab, &HostPair::default())?;
        pings(&lab, &h.ns[0], &h.addrs[1].outer.to_string(), &sizes, count)
    })();
    let clear_medians: Vec<Option<f64>> = match &clear {
        Ok(s) => s.iter().map(|s| Some(s.median_ms)).collect(),
        Err(_) => vec![None; sizes.len()],
    };
    cells.extend(rtt_cells("clear", clear, &sizes));
    let mut paths: Vec<(String, Result<Vec<bench_ping::PingStat>>)> = Vec::new();
    for (name, pair) in netveil_paths() {
        crate::say!("ping-rtt: {name}");
        let r = (|| {
            let mut lab = Lab::new("nvlab")?.with_netveil(bin);
            let h = TwoHosts::up(&mut lab, &pair)?;
            if pair.protocol == crate::lab::Protocol::Psp {
                h.wait_psp_associated(Duration::from_secs(15))?;
            }
            pings(&lab, &h.ns[0], &h.addrs[1].inner.to_string(), &sizes, count)
        })();
        paths.push((name.to_string(), r));
    }
    crate::say!("ping-rtt: {IKE_PATH}");
    paths.push((IKE_PATH.to_string(), ike_pings(bin, &sizes, count)));
    let wg = match crate::bench::find_wireguard_go() {
        Some(wg_go) => {
            crate::say!("ping-rtt: wireguard-go");
            crate::bench::with_wireguard_go(&wg_go, |lab, h| {
                pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), &sizes, count)
            })
        }
        None => Err(Error::Other(
            "wireguard-go is not installed (go install golang.zx2c4.com/wireguard@latest)".into(),
        )),
    };
    paths.push(("wireguard-go".into(), wg));
    let swan = match crate::strongswan::missing() {
        None => {
            crate::say!("ping-rtt: {STRONGSWAN_PATH}");
            strongswan_pings(&sizes, count)
        }
        Some(why) => Err(Error::Other(why)),
    };
    paths.push((STRONGSWAN_PATH.into(), swan));
    for (name, r) in paths {
        // Each path's increase over clear at each size: the study's comparison.
        let increase: Vec<Cell> = sizes
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let metric = format!("rtt increase over clear {b} B");
                let cell = match (&r, clear_medians.get(i).copied().flatten()) {
                    (Ok(stats), Some(c)) if c > 0.0 => Cell::measured(
                        "ping-rtt",
                        &name,
                        &metric,
                        "%",
                        vec![(stats[i].median_ms / c - 1.0) * 100.0],
                    ),
                    (Ok(_), _) => Cell::missing("ping-rtt", &name, &metric, "%", "no clear figure"),
                    (Err(e), _) => Cell::missing(
                        "ping-rtt",
                        &name,
                        &metric,
                        "%",
                        &format!("the path did not run: {e}"),
                    ),
                };
                // (The study's Linux-to-Linux path was StrongS/WAN's: its figure stands beside strongSwan too.)
                if name.starts_with("netveil esp") || name == STRONGSWAN_PATH {
                    cell.paper(100.0, BARE_PC_FIG8)
                } else {
                    cell
                }
            })
            .collect();
        cells.extend(rtt_cells(&name, r, &sizes));
        cells.extend(increase);
    }
    cells.extend(l2_rtt(bin, &sizes, count));
    cells
}

/// netveil's ESP tunnel with its SAs negotiated by netveil's IKEv2, beside the manually keyed one.
const IKE_PATH: &str = "netveil esp aes128gcm16 tunnel (ike)";

/// A PSK of this run's own: hex of 32 random bytes.
fn lab_psk() -> zeroize::Zeroizing<String> {
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    netveil_crypto::rand::fill_random(&mut key[..]);
    zeroize::Zeroizing::new(key.iter().map(|b| format!("{b:02x}")).collect())
}

/// Pings through netveil's ESP tunnel keyed by its IKEv2 ([`with_ike_on`]).
fn ike_pings(bin: &Path, sizes: &[u32], count: u32) -> Result<Vec<bench_ping::PingStat>> {
    with_ike_on(bin, &HostPair::default(), |lab, h, _| {
        pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), sizes, count)
    })
}

/// Runs `f` on netveil's ESP tunnel (AES-GCM-128, raw ESP) with its CHILD_SA negotiated by netveil's IKEv2 (PSK of
/// the run's own, x25519), on `pair`'s topology (IPv4; two hosts on a veth pair, or with the router between them):
/// a daemon with an `[ike]` connection on each host (the tunnel between the pair's inner addresses), side a
/// initiating at start; once a ping goes through. `f` gets the hosts and the daemons' process ids.
pub(crate) fn with_ike_on<T>(
    bin: &Path,
    pair: &HostPair,
    f: impl FnOnce(&Lab, &TwoHosts, &[u32]) -> Result<T>,
) -> Result<T> {
    let mut lab = Lab::new("nvlab")?.with_netveil(bin);
    let h = TwoHosts::topology(&mut lab, pair)?;
    for n in &h.ns {
        lab.exec_ok(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
    }
    let psk = lab_psk();
    let config = |side: usize| -> zeroize::Zeroizing<String> {
        let o = 1 - side;
        zeroize::Zeroizing::new(format!(
            "log_level = \"info\"\n[interface]\nname = \"nvike{side}\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
             state_dir = \"{state}\"\naddresses = [\"{me}/32\"]\nroutes = [\"{peer}/32\"]\n\n[ike]\n\n\
             [[ike.connection]]\nname = \"lab\"\nlocal_addrs = [\"{lo}\"]\nremote_addrs = [\"{ro}\"]\n\
             proposals = [\"aes128gcm16-prfsha256-x25519\"]\npsk = \"{psk}\"\nencap = false\n\
             local = {{ id = \"@{side}.lab.test\", auth = \"psk\" }}\nremote = {{ id = \"@{o}.lab.test\", auth = \"psk\" }}\n\n\
             [[ike.connection.children]]\nname = \"net\"\nlocal_ts = [\"{me}/32\"]\nremote_ts = [\"{peer}/32\"]\n\
             esp_proposals = [\"aes128gcm16\"]\n{start}",
            sock = lab.socket_path(&format!("nv{side}")).display(),
            state = lab.dir().join(format!("state-{side}")).display(),
            me = h.addrs[side].inner,
            peer = h.addrs[o].inner,
            lo = h.addrs[side].outer,
            ro = h.addrs[o].outer,
            psk = psk.as_str(),
            start = if side == 0 { "start_action = \"start\"\n" } else { "" },
        ))
    };
    // The responder first; the initiator starts the exchange when it comes up.
    let b = lab.start_daemon_with(&h.ns[1], "nv1", &config(1), &[])?;
    let a = lab.start_daemon_with(&h.ns[0], "nv0", &config(0), &[])?;
    let t0 = Instant::now();
    let peer = h.addrs[1].inner.to_string();
    loop {
        let o = lab.exec(&h.ns[0], &["ping", "-n", "-c", "1", "-W", "1", &peer])?;
        if o.status.success() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            return Err(Error::Other(format!(
                "no CHILD_SA within 15 s:\n{}\n{}",
                a.log(),
                b.log()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pids: Vec<u32> = [&a, &b].iter().filter_map(|d| d.pid()).collect();
    f(&lab, &h, &pids)
}

/// The strongSwan peer's path: two charons (kernel-libipsec: ESP in user space over a TUN device, in UDP),
/// IKEv2 with a PSK, AES-GCM-128 ESP.
const STRONGSWAN_PATH: &str = "strongswan esp aes128gcm16 (libipsec)";

/// The strongSwan peer's row of `overhead`.
const STRONGSWAN_OVERHEAD_PATH: &str = "strongswan esp-in-udp tunnel aes128gcm16 (libipsec)";

/// Pings through a strongSwan pair: both ends strongSwan, from one inner address to the other.
fn strongswan_pings(sizes: &[u32], count: u32) -> Result<Vec<bench_ping::PingStat>> {
    with_strongswan_on(&HostPair::default(), |lab, h, _| {
        pings(lab, &h.ns[0], &h.addrs[1].inner.to_string(), sizes, count)
    })
}

/// Runs `f` on strongSwan at both ends on the topology of `pair` (its addresses, and its router when it is
/// routed): a charon (kernel-libipsec: ESP in user space over a TUN device, in UDP) in each host's namespace, the
/// child between the pair's inner addresses (/32 on `lo`) negotiated by IKEv2 (PSK of the run's own, x25519),
/// AES-GCM-128 ESP, up before `f` runs; `f` gets the charons' process ids too.
pub(crate) fn with_strongswan_on<T>(
    pair: &HostPair,
    f: impl FnOnce(&Lab, &TwoHosts, &[u32]) -> Result<T>,
) -> Result<T> {
    use crate::strongswan::{Charon, CharonOptions, SwanAuth, SwanChild, SwanPair, SwanPsk};
    let mut lab = Lab::new("nvlab")?;
    let h = TwoHosts::topology(&mut lab, pair)?;
    for i in 0..2 {
        // No IPv6 chatter for libipsec to log about on an IPv4 lab.
        if !h.addrs[i].outer.is_ipv6() {
            lab.exec_ok(
                &h.ns[i],
                &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
            )?;
        }
        lab.addr(&h.ns[i], "lo", &format!("{}/32", h.addrs[i].inner))?;
    }
    let opts = CharonOptions::default();
    let charons = [
        Charon::start(&lab, &h.ns[0], "a", &opts)?,
        Charon::start(&lab, &h.ns[1], "b", &opts)?,
    ];
    let psk = SwanPsk::new(&lab_psk())?;
    for (side, charon) in charons.iter().enumerate() {
        let o = 1 - side;
        let mut c = SwanPair::conn(
            side,
            "lab",
            SwanAuth::Psk(psk.clone()),
            "aes128-sha256-x25519",
            "net",
            "aes128gcm16",
        );
        c.local_addrs = vec![h.addrs[side].outer];
        c.remote_addrs = vec![h.addrs[o].outer];
        c.children = vec![SwanChild::host_to_host(
            "net",
            h.addrs[side].inner,
            h.addrs[o].inner,
            "aes128gcm16",
        )];
        charon.load(&[c])?;
    }
    let t = Duration::from_secs(10);
    charons[0].initiate("net", t)?;
    for c in &charons {
        c.wait_child_installed("net", t).map_err(|e| {
            Error::Other(format!(
                "{e}\n{}{}",
                charons[0].log_tail(20),
                charons[1].log_tail(20)
            ))
        })?;
    }
    let pids: Vec<u32> = charons.iter().filter_map(|c| c.pid()).collect();
    f(&lab, &h, &pids)
}

/// The L2 study's comparison: a station pinging another on a plain bridge, and the same through l2sec
/// (AES-GCM-128), with l2sec's increase over the bridge beside the study's (its Fig. 6.6).
/// ARP round trips from `ns` to `dst` over `dev` (iputils' arping: the first request broadcast, then unicast, one a
/// second): each reply's time in ms.
fn arp_rtts(lab: &Lab, ns: &str, dev: &str, dst: &str, count: u32) -> Result<Vec<f64>> {
    let c = count.to_string();
    let w = (count + 2).to_string();
    let o = lab.exec(ns, &["arping", "-c", &c, "-w", &w, "-I", dev, dst])?;
    let text = String::from_utf8_lossy(&o.stdout);
    let v = parse_arping(&text);
    if v.is_empty() {
        return Err(Error::Other(format!(
            "arping got no reply: {}{}",
            text.trim(),
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    Ok(v)
}

/// The reply times of arping's output (`Unicast reply from A [MAC]  0.532ms`).
fn parse_arping(text: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.contains("reply from"))
        .filter_map(|l| {
            l.split_whitespace()
                .last()?
                .strip_suffix("ms")?
                .parse()
                .ok()
        })
        .collect()
}

/// The L2 study's ARP figure for its protocol with full crypto.
const L2_FIG66_ARP: &str =
    "L2 study, Fig. 6.6: ARP RTT +100.71% over plain Ethernet, full crypto (from text)";
/// The same figure's no-crypto category (its program with the encryption, decryption and HMAC modules off).
const L2_FIG66_ARP_NULL: &str =
    "L2 study, Fig. 6.6: ARP RTT +19.23% over plain Ethernet, PSP-noENC-noHMAC (from text)";
const L2_FIG66_NULL: &str =
    "L2 study, Fig. 6.6: ICMP RTT +27.21% over plain Ethernet, PSP-noENC-noHMAC (from text)";
/// What the study puts down to its cryptography: full crypto's increase less the no-crypto one.
const L2_FIG66_CRYPTO_ARP: &str =
    "L2 study, Fig. 6.6: 81.48 points of ARP's increase from encryption and HMAC, FULL less noENC (from text)";
const L2_FIG66_CRYPTO: &str =
    "L2 study, Fig. 6.6: 89.79 points of ICMP's increase from encryption and HMAC, FULL less noENC (from text)";

/// A study's number and its source.
type Paper = (f64, &'static str);

/// The l2sec paths of `ping-rtt`: (path, suite, the study's ARP and ICMP increases with their sources).
const L2_RTT_PATHS: [(&str, &str, Paper, Paper); 2] = [
    (
        "l2sec aes128gcm",
        "aes128gcm",
        (100.71, L2_FIG66_ARP),
        (117.0, L2_FIG66),
    ),
    (
        L2SEC_NULL_PATH,
        "null-null",
        (19.23, L2_FIG66_ARP_NULL),
        (27.21, L2_FIG66_NULL),
    ),
];

fn l2_rtt(bin: &Path, sizes: &[u32], count: u32) -> Vec<Cell> {
    use crate::lan::{L2Opts, Lan};
    let arps = if count >= 100 { 20 } else { 3 };
    type Rtts = (Result<Vec<bench_ping::PingStat>>, Result<Vec<f64>>);
    let run = |suite: Option<&str>| -> Result<Rtts> {
        let mut lab = Lab::new("nvlab")?.with_netveil(bin);
        let lan = Lan::build(&mut lab, &["h1", "h2"])?;
        let _d = match suite {
            Some(s) => Some(lan.protect(&lab, &["h1", "h2"], &L2Opts::suite(s))?),
            None => None,
        };
        let (h1, h2) = (lan.station("h1")?.clone(), lan.station("h2")?.clone());
        let dst = h2.ip.to_string();
        let icmp = pings(&lab, &h1.ns, &dst, sizes, count);
        // (Protected, the station's address is on l2sec's TAP; the port carries the sealed frames.)
        let dev = if suite.is_some() {
            crate::lan::TAP
        } else {
            crate::lan::PORT
        };
        let arp = arp_rtts(&lab, &h1.ns, dev, &dst, arps);
        Ok((icmp, arp))
    };
    let split = |r: Result<Rtts>| match r {
        Ok((i, a)) => (i, a),
        Err(e) => (
            Err(Error::Other(format!("{e}"))),
            Err(Error::Other(format!("{e}"))),
        ),
    };
    crate::say!("ping-rtt: plain bridge");
    let (bridge, bridge_arp) = split(run(None));
    let mut cells = Vec::new();
    let arp_cell = |path: &str, r: &Result<Vec<f64>>| match r {
        Ok(v) => Cell::measured("ping-rtt", path, "arp rtt", "ms", v.clone()),
        Err(e) => Cell::missing("ping-rtt", path, "arp rtt", "ms", &format!("{e}")),
    };
    cells.push(arp_cell("plain bridge", &bridge_arp));
    // Per l2sec path: the increases over the bridge (ARP, and ICMP per size), in %.
    let mut increases: Vec<(Option<f64>, Vec<Option<f64>>)> = Vec::new();
    let mut l2_cells = Vec::new();
    for (path, suite, (arp_paper, arp_src), (icmp_paper, icmp_src)) in L2_RTT_PATHS {
        crate::say!("ping-rtt: {path}");
        let (l2, l2_arp) = split(run(Some(suite)));
        cells.push(arp_cell(path, &l2_arp));
        let metric = "arp rtt increase over the bridge";
        let arp_inc = match (&bridge_arp, &l2_arp) {
            (Ok(b), Ok(l)) if bench_ping::median(b) > 0.0 => {
                Some((bench_ping::median(l) / bench_ping::median(b) - 1.0) * 100.0)
            }
            _ => None,
        };
        let c = match arp_inc {
            Some(v) => Cell::measured("ping-rtt", path, metric, "%", vec![v]),
            None => Cell::missing(
                "ping-rtt",
                path,
                metric,
                "%",
                "the bridge or l2sec gave no ARP figure (see their arp rtt cells)",
            ),
        };
        cells.push(c.paper(arp_paper, arp_src));
        let mut icmp_inc = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let metric = format!("rtt increase over the bridge {size} B");
            let inc = match (&bridge, &l2) {
                (Ok(b), Ok(l)) if b[i].median_ms > 0.0 => {
                    Some((l[i].median_ms / b[i].median_ms - 1.0) * 100.0)
                }
                _ => None,
            };
            icmp_inc.push(inc);
            let cell = match inc {
                Some(v) => Cell::measured("ping-rtt", path, &metric, "%", vec![v]),
                None => Cell::missing(
                    "ping-rtt",
                    path,
                    &metric,
                    "%",
                    "the bridge or l2sec gave no figure (see their rtt cells)",
                ),
            };
            cells.push(cell.paper(icmp_paper, icmp_src));
        }
        increases.push((arp_inc, icmp_inc));
        l2_cells.push((path, l2));
    }
    // What the cryptography adds: full crypto's increase less the framing alone's, in points.
    let (full, null) = (&increases[0], &increases[1]);
    let crypto_cell = |metric: &str, a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => {
            Cell::measured("ping-rtt", L2_RTT_PATHS[0].0, metric, "points", vec![a - b])
        }
        _ => Cell::missing(
            "ping-rtt",
            L2_RTT_PATHS[0].0,
            metric,
            "points",
            "an l2sec path gave no increase (see its cells)",
        ),
    };
    cells.push(
        crypto_cell("arp rtt increase from the crypto", full.0, null.0)
            .paper(81.48, L2_FIG66_CRYPTO_ARP),
    );
    for (i, size) in sizes.iter().enumerate() {
        cells.push(
            crypto_cell(
                &format!("rtt increase from the crypto {size} B"),
                full.1[i],
                null.1[i],
            )
            .paper(89.79, L2_FIG66_CRYPTO),
        );
    }
    cells.extend(rtt_cells("plain bridge", bridge, sizes));
    for (path, l2) in l2_cells {
        cells.extend(rtt_cells(path, l2, sizes));
    }
    cells
}

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

fn overhead(bin: &Path) -> Vec<Cell> {
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
        None => Err(Error::Other(
            "wireguard-go is not installed (go install golang.zx2c4.com/wireguard@latest)".into(),
        )),
    };
    cells.push(overhead_cell("wireguard-go", wg, None));
    let swan = match crate::strongswan::missing() {
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
        Some(why) => Err(Error::Other(why)),
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
    let p = netveil_pcap::read_file(&path)
        .map_err(|e| Error::Other(format!("{}: {e}", path.display())))?;
    let clear = (14 + 20 + 8 + data) as f64;
    let mut v: Vec<f64> = p
        .records
        .iter()
        .map(|r| f64::from(r.orig_len) - clear)
        .collect();
    if v.is_empty() {
        return Err(Error::Other("no l2sec frame captured".into()));
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// `netveil lab`: runs the experiments and writes the report.
pub fn run(a: LabArgs) -> Result<Report> {
    let experiments: Vec<String> = if a.only.is_empty() {
        EXPERIMENTS.iter().map(|s| s.to_string()).collect()
    } else {
        a.only.clone()
    };
    if let Some(bad) = experiments
        .iter()
        .find(|e| !EXPERIMENTS.contains(&e.as_str()))
    {
        return Err(Error::Usage(format!(
            "--only: no experiment {bad:?} (there are: {})",
            EXPERIMENTS.join(", ")
        )));
    }
    // (Read first: a bad file is refused before anything runs.)
    let earlier = a.compare.as_deref().map(lab_report::read).transpose()?;
    if !crate::lab::is_root() {
        return Err(Error::Usage(
            "netveil lab needs root (network namespaces)".into(),
        ));
    }
    crate::lab_tools::preflight(&experiments, a.install)?;
    crate::lab::clean_up_on_signals()?;
    let bin = match &a.netveil_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(Error::io("current exe"))?,
    };
    let started = Instant::now();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut cells = Vec::new();
    crate::lab_progress::start(experiments.len() as u64);
    for e in &experiments {
        let t = Instant::now();
        match e.as_str() {
            "ping-rtt" => cells.extend(ping_rtt(&bin, a.quick)),
            "loss" => cells.extend(crate::lab_loss::run(&bin, a.quick)),
            "ops" => cells.extend(crate::lab_ops::run(a.quick)),
            "delay" => cells.extend(crate::lab_delay::run(&bin, a.quick)),
            "pilsc" => cells.extend(crate::lab_pilsc::run(&bin, a.quick)),
            "iperf" => cells.extend(crate::lab_iperf::run(&bin, a.quick)),
            "scp" => cells.extend(crate::lab_scp::run(&bin, a.quick)),
            "voip" => cells.extend(crate::lab_voip::run(&bin, a.quick)),
            "mtu" => cells.extend(crate::lab_mtu::run(
                &bin,
                a.quick,
                &std::env::temp_dir().join(format!("nv-lab-mtu-{}", std::process::id())),
            )),
            "http" | "smtp" => {
                let w = if e == "http" {
                    crate::lab_http::Workload::Http
                } else {
                    crate::lab_http::Workload::Smtp
                };
                cells.extend(crate::lab_http::run(
                    &bin,
                    a.quick,
                    &std::env::temp_dir().join(format!("nv-lab-{e}-{}", std::process::id())),
                    w,
                ))
            }
            _ => cells.extend(overhead(&bin)),
        }
        crate::say!("{e}: done in {:.1} s", t.elapsed().as_secs_f64());
        crate::lab_progress::advance();
    }
    crate::lab_progress::finish();
    let (kernel, cpu) = lab_report::machine();
    let mut programs = std::collections::BTreeMap::new();
    for (p, args) in [
        ("ping", &["-V"][..]),
        ("arping", &["-V"][..]),
        ("tcpdump", &["--version"][..]),
        ("ip", &["-V"][..]),
        ("iptables", &["--version"][..]),
        ("iperf3", &["--version"][..]),
        ("openssl", &["version"][..]),
        ("curl", &["--version"][..]),
        ("nginx", &["-v"][..]),
        ("postconf", &["-d", "mail_version"][..]),
        ("swaks", &["--version"][..]),
        ("ssh", &["-V"][..]),
        ("sipp", &["-v"][..]),
        ("nft", &["--version"][..]),
    ] {
        programs.insert(p.to_string(), lab_report::version_line(p, args));
    }
    programs.insert(
        "wireguard-go".into(),
        match crate::bench::find_wireguard_go() {
            Some(p) => lab_report::version_line(&p.to_string_lossy(), &["--version"]),
            None => "not installed".into(),
        },
    );
    let report = Report {
        schema: lab_report::SCHEMA,
        command: std::env::args().collect(),
        netveil: env!("CARGO_PKG_VERSION").into(),
        kernel,
        cpu,
        programs,
        quick: a.quick,
        experiments,
        started_unix,
        seconds: started.elapsed().as_secs_f64(),
        cells,
    };
    if let Err(bad) = lab_report::check(&report) {
        return Err(Error::Other(format!(
            "the report breaks its schema:\n  {}",
            bad.join("\n  ")
        )));
    }
    lab_report::write(&report, &a.out)?;
    let figures = crate::lab_report::plot::write(&report, &a.out)?;
    print!("{}", lab_report::markdown(&report));
    println!(
        "\nwrote {}/report.json, report.csv, report.md, index.html{}",
        a.out.display(),
        figures.iter().map(|f| format!(", {f}")).collect::<String>()
    );
    if let (Some(old), Some(path)) = (&earlier, &a.compare) {
        let text = lab_report::compare_markdown(
            &path.display().to_string(),
            &lab_report::compare(old, &report),
        );
        let p = a.out.join("compare.md");
        std::fs::write(&p, &text).map_err(Error::io(format!("cannot write {}", p.display())))?;
        print!("\n{text}");
        println!("\nwrote {}", p.display());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
