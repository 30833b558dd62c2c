//! IKEv2 interop with strongSwan: `netveil up` with an `[ike]` section in one network namespace, Debian's charon
//! (5.9.x, kernel-libipsec, driven by `netveil_lab::strongswan`) in the other, joined by a veth pair. PSK ids
//! `a.lab.test` (netveil) and `b.lab.test` (charon); the child covers the inner addresses 198.51.100.1 (netveil's
//! TUN) and 198.51.100.2 (charon's `lo`, routed by libipsec over its TUN once a child is installed), so traffic
//! between them can only pass through the negotiated CHILD_SA. libipsec only does ESP-in-UDP, so charon has
//! `encap = yes` and netveil's CHILD_SAs are UDP-encapsulated on port 4500.
//!
//! They need root and strongSwan (.ci/setup installs it). Without either they print why and pass, except under CI
//! (`CI=true`), where that is a failure (`netveil_testkit::skip`). They run one at a time.

use netveil_lab::lab::{self, Daemon, Lab};
use netveil_lab::strongswan::{
    self, Charon, CharonOptions, ChildSa, ChildState, IkeSa, SwanAuth, SwanChild, SwanConn,
    SwanPair, SwanPsk, Unique,
};
use serde_json::Value;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
static SERIAL: Mutex<()> = Mutex::new(());

const PSK: &str = "netveil-lab-psk-0123456789";
const T: Duration = Duration::from_secs(10);
const NV: usize = 0;
const SW: usize = 1;

