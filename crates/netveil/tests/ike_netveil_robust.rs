//! IKEv2 between two `netveil up` daemons in network namespaces, under stress: a sequenced UDP stream of 10,000
//! packets/s across rekeys (none may be lost), rekey collisions forced from both sides, a peer killed with SIGKILL
//! and restarted, a flood of spoofed IKE_SA_INITs.
//!
//! The tunnel: tunnel mode, ESP in UDP (`encap = true`, port 4500) between the veth addresses 192.0.2.1 and
//! 192.0.2.2, the CHILD_SA covering the TUN addresses 198.51.100.1 and 198.51.100.2; PSK with X25519, ESP
//! AES-GCM-128 with X25519 PFS on every child rekey.
//!
//! They need root (CI runs them as root) and the tools installed by .ci/setup.

mod common;

use common::ike_pair::{
    ike_sa_spis, Child, Config, Conn, IkePair, Mode, Net, Retransmit, VETH as OUTER,
};
use netveil_lab::lab::{self, Daemon};
use netveil_lab::seq_udp;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const INNER: [&str; 2] = ["198.51.100.1", "198.51.100.2"];

/// Per-side knobs of the configuration (durations in whole seconds, as the config takes them).
#[derive(Clone, Copy)]
struct Opts {
    start: bool,
    ike_rekey: u32,
    ike_rand: u32,
    ike_over: u32,
    child_rekey: u32,
    child_rand: u32,
    child_life: u32,
    dpd: u32,
    retransmit_tries: u32,
    /// A responder for any address (`remote_addrs = []`).
    any_remote: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            start: false,
            ike_rekey: 0,
            ike_rand: 0,
            ike_over: 0,
            child_rekey: 0,
            child_rand: 0,
            child_life: 0,
            dpd: 0,
            retransmit_tries: 2,
            any_remote: false,
        }
    }
}

fn config(o: &Opts, side: usize) -> Config {
    let mut child = Child::new(
        "net",
        Mode::Tunnel {
            local_ts: format!("{}/32", INNER[side]),
            remote_ts: format!("{}/32", INNER[1 - side]),
        },
    )
    .start(if o.start { "start" } else { "none" });
    child.esp_proposals = vec!["aes128gcm16-x25519"];
    if o.child_rekey > 0 {
        child.rekey_time = Some(o.child_rekey);
        child.rand_time = Some(o.child_rand);
        child.life_time = Some(o.child_life);
    }
    let mut site = Conn::new("site", side).child(child);
    site.encap = Some(true);
    if o.any_remote {
        site.remote_addrs = Vec::new();
    }
    if o.ike_rekey > 0 {
        site.rekey_time = Some(o.ike_rekey);
        site.rand_time = Some(o.ike_rand);
        site.over_time = Some(o.ike_over);
    }
    site.dpd_delay = (o.dpd > 0).then_some(o.dpd);
    Config {
        log_level: "info",
        retransmit: Some(Retransmit {
            timeout_s: 1,
            base: 1.0,
            tries: o.retransmit_tries,
        }),
        connections: vec![site],
    }
}

