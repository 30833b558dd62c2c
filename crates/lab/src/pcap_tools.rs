//! Offline tools over pcap files (`netveil pcap ...`).
//!
//! `esp-encrypt` protects every IP packet of a capture with outbound SAs from a `netveil.toml` (exactly as the data
//! plane would send it); `esp-decrypt` removes every ESP/AH layer with the file's inbound SAs. Both read and write
//! classic libpcap files with a small dependency-free reader/writer: any byte order, micro- or nanosecond
//! timestamps on read; little-endian microsecond files on write. Link types: RAW (101, also 12 and 14), IPV4 (228),
//! IPV6 (229), Ethernet (1, with VLAN tags), and on read also LINUX_SLL (113) and LINUX_SLL2 (276). Ethernet input
//! gives Ethernet output (same MAC addresses and tags, EtherType of the new IP version); anything else gives RAW.
//! The configuration is the daemon's to read: the command parses it and hands over its SAs' names and directions
//! ([`select_sas`]) and the SA database built from it ([`esp`]).
//!
//! `psp-encrypt` / `psp-decrypt` ([`psp`]) do the same for PSP, configured as Google's reference tools
//! (`netveil_psp::refcfg`).

use crate::{Error, Result};
use netveil_ipsec::bundle::{self, Bundle, SaIdx, Sad, Unprotected};
use netveil_ipsec::sa::Direction;
use netveil_pcap::{ip_own, split_frame, LinkType, Pcap, Record, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use netveil_wire::PacketBuf;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files of a run: the capture read, the capture written, and whether dropped packets are accepted.
#[derive(Debug, Clone)]
pub struct Files {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Succeed even if packets were dropped.
    pub allow_drops: bool,
}

/// The drop reason of decapsulated traffic that did not come through the SAs asked for: the IP engine's name for it
/// (`policy-mismatch` in `netveil status`), so that a capture and a running daemon count it alike.
const POLICY_MISMATCH: &str = "policy-mismatch";

/// The first sequence number of `esp-encrypt` (`--seq`, required there: under one key a sequence number, and so
/// the nonce, must never be used twice); `esp-decrypt` takes the numbers from the packets and refuses one.
pub fn first_seq(op: Op, seq: Option<u64>) -> Result<Option<u64>> {
    match (op, seq) {
        (Op::Encrypt, None) => Err(Error::Usage(
            "esp-encrypt needs --seq N, the first sequence number: a number these keys have never been used \
             with (a sequence number, and so the nonce, must never repeat under one key)"
                .into(),
        )),
        (Op::Encrypt, Some(0)) => Err(Error::Usage(
            "--seq: sequence numbers start at 1 (0 is never sent)".into(),
        )),
        (Op::Encrypt, Some(n)) => Ok(Some(n)),
        (Op::Decrypt, Some(_)) => Err(Error::Usage(
            "--seq is for esp-encrypt (decryption takes the numbers from the packets)".into(),
        )),
        (Op::Decrypt, None) => Ok(None),
    }
}

/// `esp-encrypt` / `esp-decrypt` on the SA database `sad` (built from the configuration with the bundle's first
/// sequence number, [`first_seq`]): reads the input, applies `op` with `bundle` ([`typed`]), writes the output and
/// reports the counts on standard error; dropped packets fail it unless `allow_drops`.
pub fn esp(sad: &Sad, bundle: &Bundle, op: Op, files: &Files) -> Result<()> {
    let input = read_file(&files.input)?;
    let (output, stats) = transform(sad, bundle, op, &input);
    finish(files, &output, &stats)
}

/// Writes the output, reports the counts, and fails on drops unless they are allowed.
fn finish(files: &Files, output: &Pcap, stats: &Stats) -> Result<()> {
    write_file(&files.output, output)?;
    eprint!("{}", stats.summary(&files.input, &files.output));
    if stats.dropped() > 0 && !files.allow_drops {
        return Err(Error::Dropped {
            dropped: stats.dropped(),
            read: stats.read,
        });
    }
    Ok(())
}

/// What to do with the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Encrypt,
    Decrypt,
}

