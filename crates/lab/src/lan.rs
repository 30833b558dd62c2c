//! A wired-LAN lab for layer-2 protection (l2sec): a Linux bridge in its own namespace as the switch, hosts
//! connected to it by veth pairs (`eth0` on the host side), an eavesdropper whose port sees every frame, and an
//! attacker on the same LAN.
//!
//! The bridge does not learn addresses (ageing time 0), so it floods every frame to every port, as a hub or a
//! switch with a mirror port would: the eavesdropper sees all traffic between the other hosts.

use crate::lab::{run_ok, Daemon, Lab};
use crate::{Error, Result};
use std::net::Ipv4Addr;
use std::process::Command;

/// One station on the LAN.
#[derive(Debug, Clone)]
pub struct Station {
    /// Short name (e.g. "h1", "eve").
    pub name: String,
    /// Namespace.
    pub ns: String,
    /// IPv4 address on `eth0` (/24).
    pub ip: Ipv4Addr,
    /// MAC address of `eth0`.
    pub mac: [u8; 6],
}

/// The LAN: the switch namespace and the stations.
#[derive(Debug)]
pub struct Lan {
    pub switch_ns: String,
    pub stations: Vec<Station>,
}

/// The interface name of every station's LAN port.
pub const PORT: &str = "eth0";

/// Formats a MAC address as `02:00:5e:..`.
pub fn mac_str(m: &[u8; 6]) -> String {
    netveil_wire::ethernet::Address(*m).to_string()
}

impl Lan {
    /// Builds the switch and one station per name, station `i` with address 192.0.2.(10 + i)/24 and MAC
    /// 02:00:5e:00:53:(10 + i) (documentation ranges). IPv6 is off on the LAN so that captures hold only what a
    /// test sends.
    pub fn build(lab: &mut Lab, names: &[&str]) -> Result<Lan> {
        let switch_ns = lab.add_ns("sw")?;
        // The switch keeps quiet, as an unmanaged one does: no IPv6 (neighbour discovery, MLD) and no multicast
        // snooping on the bridge, so that captures hold only what the stations send. Nor does it run the host's
        // firewall on the frames it forwards (br_netfilter), which a hardware switch would not either.
        for t in ["iptables", "ip6tables", "arptables"] {
            let _ = lab.exec(
                &switch_ns,
                &["sysctl", "-qw", &format!("net.bridge.bridge-nf-call-{t}=0")],
            );
        }
        for k in ["all", "default"] {
            lab.exec_ok(
                &switch_ns,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
                ],
            )?;
        }
        lab.ip(
            &switch_ns,
            &[
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "ageing_time",
                "0",
                "mcast_snooping",
                "0",
            ],
        )?;
        lab.ip(&switch_ns, &["link", "set", "br0", "up"])?;
        let mut stations = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if i > 200 {
                return Err(Error::Usage("at most 200 stations".into()));
            }
            let ns = lab.add_ns(name)?;
            lab.exec_ok(&ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
            lab.exec_ok(
                &ns,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
            let port = format!("p-{name}");
            lab.veth(&ns, PORT, &switch_ns, &port)?;
            lab.ip(&switch_ns, &["link", "set", &port, "master", "br0"])?;
            let host = 10 + i as u8;
            let mac = [0x02, 0x00, 0x5e, 0x00, 0x53, host];
            lab.ip(&ns, &["link", "set", PORT, "address", &mac_str(&mac)])?;
            let ip = Ipv4Addr::new(192, 0, 2, host);
            lab.ip(
                &ns,
                &["addr", "add", &format!("{ip}/24"), "brd", "+", "dev", PORT],
            )?;
            stations.push(Station {
                name: name.to_string(),
                ns,
                ip,
                mac,
            });
        }
        Ok(Lan {
            switch_ns,
            stations,
        })
    }