/// The tests of this file one at a time: the 10,000 packets/s stream must not share the two cores with a flood.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the kernel dropped on the stream's way, outside the daemons: side a's TUN (packets the daemon did not read
/// in time: its queue was full) and side b's UDP sockets (the ESP-in-UDP socket's receive buffer was full).
fn kernel_drops(p: &Pair) -> (u64, u64) {
    let tun: serde_json::Value = p
        .ike
        .lab
        .exec_ok(
            &p.ike.ns[0],
            &["ip", "-s", "-j", "link", "show", "dev", &p.ike.tun(0)],
        )
        .ok()
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    let tun = tun[0]["stats64"]["tx"]["dropped"].as_u64().unwrap_or(0);
    let snmp = p
        .ike
        .lab
        .exec_ok(&p.ike.ns[1], &["cat", "/proc/net/snmp"])
        .unwrap_or_default();
    let udp: Vec<Vec<&str>> = snmp
        .lines()
        .filter(|l| l.starts_with("Udp:"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let rcvbuf = (udp.len() == 2)
        .then(|| udp[0].iter().position(|k| *k == "RcvbufErrors"))
        .flatten()
        .and_then(|i| udp[1].get(i)?.parse().ok())
        .unwrap_or(0);
    (tun, rcvbuf)
}

/// Two namespaces `a` and `b` joined by a veth pair (IPv4 only), and their daemons.
struct Pair {
    ike: IkePair,
    d: [Option<Daemon>; 2],
    /// Each side's log text from daemons that are gone (a restarted daemon's log file starts again).
    old_logs: [String; 2],
}

impl Pair {
    fn new(prefix: &str) -> Pair {
        Pair {
            ike: IkePair::new(prefix, Net::Tunnel { inner: INNER }),
            d: [None, None],
            old_logs: Default::default(),
        }
    }

    fn start(&mut self, side: usize, o: &Opts) {
        let d = self
            .ike
            .try_start(side, &config(o, side))
            .unwrap_or_else(|e| panic!("{e}{}", self.logs()));
        self.d[side] = Some(d);
    }

    /// SIGKILL, no cleanup (a crash).
    fn kill(&mut self, side: usize) {
        let mut d = self.d[side].take().expect("daemon running");
        d.kill();
        self.old_logs[side] += &d.log();
    }

    fn log(&self, side: usize) -> String {
        let cur = self.d[side].as_ref().map(|d| d.log()).unwrap_or_default();
        format!("{}{cur}", self.old_logs[side])
    }

    fn logs(&self) -> String {
        format!("\n--- a ---\n{}\n--- b ---\n{}", self.log(0), self.log(1))
    }

    /// The side's installed SAs named `ike-*`: (name, spi).
    fn sas(&self, side: usize) -> Vec<(String, u32)> {
        let Some(d) = self.d[side].as_ref() else {
            return Vec::new();
        };
        // Replaced inbound SAs that still retire are listed too, under the same name: only the current SPIs
        // count, so the entries are deduplicated by name keeping the first.
        let mut out: Vec<(String, u32)> = Vec::new();
        for (n, spi) in ike_sa_spis(d) {
            if !out.iter().any(|x| x.0 == n) {
                out.push((n, spi as u32));
            }
        }
        out
    }

    /// Waits until both sides have one CHILD_SA whose SPIs match crosswise; returns side a's (in, out) SPIs.
    fn wait_child(&self, within: Duration) -> (u32, u32) {
        let t0 = Instant::now();
        loop {
            let (a, b) = (self.sas(0), self.sas(1));
            let get = |v: &[(String, u32)], dir: &str| -> Vec<u32> {
                v.iter()
                    .filter(|x| x.0.ends_with(dir))
                    .map(|x| x.1)
                    .collect()
            };
            let (ai, ao, bi, bo) = (
                get(&a, "-in"),
                get(&a, "-out"),
                get(&b, "-in"),
                get(&b, "-out"),
            );
            if ai.len() == 1 && ao.len() == 1 && ai == bo && ao == bi {
                return (ai[0], ao[0]);
            }
            assert!(
                t0.elapsed() < within,
                "no single CHILD_SA on both sides within {within:?}: a {a:?}, b {b:?}{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn ping(&self, from: usize, count: u32) -> Result<String, String> {
        let c = count.to_string();
        self.ike
            .lab
            .exec_ok(
                &self.ike.ns[from],
                &[
                    "ping",
                    "-n",
                    "-c",
                    &c,
                    "-i",
                    "0.2",
                    "-W",
                    "1",
                    INNER[1 - from],
                ],
            )
            .map_err(|e| e.to_string())
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The time of a daemon log line (`2026-11-26T03:05:01.123456Z  INFO ...`, UTC) in ns since the epoch.
fn line_ns(line: &str) -> Option<u64> {
    let ts = line.split_whitespace().next()?;
    let (date, time) = ts.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, mi, s) = (
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146097 + doe - 719468).ok()?;
    Some(((days * 86400 + h * 3600 + mi * 60) as f64 * 1e9 + s * 1e9) as u64)
}

/// The log lines containing `needle` with their times.
fn events(log: &str, needle: &str) -> Vec<(u64, String)> {
    log.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| Some((line_ns(l)?, l.to_string())))
        .collect()
}

/// The CREATE_CHILD_SA requests in a capture of IKE on UDP 4500 (the IKE header is in clear): (time in ns since
/// the epoch, source address, message id).
fn create_child_requests(pcap: &Path) -> Vec<(u64, String, u32)> {
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-Y",
            "isakmp.exchangetype == 36 && isakmp.flag_r == 0",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "ip.src",
            "-e",
            "isakmp.messageid",
        ])
        .output()
        .expect("tshark");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let t: f64 = f.next()?.parse().ok()?;
            let src = f.next()?.to_string();
            let id = f.next()?;
            let id = u32::from_str_radix(id.trim_start_matches("0x"), 16)
                .or_else(|_| id.parse())
                .ok()?;
            Some(((t * 1e9) as u64, src, id))
        })
        .collect()
}

