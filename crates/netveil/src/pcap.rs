//! Offline tools over pcap files (`netveil pcap ...`).
//!
//! `esp-encrypt` protects every IP packet of a capture with outbound SAs from a `netveil.toml` (exactly as the data
//! plane would send it); `esp-decrypt` removes every ESP/AH layer with the file's inbound SAs. Both read and write
//! classic libpcap files with a small dependency-free reader/writer: any byte order, micro- or nanosecond
//! timestamps on read; little-endian microsecond files on write. Link types: RAW (101, also 12 and 14), IPV4 (228),
//! IPV6 (229), Ethernet (1, with VLAN tags), and on read also LINUX_SLL (113) and LINUX_SLL2 (276). Ethernet input
//! gives Ethernet output (same MAC addresses and tags, EtherType of the new IP version); anything else gives RAW.
//!
//! `psp-encrypt` / `psp-decrypt` do the same for PSP, configured as Google's reference tools (`netveil_psp::refcfg`).

use crate::config::Config;
use crate::Error;
use netveil_ipsec::bundle::{self, Sad, Unprotected};
use netveil_ipsec::sa::Direction;
use netveil_wire::PacketBuf;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum PcapCmd {
    /// Protect every IP packet of a capture with outbound SAs (ESP/AH, as configured) and write the result.
    EspEncrypt(XformArgs),
    /// Remove every ESP/AH layer of the packets of a capture with the configuration's inbound SAs and write the
    /// decapsulated packets.
    EspDecrypt(XformArgs),
    /// Protect every IP packet of a capture with PSP (configuration in the format of Google's reference
    /// psp_encrypt: master keys, SPI, mode, algorithm, crypt offsets, vc). The IV counter starts at 1.
    PspEncrypt(PspArgs),
    /// Remove the PSP encapsulation of every PSP packet (UDP port 1000) of a capture, verifying its ICV
    /// (configuration: the two master keys, as for Google's reference psp_decrypt).
    PspDecrypt(PspArgs),
}

#[derive(clap::Args, Debug)]
pub struct PspArgs {
    /// A reference-tool PSP configuration file.
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// The pcap file to read.
    #[arg(short, long, value_name = "IN.pcap")]
    pub input: PathBuf,
    /// The pcap file to write.
    #[arg(short, long, value_name = "OUT.pcap")]
    pub output: PathBuf,
    /// Succeed even if packets were dropped.
    #[arg(long)]
    pub allow_drops: bool,
}

#[derive(clap::Args, Debug)]
pub struct XformArgs {
    /// A netveil.toml: only its `[[sa]]` tables and interface.allow_null_null are used (a bare `[interface]` suffices).
    #[arg(short, long, value_name = "FILE")]
    pub config: PathBuf,
    /// An SA to apply (repeatable, innermost first). Encrypt: required, "out" SAs. Decrypt: optional, "in" SAs;
    /// if given, packets must have come through exactly these SAs.
    #[arg(long = "sa", value_name = "NAME")]
    pub sa: Vec<String>,
    /// The pcap file to read.
    #[arg(short, long, value_name = "IN.pcap")]
    pub input: PathBuf,
    /// The pcap file to write.
    #[arg(short, long, value_name = "OUT.pcap")]
    pub output: PathBuf,
    /// Succeed even if packets were dropped.
    #[arg(long)]
    pub allow_drops: bool,
    /// esp-encrypt: the first sequence number (required). Under one key a sequence number, and so the nonce, must
    /// never be used twice: give a number these keys have never sent with (a running daemon with the same keys
    /// continues from its mark in the state directory, so do not reuse a live configuration's keys here).
    #[arg(long, value_name = "N")]
    pub seq: Option<u64>,
}