    /// The station called `name`.
    pub fn station(&self, name: &str) -> Result<&Station> {
        self.stations
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::Usage(format!("no station '{name}' in the LAN")))
    }

    /// The MAC address station `on` has for `ip` in its neighbour table (if any entry is usable).
    pub fn neighbour(&self, lab: &Lab, on: &str, ip: Ipv4Addr) -> Result<Option<String>> {
        let s = self.station(on)?;
        let out = lab.exec_ok(&s.ns, &["ip", "-4", "neigh", "show", &ip.to_string()])?;
        Ok(out
            .split_whitespace()
            .skip_while(|w| *w != "lladdr")
            .nth(1)
            .map(|m| m.to_string()))
    }
}

/// How the protected stations run l2sec (see [`Lan::protect`]).
#[derive(Debug, Clone)]
pub struct L2Opts {
    pub group_suite: String,
    pub suites: Vec<String>,
    pub dh_groups: Vec<String>,
    /// Each station gets an Ed25519 key; group frames are signed and must be (`require_signatures`).
    pub signatures: bool,
    pub insecure_ecb: bool,
    /// Allow the null suite (`null-null`: no encryption, no integrity; the L2 study's noENC-noHMAC).
    pub insecure_null: bool,
    pub ethertype: Option<u16>,
    pub lifetime_seconds: Option<u64>,
    pub rekey_margin_seconds: Option<u64>,
    /// Send and require this 24-bit security number.
    pub security_number: Option<u32>,
    /// Send timestamps and require them within the tolerance.
    pub timestamps: bool,
    /// With signatures: every `[[l2sec.peer]]` also binds the peer's address (`ip`).
    pub peer_ips: bool,
}

impl Default for L2Opts {
    fn default() -> Self {
        L2Opts {
            group_suite: "aes128gcm".into(),
            suites: vec!["aes128gcm".into()],
            dh_groups: vec!["x25519".into()],
            signatures: true,
            insecure_ecb: false,
            insecure_null: false,
            ethertype: None,
            lifetime_seconds: None,
            rekey_margin_seconds: None,
            security_number: None,
            timestamps: false,
            peer_ips: true,
        }
    }
}

impl L2Opts {
    /// One suite for group traffic and sessions.
    pub fn suite(name: &str) -> L2Opts {
        L2Opts {
            group_suite: name.into(),
            suites: vec![name.into()],
            insecure_ecb: name.contains("ecb"),
            insecure_null: name == "null-null",
            ..L2Opts::default()
        }
    }
}

/// The process ids of l2sec's daemons (an error if one has none).
pub fn daemon_pids(daemons: &[Daemon]) -> Result<Vec<u32>> {
    daemons
        .iter()
        .map(|d| {
            d.pid()
                .ok_or_else(|| Error::internal("an l2sec daemon has no pid"))
        })
        .collect()
}

/// The TAP device name of protected stations.
pub const TAP: &str = "l2s0";

impl Lan {
    /// Two stations, `h1` and `h2`, on a fresh LAN in `lab`, and with `opts` l2sec's daemons protecting both (none
    /// without: the plain bridge).
    pub fn pair(lab: &mut Lab, opts: Option<L2Opts>) -> Result<(Lan, Vec<Daemon>)> {
        let lan = Lan::build(lab, &["h1", "h2"])?;
        let daemons = match opts {
            Some(o) => lan.protect(lab, &["h1", "h2"], &o)?,
            None => Vec::new(),
        };
        Ok((lan, daemons))
    }