/// Runs a sequenced stream of `count` datagrams at `pps` from `from` to `to` (both in their namespaces).
fn stream(
    ns_from: &str,
    ns_to: &str,
    to: SocketAddr,
    pps: u32,
    count: u64,
) -> std::thread::JoinHandle<(seq_udp::Sent, seq_udp::Report)> {
    let (nf, nt) = (ns_from.to_string(), ns_to.to_string());
    std::thread::spawn(move || {
        let rx = lab::spawn_in_ns(&nt, move || {
            seq_udp::Receiver::bind(to, count)
                .and_then(|r| r.run(Duration::from_secs(2), Duration::from_secs(120)))
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let tx = lab::spawn_in_ns(&nf, move || seq_udp::send(to, pps, count)).unwrap();
        let sent = tx.join().unwrap().unwrap().unwrap();
        let report = rx.join().unwrap().unwrap().unwrap();
        (sent, report)
    })
}

/// Item 1 of issue 23's "Done when": 10,000 packets/s across at least 20 child rekeys and 5 IKE rekeys, both
/// sides initiating some, and not one packet lost or duplicated.
///
/// Child rekey_time 2 s with rand_time 1 s (a rekey every 1 to 2 s, whichever side's timer runs out first), IKE
/// rekey_time 5 s with rand_time 2 s, both sides the same. A second stream at the same rate between the outer
/// addresses (no tunnel) runs at the same time: the same-run baseline of what the machine itself drops, named in
/// the failure message with the time of every gap and the rekeys next to it.
#[test]
fn stream_of_10k_pps_loses_nothing_across_rekeys() {
    let _serial = serial();
    let mut p = Pair::new("nvrs");
    let o = Opts {
        ike_rekey: 5,
        ike_rand: 2,
        ike_over: 3,
        child_rekey: 2,
        child_rand: 1,
        child_life: 4,
        ..Default::default()
    };
    p.start(1, &o);
    p.start(0, &Opts { start: true, ..o });
    p.wait_child(Duration::from_secs(10));
    // A TUN queue of 1 s at this rate (the default 500 is 50 ms): a daemon descheduled for a while on a busy
    // machine is not a rekey's loss.
    p.ike
        .lab
        .exec_ok(
            &p.ike.ns[0],
            &["ip", "link", "set", &p.ike.tun(0), "txqueuelen", "10000"],
        )
        .unwrap();
    let mut cap = p
        .ike
        .lab
        .capture(
            &p.ike.ns[1],
            "veth-b",
            "ike.pcap",
            256,
            &["udp port 4500 and udp[8:4] = 0"],
        )
        .unwrap();
    const PPS: u32 = 10_000;
    const SECS: u64 = 32;
    let drops0 = kernel_drops(&p);
    let t0 = unix_ns();
    let tunnel = stream(
        &p.ike.ns[0],
        &p.ike.ns[1],
        format!("{}:5300", INNER[1]).parse().unwrap(),
        PPS,
        PPS as u64 * SECS,
    );
    let clear = stream(
        &p.ike.ns[0],
        &p.ike.ns[1],
        format!("{}:5301", OUTER[1]).parse().unwrap(),
        PPS,
        PPS as u64 * SECS,
    );
    let (sent, r) = tunnel.join().unwrap();
    let (bsent, b) = clear.join().unwrap();
    let t1 = unix_ns();
    let drops1 = kernel_drops(&p);
    let (tun_drops, rcvbuf_drops) = (drops1.0 - drops0.0, drops1.1 - drops0.1);
    let pcap = cap.stop().unwrap();
    let log = [p.log(0), p.log(1)];
    let within = |v: Vec<(u64, String)>| -> Vec<(u64, String)> {
        v.into_iter()
            .filter(|(t, _)| (t0..=t1).contains(t))
            .collect()
    };
    // Each rekey is logged on both sides: side a's lines count them all.
    let child_rekeys = within(events(&log[0], "rekeyed"));
    // A rekeyed IKE SA is a new one: every "established" after the first.
    let ike_rekeys = within(events(&log[0], "established"));
    let reqs: Vec<_> = create_child_requests(&pcap)
        .into_iter()
        .filter(|(t, _, _)| (t0..=t1).contains(t))
        .collect();
    let from = |a: &str| reqs.iter().filter(|r| r.1 == a).count();
    println!(
        "stream over the tunnel: {} sent ({} send errors) in {:.1} s, {} received, {} lost, {} duplicated, {} \
         reordered; {} child rekeys and {} IKE rekeys during it; CREATE_CHILD_SA requests from a {}, from b {}; \
         clear-path baseline: {} sent ({} send errors), {} received, {} lost; kernel drops outside the daemons: \
         {tun_drops} on a's TUN, {rcvbuf_drops} UDP receive-buffer errors on b",
        sent.packets,
        sent.errors,
        sent.elapsed.as_secs_f64(),
        r.received,
        r.lost,
        r.duplicates,
        r.reordered,
        child_rekeys.len(),
        ike_rekeys.len(),
        from(OUTER[0]),
        from(OUTER[1]),
        bsent.packets,
        bsent.errors,
        b.received,
        b.lost,
    );
    // Where each gap fell: the rekey events within 100 ms of it on either side.
    let mut all: Vec<(u64, String)> = events(&log[0], "ike:")
        .into_iter()
        .chain(events(&log[1], "ike:"))
        .collect();
    all.sort();
    let gaps: Vec<String> = r
        .gaps
        .iter()
        .take(20)
        .map(|g| {
            let near: Vec<&String> = all
                .iter()
                .filter(|(t, _)| t.abs_diff(g.after_ns) < 100_000_000)
                .map(|(_, l)| l)
                .collect();
            format!(
                "seq {}..={} (sent after {:.3} s): {near:#?}",
                g.first,
                g.last,
                g.after_ns.saturating_sub(t0) as f64 / 1e9
            )
        })
        .collect();
    if !gaps.is_empty() {
        println!("gaps: {gaps:#?}");
    }
    assert!(
        child_rekeys.len() >= 20 && ike_rekeys.len() >= 5,
        "too few rekeys during the stream: {} child, {} IKE{}",
        child_rekeys.len(),
        ike_rekeys.len(),
        p.logs()
    );
    assert!(
        from(OUTER[0]) >= 1 && from(OUTER[1]) >= 1,
        "both sides must initiate rekeys: {reqs:?}"
    );
    assert_eq!(sent.errors, 0, "the sender's kernel refused datagrams");
    assert_eq!(
        (r.lost, r.duplicates, r.foreign),
        (0, 0, 0),
        "the tunnel lost or duplicated packets across rekeys (clear-path baseline in the same run: {} of {} \
         lost; {tun_drops} dropped on a's TUN and {rcvbuf_drops} in b's UDP receive buffers by the kernel: a \
         busy machine, not a rekey, if they account for the loss); gaps: {gaps:#?}",
        b.lost,
        b.count
    );
    assert_eq!(r.received, PPS as u64 * SECS);
}

/// IKE SAs a side's log says are up: established less deleted.
fn ike_sas_up(log: &str) -> i64 {
    let n = |s: &str| {
        log.lines()
            .filter(|l| l.contains("ike: IKE SA") && l.contains(s))
            .count() as i64
    };
    n("established") - n(" deleted")
}

/// Drops (or lets through again) every IKE datagram arriving in either namespace: UDP 4500 with the non-ESP
/// marker (ESP in UDP still passes, so traffic flows on the SAs there are).
fn block_ike(p: &Pair, on: bool) {
    for ns in &p.ike.ns {
        let cmds: Vec<Vec<&str>> = if on {
            vec![
                vec!["nft", "add", "table", "inet", "nvrblock"],
                vec![
                    "nft",
                    "add",
                    "chain",
                    "inet",
                    "nvrblock",
                    "in",
                    "{ type filter hook input priority -10 ; }",
                ],
                vec![
                    "nft",
                    "add",
                    "rule",
                    "inet",
                    "nvrblock",
                    "in",
                    "udp",
                    "dport",
                    "4500",
                    "@th,64,32",
                    "0",
                    "drop",
                ],
            ]
        } else {
            vec![vec!["nft", "delete", "table", "inet", "nvrblock"]]
        };
        for c in cmds {
            p.ike.lab.exec_ok(ns, &c).unwrap();
        }
    }
}

/// Rekey collisions forced from both sides, for a CHILD_SA (RFC 7296 2.8.1) and for the IKE SA (2.8.2): both
/// daemons with the same rekey time and no rand_time, and every IKE datagram dropped from before their timers run
/// out until after, so that each sends its CREATE_CHILD_SA and retransmits it (1 s apart) unanswered; when IKE
/// passes again the retransmissions cross, each side holding its own request outstanding. (Without the block the
/// timers never collide: the side that answered an exchange starts its timer one one-way delay before the other,
/// and the other's request arrives just as the other's timer runs out.) netveil resolves a collision without a
/// redundant SA: the exchange with the higher initiator nonce goes on, the other is refused with
/// TEMPORARY_FAILURE, and its initiator does not retry the replaced SA. Afterwards each side has one IKE SA and one
/// CHILD_SA whose SPIs match crosswise, and a stream of 2,000 packets/s across it all loses nothing.
#[test]
fn rekey_collisions_from_both_sides_leave_one_sa_and_lose_nothing() {
    let _serial = serial();
    for ike in [false, true] {
        let what = if ike { "IKE SA" } else { "CHILD_SA" };
        let mut p = Pair::new(if ike { "nvrci" } else { "nvrcc" });
        let o = Opts {
            ike_rekey: if ike { 4 } else { 0 },
            ike_over: if ike { 20 } else { 0 },
            child_rekey: if ike { 0 } else { 4 },
            child_life: if ike { 0 } else { 30 },
            retransmit_tries: 6,
            ..Default::default()
        };
        p.start(1, &o);
        p.start(0, &Opts { start: true, ..o });
        let first = p.wait_child(Duration::from_secs(10));
        let up = Instant::now();
        let mut cap = p
            .ike
            .lab
            .capture(
                &p.ike.ns[1],
                "veth-b",
                "ike.pcap",
                256,
                &["udp port 4500 and udp[8:4] = 0"],
            )
            .unwrap();
        const PPS: u32 = 2_000;
        const SECS: u64 = 12;
        let stream = stream(
            &p.ike.ns[0],
            &p.ike.ns[1],
            format!("{}:5300", INNER[1]).parse().unwrap(),
            PPS,
            PPS as u64 * SECS,
        );
        // The timers run out 4 s after the SA came up, on both sides within a few ms.
        block_ike(&p, true);
        let blocked = unix_ns();
        std::thread::sleep(Duration::from_millis(5500).saturating_sub(up.elapsed()));
        block_ike(&p, false);
        let unblocked = unix_ns();
        let (sent, r) = stream.join().unwrap();
        let now = p.wait_child(Duration::from_secs(6));
        let pcap = cap.stop().unwrap();
        let reqs = create_child_requests(&pcap);
        let during = |a: &str| {
            reqs.iter()
                .filter(|(t, src, _)| src == a && (blocked..unblocked).contains(t))
                .count()
        };
        let log = [p.log(0), p.log(1)];
        let child_rekeys = events(&log[0], "rekeyed").len();
        let ike_rekeys = events(&log[0], "established").len() - 1;
        println!(
            "{what} collision: requests while IKE was blocked: a {}, b {}; afterwards {child_rekeys} child and \
             {ike_rekeys} IKE rekeys, IKE SAs up: a {}, b {}; stream {} sent, {} received, {} lost, {} duplicated",
            during(OUTER[0]),
            during(OUTER[1]),
            ike_sas_up(&log[0]),
            ike_sas_up(&log[1]),
            sent.packets,
            r.received,
            r.lost,
            r.duplicates
        );
        assert!(
            during(OUTER[0]) >= 2 && during(OUTER[1]) >= 2,
            "both sides must have sent (and retransmitted) a rekey: {reqs:?}{}",
            p.logs()
        );
        if ike {
            assert!(ike_rekeys >= 1, "no IKE rekey{}", p.logs());
            assert_eq!(first, now, "an IKE rekey keeps the CHILD_SA");
        } else {
            assert!(child_rekeys >= 1, "no child rekey{}", p.logs());
            assert!(first.0 != now.0 && first.1 != now.1, "{first:x?} {now:x?}");
        }
        for (side, l) in log.iter().enumerate() {
            assert_eq!(
                ike_sas_up(l),
                1,
                "side {side}: not one IKE SA after the collision{}",
                p.logs()
            );
        }
        assert_eq!(
            (r.lost, r.duplicates),
            (0, 0),
            "packets lost across the {what} collision: {:?}{}",
            r.gaps,
            p.logs()
        );
        p.ping(0, 2)
            .unwrap_or_else(|e| panic!("no traffic after the collision: {e}{}", p.logs()));
    }
}

/// Dead-peer detection of a killed peer, and recovery after a restart (same configuration and state directory):
///
/// 1. The initiator a is killed with SIGKILL and started again at once: its IKE_AUTH carries INITIAL_CONTACT and
///    b drops the old IKE SA and CHILD_SA for the new ones (long before its dead-peer detection would), with new
///    SPIs; traffic flows again within 5 s of the restart.
/// 2. a is killed again and stays down: b's dead-peer detection (dpd_delay 2 s, then 1 s retransmits, 2 tries)
///    removes b's SAs within dpd_delay + the retransmit budget + 3 s of slack. While a is down, pings both ways
///    between the covered addresses (a's namespace has a route to them over the veth that only the TUN's own
///    routes outrank) leave nothing in clear on the veth: the dead daemon's fail-closed rules and b's SAD without
///    an SA drop them.
/// 3. a comes back: a new CHILD_SA, new SPIs, traffic flows.
#[test]
fn killed_peer_is_detected_and_a_restart_recovers() {
    let _serial = serial();
    let mut p = Pair::new("nvrd");
    let o = Opts {
        dpd: 2,
        retransmit_tries: 2,
        ..Default::default()
    };
    let oa = Opts { start: true, ..o };
    // The covered addresses reachable in clear over the veth: only the fail-closed rules keep them off it.
    p.ike
        .lab
        .exec_ok(
            &p.ike.ns[0],
            &[
                "ip", "route", "add", INNER[1], "via", OUTER[1], "metric", "500",
            ],
        )
        .unwrap();
    p.start(1, &o);
    p.start(0, &oa);
    let first = p.wait_child(Duration::from_secs(10));
    p.ping(0, 2).unwrap_or_else(|e| panic!("{e}{}", p.logs()));

    // 1. Killed and restarted at once: INITIAL_CONTACT.
    p.kill(0);
    let t0 = Instant::now();
    p.start(0, &oa);
    let second = p.wait_child(Duration::from_secs(5));
    while p.ping(0, 1).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no traffic within 5 s of the restart{}",
            p.logs()
        );
    }
    let recovered = t0.elapsed();
    assert!(
        first.0 != second.0 && first.1 != second.1,
        "the restarted daemon's CHILD_SA reuses SPIs: {first:x?} {second:x?}"
    );
    let lb = p.log(1);
    assert!(
        lb.contains("IKE SA 1 of connection site deleted"),
        "b did not drop the old IKE SA on INITIAL_CONTACT{}",
        p.logs()
    );
    assert!(
        !lb.contains("did not answer"),
        "b's DPD, not INITIAL_CONTACT, dropped the old IKE SA{}",
        p.logs()
    );
    assert_eq!(ike_sas_up(&lb), 1, "{}", p.logs());
    println!(
        "restart with INITIAL_CONTACT: traffic again {:.2} s after the restart began",
        recovered.as_secs_f64()
    );

    // 2. Killed and left down: b's DPD.
    let mut cap = p
        .ike
        .lab
        .capture(&p.ike.ns[1], "veth-b", "down.pcap", 256, &[])
        .unwrap();
    p.kill(0);
    let t0 = Instant::now();
    let ping_a = p.ping(0, 5);
    loop {
        if p.sas(1).is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2 + 3 + 3),
            "b kept the SAs of its dead peer{}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let detected = t0.elapsed();
    let ping_b = p.ping(1, 5);
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    // Covered: between the two inner addresses (a's own pings leave from its veth address once its TUN is gone:
    // not covered, counted only).
    let in_clear = |f: &&lab::Frame| f.protocols.contains("icmp") && !f.protocols.contains("esp");
    let clear: Vec<_> = frames
        .iter()
        .filter(in_clear)
        .filter(|f| INNER.iter().all(|a| f.addrs.iter().any(|x| x == a)))
        .collect();
    let uncovered = frames.iter().filter(in_clear).count() - clear.len();
    assert!(
        ping_a.is_err() && ping_b.is_err(),
        "pings got through to a dead peer: {ping_a:?} {ping_b:?}"
    );
    assert!(
        clear.is_empty(),
        "covered traffic in clear while a was down: {clear:#?}"
    );
    assert!(p.log(1).contains("did not answer"), "{}", p.logs());
    println!(
        "dead peer detected by b after {:.2} s (dpd_delay 2 s, 2 retransmits of 1 s); {} frames on the veth while \
         a was down, no covered one in clear ({uncovered} ICMP from a's veth address)",
        detected.as_secs_f64(),
        frames.len()
    );

    // 3. Back.
    let t0 = Instant::now();
    p.start(0, &oa);
    let third = p.wait_child(Duration::from_secs(5));
    p.ping(0, 2).unwrap_or_else(|e| panic!("{e}{}", p.logs()));
    assert!(
        third.0 != second.0 && third.1 != second.1 && third.0 != first.0,
        "{third:x?}"
    );
    println!(
        "recovery after the DPD: traffic again {:.2} s after the restart began",
        t0.elapsed().as_secs_f64()
    );
}

