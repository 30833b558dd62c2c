//! The two-host PILSC lab of `netveil demo --pilsc` ([`crate::demo`]), also `netveil bench --pilsc`'s and the
//! namespace tests': two namespaces joined by a veth pair, a host's `[pilsc]` section, and frames taken from a
//! capture or put on the wire as an attacker would.

use crate::lab::Lab;
use crate::{Error, Result};
use std::path::Path;

/// A `[pilsc]` section for host `side` (0: a, 1: b) of a lab: `rules` written to the lab's folder
/// (`pilsc-SIDE.rules`), queues `queue + 2 * side` and the next, control socket `p{side}`, its own state directory.
pub fn pilsc_config(lab: &Lab, side: usize, rules: &str, mode: &str, queue: u16) -> Result<String> {
    let path = lab.dir().join(format!("pilsc-{side}.rules"));
    std::fs::write(&path, rules).map_err(Error::io(format!("cannot write {}", path.display())))?;
    Ok(format!(
        "[pilsc]\nrules = \"{}\"\nmode = \"{mode}\"\nqueue = {}\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
        path.display(),
        queue + 2 * side as u16,
        lab.socket_path(&format!("p{side}")).display(),
        lab.dir().join(format!("state-{side}")).display(),
    ))
}

/// Two network namespaces `a` and `b` (a lab named after `prefix`) joined by a veth pair `veth-a`/`veth-b` with the
/// IPv4 addresses `addrs` (/24).
pub fn two_hosts(prefix: &str, netveil: &Path, addrs: [&str; 2]) -> Result<(Lab, [String; 2])> {
    let mut lab = Lab::new(prefix)?.with_netveil(netveil);
    let a = lab.add_ns("a")?;
    let b = lab.add_ns("b")?;
    lab.veth(&a, "veth-a", &b, "veth-b")?;
    lab.addr(&a, "veth-a", &format!("{}/24", addrs[0]))?;
    lab.addr(&b, "veth-b", &format!("{}/24", addrs[1]))?;
    Ok((lab, [a, b]))
}

/// The first IPv4 packet of an Ethernet capture that `pick` takes, with its Ethernet header (the whole frame).
pub fn first_frame(pcap: &Path, pick: impl Fn(&[u8]) -> bool) -> Result<Option<Vec<u8>>> {
    let p = netveil_pcap::read_file(pcap).map_err(Error::file(pcap))?;
    Ok(p.records.iter().find_map(|r| {
        let f = netveil_pcap::split_frame(p.link, &r.data)?;
        pick(f.ip).then(|| r.data.clone())
    }))
}

/// Puts a whole Ethernet frame on `iface` in `ns` (AF_PACKET, with Python: past the host's own stack and its
/// netfilter hooks), as an attacker on the wire would.
pub fn inject_frame(lab: &Lab, ns: &str, iface: &str, frame: &[u8]) -> Result<()> {
    let code = "import socket,sys; s=socket.socket(socket.AF_PACKET, socket.SOCK_RAW); \
                s.bind((sys.argv[1], 0)); s.send(bytes.fromhex(sys.argv[2]))";
    lab.exec_ok(ns, &["python3", "-c", code, iface, &hex::encode(frame)])?;
    Ok(())
}
