//! What `netveil status` shows of the endpoint (as `swanctl --list-sas`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::sa::State;
use super::{glue, Endpoint};
use crate::config::{Mode, TsSpec};
use crate::event::IkeSaId;
use crate::keys::Role;

/// One CHILD_SA in [`IkeSaStatus`].
#[derive(Debug, Clone, PartialEq)]
pub struct ChildStatus {
    pub name: String,
    pub inbound_spi: u32,
    pub outbound_spi: u32,
    pub mode: Mode,
    /// The selected ESP proposal in strongSwan's syntax.
    pub proposal: String,
    pub local_ts: Vec<TsSpec>,
    pub remote_ts: Vec<TsSpec>,
    /// Since the CHILD_SA was installed (its life time less what is left of it).
    pub installed: Duration,
    /// Until it is rekeyed (zero: due now), and until it expires.
    pub rekey_in: Duration,
    pub expire_in: Duration,
}

/// One IKE SA, as `swanctl --list-sas` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct IkeSaStatus {
    pub id: IkeSaId,
    pub connection: String,
    /// `CONNECTING`, `ESTABLISHED` or `DELETING`, as strongSwan names them.
    pub state: &'static str,
    pub initiator: bool,
    pub spi_i: u64,
    pub spi_r: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The selected IKE proposal in strongSwan's syntax (empty before IKE_SA_INIT completes).
    pub proposal: String,
    /// A NAT was seen (either side) or `encap` forced UDP encapsulation.
    pub nat: bool,
    /// Our address was translated (the peer's NAT_DETECTION_DESTINATION_IP did not match).
    pub nat_local: bool,
    /// The peer's address was translated (or faked, as strongSwan's `encap` does).
    pub nat_remote: bool,
    /// Since the SA was created.
    pub age: Duration,
    /// Until the IKE SA is rekeyed (`None`: not established, or no rekey planned).
    pub rekey_in: Option<Duration>,
    /// Our identity and the peer's, as configured (`local.id`, `remote.id`; `%any` accepts any), as strongSwan
    /// prints them.
    pub local_id: String,
    pub remote_id: String,
    pub children: Vec<ChildStatus>,
}

