//! IKEv2 with certificates against strongSwan: `netveil up` in one namespace, charon (5.9.x, kernel-libipsec) in
//! the other, both with certificates made by strongSwan's `pki` (RSA 2048 and ECDSA P-256, one CA; ids
//! `a.lab.test` (netveil) and `b.lab.test` (charon), the certificates' subjectAltNames). Each key type with netveil
//! as initiator and as responder: the CHILD_SA comes up and a ping crosses it both ways. A certificate from another
//! CA fails on netveil's side with the message a user can act on. And two netveil daemons with Ed25519
//! certificates (charon 5.9's ed25519 plugin is not in the lab's set), over the same harness.
//!
//! The harness (namespaces `nv` and `sw` joined by a veth pair; the child between the inner addresses
//! 198.51.100.1 on netveil's TUN and 198.51.100.2 on charon's `lo`) is ike_strongswan.rs's. They need root and
//! strongSwan (.ci/setup); without either they print why and pass, except under CI (`netveil_testkit::skip`). One at
//! a time.

use netveil_lab::lab::{self, Daemon, Lab};
use netveil_lab::strongswan::{
    self, Charon, CharonOptions, Credential, KeyType, Pki, SwanAuth, SwanPair,
};
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const NETVEIL: &str = env!("CARGO_BIN_EXE_netveil");
static SERIAL: Mutex<()> = Mutex::new(());
const T: Duration = Duration::from_secs(10);
const NV: usize = 0;
const SW: usize = 1;

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

/// netveil's configuration: the TUN with the inner address, a route to the peer's, one certificate connection.
/// `cacert`: the CA netveil trusts for the peer; `initiate`: remote_addrs set and the child started.
fn nv_config(lab: &Lab, me: &Credential, cacert: &Path, initiate: bool) -> String {
    nv_config_ids(lab, me, cacert, initiate, ["a.lab.test", "b.lab.test"])
}

/// [`nv_config`] with other ids (ours, the peer's).
fn nv_config_ids(
    lab: &Lab,
    me: &Credential,
    cacert: &Path,
    initiate: bool,
    ids: [&str; 2],
) -> String {
    let (inner, peer) = (SwanPair::inner(NV), SwanPair::inner(SW));
    format!(
        "log_level = \"info\"\n[interface]\nname = \"nvcr0\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
         state_dir = \"{state}\"\naddresses = [\"{inner}/32\"]\nroutes = [\"{peer}/32\"]\n\n[ike]\n\n\
         [[ike.connection]]\nname = \"site\"\nlocal_addrs = [\"{la}\"]\nremote_addrs = [{ra}]\n\
         proposals = [\"aes128-sha256-x25519\"]\nencap = true\n\
         local = {{ id = \"{lid}\", auth = \"pubkey\", certs = [\"{cert}\"], key = \"{key}\" }}\n\
         remote = {{ id = \"{rid}\", auth = \"pubkey\", cacerts = [\"{ca}\"] }}\n\n\
         [[ike.connection.children]]\nname = \"net\"\nlocal_ts = [\"{inner}/32\"]\nremote_ts = [\"{peer}/32\"]\n\
         esp_proposals = [\"aes128gcm16\"]\nstart_action = \"{start}\"\n",
        sock = lab.socket_path("nv").display(),
        state = lab.dir().join("state-nv").display(),
        la = SwanPair::outer(NV),
        ra = if initiate { format!("\"{}\"", SwanPair::outer(SW)) } else { String::new() },
        cert = me.cert.display(),
        key = me.key.display(),
        ca = cacert.display(),
        start = if initiate { "start" } else { "none" },
        lid = ids[0],
        rid = ids[1],
    )
}

struct Site {
    lab: Lab,
    ns: [String; 2],
    charon: Charon,
    daemon: Option<Daemon>,
}