    /// The `[l2sec]` configurations of the stations `names` (same group secret; each station's state directory
    /// in the lab directory, `state-NAME`; with signatures, every station's key written into the lab directory and
    /// every other station's public key listed, with its address unless `peer_ips` is off).
    pub fn l2sec_configs(&self, lab: &Lab, names: &[&str], o: &L2Opts) -> Result<Vec<String>> {
        let mut secret = [0u8; 32];
        netveil_crypto::rand::fill_random(&mut secret);
        let secret = hex::encode(secret);
        let mut keys = Vec::new();
        for n in names {
            if o.signatures {
                let path = lab.dir().join(format!("{n}.l2key"));
                let _ = std::fs::remove_file(&path);
                let out = run_ok(
                    Command::new(lab.netveil())
                        .args(["keygen", "--ed25519", "-n", n, "-o"])
                        .arg(lab.dir()),
                )?;
                let public = out
                    .lines()
                    .find_map(|l| l.strip_prefix("public key: "))
                    .ok_or_else(|| {
                        Error::output(
                            "netveil keygen --ed25519",
                            format!("no public key in: {out}"),
                        )
                    })?;
                keys.push((path, public.trim().to_string()));
            }
        }
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("\"{s}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let st = self.station(n)?;
            let mut c = format!(
                "[l2sec]\ninterface = \"{PORT}\"\ntap = \"{TAP}\"\naddress = \"{}/24\"\ngroup_secret = \"{secret}\"\ngroup_suite = \"{}\"\nsuites = [{}]\ndh_groups = [{}]\ncontrol_socket = \"{}\"\nstate_dir = \"{}\"\n",
                st.ip,
                o.group_suite,
                list(&o.suites),
                list(&o.dh_groups),
                lab.socket_path(n).display(),
                lab.dir().join(format!("state-{n}")).display()
            );
            if o.insecure_ecb {
                c.push_str("insecure_ecb = true\n");
            }
            if o.insecure_null {
                c.push_str("insecure_null = true\n");
            }
            if let Some(e) = o.ethertype {
                c.push_str(&format!("ethertype = 0x{e:04x}\n"));
            }
            if let Some(l) = o.lifetime_seconds {
                c.push_str(&format!("lifetime_seconds = {l}\n"));
            }
            if let Some(m) = o.rekey_margin_seconds {
                c.push_str(&format!("rekey_margin_seconds = {m}\n"));
            }
            if let Some(n) = o.security_number {
                c.push_str(&format!("security_number = 0x{n:06x}\n"));
            }
            if o.timestamps {
                c.push_str("timestamps = true\ntimestamp_tolerance = 5\n");
            }
            if o.signatures {
                c.push_str(&format!(
                    "signing_key = \"{}\"\nrequire_signatures = true\n",
                    keys[i].0.display()
                ));
                for (j, m) in names.iter().enumerate() {
                    if j != i {
                        let peer = self.station(m)?;
                        c.push_str(&format!(
                            "\n[[l2sec.peer]]\nmac = \"{}\"\npublic_key = \"{}\"\n",
                            mac_str(&peer.mac),
                            keys[j].1
                        ));
                        if o.peer_ips {
                            c.push_str(&format!("ip = \"{}\"\n", peer.ip));
                        }
                    }
                }
            }
            out.push(c);
        }
        Ok(out)
    }

    /// Starts `netveil up` with l2sec on the stations `names` (daemon names = station names).
    pub fn protect(&self, lab: &Lab, names: &[&str], o: &L2Opts) -> Result<Vec<Daemon>> {
        let cfgs = self.l2sec_configs(lab, names, o)?;
        names
            .iter()
            .zip(cfgs)
            .map(|(n, c)| lab.start_daemon(&self.station(n)?.ns, n, &c))
            .collect()
    }
}

/// Repetition in the encrypted sections of the l2sec frames of a capture: cipher blocks of `block` bytes,
/// aligned on the start of each frame's encrypted section (after the clear header) up to the ICV of `icv` bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockStats {
    pub frames: usize,
    pub blocks: usize,
    /// Blocks equal to an earlier block of the capture.
    pub repeated: usize,
}

/// Counts repeated cipher blocks in the l2sec frames (EtherType `ethertype`) of a pcap file.
pub fn repeated_blocks(
    pcap: &std::path::Path,
    ethertype: u16,
    block: usize,
    icv: usize,
) -> Result<BlockStats> {
    let cap = netveil_pcap::read_file(pcap).map_err(|e| Error::Usage(e.to_string()))?;
    let mut seen = std::collections::HashSet::new();
    let mut st = BlockStats::default();
    for rec in &cap.records {
        let frame = &rec.data[..];
        let Ok(p) = netveil_l2sec::peek(frame, ethertype) else {
            continue;
        };
        let start = 14 + p.header_len;
        let Some(end) = frame.len().checked_sub(icv) else {
            continue;
        };
        if end <= start {
            continue;
        }
        st.frames += 1;
        for b in frame[start..end].chunks_exact(block) {
            st.blocks += 1;
            if !seen.insert(b.to_vec()) {
                st.repeated += 1;
            }
        }
    }
    Ok(st)
}
