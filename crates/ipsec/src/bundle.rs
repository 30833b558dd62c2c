//! The SA database and SA bundles: outbound, apply a policy's SAs in order (innermost first); inbound, peel ESP/AH
//! headers off one by one, remembering which SAs were used, so the policy check can compare them with the bundle
//! that the inbound policy requires.

use crate::inbound::{classify, Classified};
use crate::sa::{Direction, Mode, Sa};
use crate::{ah, esp, Drop, Protocol};
use netveil_wire::PacketBuf;
use std::collections::HashMap;

/// The most SAs one bundle may have (ESP inside AH is two).
pub const MAX_BUNDLE: usize = 4;

/// All installed SAs, indexed by (protocol, SPI) for inbound lookup. Built once; SAs carry their own
/// thread-safe state, so the database is shared read-only between data-plane threads.
#[derive(Default)]
pub struct Sad {
    sas: Vec<Sa>,
    inbound: HashMap<(Protocol, u32), usize>,
}

impl Sad {
    /// Adds an SA; returns its index. Fails on an inbound (protocol, SPI) that exists already.
    pub fn insert(&mut self, sa: Sa) -> Result<usize, String> {
        let idx = self.sas.len();
        if sa.params.direction == Direction::In {
            let key = (sa.protocol(), sa.spi());
            if self.inbound.contains_key(&key) {
                return Err(format!("two inbound SAs with SPI {:#010x}", sa.spi()));
            }
            self.inbound.insert(key, idx);
        }
        self.sas.push(sa);
        Ok(idx)
    }
    pub fn get(&self, idx: usize) -> &Sa {
        &self.sas[idx]
    }
    pub fn iter(&self) -> impl Iterator<Item = &Sa> {
        self.sas.iter()
    }
    pub fn lookup_inbound(&self, proto: Protocol, spi: u32) -> Option<usize> {
        self.inbound.get(&(proto, spi)).copied()
    }
}

/// Applies the SAs `bundle` (indices into `sad`, innermost first) to the packet.
pub fn protect(sad: &Sad, bundle: &[usize], pkt: &mut PacketBuf, now: u64) -> Result<(), Drop> {
    for &i in bundle {
        let sa = sad.get(i);
        match sa.protocol() {
            Protocol::Esp => esp::encapsulate(sa, pkt, now)?,
            Protocol::Ah => ah::encapsulate(sa, pkt, now)?,
        }
    }
    Ok(())
}

/// The SAs an inbound packet came through, outermost first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    sas: [usize; MAX_BUNDLE],
    len: usize,
}

impl Used {
    pub fn as_slice(&self) -> &[usize] {
        &self.sas[..self.len]
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether these SAs are exactly `bundle` (given innermost first, as policies list them).
    pub fn matches(&self, bundle: &[usize]) -> bool {
        self.len == bundle.len() && self.as_slice().iter().rev().eq(bundle.iter())
    }
}

/// Result of inbound processing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unprotected {
    /// `pkt` now holds the decapsulated packet; these SAs were used.
    Packet(Used),
    /// The packet was not protected at all (the caller's policy decides).
    Clear,
    /// An IKE message or NAT keepalive on the NAT-T port.
    NotEsp,
}

/// Removes every ESP/AH layer of the packet in `pkt`. On error, the drop is already counted on the SA concerned
/// (if any); the caller counts it globally.
pub fn unprotect(
    sad: &Sad,
    pkt: &mut PacketBuf,
    nat_t_port: u16,
    now: u64,
) -> Result<Unprotected, Drop> {
    let mut used = Used::default();
    loop {
        match classify(pkt, nat_t_port)? {
            Classified::Clear(_) if used.is_empty() => return Ok(Unprotected::Clear),
            Classified::Clear(_) => return Ok(Unprotected::Packet(used)),
            Classified::NotEsp if used.is_empty() => return Ok(Unprotected::NotEsp),
            Classified::NotEsp => return Err(Drop::Unsupported),
            Classified::Protected(loc) => {
                if used.len == MAX_BUNDLE {
                    return Err(Drop::Unsupported);
                }
                let idx = sad
                    .lookup_inbound(loc.protocol, loc.spi)
                    .ok_or(Drop::UnknownSpi)?;
                let sa = sad.get(idx);
                // As the kernel's SA lookup by (destination, SPI, protocol): a tunnel SA takes only packets addressed to
                // its local end; ESP-in-UDP only for an SA configured for it, and raw ESP only for one that is not.
                if let Mode::Tunnel { local, .. } = sa.params.mode {
                    if crate::iphdr::dst_addr(pkt.data()) != Some(local) {
                        return Err(sa.count_drop(Drop::UnknownSpi));
                    }
                }
                if loc.udp != sa.params.encap.is_some() {
                    return Err(sa.count_drop(Drop::Unsupported));
                }
                let d = match loc.protocol {
                    Protocol::Esp => esp::decapsulate(sa, pkt, &loc, now)?,
                    Protocol::Ah => ah::decapsulate(sa, pkt, &loc, now)?,
                };
                used.sas[used.len] = idx;
                used.len += 1;
                if d.tunnel {
                    return Ok(Unprotected::Packet(used));
                }
            }
        }
    }
}