pub fn run(cmd: PcapCmd) -> crate::Result<()> {
    let (args, dir) = match cmd {
        PcapCmd::EspEncrypt(a) => (a, Op::Encrypt),
        PcapCmd::EspDecrypt(a) => (a, Op::Decrypt),
        PcapCmd::PspEncrypt(a) => return run_psp(a, Op::Encrypt),
        PcapCmd::PspDecrypt(a) => return run_psp(a, Op::Decrypt),
    };
    let mut cfg = Config::load(&args.config)?;
    let bundle = select_sas(&cfg, &args.sa, dir)?;
    match (dir, args.seq) {
        (Op::Encrypt, None) => {
            return Err(Error::Usage(
                "esp-encrypt needs --seq N, the first sequence number: a number these keys have never been used \
                 with (a sequence number, and so the nonce, must never repeat under one key)"
                    .into(),
            ))
        }
        (Op::Encrypt, Some(0)) => {
            return Err(Error::Usage(
                "--seq: sequence numbers start at 1 (0 is never sent)".into(),
            ))
        }
        (Op::Encrypt, Some(n)) => {
            for &i in &bundle {
                cfg.sas[i].first_seq = n;
            }
        }
        (Op::Decrypt, Some(_)) => {
            return Err(Error::Usage(
                "--seq is for esp-encrypt (decryption takes the numbers from the packets)".into(),
            ))
        }
        (Op::Decrypt, None) => {}
    }
    let sad = cfg.build_sad(0)?;
    let input = read_file(&args.input)?;
    let (output, stats) = transform(&sad, &bundle, dir, &input);
    write_file(&args.output, &output)?;
    eprint!("{}", stats.summary(&args.input, &args.output));
    if stats.dropped() > 0 && !args.allow_drops {
        return Err(Error::Other(format!(
            "{} of {} packets dropped (use --allow-drops to accept this)",
            stats.dropped(),
            stats.read
        )));
    }
    Ok(())
}

/// What to do with the packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Encrypt,
    Decrypt,
}