/// Resolves `--sa` names to SAD indices: `sas` are the configuration's SAs, their names and directions, in order
/// (the SAD built from the configuration has SA `i` at index `i`).
pub fn select_sas(sas: &[(&str, Direction)], names: &[String], op: Op) -> Result<Vec<usize>> {
    let want = match op {
        Op::Encrypt => Direction::Out,
        Op::Decrypt => Direction::In,
    };
    let word = match want {
        Direction::Out => "out",
        Direction::In => "in",
    };
    if op == Op::Encrypt && names.is_empty() {
        return Err(Error::Usage(
            "esp-encrypt needs the SAs to apply: --sa NAME (repeatable, innermost first)".into(),
        ));
    }
    if names.len() > bundle::MAX_BUNDLE {
        return Err(Error::Usage(format!(
            "at most {} SAs in a bundle",
            bundle::MAX_BUNDLE
        )));
    }
    let mut out = Vec::new();
    for n in names {
        let i = sas.iter().position(|(name, _)| name == n).ok_or_else(|| {
            let known: Vec<&str> = sas.iter().map(|(name, _)| *name).collect();
            Error::Usage(format!(
                "--sa {n}: no such SA in the configuration (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        if sas[i].1 != want {
            return Err(Error::Usage(format!(
                "--sa {n}: is not an '{word}' SA (direction must be \"{word}\")"
            )));
        }
        out.push(i);
    }
    if op == Op::Decrypt && !sas.iter().any(|(_, d)| *d == Direction::In) {
        return Err(Error::Usage(
            "esp-decrypt needs inbound SAs: the configuration has no [[sa]] with direction = \"in\"".into(),
        ));
    }
    Ok(out)
}

/// Counts of one run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub read: u64,
    pub written: u64,
    /// Packets not written, by reason (`Drop::name()` for ESP/AH failures).
    pub drops: BTreeMap<&'static str, u64>,
    /// Packets passed over without being a failure: not IP, or (decrypt) not protected.
    pub skipped: BTreeMap<&'static str, u64>,
}

impl Stats {
    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }
    fn drop(&mut self, why: &'static str) {
        *self.drops.entry(why).or_default() += 1;
    }
    fn skip(&mut self, why: &'static str) {
        *self.skipped.entry(why).or_default() += 1;
    }
    fn summary(&self, input: &Path, output: &Path) -> String {
        let mut s = format!(
            "{}: {} packets read; {}: {} written",
            input.display(),
            self.read,
            output.display(),
            self.written
        );
        let list = |m: &BTreeMap<&str, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.drops.is_empty() {
            s += &format!("; dropped {} ({})", self.dropped(), list(&self.drops));
        }
        if !self.skipped.is_empty() {
            let n: u64 = self.skipped.values().sum();
            s += &format!("; skipped {n} ({})", list(&self.skipped));
        }
        s.push('\n');
        s
    }
}

/// Head- and tailroom for the packet buffers: enough for a bundle of four IPv6 tunnels with UDP encapsulation.
const HEADROOM: usize = 512;
const TAILROOM: usize = 1024;

/// The SAs at `idx` of the configuration (all of one direction, as [`select_sas`] chose them) in the database
/// built from it (`at`: where each SA of the configuration went).
pub fn typed(at: &[SaIdx], idx: &[usize]) -> Bundle {
    let sas: Vec<SaIdx> = idx.iter().map(|&i| at[i]).collect();
    if let Some(v) = sas
        .iter()
        .map(|x| match x {
            SaIdx::Out(o) => Some(*o),
            SaIdx::In(_) => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
    {
        return Bundle::Out(v.into());
    }
    sas.iter()
        .map(|x| match x {
            SaIdx::In(i) => Some(*i),
            SaIdx::Out(_) => None,
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
        .map_or(Bundle::None, |v| Bundle::In(v.into()))
}

/// Applies `op` to every packet of `input`. `bundle`: encrypt: the outbound SAs to apply (innermost first);
/// decrypt: if it has inbound SAs, the bundle packets must have come through.
pub fn transform(sad: &Sad, bundle: &Bundle, op: Op, input: &Pcap) -> (Pcap, Stats) {
    map_packets(input, |pkt, stats| match op {
        Op::Encrypt => bundle::protect(sad, bundle.outbound(), pkt, 0)
            .map(|()| true)
            .map_err(|d| d.name()),
        Op::Decrypt => match bundle::unprotect(sad, pkt, 4500, 0) {
            Ok(Unprotected::Packet(used)) => {
                if bundle.inbound().is_empty() || used.matches(bundle.inbound()) {
                    Ok(true)
                } else {
                    Err(POLICY_MISMATCH)
                }
            }
            Ok(Unprotected::Clear) => {
                stats.skip("not-protected");
                Ok(false)
            }
            Ok(Unprotected::NotEsp) => {
                stats.skip("ike-or-keepalive");
                Ok(false)
            }
            Err(d) => Err(d.name()),
        },
    })
}

/// Runs `f` over the IP packet of every record of `input` and writes what it keeps: `Ok(true)` writes the
/// packet, `Ok(false)` passes over it (`f` counts why), `Err(reason)` counts a drop. Non-IP records are skipped,
/// truncated captures and malformed IP packets dropped; Ethernet framing and timestamps are kept.
fn map_packets(
    input: &Pcap,
    mut f: impl FnMut(&mut PacketBuf, &mut Stats) -> std::result::Result<bool, &'static str>,
) -> (Pcap, Stats) {
    let mut stats = Stats::default();
    let out_link = match input.link {
        LinkType::Ethernet => LinkType::Ethernet,
        _ => LinkType::Raw,
    };
    let mut out = Pcap {
        link: out_link,
        nanos: false,
        snaplen: 262_144,
        records: Vec::new(),
    };
    for r in &input.records {
        stats.read += 1;
        if r.data.len() < r.orig_len as usize {
            stats.drop("truncated-capture");
            continue;
        }
        let frame = match split_frame(input.link, &r.data) {
            Some(f) => f,
            None => {
                stats.skip("not-ip");
                continue;
            }
        };
        let ip = match ip_own(frame.ip) {
            Some(ip) => ip,
            None => {
                stats.drop(netveil_ipsec::Drop::Malformed.name());
                continue;
            }
        };
        let mut pkt = PacketBuf::from_slice(ip, HEADROOM, TAILROOM);
        match f(&mut pkt, &mut stats) {
            Ok(true) => {
                let mut data = Vec::with_capacity(frame.link_hdr.len() + pkt.len());
                if out_link == LinkType::Ethernet {
                    data.extend_from_slice(frame.link_hdr);
                    let et = match netveil_wire::ip::version(pkt.data()) {
                        Some(6) => ETHERTYPE_IPV6,
                        _ => ETHERTYPE_IPV4,
                    };
                    data.extend_from_slice(&et.to_be_bytes());
                }
                data.extend_from_slice(pkt.data());
                out.records.push(Record {
                    ts_sec: r.ts_sec,
                    ts_frac: if input.nanos {
                        r.ts_frac / 1000
                    } else {
                        r.ts_frac
                    },
                    orig_len: data.len() as u32,
                    data,
                });
                stats.written += 1;
            }
            Ok(false) => {}
            Err(why) => stats.drop(why),
        }
    }
    (out, stats)
}

// ---------------------------------------------------------------------------------------------------------------
// PSP

/// Reads a reference-tool PSP configuration file (parsed by `netveil_psp::refcfg`).
fn read_psp_config(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(Error::io(format!("cannot read {}", path.display())))
}

/// PSP-encapsulates every IP packet of `input` with `sa` (its IV counter goes on from where it is).
pub fn psp_encrypt(sa: &mut netveil_psp::TxSa, input: &Pcap) -> (Pcap, Stats) {
    map_packets(input, |pkt, _| {
        sa.encapsulate(pkt).map(|()| true).map_err(|e| e.name())
    })
}

/// Decapsulates every PSP packet of `input` (UDP to port 1000), verifying the ICV; other packets are skipped.
pub fn psp_decrypt(dec: &mut netveil_psp::Decrypter, input: &Pcap) -> (Pcap, Stats) {
    map_packets(input, |pkt, stats| match dec.decapsulate(pkt) {
        Ok(_) => Ok(true),
        Err(netveil_psp::Error::NotPsp) => {
            stats.skip("not-psp");
            Ok(false)
        }
        Err(e) => Err(e.name()),
    })
}

/// `psp-encrypt` / `psp-decrypt`: `config` is a reference-tool PSP configuration file (encrypt: master keys, SPI,
/// mode, algorithm, crypt offsets, vc; decrypt: the two master keys). The IV counter starts at 1.
pub fn psp(config: &Path, op: Op, files: &Files) -> Result<()> {
    let text = read_psp_config(config)?;
    let bad = |e: String| Error::Usage(format!("{}: {e}", config.display()));
    let input = read_file(&files.input)?;
    let (output, stats) = match op {
        Op::Encrypt => {
            let (keys, cfg) = netveil_psp::refcfg::parse_encrypt(&text).map_err(bad)?;
            let mut sa =
                netveil_psp::TxSa::new(&keys, cfg).map_err(|e| bad(format!("unusable SA: {e}")))?;
            psp_encrypt(&mut sa, &input)
        }
        Op::Decrypt => {
            let keys = netveil_psp::refcfg::parse_master_keys(&text).map_err(bad)?;
            psp_decrypt(&mut netveil_psp::Decrypter::new(keys), &input)
        }
    };
    finish(files, &output, &stats)
}

/// A pcap file error as a command error: a file that is not a pcap file is bad input (exit code 2).
fn pcap_error(e: netveil_pcap::FileError) -> Error {
    match e {
        netveil_pcap::FileError::Format(m) => Error::Usage(m),
        netveil_pcap::FileError::Io { context, source } => Error::Io { context, source },
    }
}

/// Reads a pcap file; bad input is a usage error naming the file.
pub fn read_file(path: &Path) -> Result<Pcap> {
    netveil_pcap::read_file(path).map_err(pcap_error)
}

fn write_file(path: &Path, p: &Pcap) -> Result<()> {
    netveil_pcap::write_file(path, p).map_err(pcap_error)
}
#[cfg(test)]
mod tests {
    use super::*;
    use netveil_daemon::engines::ip::config::Config;
    use netveil_pcap::testing::{eth, file, ipv4, ipv6, udp};
    use netveil_pcap::{be16, parse, serialize};

    /// The configuration's SAs as [`select_sas`] takes them.
    fn sas(cfg: &Config) -> Vec<(&str, Direction)> {
        cfg.sas
            .iter()
            .map(|s| (s.name.as_str(), s.direction))
            .collect()
    }

    const CONF: &str = r#"
[interface]

[[sa]]
name = "o"
direction = "out"
spi = 0x1001
mode = "tunnel"
local = "203.0.113.1"
remote = "203.0.113.2"
suite = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "o-ah"
direction = "out"
protocol = "ah"
spi = 0x2001
mode = "transport"
suite = "sha256"
auth_key = "0101010101010101010101010101010101010101010101010101010101010101"

[[sa]]
name = "i"
direction = "in"
spi = 0x1001
mode = "tunnel"
local = "203.0.113.2"
remote = "203.0.113.1"
suite = "aes128gcm16"
enc_key = "000102030405060708090a0b0c0d0e0f10111213"

[[sa]]
name = "i-ah"
direction = "in"
protocol = "ah"
spi = 0x2001
mode = "transport"
suite = "sha256"
auth_key = "0101010101010101010101010101010101010101010101010101010101010101"
"#;

    #[test]
    fn encrypt_then_decrypt_ethernet_and_raw() {
        let cfg = Config::parse(CONF).unwrap();
        let v4 = ipv4(&udp(10));
        let v6 = ipv6(&udp(100));
        let mut padded = eth(&[0x8100], ETHERTYPE_IPV4, &v4);
        padded.extend_from_slice(&[0; 6]);
        let input = file(
            LinkType::Ethernet,
            vec![
                padded.clone(),
                eth(&[], ETHERTYPE_IPV6, &v6),
                eth(&[], 0x0806, &[0; 28]),
            ],
        );
        let enc_bundle = select_sas(&sas(&cfg), &["o".into(), "o-ah".into()], Op::Encrypt).unwrap();
        let (sad, at) = cfg.build_sad(0).unwrap();
        let enc_bundle = typed(&at, &enc_bundle);
        let (enc, st) = transform(&sad, &enc_bundle, Op::Encrypt, &input);
        assert_eq!((st.read, st.written, st.dropped()), (3, 2, 0));
        assert_eq!(st.skipped.get("not-ip"), Some(&1));
        assert_eq!(enc.link, LinkType::Ethernet);
        // IPv6 inner in an IPv4 tunnel: the EtherType follows the new outer header.
        let e1 = &enc.records[1].data;
        assert_eq!(&e1[..12], &input.records[1].data[..12]);
        assert_eq!(be16(e1, 12), Some(ETHERTYPE_IPV4));
        assert_eq!(e1[14 + 9], 51, "AH outermost");
        assert_eq!(be16(&enc.records[0].data, 12), Some(0x8100));
        assert_eq!(enc.records[0].ts_sec, input.records[0].ts_sec);

        let reparsed = parse(&serialize(&enc)).unwrap();
        let dec_bundle = typed(
            &at,
            &select_sas(&sas(&cfg), &["i".into(), "i-ah".into()], Op::Decrypt).unwrap(),
        );
        let (dec, st) = transform(&sad, &dec_bundle, Op::Decrypt, &reparsed);
        assert_eq!((st.read, st.written, st.dropped()), (2, 2, 0));
        assert_eq!(dec.records[0].data, &padded[..padded.len() - 6]);
        assert_eq!(dec.records[1].data, input.records[1].data);

        // Replays are dropped and counted; a different required bundle is a policy mismatch.
        let (_, st) = transform(&sad, &Bundle::None, Op::Decrypt, &reparsed);
        assert_eq!(st.drops.get("replayed"), Some(&2));
        let (sad, at) = cfg.build_sad(0).unwrap();
        let only = typed(
            &at,
            &select_sas(&sas(&cfg), &["i".into()], Op::Decrypt).unwrap(),
        );
        let (_, st) = transform(&sad, &only, Op::Decrypt, &reparsed);
        assert_eq!(st.drops.get("policy-mismatch"), Some(&2));
        assert!(st
            .summary(Path::new("a"), Path::new("b"))
            .contains("dropped 2 (policy-mismatch 2)"));

        // Raw input gives raw output; clear packets are skipped on decrypt.
        let raw = file(LinkType::Raw, vec![v4.clone()]);
        let (sad, at) = cfg.build_sad(0).unwrap();
        let (out, st) = transform(&sad, &Bundle::None, Op::Decrypt, &raw);
        assert_eq!(out.link, LinkType::Raw);
        assert_eq!((st.written, st.dropped()), (0, 0));
        assert_eq!(st.skipped.get("not-protected"), Some(&1));
        let (out, _) = transform(&sad, &typed(&at, &[0]), Op::Encrypt, &raw);
        assert_eq!(out.records[0].data[0], 0x45);
        assert_eq!(out.records[0].data[9], 50);
    }

    #[test]
    fn sa_selection_checks_names_and_directions() {
        let cfg = Config::parse(CONF).unwrap();
        assert!(matches!(
            select_sas(&sas(&cfg), &[], Op::Encrypt),
            Err(Error::Usage(_))
        ));
        assert!(select_sas(&sas(&cfg), &[], Op::Decrypt).unwrap().is_empty());
        let e = select_sas(&sas(&cfg), &["i".into()], Op::Encrypt).unwrap_err();
        assert!(e.to_string().contains("not an 'out' SA"), "{e}");
        let e = select_sas(&sas(&cfg), &["nope".into()], Op::Decrypt).unwrap_err();
        assert!(e.to_string().contains("no such SA"), "{e}");
        let outonly = Config::parse(&CONF[..CONF.find("[[sa]]\nname = \"i\"").unwrap()]).unwrap();
        assert!(select_sas(&sas(&outonly), &[], Op::Decrypt).is_err());
    }
}
