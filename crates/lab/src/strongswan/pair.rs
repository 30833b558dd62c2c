//! Two charons: [`SwanPair`], two namespaces joined by a veth pair with a charon in each.

use super::charon::{Charon, CharonOptions};
use super::conf::{SwanAuth, SwanChild, SwanConn, Unique};
use crate::lab::Lab;
use crate::Result;
use std::net::IpAddr;

/// Addresses of a [`SwanPair`]: outer on a veth pair, inner (the traffic selectors) on `lo`.
pub const PAIR_OUTER: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
pub const PAIR_INNER: [&str; 2] = ["198.51.100.1", "198.51.100.2"];
/// The ids of a [`SwanPair`] (FQDNs; with certificates also the certificates' subjectAltNames).
pub const PAIR_IDS: [&str; 2] = ["a.lab.test", "b.lab.test"];

/// Two namespaces (`a` initiator, `b` responder) joined by a veth pair, a charon in each. The inner addresses
/// ([`PAIR_INNER`], /32 on `lo`) are what the children's traffic selectors cover: charon (libipsec) routes
/// them over its `ipsec0` TUN device once a child is installed, so a ping between them crosses the tunnel.
pub struct SwanPair {
    pub ns: [String; 2],
    pub charons: [Charon; 2],
}

impl SwanPair {
    /// Builds the topology and starts both charons (nothing loaded yet).
    pub fn up(lab: &mut Lab, opts: &CharonOptions) -> Result<SwanPair> {
        let a = lab.add_ns("a")?;
        let b = lab.add_ns("b")?;
        for ns in [&a, &b] {
            // IPv4 only: no IPv6 chatter for libipsec to log about.
            lab.exec_ok(ns, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
            lab.exec_ok(
                ns,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )?;
        }
        lab.veth(&a, "veth-a", &b, "veth-b")?;
        let ns = [a, b];
        for i in 0..2 {
            lab.addr(
                &ns[i],
                ["veth-a", "veth-b"][i],
                &format!("{}/24", PAIR_OUTER[i]),
            )?;
            lab.addr(&ns[i], "lo", &format!("{}/32", PAIR_INNER[i]))?;
        }
        let ca = Charon::start(lab, &ns[0], "a", opts)?;
        let cb = Charon::start(lab, &ns[1], "b", opts)?;
        Ok(SwanPair {
            ns,
            charons: [ca, cb],
        })
    }

    pub fn outer(side: usize) -> IpAddr {
        PAIR_OUTER[side]
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    pub fn inner(side: usize) -> IpAddr {
        PAIR_INNER[side]
            .parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    /// Side `side`'s connection `name` with one host-to-host child `child` between the inner addresses; `auth`
    /// per side (a PSK for both, or each side's own credential).
    pub fn conn(
        side: usize,
        name: &str,
        auth: SwanAuth,
        proposals: &str,
        child: &str,
        esp_proposals: &str,
    ) -> SwanConn {
        let o = 1 - side;
        let mut c = SwanConn {
            name: name.into(),
            local_addrs: vec![Self::outer(side)],
            remote_addrs: vec![Self::outer(o)],
            local_id: PAIR_IDS[side].into(),
            remote_id: PAIR_IDS[o].into(),
            auth,
            proposals: proposals.into(),
            encap: true,
            dpd_delay: None,
            rekey_time: None,
            unique: Unique::No,
            children: Vec::new(),
        };
        c.children.push(SwanChild::host_to_host(
            child,
            Self::inner(side),
            Self::inner(o),
            esp_proposals,
        ));
        c
    }

    /// Loads `[a's, b's]` connections.
    pub fn load(&self, conns: [&[SwanConn]; 2]) -> Result<()> {
        self.charons[0].load(conns[0])?;
        self.charons[1].load(conns[1])
    }

    /// Both charons' log tails, for failure messages.
    pub fn logs(&self, n: usize) -> String {
        format!(
            "{}{}",
            self.charons[0].log_tail(n),
            self.charons[1].log_tail(n)
        )
    }
}