impl Site {
    fn new() -> Site {
        let mut lab = Lab::new("nvcr").unwrap().with_netveil(NETVEIL);
        let a = lab.add_ns("nv").unwrap();
        let b = lab.add_ns("sw").unwrap();
        for ns in [&a, &b] {
            lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
                .unwrap();
        }
        lab.veth(&a, "veth-nv", &b, "veth-sw").unwrap();
        lab.addr(&a, "veth-nv", &format!("{}/24", SwanPair::outer(NV)))
            .unwrap();
        lab.addr(&b, "veth-sw", &format!("{}/24", SwanPair::outer(SW)))
            .unwrap();
        lab.addr(&b, "lo", &format!("{}/32", SwanPair::inner(SW)))
            .unwrap();
        let charon = Charon::start(&lab, &b, "sw", &CharonOptions::default())
            .unwrap_or_else(|e| panic!("charon: {e}"));
        Site {
            lab,
            ns: [a, b],
            charon,
            daemon: None,
        }
    }

    fn up(&mut self, cfg: &str) {
        let d = self
            .lab
            .start_daemon_with(&self.ns[NV], "nv", cfg, &["--fresh-keys"])
            .unwrap_or_else(|e| panic!("netveil up: {e}\n{cfg}"));
        self.daemon = Some(d);
    }

    fn nv_log(&self) -> String {
        self.daemon.as_ref().map(|d| d.log()).unwrap_or_default()
    }

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

    /// Three pings through the child from side `from`, all answered (after one answered: libipsec may lose the
    /// very first packet while it sets up its route on a child it has just installed).
    fn ping(&self, from: usize) {
        let (src, dst) = (
            SwanPair::inner(from).to_string(),
            SwanPair::inner(1 - from).to_string(),
        );
        let t0 = Instant::now();
        let one = ["ping", "-n", "-c", "1", "-W", "1", "-I", &src, &dst];
        while self.lab.exec_ok(&self.ns[from], &one).is_err() {
            assert!(
                t0.elapsed() < T,
                "no ping answered from side {from}{}",
                self.logs()
            );
        }
        let out = self
            .lab
            .exec_ok(
                &self.ns[from],
                &[
                    "ping", "-n", "-c", "3", "-i", "0.2", "-W", "1", "-I", &src, &dst,
                ],
            )
            .unwrap_or_else(|e| panic!("ping from side {from}: {e}{}", self.logs()));
        assert!(out.contains("3 received"), "{out}");
    }

