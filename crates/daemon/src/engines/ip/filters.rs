//! The rules of the socket filters every engine installs on its receive sockets, and when an engine counts as under
//! a storm of forged packets.

use netveil_io::filter::{spi_filter, spi_filter_gro, Layout, Program, SpiRule};
use netveil_io::{RawSocket, UdpSocket};
use netveil_ipsec::bundle::Sad;
use std::sync::Arc;
use std::time::Duration;

/// How far above a window's top the socket filters refuse counters during a storm of authentication failures:
/// twice the reservation block, more than a genuine sender ever jumps (a restarted one skips at most one block).
pub const STORM_CEILING_AHEAD: u64 = 2 * crate::runtime::state::SEQ_BLOCK;

/// The socket-filter rule of a receive SA with window state `w` (top, size): the floor (twice the window below the
/// top, so a filter that lags behind never refuses what the window would take) and, during a storm, the ceiling
/// ([`STORM_CEILING_AHEAD`] above the top; none before the first packet authenticated).
pub fn window_rule(spi: u32, w: Option<(u64, u32)>, storm: bool) -> SpiRule {
    let (floor, ceiling) = match w {
        Some((top, size)) => (
            Some(top.saturating_sub(2 * u64::from(size))).filter(|f| *f > 0),
            (storm && top > 0).then(|| top.saturating_add(STORM_CEILING_AHEAD)),
        ),
        None => (None, None),
    };
    SpiRule {
        spi,
        floor,
        ceiling,
    }
}

/// The longest single ESP-in-UDP or PSP datagram a peer sends with a tunnel MTU of `mtu` (the inner packet and every
/// header and trailer, generously): anything longer on a GRO socket is datagrams coalesced by the kernel.
pub fn single_datagram_max(mtu: u16) -> u32 {
    u32::from(mtu) + 512
}

/// Authentication failures per second from which the receive path counts as under a storm (forged packets with
/// the right SPI): the socket filters then also refuse counters far above the window.
pub const STORM_AUTH_FAILURES_PER_S: u64 = 1000;
/// How long the storm mode outlasts the last second with that many failures.
pub const STORM_HOLD: Duration = Duration::from_secs(2);

/// A receive socket with a socket filter.
pub enum FilterSock {
    Udp(Arc<UdpSocket>),
    Raw(Arc<RawSocket>),
}

impl FilterSock {
    pub fn attach(&self, p: Option<&Program>) -> std::io::Result<()> {
        match self {
            FilterSock::Udp(s) => s.attach_filter(p),
            FilterSock::Raw(s) => s.attach_filter(p),
        }
    }

    /// The one address family the socket receives (`Some(true)`: IPv6; the IPv6 sockets are `IPV6_V6ONLY`),
    /// from its layout or its address.
    pub fn family(&self, layout: Layout) -> Option<bool> {
        match (layout, self) {
            (Layout::EspRawV4 | Layout::AhRawV4, _) => Some(false),
            (Layout::EspRawV6 | Layout::AhRawV6, _) => Some(true),
            (_, FilterSock::Udp(s)) => Some(s.local_addr().is_ipv6()),
            _ => None,
        }
    }

    pub fn kernel_drops(&self) -> std::io::Result<u32> {
        match self {
            FilterSock::Udp(s) => s.kernel_drops(),
            FilterSock::Raw(s) => s.kernel_drops(),
        }
    }
}

/// The socket filter of an ESP or AH receive socket: the inbound SAs of its protocol that arrive that way (ESP in
/// UDP, or raw; AH raw), each with its window (see [`window_rule`]). `None` (no filter) if there are too many SAs
/// for one filter.
pub fn esp_filter(sad: &Sad, layout: Layout, storm: bool, mtu: u16) -> Option<Program> {
    esp_filter_for(sad, layout, storm, mtu, None)
}

