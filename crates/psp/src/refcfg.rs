//! The configuration files of Google's reference PSP tools, one value per line: master key 0 and master key 1
//! (32 bytes each, hex pairs separated by spaces), then for encryption: SPI (hex), `transport` or `tunnel`,
//! `aes-gcm-128` or `aes-gcm-256` (also accepted: `aes-gmac-128`, `aes-gmac-256`), crypt offset for transport
//! mode, for IPv4 tunnel mode and for IPv6 tunnel mode (4-byte units), `vc` or `no-vc`. A decryption
//! configuration holds only the two master keys.

use crate::header::Version;
use crate::kdf::MasterKeys;
use crate::xform::{Mode, TxConfig};

fn master_key(line: Option<&str>, n: usize) -> Result<[u8; 32], String> {
    let line = line.ok_or_else(|| format!("line {}: master key {} missing", n + 1, n))?;
    let mut key = [0u8; 32];
    let mut count = 0;
    for (i, tok) in line.split_whitespace().enumerate() {
        if i >= 32 {
            return Err(format!(
                "line {}: master key {n} has more than 32 bytes",
                n + 1
            ));
        }
        if tok.len() != 2 {
            return Err(format!("line {}: {tok:?} is not a hex byte", n + 1));
        }
        key[i] = u8::from_str_radix(tok, 16)
            .map_err(|_| format!("line {}: {tok:?} is not a hex byte", n + 1))?;
        count += 1;
    }
    if count != 32 {
        return Err(format!(
            "line {}: master key {n} has {count} bytes, want 32",
            n + 1
        ));
    }
    Ok(key)
}

fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The master keys of a decryption (or encryption) configuration.
pub fn parse_master_keys(text: &str) -> Result<MasterKeys, String> {
    let l = lines(text);
    Ok(MasterKeys::new(
        master_key(l.first().copied(), 0)?,
        master_key(l.get(1).copied(), 1)?,
    ))
}

/// An encryption configuration: the master keys and the SA.
pub fn parse_encrypt(text: &str) -> Result<(MasterKeys, TxConfig), String> {
    let keys = parse_master_keys(text)?;
    let l = lines(text);
    if l.len() != 9 {
        return Err(format!(
            "an encryption configuration has 9 lines (keys, SPI, mode, algorithm, 3 crypt offsets, vc), got {}",
            l.len()
        ));
    }
    let spi_txt = l[2].trim_start_matches("0x").trim_start_matches("0X");
    let spi = u32::from_str_radix(spi_txt, 16)
        .map_err(|_| format!("line 3: SPI {:?} is not a 32-bit hex number", l[2]))?;
    let mode = match l[3] {
        "transport" => Mode::Transport,
        "tunnel" => Mode::Tunnel,
        m => return Err(format!("line 4: mode {m:?}: want transport or tunnel")),
    };
    let version = match l[4] {
        "aes-gcm-128" => Version::AesGcm128,
        "aes-gcm-256" => Version::AesGcm256,
        "aes-gmac-128" => Version::AesGmac128,
        "aes-gmac-256" => Version::AesGmac256,
        a => {
            return Err(format!(
            "line 5: algorithm {a:?}: want aes-gcm-128, aes-gcm-256, aes-gmac-128 or aes-gmac-256"
        ))
        }
    };
    let off = |i: usize| -> Result<u8, String> {
        l[i].parse::<u8>()
            .ok()
            .filter(|&o| o <= 63)
            .ok_or_else(|| format!("line {}: crypt offset {:?}: want 0..=63", i + 1, l[i]))
    };
    let vc = match l[8] {
        "vc" => true,
        "no-vc" => false,
        v => return Err(format!("line 9: {v:?}: want vc or no-vc")),
    };
    Ok((
        keys,
        TxConfig {
            spi,
            version,
            mode,
            crypt_offset_transport: off(5)?,
            crypt_offset_tunnel_v4: off(6)?,
            crypt_offset_tunnel_v6: off(7)?,
            vc,
        },
    ))
}
