//! SEP's messages on the wire: the common header, the type numbers, the suite and group codes, and the fields
//! read from a message's body (see the module documentation's "Messages").

use std::net::Ipv4Addr;

use netveil_crypto::dh::Group;

use super::types::{DhGroup, Mac, SepError};
use crate::suite::Suite;

/// The SEP version this implementation speaks (first byte of every message).
pub const VERSION: u8 = 1;

/// Length of the common header: version, type, sender MAC, receiver MAC, exchange id.
pub const HEADER_LEN: usize = 22;

/// Length of the nonces Ni and Nr.
pub const NONCE_LEN: usize = 32;

/// Length of the key confirmations MAC_r and MAC_i.
pub const CONFIRM_LEN: usize = 32;

/// The broadcast address, the receiver of ANNOUNCE.
pub(super) const BROADCAST: Mac = [0xff; 6];

/// Message types (the second byte of every message).
pub mod msg_type {
    pub const REQUEST: u8 = 1;
    pub const ACCEPT: u8 = 2;
    pub const OFFER: u8 = 3;
    pub const SELECT: u8 = 4;
    pub const KEY_EXCHANGE: u8 = 5;
    pub const KEY_EXCHANGE_ACCEPT: u8 = 6;
    pub const FINISH: u8 = 7;
    pub const REJECT: u8 = 8;
    pub const ANNOUNCE: u8 = 9;
}

pub(super) use msg_type as ty;

pub(super) const REJECT_NO_SUITE: u8 = 1;
pub(super) const REJECT_NO_GROUP: u8 = 2;

/// The stable one-byte code of a suite in OFFER and SELECT.
pub fn suite_code(s: Suite) -> u8 {
    match s {
        Suite::BlowfishCbc => 1,
        Suite::Aes128Cbc => 2,
        Suite::Aes256Cbc => 3,
        Suite::TripleDesCbc => 4,
        Suite::BlowfishEcb => 5,
        Suite::Aes128Ecb => 6,
        Suite::Aes256Ecb => 7,
        Suite::TripleDesEcb => 8,
        Suite::Aes128Gcm => 16,
        Suite::Aes256Gcm => 17,
        Suite::ChaCha20Poly1305 => 18,
        Suite::Null => 32,
    }
}

/// The suite of a code, if known.
pub fn suite_from_code(c: u8) -> Option<Suite> {
    Suite::ALL.into_iter().find(|s| suite_code(*s) == c)
}

/// The one-byte code of a group (the IANA IKEv2 Diffie-Hellman group number).
pub fn group_code(g: DhGroup) -> u8 {
    match g {
        DhGroup::Modp2048 => 14,
        DhGroup::Modp3072 => 15,
        DhGroup::X25519 => 31,
    }
}

/// The group of a code, if known.
pub fn group_from_code(c: u8) -> Option<DhGroup> {
    DhGroup::ALL.into_iter().find(|g| group_code(*g) == c)
}

pub(super) fn dh_group(g: DhGroup) -> Group {
    match g {
        DhGroup::X25519 => Group::X25519,
        DhGroup::Modp2048 => Group::Modp2048,
        DhGroup::Modp3072 => Group::Modp3072,
    }
}

/// Length of a group's public value in KEY_EXCHANGE and KEY_EXCHANGE_ACCEPT.
pub fn public_len(g: DhGroup) -> usize {
    dh_group(g).public_len()
}

pub(super) struct Hdr {
    pub(super) ty: u8,
    pub(super) sender: Mac,
    pub(super) receiver: Mac,
    pub(super) id: [u8; 8],
}

pub(super) fn parse_header(msg: &[u8]) -> Result<(Hdr, &[u8]), SepError> {
    if msg.len() < HEADER_LEN || msg[0] != VERSION {
        return Err(SepError::Malformed);
    }
    let mut h = Hdr {
        ty: msg[1],
        sender: [0; 6],
        receiver: [0; 6],
        id: [0; 8],
    };
    if !(ty::REQUEST..=ty::ANNOUNCE).contains(&h.ty) {
        return Err(SepError::Malformed);
    }
    h.sender.copy_from_slice(&msg[2..8]);
    h.receiver.copy_from_slice(&msg[8..14]);
    h.id.copy_from_slice(&msg[14..22]);
    Ok((h, &msg[HEADER_LEN..]))
}

pub(super) fn header(msg_ty: u8, sender: Mac, receiver: Mac, id: &[u8; 8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER_LEN + 64);
    m.push(VERSION);
    m.push(msg_ty);
    m.extend_from_slice(&sender);
    m.extend_from_slice(&receiver);
    m.extend_from_slice(id);
    m
}

/// The ANNOUNCE message of the host `mac` (see the module documentation).
pub fn announce_message(mac: Mac) -> Vec<u8> {
    header(ty::ANNOUNCE, mac, BROADCAST, &[0; 8])
}

/// The IPv4 address a REQUEST (the initiator's) or an ACCEPT (the responder's) addressed to `to` states for its
/// sender, for a caller that binds addresses to MAC addresses before SEP acts on the message. `None` for any other
/// message, or one that is malformed or for another host.
pub fn stated_ip(msg: &[u8], to: Mac) -> Option<Ipv4Addr> {
    let (h, body) = parse_header(msg).ok()?;
    if h.receiver != to {
        return None;
    }
    match (h.ty, body.len()) {
        (ty::REQUEST, n) if n == 8 + NONCE_LEN => Some(ip_at(body)),
        (ty::ACCEPT, n) if n == NONCE_LEN + 4 => Some(ip_at(&body[NONCE_LEN..])),
        _ => None,
    }
}

pub(super) fn ip_at(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

pub(super) fn u32_at(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub(super) fn nonce_at(b: &[u8]) -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    n.copy_from_slice(&b[..NONCE_LEN]);
    n
}

pub(super) struct Offer {
    pub(super) key_id: u8,
    pub(super) suites: Vec<Suite>,
    pub(super) groups: Vec<DhGroup>,
}

pub(super) fn parse_offer(b: &[u8]) -> Result<Offer, SepError> {
    let key_id = *b.first().ok_or(SepError::Malformed)?;
    let n = *b.get(1).ok_or(SepError::Malformed)? as usize;
    let suites = b.get(2..2 + n).ok_or(SepError::Malformed)?;
    let m = *b.get(2 + n).ok_or(SepError::Malformed)? as usize;
    let groups = b.get(3 + n..3 + n + m).ok_or(SepError::Malformed)?;
    if key_id == 0 || n == 0 || m == 0 || b.len() != 3 + n + m {
        return Err(SepError::Malformed);
    }
    Ok(Offer {
        key_id,
        suites: suites.iter().filter_map(|c| suite_from_code(*c)).collect(),
        groups: groups.iter().filter_map(|c| group_from_code(*c)).collect(),
    })
}