/// Sends IKE_SA_INIT requests from spoofed sources: the first IKE_SA_INIT request to port 500 in a capture,
/// replayed over a raw socket from random addresses in 10.0.0.0/8, each with a random SPIi (a new half-open SA
/// for the responder, not a retransmission), at `pps` for `secs`. Prints how many it sent.
const FLOOD_PY: &str = r#"
import random, socket, struct, sys, time
pcap, dst, secs, pps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
data = open(pcap, 'rb').read()
link = struct.unpack('<I', data[20:24])[0]
l2 = {1: 14, 113: 16}[link]
off, ike = 24, None
while off + 16 <= len(data):
    incl = struct.unpack('<I', data[off + 8:off + 12])[0]
    pkt = data[off + 16:off + 16 + incl]
    off += 16 + incl
    ip = pkt[l2:]
    if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
        continue
    udp = ip[(ip[0] & 15) * 4:]
    body = udp[8:]
    if struct.unpack('!H', udp[2:4])[0] == 500 and len(body) > 28 and body[18] == 34 and not body[19] & 0x20:
        ike = body
        break
assert ike is not None, 'no IKE_SA_INIT request in the capture'
pkt = bytearray(struct.pack('!BBHHHBBH4s4s', 0x45, 0, 0, 0, 0, 64, 17, 0, bytes(4), socket.inet_aton(dst)))
pkt += struct.pack('!HHHH', 500, 500, 8 + len(ike), 0) + ike
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
n, t0 = 0, time.time()
end = t0 + secs
while True:
    now = time.time()
    if now >= end:
        break
    due = int((now - t0) * pps)
    while n < due:
        r = random.getrandbits(64)
        pkt[12:16] = bytes((10, (r >> 8) & 255, (r >> 16) & 255, 1 + (r >> 24) % 254))
        pkt[28:36] = r.to_bytes(8, 'big')
        try:
            s.sendto(pkt, (dst, 0))
        except OSError:
            pass
        n += 1
    time.sleep(0.001)
