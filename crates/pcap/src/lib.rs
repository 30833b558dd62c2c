//! pcap files: the classic libpcap format (read: either byte order, micro- or nanosecond timestamps; written:
//! little-endian, the file's resolution), and the split of a captured frame into its link-layer header and its IP
//! packet. Link types: RAW (101, also 12 and 14), IPV4 (228), IPV6 (229), Ethernet (1, with VLAN tags), and on read
//! also LINUX_SLL (113) and LINUX_SLL2 (276).

#![forbid(unsafe_code)]

use std::path::Path;

/// A pcap file that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file is not a pcap file this crate reads (the message says why and names the file).
    #[error("{0}")]
    Format(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// The IP packet at the start of `p`, cut to the length its header gives (link-layer padding, FCS removed);
/// `None` if `p` is shorter than that.
pub fn ip_own(p: &[u8]) -> Option<&[u8]> {
    use netveil_wire::{ipv4, ipv6};
    let len = match netveil_wire::ip::version(p) {
        Some(4) if p.len() >= ipv4::MIN_HEADER_LEN => {
            usize::from(ipv4::Packet::new_unchecked(p).total_len())
        }
        Some(6) if p.len() >= ipv6::HEADER_LEN => {
            match ipv6::Packet::new_unchecked(p).payload_len() {
                // A zero payload length (jumbogram) is left to the IPsec code to refuse.
                0 => p.len(),
                n => ipv6::HEADER_LEN + usize::from(n),
            }
        }
        _ => return None,
    };
    p.get(..len)
}

pub const ETHERTYPE_IPV4: u16 = netveil_wire::ethernet::ethertype::IPV4;
pub const ETHERTYPE_IPV6: u16 = netveil_wire::ethernet::ethertype::IPV6;

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
pub struct Frame<'a> {
    pub link_hdr: &'a [u8],
    pub ip: &'a [u8],
}

pub fn be16(b: &[u8], at: usize) -> Option<u16> {
    b.get(at..at + 2).map(|x| u16::from_be_bytes([x[0], x[1]]))
}

/// Splits a frame into link header and IP packet; `None` for non-IP frames.
pub fn split_frame(link: LinkType, f: &[u8]) -> Option<Frame<'_>> {
    let ip_by_type = |et: u16, at: usize| -> Option<Frame<'_>> {
        let ip = f.get(at..)?;
        match (et, netveil_wire::ip::version(ip)?) {
            (ETHERTYPE_IPV4, 4) | (ETHERTYPE_IPV6, 6) => Some(Frame {
                link_hdr: &f[..at - 2],
                ip,
            }),
            _ => None,
        }
    };
    match link {
        LinkType::Raw => match netveil_wire::ip::version(f) {
            Some(4) | Some(6) => Some(Frame {
                link_hdr: &f[..0],
                ip: f,
            }),
            _ => None,
        },
        LinkType::Ethernet => {
            let (et, at) = netveil_wire::ethernet::payload_type(f)?;
            ip_by_type(et, at)
        }
        LinkType::LinuxSll => ip_by_type(be16(f, 14)?, 16),
        LinkType::LinuxSll2 => {
            let et = be16(f, 0)?;
            let ip = f.get(20..)?;
            match (et, netveil_wire::ip::version(ip)?) {
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
pub fn read_file(path: &Path) -> Result<Pcap, FileError> {
    let b = std::fs::read(path).map_err(|source| FileError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    })?;
    parse(&b).map_err(|e| FileError::Format(format!("{}: {e}", path.display())))
}

pub fn write_file(path: &Path, p: &Pcap) -> Result<(), FileError> {
    std::fs::write(path, serialize(p)).map_err(|source| FileError::Io {
        context: format!("cannot write {}", path.display()),
        source,
    })
}

/// Packets and files for tests (here and in the crates that use pcap files): an IPv4/UDP and an IPv6/UDP packet
/// with valid lengths and checksum, an Ethernet frame with VLAN tags, a file of records.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::{LinkType, Pcap, Record};

    pub fn ipv4(payload: &[u8]) -> Vec<u8> {
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

    pub fn ipv6(payload: &[u8]) -> Vec<u8> {
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

    pub fn udp(n: usize) -> Vec<u8> {
        let mut u = vec![0x30, 0x39, 0x00, 0x35, 0, (8 + n) as u8, 0, 0];
        u.extend((0..n).map(|i| i as u8));
        u
    }

    pub fn file(link: LinkType, records: Vec<Vec<u8>>) -> Pcap {
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

    pub fn eth(tags: &[u16], et: u16, ip: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        for t in tags {
            f.extend_from_slice(&t.to_be_bytes());
            f.extend_from_slice(&[0, 42]);
        }
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(ip);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

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
            Err(FileError::Format(m)) => {
                assert!(m.contains("bad.pcap") && m.contains("not a pcap"))
            }
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
}
