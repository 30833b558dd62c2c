//! The paths that need more than a [`HostPair`]: netveil's ESP tunnel keyed by its IKEv2, strongSwan at both ends,
//! and the name of l2sec's null suite's paths.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::lab::{HostPair, Lab, TwoHosts};
use crate::{Error, Result};

/// The L2 study's name of its no-crypto category, for the path names of l2sec's null suite.
pub const L2SEC_NULL_PATH: &str = "l2sec null-null (noENC-noHMAC)";

/// A PSK of this run's own: hex of 32 random bytes.
fn lab_psk() -> zeroize::Zeroizing<String> {
    let mut key = zeroize::Zeroizing::new([0u8; 32]);
    netveil_crypto::rand::fill_random(&mut key[..]);
    zeroize::Zeroizing::new(key.iter().map(|b| format!("{b:02x}")).collect())
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
            return Err(Error::timeout(
                "no CHILD_SA",
                15.0,
                format!("{}\n{}", a.log(), b.log()),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pids: Vec<u32> = [&a, &b].iter().filter_map(|d| d.pid()).collect();
    f(&lab, &h, &pids)
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
            e.logged(format!(
                "\n{}{}",
                charons[0].log_tail(20),
                charons[1].log_tail(20)
            ))
        })?;
    }
    let pids: Vec<u32> = charons.iter().filter_map(|c| c.pid()).collect();
    f(&lab, &h, &pids)
}