/// [`esp_filter`] for a socket that receives one address family only (`v6`: `Some(true)` IPv6, `Some(false)`
/// IPv4): a tunnel-mode SA whose peer is of the other family never arrives there and is left out (an
/// IPv4-mapped IPv6 peer counts as both). So adding an IPv4 SA leaves the IPv6 socket's program as it is, and
/// the kernel compiles one program per change, not two.
pub fn esp_filter_for(
    sad: &Sad,
    layout: Layout,
    storm: bool,
    mtu: u16,
    v6: Option<bool>,
) -> Option<Program> {
    let reaches = |mode: &netveil_ipsec::Mode| match (mode, v6) {
        (netveil_ipsec::Mode::Tunnel { remote, .. }, Some(v6)) => match remote {
            std::net::IpAddr::V4(_) => !v6,
            std::net::IpAddr::V6(a) => v6 || a.to_ipv4_mapped().is_some(),
        },
        _ => true,
    };
    let udp = layout == Layout::EspInUdp;
    let protocol = match layout {
        Layout::AhRawV4 | Layout::AhRawV6 => netveil_ipsec::Protocol::Ah,
        _ => netveil_ipsec::Protocol::Esp,
    };
    let rules: Vec<SpiRule> = sad
        .inbound()
        .filter(|s| s.protocol() == protocol && s.params.encap.is_some() == udp)
        .filter(|s| reaches(&s.params.mode))
        .map(|s| window_rule(s.spi(), s.replay_state(), storm))
        .collect();
    if udp {
        spi_filter_gro(layout, &rules, single_datagram_max(mtu))
    } else {
        spi_filter(layout, &rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each raw socket's filter lists the inbound SAs of its protocol that arrive raw: the ESP filters (both
    /// families) the raw ESP SA, the AH filters the AH SA, the ESP-in-UDP filter the UDP one; never an outbound SA.
    #[test]
    fn each_socket_filter_lists_its_protocols_sas() {
        let key = |n: usize| "11".repeat(n);
        let sa = |name: &str,
                  dir: &str,
                  proto: &str,
                  spi: u32,
                  suite: &str,
                  k: String,
                  extra: &str| {
            format!(
                "[[sa]]\nname = \"{name}\"\ndirection = \"{dir}\"\nprotocol = \"{proto}\"\nspi = {spi}\n\
                 mode = \"transport\"\nsuite = \"{suite}\"\n{k}\n{extra}\n"
            )
        };
        let text = [
            "[interface]\n".to_string(),
            sa(
                "esp-in",
                "in",
                "esp",
                0x1001,
                "aes128gcm16",
                format!("enc_key = \"{}\"", key(20)),
                "",
            ),
            sa(
                "ah-in",
                "in",
                "ah",
                0x2001,
                "sha256",
                format!("auth_key = \"{}\"", key(32)),
                "",
            ),
            sa(
                "udp-in",
                "in",
                "esp",
                0x3001,
                "aes128gcm16",
                format!("enc_key = \"{}\"", key(20)),
                "encap = \"udp\"",
            ),
            sa(
                "esp-out",
                "out",
                "esp",
                0x4001,
                "aes128gcm16",
                format!("enc_key = \"{}\"", key(20)),
                "",
            ),
            sa(
                "ah-out",
                "out",
                "ah",
                0x5001,
                "sha256",
                format!("auth_key = \"{}\"", key(32)),
                "",
            ),
        ]
        .concat();
        let cfg = crate::engines::ip::config::Config::parse(&text).unwrap();
        let (sad, _) = cfg.build_sad(0).unwrap();
        // What each filter passes, over what its socket's filter sees: the SPI at the layout's offset.
        let passes = |layout: Layout, spi: u32| {
            let p = esp_filter(&sad, layout, false, 1400).unwrap();
            let mut pkt = match layout {
                Layout::EspRawV4 | Layout::AhRawV4 => {
                    let mut h = vec![0u8; 20];
                    h[0] = 0x45;
                    h
                }
                Layout::EspInUdp => vec![0u8; 8],
                _ => Vec::new(),
            };
            if matches!(layout, Layout::AhRawV4 | Layout::AhRawV6) {
                pkt.extend_from_slice(&[59, 4, 0, 0]);
            }
            pkt.extend_from_slice(&spi.to_be_bytes());
            pkt.extend_from_slice(&1u32.to_be_bytes());
            pkt.extend_from_slice(&[0; 32]);
            netveil_io::filter::run(&p, &pkt)
        };
        let spis = [0x1001, 0x2001, 0x3001, 0x4001, 0x5001];
        for (layout, pass) in [
            (Layout::EspRawV4, 0x1001),
            (Layout::EspRawV6, 0x1001),
            (Layout::AhRawV4, 0x2001),
            (Layout::AhRawV6, 0x2001),
            (Layout::EspInUdp, 0x3001),
        ] {
            for spi in spis {
                assert_eq!(passes(layout, spi), spi == pass, "{layout:?} {spi:#x}");
            }
        }
        // The raw sockets of both protocols and families get a filter; no other protocol has one.
        assert_eq!(Layout::raw(50, true), Some(Layout::EspRawV6));
        assert_eq!(Layout::raw(51, false), Some(Layout::AhRawV4));
        assert_eq!(Layout::raw(17, false), None);
    }

    #[test]
    fn window_rules() {
        let r = window_rule(7, Some((10_000, 1024)), false);
        assert_eq!((r.spi, r.floor, r.ceiling), (7, Some(10_000 - 2048), None));
        let r = window_rule(7, Some((10_000, 1024)), true);
        assert_eq!(r.ceiling, Some(10_000 + STORM_CEILING_AHEAD));
        const { assert!(STORM_CEILING_AHEAD > crate::runtime::state::SEQ_BLOCK) };
        let r = window_rule(7, Some((0, 1024)), true);
        assert_eq!((r.floor, r.ceiling), (None, None));
        let r = window_rule(7, Some((100, 1024)), true);
        assert_eq!(r.floor, None);
        let r = window_rule(7, None, true);
        assert_eq!((r.floor, r.ceiling), (None, None));
    }

    /// A socket of one family lists only the UDP-encapsulated tunnel SAs whose peer is of that family (and the
    /// transport-mode ones, whose peers the SA does not say; an IPv4-mapped peer counts as both): adding an IPv4
    /// SA leaves the IPv6 socket's program unchanged, so it is not compiled and attached again.
    #[test]
    fn a_socket_of_one_family_lists_the_sas_of_its_peers() {
        let key = "11".repeat(20);
        let sa = |name: &str, spi: u32, mode: &str| {
            format!(
                "[[sa]]\nname = \"{name}\"\ndirection = \"in\"\nprotocol = \"esp\"\nspi = {spi}\n{mode}\n\
                 suite = \"aes128gcm16\"\nenc_key = \"{key}\"\nencap = \"udp\"\n"
            )
        };
        let tunnel =
            |l: &str, r: &str| format!("mode = \"tunnel\"\nlocal = \"{l}\"\nremote = \"{r}\"");
        let text = [
            "[interface]\n".to_string(),
            sa("v4", 0x1001, &tunnel("192.0.2.1", "192.0.2.2")),
            sa("v6", 0x2001, &tunnel("2001:db8::1", "2001:db8::2")),
            sa(
                "mapped",
                0x3001,
                &tunnel("::ffff:192.0.2.1", "::ffff:192.0.2.3"),
            ),
            sa("transport", 0x4001, "mode = \"transport\""),
        ]
        .concat();
        let cfg = crate::engines::ip::config::Config::parse(&text).unwrap();
        let (sad, _) = cfg.build_sad(0).unwrap();
        let passed = |v6: Option<bool>| -> Vec<u32> {
            let p = esp_filter_for(&sad, Layout::EspInUdp, false, 1400, v6).unwrap();
            [0x1001u32, 0x2001, 0x3001, 0x4001]
                .into_iter()
                .filter(|spi| {
                    let mut pkt = vec![0u8; 8];
                    pkt.extend_from_slice(&spi.to_be_bytes());
                    pkt.extend_from_slice(&1u32.to_be_bytes());
                    pkt.extend_from_slice(&[0; 32]);
                    netveil_io::filter::run(&p, &pkt)
                })
                .collect()
        };
        assert_eq!(passed(Some(false)), [0x1001, 0x3001, 0x4001]);
        assert_eq!(passed(Some(true)), [0x2001, 0x3001, 0x4001]);
        assert_eq!(passed(None), [0x1001, 0x2001, 0x3001, 0x4001]);
        // Without the IPv4 SA, the IPv4 socket's program differs and the IPv6 socket's is the same.
        let without = text.replace(&sa("v4", 0x1001, &tunnel("192.0.2.1", "192.0.2.2")), "");
        let (fewer, _) = crate::engines::ip::config::Config::parse(&without)
            .unwrap()
            .build_sad(0)
            .unwrap();
        let prog = |sad: &Sad, v6| esp_filter_for(sad, Layout::EspInUdp, false, 1400, Some(v6));
        assert_ne!(prog(&sad, false), prog(&fewer, false));
        assert_eq!(prog(&sad, true), prog(&fewer, true));
    }
}