    /// Waits until netveil's status lists an inbound and an outbound SA named `ike-*`.
    fn wait_installed(&self) {
        fn dirs(v: &serde_json::Value, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    let ike = m
                        .get("name")
                        .and_then(|n| n.as_str())
                        .is_some_and(|n| n.starts_with("ike-"));
                    if let (true, Some(d)) = (ike, m.get("direction").and_then(|d| d.as_str())) {
                        out.push(d.to_string());
                    }
                    m.values().for_each(|x| dirs(x, out));
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| dirs(x, out)),
                _ => {}
            }
        }
        let t0 = Instant::now();
        loop {
            let mut d = Vec::new();
            if let Some(st) = self.daemon.as_ref().and_then(|x| x.status_json().ok()) {
                dirs(&st, &mut d);
            }
            if d.iter().any(|x| x == "in") && d.iter().any(|x| x == "out") {
                return;
            }
            assert!(
                t0.elapsed() < T,
                "netveil has no CHILD_SA installed{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_log(&self, needle: &str) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.nv_log().lines().find(|l| l.contains(needle)) {
                return l.to_string();
            }
            assert!(
                t0.elapsed() < T,
                "no {needle:?} in netveil's log{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One CA of `key_type` issuing netveil's and charon's certificates; netveil initiates or responds; the child comes
/// up on both sides (charon says it authenticated netveil with a signature), a ping crosses it both ways.
fn certificates(test: &str, key_type: KeyType, netveil_initiates: bool) {
    let Some(_g) = prerequisites(test) else {
        return;
    };
    let mut s = Site::new();
    let pki = Pki::new(&s.lab.dir().join("pki"), key_type).unwrap();
    let (nv, sw) = (
        pki.issue("a.lab.test").unwrap(),
        pki.issue("b.lab.test").unwrap(),
    );
    let conn = SwanPair::conn(
        SW,
        "site",
        SwanAuth::Pubkey(sw),
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
    );
    s.charon
        .load(&[conn])
        .unwrap_or_else(|e| panic!("charon load: {e}"));
    s.up(&nv_config(&s.lab, &nv, &nv.ca, netveil_initiates));
    if !netveil_initiates {
        s.charon
            .initiate("net", T)
            .unwrap_or_else(|e| panic!("initiate: {e}{}", s.logs()));
    }
    let (ike, _) = s
        .charon
        .wait_child_installed("net", T)
        .unwrap_or_else(|e| panic!("{e}{}", s.logs()));
    assert_eq!(ike.initiator, !netveil_initiates, "{ike:?}");
    assert_eq!(ike.remote_id, "a.lab.test");
    let log = s.charon.log();
    let authed = log
        .lines()
        .find(|l| l.contains("authentication of 'a.lab.test' with"))
        .unwrap_or_else(|| panic!("charon did not log netveil's authentication{}", s.logs()));
    assert!(authed.contains("successful"), "{authed}");
    println!("observation: charon: {}", authed.trim());
    // netveil's view: the SA is up (its log), its CHILD_SA installed both ways; traffic crosses it both ways.
    s.wait_log("established");
    s.wait_installed();
    for from in [NV, SW] {
        s.ping(from);
    }
}

#[test]
fn rsa_netveil_initiates() {
    certificates("rsa_netveil_initiates", KeyType::Rsa(2048), true);
}

#[test]
fn rsa_charon_initiates() {
    certificates("rsa_charon_initiates", KeyType::Rsa(2048), false);
}

#[test]
fn ecdsa_netveil_initiates() {
    certificates("ecdsa_netveil_initiates", KeyType::EcdsaP256, true);
}

#[test]
fn ecdsa_charon_initiates() {
    certificates("ecdsa_charon_initiates", KeyType::EcdsaP256, false);
}

/// Identities as distinguished names (the certificates' subjects, `CN=NAME` as the lab's pki writes them) on
/// both sides: netveil sends its subject's DER as IDi and matches charon's IDr against its DN; charon does the same.
#[test]
fn distinguished_name_ids_with_charon() {
    let Some(_g) = prerequisites("dn_ids") else {
        return;
    };
    let mut s = Site::new();
    let pki = Pki::new(&s.lab.dir().join("pki"), KeyType::EcdsaP256).unwrap();
    let (nv, sw) = (
        pki.issue("a.lab.test").unwrap(),
        pki.issue("b.lab.test").unwrap(),
    );
    let mut conn = SwanPair::conn(
        SW,
        "site",
        SwanAuth::Pubkey(sw),
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
    );
    conn.local_id = "CN=b.lab.test".into();
    conn.remote_id = "CN=a.lab.test".into();
    s.charon
        .load(&[conn])
        .unwrap_or_else(|e| panic!("charon load: {e}"));
    s.up(&nv_config_ids(
        &s.lab,
        &nv,
        &nv.ca,
        true,
        ["CN=a.lab.test", "CN=b.lab.test"],
    ));
    let (ike, _) = s
        .charon
        .wait_child_installed("net", T)
        .unwrap_or_else(|e| panic!("{e}{}", s.logs()));
    assert_eq!(ike.remote_id, "CN=a.lab.test", "{ike:?}");
    s.wait_installed();
    s.ping(NV);
    // netveil shows the DNs as text, as charon does (not `ID_DER_ASN1_DN:` and the DER's hex), in `status` and
    // `status --json`.
    let d = s.daemon.as_ref().unwrap();
    let st = d.status_json().unwrap_or_else(|e| panic!("{e}"));
    let sa = &st["engines"]["ike"]["ike_sas"][0];
    assert_eq!(sa["local_id"], "CN=a.lab.test", "{st}");
    assert_eq!(sa["remote_id"], "CN=b.lab.test", "{st}");
    let text = d.status_text().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        text.contains("local  'CN=a.lab.test'") && text.contains("remote 'CN=b.lab.test'"),
        "{text}"
    );
    assert!(!text.contains("ID_DER_ASN1_DN"), "{text}");
}

/// netveil initiates and refuses charon's certificate (from a CA netveil does not trust), after charon took
/// netveil's: charon had its IKE SA established and the child installed. netveil says why and tells charon
/// (INFORMATIONAL with AUTHENTICATION_FAILED, RFC 7296 2.21.2), which deletes its IKE SA: none is left within 5 s
/// (before, charon kept it, and sent ESP into the child, for as long as was watched).
#[test]
fn netveil_refusing_charons_certificate_leaves_charon_no_sa() {
    let Some(_g) = prerequisites("refused_responder") else {
        return;
    };
    let mut s = Site::new();
    let ours = Pki::new(&s.lab.dir().join("pki-ours"), KeyType::EcdsaP256).unwrap();
    let theirs = Pki::new(&s.lab.dir().join("pki-theirs"), KeyType::EcdsaP256).unwrap();
    let nv = ours.issue("a.lab.test").unwrap();
    // charon's certificate from the CA netveil does not trust; charon trusts netveil's CA.
    let mut sw = theirs.issue("b.lab.test").unwrap();
    sw.ca = nv.ca.clone();
    let conn = SwanPair::conn(
        SW,
        "site",
        SwanAuth::Pubkey(sw),
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
    );
    s.charon
        .load(&[conn])
        .unwrap_or_else(|e| panic!("charon load: {e}"));
    s.up(&nv_config(&s.lab, &nv, &nv.ca, true));
    let line = s.wait_log("authentication failed for b.lab.test");
    let refused = Instant::now();
    assert!(
        line.contains("certificate not signed by a configured CA"),
        "{line}"
    );
    // charon had it up (it accepted netveil's authentication) ...
    let t0 = Instant::now();
    while !s.charon.log().contains("IKE_SA site[1] established") {
        assert!(
            t0.elapsed() < T,
            "charon never had the IKE SA up{}",
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // ... and has none within 5 s of netveil's refusal.
    loop {
        let sas = s.charon.list_sas().unwrap();
        if sas.is_empty() {
            break;
        }
        assert!(
            refused.elapsed() < Duration::from_secs(5),
            "charon still holds {sas:?} 5 s after netveil refused its certificate{}",
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "observation: charon's IKE SA gone {:.0} ms after netveil's refusal was logged",
        refused.elapsed().as_secs_f64() * 1e3
    );
    let log = s.charon.log();
    assert!(
        log.contains("N(AUTH_FAILED)"),
        "charon did not parse netveil's AUTHENTICATION_FAILED{}",
        s.logs()
    );
    for l in log
        .lines()
        .filter(|l| l.contains("INFORMATIONAL") || l.contains("delet"))
    {
        println!("observation: charon: {}", l.trim());
    }
    // netveil has no SA either, and never installed one.
    assert!(
        !s.nv_log()
            .contains("CHILD_SA net of connection site installed"),
        "{}",
        s.logs()
    );
}

/// charon's certificate comes from a CA netveil does not trust: netveil (responder) refuses it and says why; no
/// SA on either side.
#[test]
fn a_certificate_from_another_ca_is_refused_with_the_reason() {
    let Some(_g) = prerequisites("another_ca") else {
        return;
    };
    let mut s = Site::new();
    let ours = Pki::new(&s.lab.dir().join("pki-ours"), KeyType::EcdsaP256).unwrap();
    let theirs = Pki::new(&s.lab.dir().join("pki-theirs"), KeyType::EcdsaP256).unwrap();
    let nv = ours.issue("a.lab.test").unwrap();
    let sw = theirs.issue("b.lab.test").unwrap();
    let conn = SwanPair::conn(
        SW,
        "site",
        SwanAuth::Pubkey(sw),
        "aes128-sha256-x25519",
        "net",
        "aes128gcm16",
    );
    s.charon
        .load(&[conn])
        .unwrap_or_else(|e| panic!("charon load: {e}"));
    s.up(&nv_config(&s.lab, &nv, &nv.ca, false));
    assert!(
        s.charon.initiate("net", T).is_err(),
        "charon's initiate succeeded{}",
        s.logs()
    );
    let line = s.wait_log("authentication failed for b.lab.test");
    assert!(
        line.contains(
            "authentication failed for b.lab.test: certificate not signed by a configured CA"
        ),
        "{line}"
    );
    assert!(s.charon.list_sas().unwrap().is_empty());
    assert!(
        s.charon.log().contains("AUTHENTICATION_FAILED"),
        "charon did not hear AUTHENTICATION_FAILED{}",
        s.logs()
    );
}

/// Two netveil daemons with Ed25519 certificates (RFC 8420 in RFC 7427's AUTH; netveil-ike's testdata, made by
/// pki, CA in DER): transport mode over raw ESP as in ike_netveil.rs; the CHILD_SA comes up on both sides and a
/// ping crosses it. Needs root only.
#[test]
fn two_netveils_with_ed25519_certificates() {
    if !netveil_testkit::require_root("two_netveils_with_ed25519_certificates") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use std::os::unix::fs::PermissionsExt;
    const ADDR: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
    const NAMES: [&str; 2] = ["venus", "pluto"];
    let mut lab = Lab::new("nved").unwrap().with_netveil(NETVEIL);
    let td = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ike/testdata/certs");
    let files = lab.dir().join("certs");
    std::fs::create_dir_all(&files).unwrap();
    for f in ["ca.der", "venus.der", "venus.key", "pluto.der", "pluto.key"] {
        std::fs::copy(td.join(f), files.join(f)).unwrap();
        std::fs::set_permissions(files.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let config = |lab: &Lab, side: usize| {
        let (me, peer) = (ADDR[side], ADDR[1 - side]);
        format!(
            "log_level = \"info\"\n[interface]\nname = \"nved{side}\"\nmtu = 1400\ncontrol_socket = \"{sock}\"\n\
             state_dir = \"{state}\"\nfwmark = {mark}\nroutes = [\"{peer}/32\"]\n\n\
             [ike]\nsocket_mark = {mark}\n\n\
             [[ike.connection]]\nname = \"host\"\nlocal_addrs = [\"{me}\"]\nremote_addrs = [\"{peer}\"]\n\
             proposals = [\"aes128gcm16-prfsha256-x25519\"]\nencap = false\n\
             local = {{ id = \"{lid}.netveil.test\", auth = \"pubkey\", certs = [\"{dir}/{lid}.der\"], key = \"{dir}/{lid}.key\" }}\n\
             remote = {{ id = \"{rid}.netveil.test\", auth = \"pubkey\", cacerts = [\"{dir}/ca.der\"] }}\n\n\
             [[ike.connection.children]]\nname = \"hosts\"\nmode = \"transport\"\nesp_proposals = [\"aes128gcm16\"]\n\
             start_action = \"{start}\"\n",
            sock = lab.socket_path(&format!("nv{side}")).display(),
            state = lab.dir().join(format!("state-{side}")).display(),
            mark = lab::TRANSPORT_FWMARK,
            lid = NAMES[side],
            rid = NAMES[1 - side],
            dir = files.display(),
            start = if side == 0 { "start" } else { "none" },
        )
    };
    let a = lab.add_ns("a").unwrap();
    let b = lab.add_ns("b").unwrap();
    for ns in [&a, &b] {
        lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
            .unwrap();
    }
    lab.veth(&a, "veth-a", &b, "veth-b").unwrap();
    lab.addr(&a, "veth-a", &format!("{}/24", ADDR[0])).unwrap();
    lab.addr(&b, "veth-b", &format!("{}/24", ADDR[1])).unwrap();
    let db = lab
        .start_daemon_with(&b, "nv1", &config(&lab, 1), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let da = lab
        .start_daemon_with(&a, "nv0", &config(&lab, 0), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let logs = || format!("\n--- a ---\n{}\n--- b ---\n{}", da.log(), db.log());
    let t0 = Instant::now();
    while !(da
        .log()
        .contains("CHILD_SA hosts of connection host installed")
        && db
            .log()
            .contains("CHILD_SA hosts of connection host installed"))
    {
        assert!(t0.elapsed() < T, "no CHILD_SA on both sides{}", logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = lab
        .exec_ok(
            &a,
            &["ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", ADDR[1]],
        )
        .unwrap_or_else(|e| panic!("ping: {e}{}", logs()));
    assert!(out.contains("3 received"), "{out}");
}
