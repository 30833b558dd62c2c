//! A wired-LAN lab for layer-2 protection (l2sec): a Linux bridge in its own namespace as the switch, hosts
//! connected to it by veth pairs (`eth0` on the host side), an eavesdropper whose port sees every frame, and an
//! attacker on the same LAN.
//!
//! The bridge does not learn addresses (ageing time 0), so it floods every frame to every port, as a hub or a
//! switch with a mirror port would: the eavesdropper sees all traffic between the other hosts.

use crate::lab::Lab;
use crate::{Error, Result};
use std::net::Ipv4Addr;

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
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Lan {
    /// Builds the switch and one station per name, station `i` with address 192.0.2.(10 + i)/24 and MAC
    /// 02:00:5e:00:53:(10 + i) (documentation ranges). IPv6 is off on the LAN so that captures hold only what a
    /// test sends.
    pub fn build(lab: &mut Lab, names: &[&str]) -> Result<Lan> {
        let switch_ns = lab.add_ns("sw")?;
        lab.ip(
            &switch_ns,
            &["link", "add", "br0", "type", "bridge", "ageing_time", "0"],
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
            lab.addr(&ns, PORT, &format!("{ip}/24"))?;
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