/// The serial lock, or None when these tests cannot run here (skipped: `netveil_testkit::skip`, a failure under CI).
fn prerequisites(test: &str) -> Option<MutexGuard<'static, ()>> {
    if !netveil_testkit::require_root(test)
        || !netveil_testkit::require(test, strongswan::missing())
    {
        return None;
    }
    for t in ["ip", "ping", "nft"] {
        assert!(lab::have_tool(t), "'{t}' is missing: run .ci/setup");
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

/// One netveil child as the config writes it.
struct NvChild {
    name: String,
    esp: String,
    start: bool,
    rekey_time: Option<&'static str>,
    /// `start_action = "trap"` (instead of start or none).
    trap: bool,
    /// The peer's side of the child (its remote_ts, routed to the TUN): charon's inner address when `None`.
    remote: Option<std::net::IpAddr>,
}

/// One netveil connection.
struct NvConn {
    name: String,
    proposals: String,
    psk: String,
    /// Initiate (remote_addrs set); otherwise responder only.
    remote_addr: bool,
    rekey_time: Option<&'static str>,
    reauth_time: Option<&'static str>,
    /// The peer's id as configured (`@b.lab.test`, charon's; `%any`).
    remote_id: &'static str,
    children: Vec<NvChild>,
}

impl NvConn {
    fn new(name: &str, proposals: &str, child: &str, esp: &str, start: bool) -> NvConn {
        NvConn {
            name: name.into(),
            proposals: proposals.into(),
            psk: PSK.into(),
            remote_addr: true,
            rekey_time: None,
            reauth_time: None,
            remote_id: "@b.lab.test",
            children: vec![NvChild {
                name: child.into(),
                esp: esp.into(),
                start,
                rekey_time: None,
                trap: false,
                remote: None,
            }],
        }
    }
}

/// The netveil side's configuration: the TUN with the inner address, a route to the peer's, and `[ike]`.
fn nv_config(lab: &Lab, conns: &[NvConn]) -> String {
    let me = SwanPair::inner(NV);
    let mut peers = vec![SwanPair::inner(SW)];
    for ch in conns.iter().flat_map(|c| &c.children) {
        if let Some(r) = ch.remote.filter(|r| !peers.contains(r)) {
            peers.push(r);
        }
    }
    let routes: Vec<String> = peers.iter().map(|p| format!("\"{p}/32\"")).collect();
    let mut t = format!(
        "log_level = \"info\"\n[interface]\nname = \"nvis0\"\nmtu = 1400\ncontrol_socket = \"{}\"\n\
         state_dir = \"{}\"\naddresses = [\"{me}/32\"]\nroutes = [{}]\n\n[ike]\n",
        lab.socket_path("nv").display(),
        lab.dir().join("state-nv").display(),
        routes.join(", "),
    );
    for c in conns {
        t += &format!(
            "\n[[ike.connection]]\nname = \"{}\"\nlocal_addrs = [\"{}\"]\nremote_addrs = [{}]\n\
             proposals = [\"{}\"]\npsk = \"{}\"\nencap = true\n\
             local = {{ id = \"@a.lab.test\", auth = \"psk\" }}\nremote = {{ id = \"{}\", auth = \"psk\" }}\n",
            c.name,
            SwanPair::outer(NV),
            if c.remote_addr {
                format!("\"{}\"", SwanPair::outer(SW))
            } else {
                String::new()
            },
            c.proposals,
            c.psk,
            c.remote_id,
        );
        if let Some(r) = c.rekey_time {
            t += &format!("rekey_time = \"{r}\"\n");
        }
        if let Some(r) = c.reauth_time {
            t += &format!("reauth_time = \"{r}\"\n");
        }
        for ch in &c.children {
            t += &format!(
                "\n[[ike.connection.children]]\nname = \"{}\"\nlocal_ts = [\"{me}/32\"]\nremote_ts = [\"{}/32\"]\n\
                 esp_proposals = [\"{}\"]\nstart_action = \"{}\"\n",
                ch.name,
                ch.remote.unwrap_or(SwanPair::inner(SW)),
                ch.esp,
                match (ch.start, ch.trap) {
                    (true, _) => "start",
                    (false, true) => "trap",
                    _ => "none",
                }
            );
            if let Some(r) = ch.rekey_time {
                t += &format!("rekey_time = \"{r}\"\n");
            }
        }
    }
    t
}

/// Namespaces `nv` (netveil) and `sw` (charon) joined by a veth pair, charon started (nothing loaded).
struct Site {
    lab: Lab,
    ns: [String; 2],
    charon: Charon,
    daemon: Option<Daemon>,
}

impl Site {
    fn new(opts: &CharonOptions) -> Site {
        let mut lab = Lab::new("nvis").unwrap().with_netveil(NETVEIL);
        let a = lab.add_ns("nv").unwrap();
        let b = lab.add_ns("sw").unwrap();
        for ns in [&a, &b] {
            lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
                .unwrap();
            lab.exec_ok(
                ns,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )
            .unwrap();
        }
        lab.veth(&a, "veth-nv", &b, "veth-sw").unwrap();
        lab.addr(&a, "veth-nv", &format!("{}/24", SwanPair::outer(NV)))
            .unwrap();
        lab.addr(&b, "veth-sw", &format!("{}/24", SwanPair::outer(SW)))
            .unwrap();
        lab.addr(&b, "lo", &format!("{}/32", SwanPair::inner(SW)))
            .unwrap();
        let charon = Charon::start(&lab, &b, "sw", opts).unwrap_or_else(|e| panic!("charon: {e}"));
        Site {
            lab,
            ns: [a, b],
            charon,
            daemon: None,
        }
    }

    /// charon's connection `name` with child `child` (proposals as given), responder unless `start`.
    fn swan_conn(name: &str, ike: &str, child: &str, esp: &str, psk: &str) -> SwanConn {
        SwanPair::conn(
            SW,
            name,
            SwanAuth::Psk(SwanPsk::new(psk).unwrap()),
            ike,
            child,
            esp,
        )
    }

    fn load(&self, conns: &[SwanConn]) {
        self.charon
            .load(conns)
            .unwrap_or_else(|e| panic!("charon load: {e}"));
    }

    /// Starts `netveil up` (with `args`) with the given connections.
    fn up(&mut self, conns: &[NvConn], args: &[&str]) {
        let cfg = nv_config(&self.lab, conns);
        let d = self
            .lab
            .start_daemon_with(&self.ns[NV], "nv", &cfg, args)
            .unwrap_or_else(|e| panic!("netveil up: {e}\n{cfg}"));
        self.daemon = Some(d);
    }

    fn daemon(&self) -> &Daemon {
        self.daemon.as_ref().expect("netveil is up")
    }

    fn nv_log(&self) -> String {
        self.daemon.as_ref().map(|d| d.log()).unwrap_or_default()
    }

    /// Both logs' tails, for failure messages.
    fn logs(&self) -> String {
        let l = self.nv_log();
        let lines: Vec<&str> = l.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "\n--- netveil log (last lines) ---\n{}{}",
            lines[from..].join("\n"),
            self.charon.log_tail(40)
        )
    }

    fn ping(&self, from: usize, count: u32) -> Result<String, String> {
        let c = count.to_string();
        let dst = SwanPair::inner(1 - from).to_string();
        let src = SwanPair::inner(from).to_string();
        self.lab
            .exec_ok(
                &self.ns[from],
                &[
                    "ping", "-n", "-c", &c, "-i", "0.2", "-W", "1", "-I", &src, &dst,
                ],
            )
            .map_err(|e| e.to_string())
    }

    /// The netveil daemon's SAs named `ike-*` from `status --json`: (name, direction, spi).
    fn nv_sas(&self) -> Vec<(String, String, u32)> {
        let st = self
            .daemon()
            .status_json()
            .unwrap_or_else(|e| panic!("status: {e}"));
        collect_sas(&st)
    }

    /// Waits until charon lists `child` installed and netveil holds an inbound and an outbound IKE SA.
    fn wait_up(&self, child: &str) -> (IkeSa, Vec<(String, String, u32)>) {
        let (ike, _) = self
            .charon
            .wait_child_installed(child, T)
            .unwrap_or_else(|e| panic!("{e}{}", self.logs()));
        let t0 = Instant::now();
        loop {
            let sas = self.nv_sas();
            if sas.iter().any(|s| s.1 == "in") && sas.iter().any(|s| s.1 == "out") {
                return (ike, sas);
            }
            assert!(
                t0.elapsed() < T,
                "netveil has no IKE SAs installed: {sas:?}{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Every SA object under the status JSON whose name starts with `ike-`: (name, direction, spi).
fn collect_sas(v: &Value) -> Vec<(String, String, u32)> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<(String, String, u32)>) {
        match v {
            Value::Object(m) => {
                let name = m.get("name").and_then(|n| n.as_str());
                let spi = m.get("spi").and_then(|s| {
                    s.as_u64().map(|x| x as u32).or_else(|| {
                        s.as_str()
                            .and_then(|h| u32::from_str_radix(h.trim_start_matches("0x"), 16).ok())
                    })
                });
                let dir = m.get("direction").and_then(|d| d.as_str());
                if let (Some(n), Some(spi), Some(d)) = (name, spi, dir) {
                    if n.starts_with("ike-") {
                        out.push((n.to_string(), d.to_string(), spi));
                    }
                }
                for x in m.values() {
                    walk(x, out);
                }
            }
            Value::Array(a) => {
                for x in a {
                    walk(x, out);
                }
            }
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

/// charon's only IKE SA and its child `child`, and netveil's SAs: the same SPIs crosswise (charon's inbound SPI is
/// netveil's outbound one and the other way round), the child installed and UDP-encapsulated.
fn assert_same_spis(s: &Site, child: &str) -> ChildSa {
    let sas = s.charon.list_sas().unwrap();
    assert_eq!(sas.len(), 1, "{sas:?}");
    let c = sas[0]
        .child(child)
        .unwrap_or_else(|| panic!("no child {child}: {sas:?}"))
        .clone();
    assert_eq!(c.state, ChildState::Installed);
    assert!(c.encap, "{c:?}");
    let nv = s.nv_sas();
    let nv_in: Vec<u32> = nv.iter().filter(|x| x.1 == "in").map(|x| x.2).collect();
    let nv_out: Vec<u32> = nv.iter().filter(|x| x.1 == "out").map(|x| x.2).collect();
    assert_eq!(nv_in, vec![c.spi_out], "netveil {nv:?}, charon {c:?}");
    assert_eq!(nv_out, vec![c.spi_in], "netveil {nv:?}, charon {c:?}");
    c
}

/// Pings both ways and a byte-checked TCP transfer of `bytes` each way.
fn traffic(s: &Site, bytes: u64) {
    for from in [NV, SW] {
        let out = s
            .ping(from, 3)
            .unwrap_or_else(|e| panic!("ping from side {from}: {e}{}", s.logs()));
        assert!(out.contains("3 received"), "{out}");
    }
    for from in [NV, SW] {
        let t = lab::tcp_transfer(
            &s.ns[from],
            &s.ns[1 - from],
            SwanPair::inner(1 - from),
            5201,
            bytes,
        )
        .unwrap_or_else(|e| panic!("TCP from side {from}: {e}{}", s.logs()));
        assert_eq!(t.bytes, bytes);
        println!(
            "TCP {} -> {}: {bytes} bytes checked, {:.0} Mbit/s",
            ["netveil", "charon"][from],
            ["netveil", "charon"][1 - from],
            t.mbit_per_s()
        );
    }
}

/// The usual start of a test: the prerequisites (and this file's lock, held until the test ends: declared first,
/// dropped last), and a site whose charon has connection "site" (aes128-sha256-x25519, PSK) with child "net" of
/// `esp`. `None`: the test is skipped (see [`prerequisites`]).
fn site(test: &str, esp: &str) -> Option<(MutexGuard<'static, ()>, Site)> {
    let g = prerequisites(test)?;
    let s = Site::new(&CharonOptions::default());
    s.load(&[Site::swan_conn(
        "site",
        "aes128-sha256-x25519",
        "net",
        esp,
        PSK,
    )]);
    Some((g, s))
}

/// Waits until `f` holds, or panics with `what` and the logs.
fn wait_for(s: &Site, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < T, "{what}{}", s.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn netveil_initiates_to_charon_pings_transfers_and_deletes() {
    let Some((_g, mut s)) = site("netveil_initiates", "aes128gcm16") else {
        return;
    };
    // No SA yet: the ping cannot pass (netveil discards what no policy covers).
    let t0 = Instant::now();
    s.up(
        &[NvConn::new(
            "site",
            "aes128-sha256-x25519",
            "net",
            "aes128gcm16",
            true,
        )],
        &["--fresh-keys"],
    );
    let (ike, _) = s.wait_up("net");
    println!(
        "observation: `netveil up` (start_action = start) to the child installed on both sides: {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    assert!(!ike.initiator, "charon is the responder: {ike:?}");
    assert_eq!(ike.remote_id, "a.lab.test");
    assert_eq!(ike.algorithms.dh_group.as_deref(), Some("CURVE_25519"));
    assert_eq!(ike.remote_port, Some(4500), "{ike:?}");
    let c = assert_same_spis(&s, "net");
    assert_eq!(c.algorithms.encr.as_deref(), Some("AES_GCM_16"));
    assert_eq!(c.algorithms.encr_keysize, Some(128));
    traffic(&s, 2 << 20);
    // charon counted the traffic on the child (it did pass through this SA).
    let c = s.charon.list_sas().unwrap()[0]
        .child("net")
        .unwrap()
        .clone();
    assert!(c.bytes_in >= 2 << 20 && c.bytes_out >= 2 << 20, "{c:?}");

    // netveil stops: its DELETE removes the IKE SA and the child on charon's side.
    s.daemon.as_mut().unwrap().stop();
    wait_for(&s, "charon kept its SAs after netveil stopped", || {
        s.charon.list_sas().unwrap().is_empty()
    });
    assert!(
        s.charon.log().contains("received DELETE for IKE_SA site"),
        "{}",
        s.logs()
    );
}

#[test]
fn charon_initiates_to_netveil_and_its_delete_tears_down_netveil() {
    let Some((_g, mut s)) = site("charon_initiates", "aes128gcm16") else {
        return;
    };
    let mut c = NvConn::new("site", "aes128-sha256-x25519", "net", "aes128gcm16", false);
    c.remote_addr = false;
    s.up(&[c], &["--fresh-keys"]);
    s.charon
        .initiate("net", T)
        .unwrap_or_else(|e| panic!("initiate: {e}{}", s.logs()));
    // Right after charon has its child: a ping every 5 ms from charon's side. netveil installs its SAs and
    // policies (tens of ms with the nftables rules) before it answers IKE_AUTH, so the first one is answered.
    let out = s
        .lab
        .exec(
            &s.ns[SW],
            &[
                "ping",
                "-n",
                "-c",
                "20",
                "-i",
                "0.005",
                "-W",
                "1",
                "-I",
                "198.51.100.2",
                "198.51.100.1",
            ],
        )
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let first = out
        .lines()
        .find_map(|l| l.split("icmp_seq=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok());
    assert_eq!(
        first,
        Some(1),
        "the first packets after the CHILD_SA came up were lost: {out}{}",
        s.logs()
    );
    let (ike, _) = s.wait_up("net");
    assert!(ike.initiator, "{ike:?}");
    assert_same_spis(&s, "net");
    traffic(&s, 2 << 20);

    // charon terminates: netveil removes its SAs, and traffic no longer passes, nor leaves in clear.
    s.charon
        .terminate("site", T)
        .unwrap_or_else(|e| panic!("terminate: {e}{}", s.logs()));
    wait_for(&s, "netveil kept its SAs after charon's DELETE", || {
        s.nv_sas().is_empty()
    });
    let mut cap = s
        .lab
        .capture(&s.ns[SW], "veth-sw", "after-delete.pcap", 256, &[])
        .unwrap();
    assert!(s.ping(NV, 2).is_err(), "ping passed after the DELETE");
    let pcap = cap.stop().unwrap();
    let frames = lab::tshark_frames(&pcap, None, None).unwrap();
    assert!(
        frames
            .iter()
            .all(|f| !f.protocols.contains("icmp") && !f.protocols.contains("esp")),
        "sent after the DELETE: {frames:?}"
    );
}

/// The first line of netveil's log that contains `needle`, or a panic with the logs.
fn nv_line(s: &Site, needle: &str) -> String {
    let mut line = String::new();
    wait_for(s, &format!("no {needle:?} in netveil's log"), || {
        match s.nv_log().lines().find(|l| l.contains(needle)) {
            Some(l) => {
                line = l.to_string();
                true
            }
            None => false,
        }
    });
    line
}

#[test]
fn proposal_mismatch_and_wrong_psk_are_named_in_netveils_log() {
    let Some((_g, mut s)) = site("failures", "aes128gcm16") else {
        return;
    };

    // Proposals: netveil offers only ECP-384 with AES-256/SHA-384, charon only X25519 with AES-128/SHA-256.
    s.up(
        &[NvConn::new(
            "site",
            "aes256-sha384-ecp384",
            "net",
            "aes128gcm16",
            true,
        )],
        &["--fresh-keys"],
    );
    // As initiator: charon refuses, and netveil says with what.
    let l = nv_line(&s, "NO_PROPOSAL_CHOSEN");
    assert!(l.contains("connection site"), "{l}");
    // As responder: netveil chooses nothing and lists both sides' proposals.
    let err = s
        .charon
        .initiate("net", T)
        .expect_err("charon's initiate succeeded without a common proposal")
        .to_string();
    assert!(err.contains("NO_PROPOSAL_CHOSEN"), "{err}");
    let l = nv_line(&s, "no proposal in common");
    println!("{l}");
    let (ours, theirs) = l.split_once("the peer's").unwrap();
    let ours = ours.to_ascii_uppercase();
    let theirs = theirs.to_ascii_uppercase();
    for (side, want) in [(&ours, ["384", "AES"]), (&theirs, ["25519", "AES"])] {
        for w in want {
            assert!(side.contains(w), "{w} missing in {side}: {l}");
        }
    }
    assert!(!ours.contains("25519") && !theirs.contains("384"), "{l}");
    assert!(s.nv_sas().is_empty());
    s.daemon.as_mut().unwrap().stop();

    // A different PSK on netveil's side.
    let mut c = NvConn::new("site", "aes128-sha256-x25519", "net", "aes128gcm16", true);
    c.psk = "a-different-psk-9876543210".into();
    s.up(&[c], &["--fresh-keys"]);
    // As initiator: charon cannot verify netveil's AUTH and answers AUTHENTICATION_FAILED.
    let l = nv_line(&s, "refused our authentication");
    assert!(
        l.contains("a.lab.test") && l.contains("pre-shared key"),
        "{l}"
    );
    assert!(s.charon.log().contains("MAC mismatched"), "{}", s.logs());
    // As responder: netveil cannot verify charon's AUTH and names charon's id.
    let err = s
        .charon
        .initiate("net", T)
        .expect_err("charon's initiate succeeded with a wrong PSK")
        .to_string();
    assert!(err.contains("AUTHENTICATION_FAILED"), "{err}");
    let l = nv_line(&s, "failed to authenticate");
    assert!(
        l.contains("b.lab.test") && l.contains("pre-shared key"),
        "{l}"
    );
    assert!(s.nv_sas().is_empty());
    // Neither key is in netveil's log.
    let log = s.nv_log();
    assert!(
        !log.contains(PSK) && !log.contains("a-different-psk"),
        "{log}"
    );
}

/// The matrix, one IKE SA per case in one namespace pair: every DH group of the issue that strongSwan 5.9.8 has,
/// with netveil initiating (a `netveil up` per group, its stop's DELETE ending the case), and the four ESP suites,
/// with charon initiating to one netveil responder that accepts them all; each case pings through its child and
/// checks what charon says was negotiated.
#[test]
fn matrix_dh_groups_and_esp_suites() {
    let Some(_g) = prerequisites("matrix") else {
        return;
    };
    let t0 = Instant::now();
    let mut s = Site::new(&CharonOptions::default());
    let groups = [
        ("x25519", "CURVE_25519"),
        ("modp2048", "MODP_2048"),
        ("modp3072", "MODP_3072"),
        ("ecp256", "ECP_256"),
        ("ecp384", "ECP_384"),
    ];
    let all_ike: Vec<String> = groups
        .iter()
        .map(|(g, _)| format!("aes128-sha256-{g}"))
        .collect();
    s.load(&[Site::swan_conn(
        "all",
        &all_ike.join(", "),
        "net",
        "aes128gcm16",
        PSK,
    )]);
    for (g, want) in groups {
        let t = Instant::now();
        let prop = format!("aes128-sha256-{g}");
        s.up(
            &[NvConn::new("site", &prop, "net", "aes128gcm16", true)],
            &["--fresh-keys"],
        );
        let (ike, _) = s.wait_up("net");
        assert_eq!(ike.algorithms.dh_group.as_deref(), Some(want), "{ike:?}");
        assert_same_spis(&s, "net");
        let out = s
            .ping(NV, 1)
            .unwrap_or_else(|e| panic!("{g}: ping: {e}{}", s.logs()));
        assert!(out.contains("1 received"), "{g}: {out}");
        s.daemon.as_mut().unwrap().stop();
        wait_for(&s, "charon kept its SAs after netveil stopped", || {
            s.charon.list_sas().unwrap().is_empty()
        });
        println!("{g}: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    }

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
    let conns: Vec<SwanConn> = esp
        .iter()
        .map(|(n, p, ..)| Site::swan_conn(&format!("esp-{n}"), "aes128-sha256-x25519", n, p, PSK))
        .collect();
    s.load(&conns);
    let mut c = NvConn::new("site", "aes128-sha256-x25519", "net", "aes128gcm16", false);
    c.remote_addr = false;
    c.children[0].esp = esp.iter().map(|e| e.1).collect::<Vec<_>>().join("\", \"");
    s.up(&[c], &["--fresh-keys"]);
    for (name, _, encr, keysize, integ) in esp {
        let t = Instant::now();
        s.charon
            .initiate(name, T)
            .unwrap_or_else(|e| panic!("{name}: {e}{}", s.logs()));
        s.wait_up(name);
        let c = assert_same_spis(&s, name);
        assert_eq!(c.algorithms.encr.as_deref(), Some(encr), "{c:?}");
        if keysize > 0 {
            assert_eq!(c.algorithms.encr_keysize, Some(keysize), "{c:?}");
        }
        assert_eq!(c.algorithms.integ.as_deref(), integ, "{c:?}");
        let out = s
            .ping(SW, 1)
            .unwrap_or_else(|e| panic!("{name}: ping: {e}{}", s.logs()));
        assert!(out.contains("1 received"), "{name}: {out}");
        s.charon
            .terminate(&format!("esp-{name}"), T)
            .unwrap_or_else(|e| panic!("{e}"));
        wait_for(&s, "netveil kept its SAs after charon's DELETE", || {
            s.nv_sas().is_empty()
        });
        println!("{name}: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    }
    println!("matrix: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Negotiated keys are always new, so IKE needs no receive floor: a state directory that was never initialised
/// (no `--fresh-keys`) still takes IKE's inbound SAs, and traffic passes both ways.
#[test]
fn ike_works_on_a_new_state_dir_without_fresh_keys() {
    let Some((_g, mut s)) = site("new_state_dir", "aes128gcm16") else {
        return;
    };
    s.up(
        &[NvConn::new(
            "site",
            "aes128-sha256-x25519",
            "net",
            "aes128gcm16",
            true,
        )],
        &[],
    );
    s.wait_up("net");
    assert_same_spis(&s, "net");
    for from in [NV, SW] {
        let out = s
            .ping(from, 2)
            .unwrap_or_else(|e| panic!("ping from side {from}: {e}{}", s.logs()));
        assert!(out.contains("2 received"), "{out}");
    }
}

/// A child rekey and an IKE rekey initiated by each side while a TCP transfer runs through the tunnel: charon's
/// through swanctl (`--rekey --child`, `--rekey --ike`) early in the transfer, netveil's from short rekey times
/// in its configuration (child 2 s, IKE SA 4 s, each with jitter), all with PFS (X25519). The transfer (600 MB,
/// several seconds here) is byte-checked and must not fail; both logs show each kind of rekey from each side,
/// and afterwards the tunnel still carries a ping with one IKE SA and one CHILD_SA, the same SPIs on both sides.
#[test]
fn rekeys_from_both_sides_during_a_transfer() {
    let Some((_g, mut s)) = site("rekeys", "aes128gcm16-x25519") else {
        return;
    };
    let mut c = NvConn::new(
        "site",
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16-x25519",
        true,
    );
    c.rekey_time = Some("4s");
    c.children[0].rekey_time = Some("2s");
    s.up(&[c], &[]);
    s.wait_up("net");
    let (src, dst) = (s.ns[NV].clone(), s.ns[SW].clone());
    let bytes: u64 = 600 << 20;
    let t0 = Instant::now();
    let transfer =
        std::thread::spawn(move || lab::tcp_transfer(&src, &dst, SwanPair::inner(SW), 5202, bytes));
    std::thread::sleep(Duration::from_millis(1000));
    s.charon
        .swanctl(&["--rekey", "--child", "net"])
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1000));
    s.charon
        .swanctl(&["--rekey", "--ike", "site"])
        .unwrap_or_else(|e| panic!("{e}"));
    let r = transfer.join().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let t = r.unwrap_or_else(|e| panic!("transfer across rekeys: {e}{}", s.logs()));
    assert_eq!(t.bytes, bytes);
    println!("transfer across rekeys: {bytes} bytes checked in {secs:.1} s");
    // charon's CREATE_CHILD_SA lines: a child rekey carries N(REKEY_SA) and traffic selectors, an IKE rekey only
    // SA, Ni/Nr and KE. On this 2-core machine all four kinds fall inside the transfer; a faster one may finish
    // it before netveil's IKE rekey, which then still has to come.
    let counts = || {
        let sw = s.charon.log();
        let n = |dir: &str, tail: &str| {
            sw.lines()
                .filter(|l| {
                    l.contains(&format!("{dir} CREATE_CHILD_SA request")) && l.contains(tail)
                })
                .count()
        };
        [
            n("generating", "N(REKEY_SA)"),
            n("generating", "[ SA No KE ]"),
            n("parsed", "N(REKEY_SA)"),
            n("parsed", "[ SA No KE ]"),
        ]
    };
    let [sw_child, sw_ike, nv_child, nv_ike] = counts();
    println!(
        "rekeys initiated during the transfer: charon {sw_child} child, {sw_ike} IKE; netveil {nv_child} child, \
         {nv_ike} IKE"
    );
    wait_for(&s, "a rekey of each kind from each side", || {
        counts().iter().all(|&c| c >= 1)
    });
    let [sw_child, _, nv_child, _] = counts();
    let nv = s.nv_log();
    assert!(
        nv.lines().filter(|l| l.contains("rekeyed")).count() >= sw_child + nv_child,
        "{}",
        s.logs()
    );
    // Between rekeys (they go on every 2 s): charon holds one IKE SA with one installed child, whose SPIs are the
    // ones netveil's current SAs have crosswise (netveil still lists replaced inbound SAs while they retire).
    let t1 = Instant::now();
    loop {
        let sas = s.charon.list_sas().unwrap();
        let nv = s.nv_sas();
        // (charon lists rekeyed children as DELETED for a while: only the installed one counts.)
        let installed: Vec<&ChildSa> = sas
            .iter()
            .flat_map(|i| &i.children)
            .filter(|c| c.state == ChildState::Installed)
            .collect();
        let ok = sas.len() == 1
            && installed.len() == 1
            && nv.contains(&("ike-1-in".into(), "in".into(), installed[0].spi_out))
            && nv.contains(&("ike-1-out".into(), "out".into(), installed[0].spi_in));
        if ok {
            break;
        }
        assert!(
            t1.elapsed() < T,
            "no state with the same SPIs on both sides after the rekeys: charon {sas:?}, netveil {nv:?}{}",
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = s
        .ping(NV, 2)
        .unwrap_or_else(|e| panic!("ping after the rekeys: {e}{}", s.logs()));
    assert!(out.contains("2 received"), "{out}");
}

/// Reauthentication (`reauth_time`, make-before-break) with charon 5.9.8 as the responder: a second IKE SA from
/// the same peer without INITIAL_CONTACT, its child, then netveil's DELETE of the old IKE SA; pings pass all along.
#[test]
fn charon_accepts_netveils_reauthentication() {
    let Some((_g, mut s)) = site("reauth", "aes128gcm16") else {
        return;
    };
    let mut c = NvConn::new("site", "aes128-sha256-x25519", "net", "aes128gcm16", true);
    c.reauth_time = Some("6s");
    s.up(&[c], &[]);
    let (old, _) = s.wait_up("net");
    let old_spis = (old.initiator_spi, old.responder_spi);
    // Pings every 0.2 s across the reauthentication (at 5.4 to 6 s).
    let (src, dst) = (
        SwanPair::inner(NV).to_string(),
        SwanPair::inner(SW).to_string(),
    );
    let mut cmd = s.lab.command(
        &s.ns[NV],
        &[
            "ping", "-n", "-c", "50", "-i", "0.2", "-W", "1", "-I", &src, &dst,
        ],
    );
    cmd.stdin(std::process::Stdio::null());
    let pings = std::thread::spawn(move || cmd.output());
    wait_for(&s, "charon replaced the IKE SA", || {
        let sas = s.charon.list_sas().unwrap();
        sas.len() == 1
            && (sas[0].initiator_spi, sas[0].responder_spi) != old_spis
            && sas[0]
                .child("net")
                .is_some_and(|c| c.state == ChildState::Installed)
    });
    let out = pings.join().unwrap().expect("ping runs");
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    println!("pings across the reauthentication: {out}");
    assert!(out.contains("50 received"), "{out}{}", s.logs());
    let sw = s.charon.log();
    assert!(
        sw.contains("received DELETE for IKE_SA site"),
        "{}",
        s.logs()
    );
    // The first IKE_AUTH asserts INITIAL_CONTACT, a reauthentication's does not (charon would drop the old SA).
    let auths: Vec<&str> = sw
        .lines()
        .filter(|l| l.contains("parsed IKE_AUTH request"))
        .collect();
    assert!(auths.len() >= 2, "{auths:?}");
    assert!(auths[0].contains("N(INIT_CONTACT)"), "{auths:?}");
    assert!(
        auths[1..].iter().all(|l| !l.contains("N(INIT_CONTACT)")),
        "{auths:?}"
    );
    wait_for(&s, "one IKE SA and its child on both sides", || {
        let sas = s.charon.list_sas().unwrap();
        sas.len() == 1 && sas[0].children.len() == 1 && s.nv_sas().len() == 2
    });
    assert_same_spis(&s, "net");
}

/// Hybrid post-quantum fallback: netveil lists strongSwan 6's hybrid proposal (X25519 + ML-KEM-768 as ADDKE1,
/// RFC 9370) before the classic one; charon 5.9.8, which predates RFC 9370, chooses the classic one when netveil
/// initiates, and netveil chooses it from charon's classic offer when charon initiates. Pings pass each way.
#[test]
fn hybrid_offer_falls_back_to_classic_with_charon_5() {
    let Some(_g) = prerequisites("hybrid_fallback") else {
        return;
    };
    const HYBRID: &str = "aes256gcm16-prfsha384-x25519-ke1_mlkem768";
    const CLASSIC: &str = "aes256gcm16-prfsha384-x25519";
    let mut s = Site::new(&CharonOptions::default());
    s.load(&[Site::swan_conn("site", CLASSIC, "net", "aes256gcm16", PSK)]);
    let mut cap = s
        .lab
        .capture(
            &s.ns[NV],
            "veth-nv",
            "hybrid-ike.pcap",
            4096,
            &["udp", "port", "500"],
        )
        .unwrap();
    // Two proposals in the config's list (the helper writes one string: the quotes close and reopen it).
    let both = format!("{HYBRID}\", \"{CLASSIC}");
    s.up(
        &[NvConn::new("site", &both, "net", "aes256gcm16", true)],
        &["--fresh-keys"],
    );
    let (ike, _) = s.wait_up("net");
    assert_eq!(ike.algorithms.dh_group.as_deref(), Some("CURVE_25519"));
    let l = nv_line(&s, "of connection site established");
    assert!(l.contains(&format!("({CLASSIC})")), "{l}");
    s.ping(NV, 3).unwrap_or_else(|e| panic!("{e}{}", s.logs()));
    // tshark: charon's IKE_SA_INIT response chose proposal 2 (the classic one), not proposal 1 without its
    // unknown transform.
    let pcap = cap.stop().unwrap();
    let out = std::process::Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(&pcap)
        .args([
            "-Y",
            &format!(
                "isakmp.exchangetype == 34 && ip.src == {}",
                SwanPair::outer(SW)
            ),
        ])
        .args([
            "-T",
            "fields",
            "-e",
            "isakmp.prop.number",
            "-e",
            "isakmp.tf.type",
        ])
        .output()
        .unwrap();
    let fields = String::from_utf8_lossy(&out.stdout).to_string();
    println!(
        "observation: charon's IKE_SA_INIT response (proposal number, transform types): {fields}"
    );
    assert!(
        fields.starts_with("2\t"),
        "charon chose proposal {fields:?}"
    );
    assert!(
        !fields.contains(",6"),
        "no ADDKE transform in charon's choice: {fields:?}"
    );
    // What charon made of the proposal with transform type 6: it names it and skips it, no error.
    let clog = s.charon.log();
    for line in clog.lines().filter(|l| l.contains("received proposals")) {
        println!("observation: charon 5.9.8 {}", line.trim());
    }
    assert!(!clog.contains("NO_PROPOSAL_CHOSEN"), "{}", s.logs());
    s.daemon.as_mut().unwrap().stop();
    wait_for(&s, "charon kept its SAs after netveil stopped", || {
        s.charon.list_sas().unwrap().is_empty()
    });
    // charon initiates its classic proposal to a netveil that lists both.
    let mut c = NvConn::new("site", &both, "net", "aes256gcm16", false);
    c.remote_addr = false;
    s.up(&[c], &["--fresh-keys"]);
    s.charon
        .initiate("net", T)
        .unwrap_or_else(|e| panic!("charon initiate: {e}{}", s.logs()));
    let l = nv_line(&s, "of connection site established");
    assert!(l.contains(&format!("({CLASSIC})")), "{l}");
    s.wait_up("net");
    s.ping(SW, 3).unwrap_or_else(|e| panic!("{e}{}", s.logs()));
}

/// Issue 40: the children of one netveil connection go on its one IKE SA, as strongSwan puts them. Two children
/// with `start_action = start` and a third trapped (started by the first packet for it) against charon with
/// `unique = replace`, which lets a second IKE SA of the same identities replace the first (and the first's
/// child die with it, 10 s later): one IKE SA on both sides carries all three, charon never had a second, and
/// after 15 s all three still carry traffic.
#[test]
fn two_started_children_and_a_trapped_one_share_one_ike_sa() {
    let Some(_g) = prerequisites("children_share") else {
        return;
    };
    let s = Site::new(&CharonOptions::default());
    // charon's ends of the second and third child: more addresses on its lo.
    let extra: [std::net::IpAddr; 2] = [
        "198.51.100.3".parse().unwrap(),
        "198.51.100.4".parse().unwrap(),
    ];
    for a in extra {
        s.lab.addr(&s.ns[SW], "lo", &format!("{a}/32")).unwrap();
    }
    let mut sw = Site::swan_conn("site", "aes128-sha256-x25519", "net", "aes128gcm16", PSK);
    sw.unique = Unique::Replace;
    for (name, a) in ["web", "db"].into_iter().zip(extra) {
        sw.children.push(SwanChild::host_to_host(
            name,
            a,
            SwanPair::inner(NV),
            "aes128gcm16",
        ));
    }
    s.load(&[sw]);
    let mut c = NvConn::new("site", "aes128-sha256-x25519", "net", "aes128gcm16", true);
    for (name, a, trap) in [("web", extra[0], false), ("db", extra[1], true)] {
        c.children.push(NvChild {
            name: name.into(),
            esp: "aes128gcm16".into(),
            start: !trap,
            rekey_time: None,
            trap,
            remote: Some(a),
        });
    }
    let mut s = s;
    s.up(&[c], &["--fresh-keys"]);
    let installed = |s: &Site| -> Vec<(u64, String)> {
        s.charon
            .list_sas()
            .unwrap()
            .iter()
            .flat_map(|i| {
                i.children
                    .iter()
                    .filter(|c| c.state == ChildState::Installed)
                    .map(|c| (i.initiator_spi, c.name.clone()))
            })
            .collect()
    };
    wait_for(&s, "charon has net and web installed", || {
        let i = installed(&s);
        ["net", "web"].iter().all(|n| i.iter().any(|(_, c)| c == n))
    });
    // The trap: the first ping to db's address starts its child (that packet is dropped, not sent in clear).
    let ping1 = |s: &Site, dst: std::net::IpAddr| {
        s.lab
            .exec_ok(
                &s.ns[NV],
                &[
                    "ping",
                    "-n",
                    "-c",
                    "1",
                    "-W",
                    "1",
                    "-I",
                    &SwanPair::inner(NV).to_string(),
                    &dst.to_string(),
                ],
            )
            .is_ok()
    };
    wait_for(&s, "the trapped child db carries a ping", || {
        ping1(&s, extra[1])
    });
    let sas = s.charon.list_sas().unwrap();
    assert_eq!(sas.len(), 1, "charon has one IKE SA: {sas:?}{}", s.logs());
    let mut names: Vec<&str> = sas[0].children.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["db", "net", "web"], "{sas:?}");
    // netveil: one IKE SA with the three; the second and third went with CREATE_CHILD_SA.
    let st = s.daemon().status_json().unwrap();
    let ike = st["engines"]["ike"]["ike_sas"].as_array().unwrap();
    assert_eq!(ike.len(), 1, "{st}");
    assert_eq!(ike[0]["child_sas"].as_array().unwrap().len(), 3, "{st}");
    // 15 s (charon's duplicate check replaced the first IKE SA's child after 10 s): the same one IKE SA all along,
    // and the three children installed.
    let spi = sas[0].initiator_spi;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(15) {
        let i = installed(&s);
        assert!(
            i.len() == 3 && i.iter().all(|(x, _)| *x == spi),
            "after {:.1} s: {i:?}{}",
            t0.elapsed().as_secs_f64(),
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for dst in [SwanPair::inner(SW), extra[0], extra[1]] {
        let out = s
            .lab
            .exec_ok(
                &s.ns[NV],
                &[
                    "ping",
                    "-n",
                    "-c",
                    "2",
                    "-i",
                    "0.2",
                    "-W",
                    "1",
                    "-I",
                    &SwanPair::inner(NV).to_string(),
                    &dst.to_string(),
                ],
            )
            .unwrap_or_else(|e| panic!("ping {dst} after 15 s: {e}{}", s.logs()));
        assert!(out.contains("2 received"), "{out}");
    }
    let log = s.charon.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("parsed IKE_AUTH request"))
            .count(),
        1,
        "one IKE SA{}",
        s.logs()
    );
    assert!(!log.contains("deleting duplicate IKE_SA"), "{}", s.logs());
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("parsed CREATE_CHILD_SA request"))
            .count(),
        2,
        "web and db with CREATE_CHILD_SA{}",
        s.logs()
    );
}

/// Issue 40: netveil as responder with a `%any` connection listed before one that names charon's id
/// `b.lab.test`, each with its own PSK. charon claiming `b.lab.test` with the wildcard's PSK is refused (the
/// named connection serves that id, and its PSK is not charon's); with the named connection's PSK it gets that
/// connection; claiming an id no connection names, the wildcard's PSK lets it in there. Asking netveil to be an
/// id it is not (IDr): refused, and the log names both ends and what was expected.
#[test]
fn the_connection_naming_the_peer_wins_over_an_earlier_wildcard() {
    let Some(_g) = prerequisites("best_match") else {
        return;
    };
    const WILD: &str = "netveil-lab-wildcard-psk-42";
    let mut s = Site::new(&CharonOptions::default());
    let mut any = NvConn::new("any", "aes128-sha256-x25519", "net", "aes128gcm16", false);
    (any.remote_addr, any.remote_id, any.psk) = (false, "%any", WILD.into());
    let mut bob = NvConn::new("bob", "aes128-sha256-x25519", "net", "aes128gcm16", false);
    bob.remote_addr = false;
    s.up(&[any, bob], &["--fresh-keys"]);
    let established = |s: &Site, conn: &str| {
        s.nv_log()
            .lines()
            .filter(|l| l.contains(&format!("of connection {conn} established")))
            .count()
    };

    // b.lab.test with the wildcard's PSK: refused.
    s.load(&[Site::swan_conn(
        "site",
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
        WILD,
    )]);
    let err = s
        .charon
        .initiate("net", T)
        .expect_err("charon got in as b.lab.test with the %any connection's PSK")
        .to_string();
    assert!(err.contains("AUTHENTICATION_FAILED"), "{err}");
    let l = nv_line(&s, "failed to authenticate as b.lab.test");
    assert!(l.contains("connection bob"), "{l}");
    assert_eq!(
        established(&s, "any") + established(&s, "bob"),
        0,
        "{}",
        s.logs()
    );

    // With the named connection's PSK: that connection.
    s.load(&[Site::swan_conn(
        "site",
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
        PSK,
    )]);
    s.charon
        .initiate("net", T)
        .unwrap_or_else(|e| panic!("initiate: {e}{}", s.logs()));
    wait_for(&s, "connection bob established", || {
        established(&s, "bob") == 1
    });
    let st = s.daemon().status_json().unwrap();
    let ike = &st["engines"]["ike"]["ike_sas"][0];
    assert_eq!(
        (ike["name"].as_str(), ike["remote_id"].as_str()),
        (Some("bob"), Some("b.lab.test")),
        "{st}"
    );
    s.charon
        .terminate("site", T)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(&s, "netveil kept its SAs after charon's DELETE", || {
        s.nv_sas().is_empty()
    });

    // An id that no connection names, with the wildcard's PSK: the %any connection, the id shown as claimed.
    let mut c = Site::swan_conn("site", "aes128-sha256-x25519", "net", "aes128gcm16", WILD);
    c.local_id = "c.lab.test".into();
    s.load(&[c]);
    s.charon
        .initiate("net", T)
        .unwrap_or_else(|e| panic!("initiate: {e}{}", s.logs()));
    wait_for(&s, "connection any established", || {
        established(&s, "any") == 1
    });
    let st = s.daemon().status_json().unwrap();
    let ike = &st["engines"]["ike"]["ike_sas"][0];
    assert_eq!(
        (ike["name"].as_str(), ike["remote_id"].as_str()),
        (Some("any"), Some("c.lab.test")),
        "{st}"
    );
    s.charon
        .terminate("site", T)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(&s, "netveil kept its SAs after charon's DELETE", || {
        s.nv_sas().is_empty()
    });

    // charon asks netveil to be x.lab.test: no connection matches, and the line says what was sent and expected.
    let mut c = Site::swan_conn("site", "aes128-sha256-x25519", "net", "aes128gcm16", PSK);
    c.remote_id = "x.lab.test".into();
    s.load(&[c]);
    assert!(s.charon.initiate("net", T).is_err());
    let l = nv_line(&s, "no connection matches");
    println!("{l}");
    let log = s.nv_log();
    assert!(
        !log.contains(WILD) && !log.contains(PSK),
        "a PSK in the log"
    );
    for want in [
        "192.0.2.1[x.lab.test]...192.0.2.2[b.lab.test]",
        "bob: 192.0.2.1[a.lab.test]...%any[b.lab.test]",
        "any: 192.0.2.1[a.lab.test]...%any[%any]",
    ] {
        assert!(l.contains(want), "{want:?} not in {l}");
    }
}