impl Endpoint {
    /// For `netveil status` (as swanctl --list-sas): one entry per IKE SA with its children.
    pub fn status(&self, now: Instant) -> Vec<IkeSaStatus> {
        self.sas
            .values()
            .map(|sa| IkeSaStatus {
                id: sa.id,
                connection: self.connections[sa.conn].name.clone(),
                state: match sa.state {
                    State::Established => "ESTABLISHED",
                    State::Deleting => "DELETING",
                    State::Rekeyed => "REKEYED",
                    _ => "CONNECTING",
                },
                initiator: sa.role == Role::Initiator,
                spi_i: sa.spi_i,
                spi_r: sa.spi_r,
                local: sa.local,
                remote: sa.remote,
                proposal: sa.proposal().map(|p| p.to_string()).unwrap_or_default(),
                nat: sa.nat_local || sa.nat_remote || self.connections[sa.conn].encap,
                nat_local: sa.nat_local,
                nat_remote: sa.nat_remote,
                age: now.saturating_duration_since(sa.created),
                // A rekey "a year from now" is how the machine says none is planned.
                rekey_in: Some(sa.ike_rekey_at.saturating_duration_since(now)).filter(|d| {
                    sa.state == State::Established && *d < Duration::from_secs(86400 * 300)
                }),
                local_id: glue::identity_string(&self.connections[sa.conn].local.id),
                // As the peer authenticated, where the configuration does not say it (remote id = %any).
                remote_id: sa.peer_id.as_deref().map_or_else(
                    || glue::identity_string(&self.connections[sa.conn].remote.id),
                    str::to_string,
                ),
                children: sa
                    .children
                    .iter()
                    .map(|c| ChildStatus {
                        installed: self.connections[sa.conn].children.get(c.cfg).map_or(
                            Duration::ZERO,
                            |cfg| {
                                cfg.lifetimes
                                    .life
                                    .saturating_sub(c.expire_at.saturating_duration_since(now))
                            },
                        ),
                        rekey_in: c.rekey_at.saturating_duration_since(now),
                        expire_in: c.expire_at.saturating_duration_since(now),
                        name: self.child_name(sa, c),
                        inbound_spi: c.inbound_spi,
                        outbound_spi: c.outbound_spi,
                        mode: c.mode,
                        proposal: c
                            .proposal
                            .proposal()
                            .map(|p| p.to_string())
                            .unwrap_or_default(),
                        local_ts: c.local_ts.to_vec(),
                        remote_ts: c.remote_ts.to_vec(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// One IKE SA's keys as Wireshark's IKEv2 decryption table (`ikev2_decryption_table`) wants them, in the format of
/// strongSwan's save-keys plugin: `SPIi,SPIr,SK_ei,SK_er,"ENCR",SK_ai,SK_ar,"INTEG"` (SPIs and keys in lower-case
/// hex, the algorithm names as Wireshark's table lists them). Secret: zeroized on drop, never in `Debug`.
pub struct WiresharkKeys(zeroize::Zeroizing<String>);

impl WiresharkKeys {
    /// The table's line (no newline).
    pub fn line(&self) -> &str {
        &self.0
    }
}

impl core::fmt::Debug for WiresharkKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("WiresharkKeys(..)")
    }
}

/// Wireshark's names (its IKEv2 UAT) for an encryption algorithm, and for the integrity algorithm (`NONE` with an
/// AEAD). `None`: Wireshark's table has no entry for it (ChaCha20-Poly1305 in tshark 4.0), so no line is written,
/// as strongSwan's save-keys does.
pub fn wireshark_names(
    encr: crate::proposal::Encr,
    integ: Option<crate::proposal::Integ>,
) -> Option<(&'static str, &'static str)> {
    use crate::proposal::{Encr, Integ};
    let e = match encr {
        Encr::AesCbc128 => "AES-CBC-128 [RFC3602]",
        Encr::AesCbc256 => "AES-CBC-256 [RFC3602]",
        Encr::AesGcm16_128 => "AES-GCM-128 with 16 octet ICV [RFC5282]",
        Encr::AesGcm16_256 => "AES-GCM-256 with 16 octet ICV [RFC5282]",
        Encr::TripleDes => "3DES [RFC2451]",
        Encr::ChaCha20Poly1305 => return None,
    };
    let i = match integ {
        None => "NONE [RFC4306]",
        Some(Integ::HmacSha1_96) => "HMAC_SHA1_96 [RFC2404]",
        Some(Integ::HmacSha256_128) => "HMAC_SHA2_256_128 [RFC4868]",
        Some(Integ::HmacSha384_192) => "HMAC_SHA2_384_192 [RFC4868]",
        Some(Integ::HmacSha512_256) => "HMAC_SHA2_512_256 [RFC4868]",
    };
    Some((e, i))
}

impl Endpoint {
    /// The keys of every IKE SA that has them, for `netveil keys --wireshark` (and only for it: they are
    /// secrets). One entry per SA whose algorithms Wireshark knows (see [`wireshark_names`]), with its id.
    pub fn wireshark_keys(&self) -> Vec<(IkeSaId, WiresharkKeys)> {
        use core::fmt::Write;
        let mut out = Vec::new();
        for sa in self.sas.values() {
            let Some(k) = sa.keys() else { continue };
            let suite = k.suite();
            let Some((e, i)) = wireshark_names(suite.encr(), suite.integ()) else {
                continue;
            };
            let mut line = zeroize::Zeroizing::new(String::with_capacity(1024));
            let hex = |s: &mut String, b: &[u8]| {
                for x in b {
                    let _ = write!(s, "{x:02x}");
                }
            };
            let _ = write!(line, "{:016x},{:016x},", sa.spi_i, sa.spi_r);
            hex(&mut line, k.sk_ei().expose());
            line.push(',');
            hex(&mut line, k.sk_er().expose());
            let _ = write!(line, ",\"{e}\",");
            hex(&mut line, k.sk_ai().expose());
            line.push(',');
            hex(&mut line, k.sk_ar().expose());
            let _ = write!(line, ",\"{i}\"");
            out.push((sa.id, WiresharkKeys(line)));
        }
        out
    }
}