print(n)
"#;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The responder's answers to the flood in a capture (Ethernet, IPv4, UDP from port 500): (full IKE_SA_INIT
/// responses, whose first payload is SA; COOKIE requests and other notify-only answers, first payload Notify).
fn flood_answers(pcap: &Path) -> (u64, u64) {
    let data = std::fs::read(pcap).unwrap();
    let (mut full, mut notify, mut at) = (0, 0, 24);
    while at + 16 <= data.len() {
        let incl = u32::from_le_bytes(data[at + 8..at + 12].try_into().unwrap()) as usize;
        let pkt = &data[at + 16..(at + 16 + incl).min(data.len())];
        at += 16 + incl;
        // Ethernet 14 + IPv4 20 + UDP 8, then the IKE header: next payload at 16, exchange type at 18.
        if pkt.len() >= 42 + 20 && pkt[42 + 18] == 34 {
            match pkt[42 + 16] {
                33 => full += 1,
                41 => notify += 1,
                _ => {}
            }
        }
    }
    (full, notify)
}

/// The setup time of side 0's first CHILD_SA from its log: from "initiating" to "installed".
fn setup_time(log: &str) -> Option<Duration> {
    let t0 = events(log, "ike: initiating connection").first()?.0;
    let t1 = events(log, "CHILD_SA net of connection site installed")
        .first()?
        .0;
    Some(Duration::from_nanos(t1.checked_sub(t0)?))
}