/// Resolves `--sa` names to SAD indices (the SAD built from `cfg` has SA `i` at index `i`).
fn select_sas(cfg: &Config, names: &[String], op: Op) -> crate::Result<Vec<usize>> {
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
        let i = cfg.sa_index(n).ok_or_else(|| {
            let known: Vec<&str> = cfg.sas.iter().map(|s| s.name.as_str()).collect();
            Error::Usage(format!(
                "--sa {n}: no such SA in the configuration (known: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        if cfg.sas[i].direction != want {
            return Err(Error::Usage(format!(
                "--sa {n}: is not an '{word}' SA (direction must be \"{word}\")"
            )));
        }
        out.push(i);
    }
    if op == Op::Decrypt && !cfg.sas.iter().any(|s| s.direction == Direction::In) {
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

/// Applies `op` to every packet of `input`. `bundle`: encrypt: the SAs to apply (innermost first); decrypt: if not
/// empty, the bundle packets must have come through.
pub fn transform(sad: &Sad, bundle: &[usize], op: Op, input: &Pcap) -> (Pcap, Stats) {
    map_packets(input, |pkt, stats| match op {
        Op::Encrypt => bundle::protect(sad, bundle, pkt, 0)
            .map(|()| true)
            .map_err(|d| d.name()),
        Op::Decrypt => match bundle::unprotect(sad, pkt, 4500, 0) {
            Ok(Unprotected::Packet(used)) => {
                if bundle.is_empty() || used.matches(bundle) {
                    Ok(true)
                } else {
                    Err(netveil_ipsec::Drop::PolicyMismatch.name())
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
    mut f: impl FnMut(&mut PacketBuf, &mut Stats) -> Result<bool, &'static str>,
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
                    let et = match pkt.data().first().map(|b| b >> 4) {
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
fn read_psp_config(path: &Path) -> crate::Result<String> {
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

fn run_psp(args: PspArgs, op: Op) -> crate::Result<()> {
    let text = read_psp_config(&args.config)?;
    let bad = |e: String| Error::Usage(format!("{}: {e}", args.config.display()));
    let input = read_file(&args.input)?;
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
    write_file(&args.output, &output)?;
    eprint!("{}", stats.summary(&args.input, &args.output));
    if stats.dropped() > 0 && !args.allow_drops {
        return Err(Error::Other(format!(
            "{} of {} packets dropped (use --allow-drops to accept this)",
            stats.dropped(),
            stats.read
        )));
    }
    Ok(())
}

/// The IP packet at the start of `p`, cut to the length its header gives (link-layer padding, FCS removed);
/// `None` if `p` is shorter than that.
fn ip_own(p: &[u8]) -> Option<&[u8]> {
    let len = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 => u16::from_be_bytes([p[2], p[3]]) as usize,
        // A zero payload length (jumbogram) is left to the IPsec code to refuse.
        Some(6) if p.len() >= 40 && (p[4], p[5]) == (0, 0) => p.len(),
        Some(6) if p.len() >= 40 => 40 + u16::from_be_bytes([p[4], p[5]]) as usize,
        _ => return None,
    };
    p.get(..len)
}

// ---------------------------------------------------------------------------------------------------------------
// pcap files

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// The link types this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// LINKTYPE_RAW (101; DLT_RAW 12 and 14 are read as this too); IPV4 (228) and IPV6 (229) also read as this.
    Raw,
    Ethernet,
    LinuxSll,
    LinuxSll2,
}

impl LinkType {
    fn from_number(n: u32) -> Option<LinkType> {
        Some(match n {
            1 => LinkType::Ethernet,
            12 | 14 | 101 | 228 | 229 => LinkType::Raw,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }
    pub fn number(self) -> u32 {
        match self {
            LinkType::Raw => 101,
            LinkType::Ethernet => 1,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
        }
    }
}

/// One captured packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub ts_sec: u32,
    /// Microseconds, or nanoseconds if the file's [`Pcap::nanos`].
    pub ts_frac: u32,
    /// The packet's length on the wire (more than `data.len()` if the capture truncated it).
    pub orig_len: u32,
    pub data: Vec<u8>,
}

/// A classic pcap file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pcap {
    pub link: LinkType,
    pub nanos: bool,
    pub snaplen: u32,
    pub records: Vec<Record>,
}

/// A frame split into its link-layer header (for Ethernet: up to, not including, the last EtherType) and the IP
/// packet.
struct Frame<'a> {
    link_hdr: &'a [u8],
    ip: &'a [u8],
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|x| u16::from_be_bytes([x[0], x[1]]))
}

/// Splits a frame into link header and IP packet; `None` for non-IP frames.
fn split_frame(link: LinkType, f: &[u8]) -> Option<Frame<'_>> {
    let ip_by_type = |et: u16, at: usize| -> Option<Frame<'_>> {
        let ip = f.get(at..)?;
        let v = ip.first()? >> 4;
        match (et, v) {
            (ETHERTYPE_IPV4, 4) | (ETHERTYPE_IPV6, 6) => Some(Frame {
                link_hdr: &f[..at - 2],
                ip,
            }),
            _ => None,
        }
    };
    match link {
        LinkType::Raw => match f.first().map(|b| b >> 4) {
            Some(4) | Some(6) => Some(Frame {
                link_hdr: &f[..0],
                ip: f,
            }),
            _ => None,
        },
        LinkType::Ethernet => {
            let mut at = 12;
            let mut et = be16(f, at)?;
            while ETHERTYPE_VLAN.contains(&et) {
                at += 4;
                et = be16(f, at)?;
            }
            ip_by_type(et, at + 2)
        }
        LinkType::LinuxSll => ip_by_type(be16(f, 14)?, 16),
        LinkType::LinuxSll2 => {
            let et = be16(f, 0)?;
            let ip = f.get(20..)?;
            match (et, ip.first()? >> 4) {
                (ETHERTYPE_IPV4, 4) | (ETHERTYPE_IPV6, 6) => Some(Frame {
                    link_hdr: &f[..0],
                    ip,
                }),
                _ => None,
            }
        }
    }
}

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const MAGIC_PCAPNG: u32 = 0x0a0d_0d0a;
/// Larger records are taken for a corrupt file.
const MAX_RECORD: u32 = 16 << 20;

/// Parses a classic pcap file. Errors describe the problem (the caller adds the file name).
pub fn parse(b: &[u8]) -> Result<Pcap, String> {
    if b.len() < 24 {
        return Err(format!(
            "not a pcap file: {} bytes, shorter than the 24-byte file header",
            b.len()
        ));
    }
    let raw = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (le, nanos) = match raw {
        MAGIC_US => (true, false),
        MAGIC_NS => (true, true),
        m if m.swap_bytes() == MAGIC_US => (false, false),
        m if m.swap_bytes() == MAGIC_NS => (false, true),
        MAGIC_PCAPNG => {
            return Err(
                "pcapng files are not supported: convert with `editcap -F pcap IN OUT`".into(),
            )
        }
        m => {
            return Err(format!(
                "not a pcap file: bad magic number {m:#010x} (want a1b2c3d4 or a1b23c4d)"
            ))
        }
    };
    let u32_at = |at: usize| {
        let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(x)
        } else {
            u32::from_be_bytes(x)
        }
    };
    let major = if le {
        u16::from_le_bytes([b[4], b[5]])
    } else {
        u16::from_be_bytes([b[4], b[5]])
    };
    if major != 2 {
        return Err(format!("unsupported pcap version {major} (want 2)"));
    }
    let snaplen = u32_at(16);
    // The upper bits may carry FCS information; the link type is the low 16 bits.
    let network = u32_at(20) & 0xffff;
    let link = LinkType::from_number(network).ok_or_else(|| {
        format!(
            "unsupported link type {network} (supported: 1 Ethernet, 101/12/14 raw IP, 228 IPv4, 229 IPv6, \
             113 Linux cooked, 276 Linux cooked v2)"
        )
    })?;
    let mut records = Vec::new();
    let mut at = 24;
    while at < b.len() {
        if b.len() - at < 16 {
            return Err(format!(
                "truncated record header at offset {at} (record {}): {} of 16 bytes",
                records.len() + 1,
                b.len() - at
            ));
        }
        let ts_sec = u32_at(at);
        let ts_frac = u32_at(at + 4);
        let incl = u32_at(at + 8);
        let orig_len = u32_at(at + 12);
        if incl > MAX_RECORD {
            return Err(format!(
                "record {} at offset {at}: captured length {incl} is implausible (corrupt file?)",
                records.len() + 1
            ));
        }
        let start = at + 16;
        let end = start + incl as usize;
        if end > b.len() {
            return Err(format!(
                "record {} at offset {at} is truncated: {} of {incl} bytes present",
                records.len() + 1,
                b.len() - start
            ));
        }
        records.push(Record {
            ts_sec,
            ts_frac,
            orig_len: orig_len.max(incl),
            data: b[start..end].to_vec(),
        });
        at = end;
    }
    Ok(Pcap {
        link,
        nanos,
        snaplen,
        records,
    })
}

/// Serializes as a little-endian pcap file with the file's timestamp resolution.
pub fn serialize(p: &Pcap) -> Vec<u8> {
    let size = 24 + p.records.iter().map(|r| 16 + r.data.len()).sum::<usize>();
    let mut o = Vec::with_capacity(size);
    let magic = if p.nanos { MAGIC_NS } else { MAGIC_US };
    o.extend_from_slice(&magic.to_le_bytes());
    o.extend_from_slice(&2u16.to_le_bytes());
    o.extend_from_slice(&4u16.to_le_bytes());
    o.extend_from_slice(&0u32.to_le_bytes()); // thiszone
    o.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
    let longest = p.records.iter().map(|r| r.data.len()).max().unwrap_or(0) as u32;
    o.extend_from_slice(&p.snaplen.max(longest).to_le_bytes());
    o.extend_from_slice(&p.link.number().to_le_bytes());
    for r in &p.records {
        o.extend_from_slice(&r.ts_sec.to_le_bytes());
        o.extend_from_slice(&r.ts_frac.to_le_bytes());
        o.extend_from_slice(&(r.data.len() as u32).to_le_bytes());
        o.extend_from_slice(&r.orig_len.max(r.data.len() as u32).to_le_bytes());
        o.extend_from_slice(&r.data);
    }
    o
}

/// Reads a pcap file; bad input is a usage error naming the file.
pub fn read_file(path: &Path) -> crate::Result<Pcap> {
    let b = std::fs::read(path).map_err(Error::io(format!("cannot read {}", path.display())))?;
    parse(&b).map_err(|e| Error::Usage(format!("{}: {e}", path.display())))
}

pub fn write_file(path: &Path, p: &Pcap) -> crate::Result<()> {
    std::fs::write(path, serialize(p))
        .map_err(Error::io(format!("cannot write {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(payload: &[u8]) -> Vec<u8> {
        let len = 20 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (len >> 8) as u8,
            len as u8,
            0,
            1,
            0x40,
            0,
            64,
            17,
            0,
            0,
            192,
            0,
            2,
            1,
            192,
            0,
            2,
            2,
        ];
        let mut sum = 0u32;
        for c in p.chunks(2) {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    fn ipv6(payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 0, 17, 64];
        p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p.extend_from_slice(&[0; 11]);
        p.push(1);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p.extend_from_slice(&[0; 11]);
        p.push(2);
        p.extend_from_slice(payload);
        p
    }

    fn udp(n: usize) -> Vec<u8> {
        let mut u = vec![0x30, 0x39, 0x00, 0x35, 0, (8 + n) as u8, 0, 0];
        u.extend((0..n).map(|i| i as u8));
        u
    }

    fn file(link: LinkType, records: Vec<Vec<u8>>) -> Pcap {
        Pcap {
            link,
            nanos: false,
            snaplen: 65535,
            records: records
                .into_iter()
                .enumerate()
                .map(|(i, data)| Record {
                    ts_sec: 1_700_000_000 + i as u32,
                    ts_frac: 123_456,
                    orig_len: data.len() as u32,
                    data,
                })
                .collect(),
        }
    }

    /// A pcap file written by hand in the given byte order.
    fn handmade(be: bool, magic: u32, link: u32, recs: &[(u32, u32, &[u8])]) -> Vec<u8> {
        let w32 = |o: &mut Vec<u8>, v: u32| {
            o.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() })
        };
        let w16 = |o: &mut Vec<u8>, v: u16| {
            o.extend_from_slice(&if be { v.to_be_bytes() } else { v.to_le_bytes() })
        };
        let mut o = Vec::new();
        w32(&mut o, magic);
        w16(&mut o, 2);
        w16(&mut o, 4);
        w32(&mut o, 0);
        w32(&mut o, 0);
        w32(&mut o, 65535);
        w32(&mut o, link);
        for (s, f, d) in recs {
            w32(&mut o, *s);
            w32(&mut o, *f);
            w32(&mut o, d.len() as u32);
            w32(&mut o, d.len() as u32);
            o.extend_from_slice(d);
        }
        o
    }

    #[test]
    fn roundtrip_raw() {
        let p = file(LinkType::Raw, vec![ipv4(&udp(3)), ipv6(&udp(0)), vec![]]);
        let b = serialize(&p);
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&b[20..24], &101u32.to_le_bytes());
        assert_eq!(parse(&b).unwrap(), p);
    }

    #[test]
    fn reads_both_byte_orders_and_nanoseconds() {
        let pkt = ipv4(&udp(5));
        for be in [false, true] {
            for (magic, nanos) in [(MAGIC_US, false), (MAGIC_NS, true)] {
                let b = handmade(be, magic, 101, &[(7, 999, &pkt), (8, 1, &pkt[..20])]);
                let p = parse(&b).unwrap();
                assert_eq!(p.nanos, nanos);
                assert_eq!(p.link, LinkType::Raw);
                assert_eq!(p.records.len(), 2);
                assert_eq!(p.records[0].ts_sec, 7);
                assert_eq!(p.records[0].ts_frac, 999);
                assert_eq!(p.records[0].data, pkt);
                assert_eq!(p.records[1].data, &pkt[..20]);
            }
        }
        for dlt in [12, 14, 228, 229] {
            assert_eq!(
                parse(&handmade(false, MAGIC_US, dlt, &[])).unwrap().link,
                LinkType::Raw
            );
        }
        // FCS bits above the link type are ignored.
        assert_eq!(
            parse(&handmade(false, MAGIC_US, 0x1000_0001, &[]))
                .unwrap()
                .link,
            LinkType::Ethernet
        );
    }

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let pkt = ipv4(&udp(5));
        let good = handmade(false, MAGIC_US, 101, &[(1, 2, &pkt)]);
        let e = parse(&good[..10]).unwrap_err();
        assert!(e.contains("24-byte file header"), "{e}");
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(parse(&bad).unwrap_err().contains("bad magic"));
        let e = parse(&good[..good.len() - 1]).unwrap_err();
        assert!(e.contains("truncated") && e.contains("record 1"), "{e}");
        let e = parse(&good[..24 + 7]).unwrap_err();
        assert!(e.contains("truncated record header"), "{e}");
        let e = parse(&handmade(false, MAGIC_US, 105, &[])).unwrap_err();
        assert!(e.contains("unsupported link type 105"), "{e}");
        let mut ng = good.clone();
        ng[..4].copy_from_slice(&MAGIC_PCAPNG.to_le_bytes());
        assert!(parse(&ng).unwrap_err().contains("pcapng"));
        let mut v = good.clone();
        v[4] = 3;
        assert!(parse(&v).unwrap_err().contains("version"));
        let mut huge = good;
        huge[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse(&huge).unwrap_err().contains("implausible"));
        // Empty file of records is fine.
        assert!(parse(&handmade(true, MAGIC_US, 1, &[]))
            .unwrap()
            .records
            .is_empty());
    }

    #[test]
    fn read_file_names_the_file() {
        let dir = std::env::temp_dir().join(format!("netveil-pcap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.pcap");
        std::fs::write(&f, b"hello").unwrap();
        match read_file(&f) {
            Err(Error::Usage(m)) => assert!(m.contains("bad.pcap") && m.contains("not a pcap")),
            other => panic!("{other:?}"),
        }
        let missing = dir.join("missing.pcap");
        let e = read_file(&missing).unwrap_err();
        assert!(e.to_string().contains("missing.pcap"));
        let p = file(LinkType::Ethernet, vec![vec![1, 2, 3]]);
        let g = dir.join("good.pcap");
        write_file(&g, &p).unwrap();
        assert_eq!(read_file(&g).unwrap(), p);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn eth(tags: &[u16], et: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for t in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0, 42]);
        }
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }

    #[test]
    fn splits_link_layers() {
        let v4 = ipv4(&udp(2));
        let v6 = ipv6(&udp(2));
        let f = eth(&[], ETHERTYPE_IPV4, &v4);
        let s = split_frame(LinkType::Ethernet, &f).unwrap();
        assert_eq!(s.ip, &v4[..]);
        assert_eq!(s.link_hdr, &f[..12]);
        let f = eth(&[0x88a8, 0x8100], ETHERTYPE_IPV6, &v6);
        let s = split_frame(LinkType::Ethernet, &f).unwrap();
        assert_eq!(s.ip, &v6[..]);
        assert_eq!(s.link_hdr.len(), 20);
        assert!(split_frame(LinkType::Ethernet, &eth(&[], 0x0806, &[0; 28])).is_none());
        // EtherType and version disagree.
        assert!(split_frame(LinkType::Ethernet, &eth(&[], ETHERTYPE_IPV6, &v4)).is_none());
        assert!(split_frame(LinkType::Ethernet, &f[..13]).is_none());

        let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
        sll.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.extend_from_slice(&v4);
        assert_eq!(split_frame(LinkType::LinuxSll, &sll).unwrap().ip, &v4[..]);
        let mut sll2 = ETHERTYPE_IPV6.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0; 18]);
        sll2.extend_from_slice(&v6);
        assert_eq!(split_frame(LinkType::LinuxSll2, &sll2).unwrap().ip, &v6[..]);
        assert!(split_frame(LinkType::Raw, &[0x10, 0]).is_none());
        assert!(split_frame(LinkType::Raw, &[]).is_none());
    }

    #[test]
    fn ip_own_length_cuts_padding() {
        let v4 = ipv4(&udp(0));
        let mut padded = v4.clone();
        padded.extend_from_slice(&[0; 18]);
        assert_eq!(ip_own(&padded).unwrap(), &v4[..]);
        assert!(ip_own(&v4[..v4.len() - 1]).is_none());
        let v6 = ipv6(&udp(1));
        let mut padded = v6.clone();
        padded.extend_from_slice(&[0xee; 4]);
        assert_eq!(ip_own(&padded).unwrap(), &v6[..]);
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
        let enc_bundle = select_sas(&cfg, &["o".into(), "o-ah".into()], Op::Encrypt).unwrap();
        let sad = cfg.build_sad(0).unwrap();
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
        let dec_bundle = select_sas(&cfg, &["i".into(), "i-ah".into()], Op::Decrypt).unwrap();
        let (dec, st) = transform(&sad, &dec_bundle, Op::Decrypt, &reparsed);
        assert_eq!((st.read, st.written, st.dropped()), (2, 2, 0));
        assert_eq!(dec.records[0].data, &padded[..padded.len() - 6]);
        assert_eq!(dec.records[1].data, input.records[1].data);

        // Replays are dropped and counted; a different required bundle is a policy mismatch.
        let (_, st) = transform(&sad, &[], Op::Decrypt, &reparsed);
        assert_eq!(st.drops.get("replayed"), Some(&2));
        let sad = cfg.build_sad(0).unwrap();
        let only = select_sas(&cfg, &["i".into()], Op::Decrypt).unwrap();
        let (_, st) = transform(&sad, &only, Op::Decrypt, &reparsed);
        assert_eq!(st.drops.get("policy-mismatch"), Some(&2));
        assert!(st
            .summary(Path::new("a"), Path::new("b"))
            .contains("dropped 2 (policy-mismatch 2)"));

        // Raw input gives raw output; clear packets are skipped on decrypt.
        let raw = file(LinkType::Raw, vec![v4.clone()]);
        let sad = cfg.build_sad(0).unwrap();
        let (out, st) = transform(&sad, &[], Op::Decrypt, &raw);
        assert_eq!(out.link, LinkType::Raw);
        assert_eq!((st.written, st.dropped()), (0, 0));
        assert_eq!(st.skipped.get("not-protected"), Some(&1));
        let (out, _) = transform(&sad, &[0], Op::Encrypt, &raw);
        assert_eq!(out.records[0].data[0], 0x45);
        assert_eq!(out.records[0].data[9], 50);
    }

    #[test]
    fn sa_selection_checks_names_and_directions() {
        let cfg = Config::parse(CONF).unwrap();
        assert!(matches!(
            select_sas(&cfg, &[], Op::Encrypt),
            Err(Error::Usage(_))
        ));
        assert!(select_sas(&cfg, &[], Op::Decrypt).unwrap().is_empty());
        let e = select_sas(&cfg, &["i".into()], Op::Encrypt).unwrap_err();
        assert!(e.to_string().contains("not an 'out' SA"), "{e}");
        let e = select_sas(&cfg, &["nope".into()], Op::Decrypt).unwrap_err();
        assert!(e.to_string().contains("no such SA"), "{e}");
        let outonly = Config::parse(&CONF[..CONF.find("[[sa]]\nname = \"i\"").unwrap()]).unwrap();
        assert!(select_sas(&outonly, &[], Op::Decrypt).is_err());
    }
}
