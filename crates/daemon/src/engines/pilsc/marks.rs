//! The keys' counter marks and the sources' receive floors in the state directory (see
//! [`crate::runtime::state`]): a restart never reuses a counter and never accepts a packet twice.

use crate::runtime::state::StateDir;
use netveil_pilsc::cipher::Cipher;

/// Counters reserved ahead per key: a crash skips at most this many, and the mark is synced once per this many
/// packets (half a block ahead).
pub const MARK_BLOCK: u64 = 1 << 16;

/// The file name of the counter mark of a key under a cipher (a one-way fingerprint: the key cannot be learned
/// from it).
pub(super) fn mark_file(cipher: Cipher, key: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"netveil pilsc mark v1\0");
    h.update(cipher.to_string().as_bytes());
    h.update([0]);
    h.update(key);
    format!("pilsc-{}", hex::encode(&h.finalize()[..16]))
}

/// The smallest block a receive ceiling is raised by, and the time of traffic a block should last (as static ESP
/// keys' receive floors, [`crate::runtime::state::RxStore`]).
pub(super) const RX_MIN_BLOCK: u64 = crate::runtime::state::RX_MIN_BLOCK;
pub(super) const RX_BLOCK_MILLIS: u64 = crate::runtime::state::RX_BLOCK_MILLIS;
/// An authenticated packet above its source's ceiling reserves this far above itself at once (the top-up between
/// batches then reserves by the source's rate).
pub(super) const RX_INLINE_BLOCK: u64 = RX_MIN_BLOCK;

/// The file of a source's receive floor under the key whose counter mark is `mark` (`pilsc-...`).
pub(super) fn rx_file(mark: &str, src: std::net::Ipv4Addr) -> String {
    format!("{}-rx-{}", mark, u32::from(src))
}

/// A key's receive floors in the state directory (see [`netveil_pilsc::packet::Floors`]).
pub(super) struct RxFloors<'a> {
    pub(super) dir: &'a StateDir,
    /// The key's counter mark file name.
    pub(super) name: &'a str,
}

impl netveil_pilsc::packet::Floors for RxFloors<'_> {
    fn load(&mut self, src: std::net::Ipv4Addr) -> Option<u64> {
        let f = rx_file(self.name, src);
        match self
            .dir
            .read_floor(&f, "pilsc.state_dir", &format!("pilsc receiver of {src}"))
        {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!("pilsc: {}", e.reason);
                None
            }
        }
    }

    fn reserve(&mut self, src: std::net::Ipv4Addr, counter: u64) -> Option<u64> {
        let c = counter.saturating_add(RX_INLINE_BLOCK);
        match self.dir.write_u64(&rx_file(self.name, src), c) {
            Ok(()) => Some(c),
            Err(e) => {
                tracing::error!("pilsc: cannot write a receive floor: {e}");
                None
            }
        }
    }
}