/// A responder flooded with IKE_SA_INIT from many spoofed sources keeps serving a legitimate peer with bounded
/// memory. b is the responder; a sets up once without the flood (the same-run baseline) and, after a DELETE, again
/// while 10,000 spoofed IKE_SA_INITs per second (each a new SPIi from a new address in 10.0.0.0/8) arrive at b;
/// b's answers to them go back over the veth to nowhere. The half-open cap and cookies bound b's state: its RSS
/// is sampled all through the flood.
#[test]
fn spoofed_ike_sa_init_flood_leaves_setup_working_and_memory_bounded() {
    let _serial = serial();
    let mut p = Pair::new("nvrf");
    p.ike
        .lab
        .exec_ok(
            &p.ike.ns[1],
            &["ip", "route", "add", "10.0.0.0/8", "via", OUTER[0]],
        )
        .unwrap();
    let o = Opts {
        retransmit_tries: 4,
        ..Default::default()
    };
    p.start(
        1,
        &Opts {
            any_remote: true,
            ..o
        },
    );
    let pid = p.d[1].as_ref().unwrap().pid().unwrap();
    let idle = rss_kib(pid);
    // Baseline: a's setup without the flood, its IKE_SA_INIT captured for the flood to replay.
    let mut cap = p
        .ike
        .lab
        .capture(&p.ike.ns[0], "veth-a", "init.pcap", 2048, &["udp port 500"])
        .unwrap();
    p.start(0, &Opts { start: true, ..o });
    p.wait_child(Duration::from_secs(10));
    let pcap = cap.stop().unwrap();
    let quiet = setup_time(&p.log(0)).expect("setup logged");
    let mut a = p.d[0].take().unwrap();
    a.stop();
    p.old_logs[0] += &a.log();
    drop(a);
    let t = Instant::now();
    while !p.sas(1).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "b kept a's SAs after its DELETE{}",
            p.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = p.log(0).len();
    // The flood, from a's namespace, for 12 s.
    const PPS: u32 = 10_000;
    let flood = p
        .ike
        .lab
        .command(
            &p.ike.ns[0],
            &[
                "python3",
                "-c",
                FLOOD_PY,
                pcap.to_str().unwrap(),
                OUTER[1],
                "12",
                &PPS.to_string(),
            ],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut answers = p
        .ike
        .lab
        .capture(
            &p.ike.ns[1],
            "veth-b",
            "answers.pcap",
            96,
            &["src host 192.0.2.2 and udp src port 500 and dst net 10.0.0.0/8"],
        )
        .unwrap();
    let sampler = std::thread::spawn(move || {
        let t = Instant::now();
        let mut max = 0;
        while t.elapsed() < Duration::from_secs(12) {
            max = max.max(rss_kib(pid));
            std::thread::sleep(Duration::from_millis(100));
        }
        max
    });
    std::thread::sleep(Duration::from_secs(3));
    p.start(0, &Opts { start: true, ..o });
    p.wait_child(Duration::from_secs(8));
    let flooded = setup_time(&p.log(0)[before..]).expect("setup under flood logged");
    p.ping(0, 2).unwrap_or_else(|e| panic!("{e}{}", p.logs()));
    let max = sampler.join().unwrap();
    let out = flood.wait_with_output().unwrap();
    let sent: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("flood: {}", String::from_utf8_lossy(&out.stderr)));
    let (full, cookies) = flood_answers(&answers.stop().unwrap());
    println!(
        "spoofed IKE_SA_INIT flood: {sent} requests in 12 s; legitimate setup {:.1} ms without, {:.1} ms during \
         the flood; the responder answered {full} with a full IKE_SA_INIT response and {cookies} with a COOKIE \
         request; responder RSS {idle} KiB idle, at most {max} KiB during the flood",
        quiet.as_secs_f64() * 1e3,
        flooded.as_secs_f64() * 1e3
    );
    assert!(sent >= PPS as u64 * 12 / 2, "the flood fell short: {sent}");
    // The flood reached the IKE machine: it answered (the half-open cap's worth in full, the rest with cookies).
    assert!(
        full + cookies >= sent / 4 && cookies > full,
        "the responder answered {full} + {cookies} of {sent} spoofed requests{}",
        p.logs()
    );
    assert!(
        max < idle + 32 * 1024,
        "the responder's memory grew by {} KiB under the flood",
        max - idle
    );
}
