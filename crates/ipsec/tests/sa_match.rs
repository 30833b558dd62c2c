//! Inbound SA selection beyond the SPI: a tunnel SA only accepts packets addressed to its local end, and the
//! encapsulation (raw ESP or ESP-in-UDP) must be the one the SA is configured for.

use netveil_crypto::rand::OsRng;
use netveil_ipsec::bundle::{self, Sad};
use netveil_ipsec::sa::{Direction, Suite};
use netveil_ipsec::suite::EspSuite;
use netveil_ipsec::{Drop, InboundSa, Mode, OutboundSa, SaError, SaParams, UdpEncap};
use netveil_sa::lifetime::Lifetime;
use netveil_wire::PacketBuf;
use std::net::IpAddr;

fn params(dir: Direction, local: &str, remote: &str, udp: bool) -> SaParams {
    SaParams {
        name: "t".into(),
        spi: 0x4242,
        direction: dir,
        suite: Suite::Esp(EspSuite::parse("aes128gcm16", false).unwrap()),
        mode: Mode::Tunnel {
            local: local.parse::<IpAddr>().unwrap(),
            remote: remote.parse().unwrap(),
        },
        enc_key: zeroize::Zeroizing::new(vec![7u8; 20]),
        auth_key: zeroize::Zeroizing::new(vec![]),
        esn: false,
        replay_window: 1024,
        lifetime: Lifetime::default(),
        encap: udp.then_some(UdpEncap {
            local_port: 4500,
            remote_port: 4500,
        }),
        tfc_pad_to: 0,
        first_seq: 1,
    }
}

fn inner() -> PacketBuf {
    let mut ip = vec![
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 51, 100, 1, 198, 51, 100, 2,
    ];
    let c = netveil_wire::checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip.extend_from_slice(&[0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0]);
    PacketBuf::from_slice(&ip, 128, 128)
}

fn sealed(out_local: &str, out_remote: &str, udp: bool) -> PacketBuf {
    let mut out = Sad::default();
    let o = out.insert_out(
        OutboundSa::new(
            params(Direction::Out, out_local, out_remote, udp),
            0,
            &mut OsRng,
        )
        .unwrap(),
    );
    let mut p = inner();
    bundle::protect(&out, &[o], &mut p, 0).unwrap();
    p
}

fn receiver(udp: bool) -> Sad {
    let mut sad = Sad::default();
    sad.insert_in(InboundSa::new(params(Direction::In, "192.0.2.2", "192.0.2.1", udp), 0).unwrap())
        .unwrap();
    sad
}

#[test]
fn tunnel_sa_accepts_only_its_local_address() {
    let mut ok = sealed("192.0.2.1", "192.0.2.2", false);
    assert!(bundle::unprotect(&receiver(false), &mut ok, 4500, 0).is_ok());
    let mut elsewhere = sealed("192.0.2.1", "192.0.2.9", false);
    let sad = receiver(false);
    assert_eq!(
        bundle::unprotect(&sad, &mut elsewhere, 4500, 0),
        Err(Drop::UnknownSpi)
    );
    assert_eq!(sad.inbound().next().unwrap().counters.snapshot().dropped, 1);
}

/// An SA is built as the type of its direction only: the parameters of an inbound SA (the peer's sending keys)
/// cannot become an SA that seals, nor an outbound SA's one that opens.
#[test]
fn an_sa_is_built_only_as_its_own_direction() {
    let inbound = params(Direction::In, "192.0.2.2", "192.0.2.1", false);
    let outbound = params(Direction::Out, "192.0.2.1", "192.0.2.2", false);
    assert_eq!(
        OutboundSa::new(inbound.clone(), 0, &mut OsRng).err(),
        Some(SaError::Direction)
    );
    assert_eq!(
        OutboundSa::with_reservation(inbound.clone(), 0, 1 << 20, &mut OsRng).err(),
        Some(SaError::Direction)
    );
    assert_eq!(
        InboundSa::new(outbound.clone(), 0).err(),
        Some(SaError::Direction)
    );
    assert!(OutboundSa::new(outbound, 0, &mut OsRng).is_ok());
    assert!(InboundSa::new(inbound, 0).is_ok());
}

#[test]
fn encapsulation_must_match_the_sa() {
    let mut raw = sealed("192.0.2.1", "192.0.2.2", false);
    assert_eq!(
        bundle::unprotect(&receiver(true), &mut raw, 4500, 0),
        Err(Drop::Unsupported)
    );
    let mut udp = sealed("192.0.2.1", "192.0.2.2", true);
    assert_eq!(
        bundle::unprotect(&receiver(false), &mut udp, 4500, 0),
        Err(Drop::Unsupported)
    );
    let mut udp = sealed("192.0.2.1", "192.0.2.2", true);
    assert!(bundle::unprotect(&receiver(true), &mut udp, 4500, 0).is_ok());
}
