//! [`TwoHosts`]: a [`HostPair`] brought up in a [`Lab`], two namespaces joined by a veth pair or through a
//! [`Router`], with a daemon in each.

use super::capture::Capture;
use super::config::{Family, HostAddrs, HostPair, Mode};
use super::daemon::Daemon;
use super::netns::Lab;
use super::traffic::{tcp_transfer, Transfer};
use crate::{Error, Result};
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;

/// Two namespaces ("a", "b") joined by a veth pair (`veth-a`, `veth-b`) with a netveil daemon in each; with
/// [`HostPair::routed`], by a [`Router`] instead.
pub struct TwoHosts {
    pub pair: HostPair,
    pub ns: [String; 2],
    pub veth: [&'static str; 2],
    pub addrs: [HostAddrs; 2],
    pub configs: [String; 2],
    /// The router between the hosts, when the pair is routed.
    pub router: Option<Router>,
    /// Dropped before the lab (field order).
    pub daemons: Vec<Daemon>,
}

/// The router in the middle of a routed [`TwoHosts`]: namespace "r", a veth pair to each host (its ports `r-a`
/// and `r-b`; the hosts' ends keep their names `veth-a` and `veth-b`), IP forwarding on, and on each host a route
/// to the other host's subnet through it. It is where the lab makes link conditions (loss, delay) and where it
/// can capture what crosses between the hosts.
pub struct Router {
    pub ns: String,
    /// Its port toward side a, and toward side b.
    pub ports: [&'static str; 2],
    /// Its address on each link.
    pub addrs: [IpAddr; 2],
}

impl Router {
    /// The capture point between the hosts: tcpdump on the router's port toward side `side` (0: the client's, 1:
    /// the server's), as [`Lab::capture`]. A capture there sees what arrives on that link before the router's own
    /// rules (the loss lab's drop) and what the router sends onto it.
    pub fn capture(
        &self,
        lab: &Lab,
        side: usize,
        file: &str,
        snaplen: u32,
        filter: &[&str],
    ) -> Result<Capture> {
        lab.capture(&self.ns, self.ports[side], file, snaplen, filter)
    }
}

/// The network `addr/prefix` lies in, as `ip route` takes it (host bits zero).
pub(super) fn network(addr: IpAddr, prefix: u8) -> String {
    match addr {
        IpAddr::V4(v) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            format!("{}/{prefix}", std::net::Ipv4Addr::from(u32::from(v) & mask))
        }
        IpAddr::V6(v) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            format!(
                "{}/{prefix}",
                std::net::Ipv6Addr::from(u128::from(v) & mask)
            )
        }
    }
}

impl Router {
    /// The router's address on side `side`'s link: .254 (v4) or ::fe (v6) of that side's subnet.
    pub(super) fn address(pair: &HostPair, side: usize) -> (IpAddr, u8) {
        let a = pair.addrs(side);
        match a.outer {
            IpAddr::V4(v) => {
                let o = v.octets();
                (IpAddr::from([o[0], o[1], o[2], 254]), a.outer_prefix)
            }
            IpAddr::V6(v) => {
                let mut s = v.segments();
                s[7] = 0xfe;
                (IpAddr::from(s), a.outer_prefix)
            }
        }
    }

    /// Builds the router between `ns[0]` and `ns[1]` (whose ends are `veth[0]`, `veth[1]`) and addresses the
    /// hosts' ends.
    fn build(
        lab: &mut Lab,
        pair: &HostPair,
        ns: &[String; 2],
        veth: [&'static str; 2],
        addrs: &[HostAddrs; 2],
    ) -> Result<Router> {
        let r = lab.add_ns("r")?;
        let ports = ["r-a", "r-b"];
        let v6 = pair.outer == Family::V6;
        if v6 {
            lab.exec_ok(&r, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])?;
        } else {
            lab.exec_ok(&r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
            lab.exec_ok(
                &r,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        let mut raddrs = Vec::new();
        for i in 0..2 {
            lab.veth(&ns[i], veth[i], &r, ports[i])?;
            let (ra, prefix) = Router::address(pair, i);
            lab.addr(&r, ports[i], &format!("{ra}/{prefix}"))?;
            let cidr = format!("{}/{}", addrs[i].outer, addrs[i].outer_prefix);
            lab.addr(&ns[i], veth[i], &cidr)?;
            raddrs.push(ra);
        }
        for i in 0..2 {
            let subnet = network(addrs[1 - i].outer, addrs[1 - i].outer_prefix);
            let via = raddrs[i].to_string();
            let fam = if v6 { "-6" } else { "-4" };
            lab.ip(&ns[i], &[fam, "route", "add", &subnet, "via", &via])?;
        }
        Ok(Router {
            ns: r,
            ports,
            addrs: [raddrs[0], raddrs[1]],
        })
    }
}

impl TwoHosts {
    /// Builds the topology in `lab` (without daemons).
    pub fn topology(lab: &mut Lab, pair: &HostPair) -> Result<TwoHosts> {
        let a = lab.add_ns("a")?;
        let b = lab.add_ns("b")?;
        let veth = ["veth-a", "veth-b"];
        if pair.outer == Family::V4 && (pair.inner == Family::V4 || pair.mode == Mode::Transport) {
            // No IPv6 link-local chatter on an IPv4-only wire: captures show only what the test is about.
            for ns in [&a, &b] {
                lab.exec_ok(
                    ns,
                    &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                )?;
            }
        }
        let addrs = [pair.addrs(0), pair.addrs(1)];
        let ns = [a, b];
        let router = if pair.routed {
            Some(Router::build(lab, pair, &ns, veth, &addrs)?)
        } else {
            lab.veth(&ns[0], veth[0], &ns[1], veth[1])?;
            for i in 0..2 {
                let cidr = format!("{}/{}", addrs[i].outer, addrs[i].outer_prefix);
                lab.addr(&ns[i], veth[i], &cidr)?;
            }
            None
        };
        let configs = pair.configs_with(
            lab.netveil(),
            [&lab.socket_path("a"), &lab.socket_path("b")],
        )?;
        Ok(TwoHosts {
            pair: pair.clone(),
            ns,
            veth,
            addrs,
            configs,
            router,
            daemons: Vec::new(),
        })
    }

    /// Builds the topology and starts both daemons.
    pub fn up(lab: &mut Lab, pair: &HostPair) -> Result<TwoHosts> {
        let mut h = TwoHosts::topology(lab, pair)?;
        h.start(lab)?;
        Ok(h)
    }

    /// Starts both daemons.
    pub fn start(&mut self, lab: &Lab) -> Result<()> {
        for (i, n) in ["a", "b"].iter().enumerate() {
            let d = lab.start_daemon(&self.ns[i], n, &self.configs[i])?;
            self.daemons.push(d);
        }
        Ok(())
    }

    pub fn daemon(&self, side: usize) -> &Daemon {
        &self.daemons[side]
    }

    /// PSP: waits until both daemons are connected and hold each other's association.
    pub fn wait_psp_associated(&self, timeout: Duration) -> Result<()> {
        let t = std::time::Instant::now();
        loop {
            // Connected, and each side sends with the SPI the other handed out last (not an older one of a peer
            // that restarted).
            let st: Vec<Value> = self
                .daemons
                .iter()
                .filter_map(|d| d.status_json().ok())
                .collect();
            let ok = st.len() == 2
                && st
                    .iter()
                    .all(|s| s["psp"]["connected"] == true && s["psp"]["tx_spi"] != "0x00000000")
                && st[0]["psp"]["tx_spi"] == st[1]["psp"]["rx_spi"]
                && st[1]["psp"]["tx_spi"] == st[0]["psp"]["rx_spi"];
            if ok {
                return Ok(());
            }
            if t.elapsed() > timeout {
                return Err(Error::timeout(
                    "no PSP association",
                    timeout.as_secs_f64(),
                    format!(
                        "--- a ---\n{}\n--- b ---\n{}",
                        self.daemons.first().map(|d| d.log()).unwrap_or_default(),
                        self.daemons.get(1).map(|d| d.log()).unwrap_or_default()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ping -c COUNT -i INTERVAL` from side `from` to the other side's inner address; returns ping's output.
    pub fn ping(&self, lab: &Lab, from: usize, count: u32, interval: &str) -> Result<String> {
        let dst = self.addrs[1 - from].inner.to_string();
        let c = count.to_string();
        lab.exec_ok(
            &self.ns[from],
            &["ping", "-n", "-c", &c, "-i", interval, "-W", "2", &dst],
        )
    }

    /// A TCP transfer of `bytes` from side `from` to the other side's inner address (see [`tcp_transfer`]).
    pub fn tcp(&self, from: usize, bytes: u64) -> Result<Transfer> {
        tcp_transfer(
            &self.ns[from],
            &self.ns[1 - from],
            self.addrs[1 - from].inner,
            5201,
            bytes,
        )
    }
}
