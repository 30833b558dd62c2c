//! Classic BPF socket filters (`SO_ATTACH_FILTER`): the kernel runs them on every packet before it queues the
//! packet for the socket, and drops what they refuse. netveil uses them to keep a flood of packets that can never
//! authenticate away from the data plane: only the receive SPIs the daemon holds pass, and, where a replay window
//! runs, only sequence numbers (ESP) or IVs (PSP) that are not already left of the window. A filter is a fast path,
//! never the check itself: what it lets through is still checked in full, and a floor that lags behind the window
//! only lets more through.
//!
//! Layouts (where the SPI and the counter are, relative to what a socket's filter sees):
//!
//! | socket | filter sees | SPI | counter |
//! |---|---|---|---|
//! | UDP (ESP-in-UDP, RFC 3948) | the UDP header | bytes 8..12 | sequence number, 12..16 |
//! | UDP (PSP) | the UDP header | bytes 12..16 | IV, 16..24 |
//! | raw IPv4, protocol 50 | the IPv4 header | after the IPv4 header | the next 4 bytes |
//! | raw IPv6, protocol 50 | the ESP header (an IPv6 raw socket's packets start after the IPv6 header) | bytes 0..4 | 4..8 |
//! | raw IPv4, protocol 51 | the IPv4 header | 4 bytes after the IPv4 header | the next 4 bytes |
//! | raw IPv6, protocol 51 | the AH header | bytes 4..8 | 8..12 |

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// One instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

const LD_W_ABS: u16 = 0x20;
const LD_W_IND: u16 = 0x40;
const LD_W_LEN: u16 = 0x80;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// `ret` value that keeps the whole packet.
const ACCEPT: u32 = 0xffff_ffff;
/// `ld` of the kernel's per-packet random number (`SKF_AD_OFF + SKF_AD_RANDOM`).
const RANDOM_K: u32 = 0xffff_f000 + 56;
/// Above a ceiling, one packet in [`CEILING_LETS_THROUGH`] passes anyway (a random draw): should a genuine sender
/// be ahead of the ceiling, its packets still reach the window, and the first that authenticates moves it.
pub const CEILING_LETS_THROUGH: u32 = 64;
const RANDOM_PASS_FROM: u32 = u32::MAX - u32::MAX / CEILING_LETS_THROUGH;
/// Most SPIs one filter lists (beyond, no filter is built: everything passes).
pub const MAX_SPIS: usize = 32;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// Where a filter finds the SPI and the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// ESP in UDP: SPI and 32-bit sequence number after the UDP header.
    EspInUdp,
    /// PSP: SPI at 4 and 64-bit IV at 8 of the PSP header, after the UDP header.
    PspInUdp,
    /// ESP on a raw IPv4 socket: after the IPv4 header (of any length).
    EspRawV4,
    /// ESP on a raw IPv6 socket: at the start (the kernel hands over what follows the IPv6 header and any
    /// extension headers before ESP).
    EspRawV6,
    /// AH on a raw IPv4 socket: SPI and sequence number at 4 and 8 of the AH header, after the IPv4 header.
    AhRawV4,
    /// AH on a raw IPv6 socket: the AH header at the start.
    AhRawV6,
}

impl Layout {
    /// The layout of a raw receive socket of IP protocol `proto` (50: ESP, 51: AH; `None` for others).
    pub fn raw(proto: u8, ipv6: bool) -> Option<Layout> {
        match (proto, ipv6) {
            (50, false) => Some(Layout::EspRawV4),
            (50, true) => Some(Layout::EspRawV6),
            (51, false) => Some(Layout::AhRawV4),
            (51, true) => Some(Layout::AhRawV6),
            _ => None,
        }
    }

    /// Whether the socket's packets start with an IPv4 header (the filter skips it, whatever its length).
    fn after_ipv4(self) -> bool {
        matches!(self, Layout::EspRawV4 | Layout::AhRawV4)
    }
}

/// A receive SA the filter lets through: its SPI and, if a replay window runs, the lowest counter value not yet
/// left of it (ESP: the low 32 bits of the sequence number; PSP: the IV), and optionally the highest one accepted
/// (see [`SpiRule::ceiling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpiRule {
    pub spi: u32,
    pub floor: Option<u64>,
    /// Counters above this are refused too, but for one packet in [`CEILING_LETS_THROUGH`] (random). The daemon
    /// sets it only during a storm of authentication failures, far above the window (beyond the largest jump a
    /// genuine sender makes), so that a forger who does not see the peer's counters makes the receiver decrypt
    /// little: a blind guess lands below it with a tiny probability.
    pub ceiling: Option<u64>,
}

/// A compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program(pub Vec<(u16, u8, u8, u32)>);

/// One instruction with symbolic jump targets, resolved by [`assemble`].
#[derive(Clone, Copy)]
enum Op {
    /// A plain instruction.
    I(u16, u32),
    /// A conditional jump: code, constant, then the labels for true and false.
    J(u16, u32, usize, usize),
    /// `ret`.
    Ret(u32),
    /// A label (no instruction).
    L(usize),
}

/// Resolves labels into jump offsets; `None` if one is out of the 8-bit range or undefined.
fn assemble(ops: &[Op]) -> Option<Vec<Insn>> {
    let mut at = std::collections::HashMap::new();
    let mut pc = 0usize;
    for op in ops {
        match op {
            Op::L(l) => {
                at.insert(*l, pc);
            }
            _ => pc += 1,
        }
    }
    let mut out = Vec::new();
    for op in ops {
        let here = out.len();
        let off = |l: &usize| -> Option<u8> {
            let to = *at.get(l)?;
            u8::try_from(to.checked_sub(here + 1)?).ok()
        };
        match op {
            Op::I(code, k) => out.push(insn(*code, 0, 0, *k)),
            Op::J(code, k, t, f) => out.push(insn(*code, off(t)?, off(f)?, *k)),
            Op::Ret(k) => out.push(insn(RET_K, 0, 0, *k)),
            Op::L(_) => {}
        }
    }
    Some(out)
}

/// [`spi_filter`] for a socket with UDP GRO: the kernel may coalesce datagrams of one flow into one packet and
/// run the filter once, on the first datagram's header, so a forged first datagram would take genuine ones with it.
/// Packets longer than `single_max` (more than one datagram can be) therefore pass unfiltered: the daemon checks
/// every datagram in them.
pub fn spi_filter_gro(layout: Layout, rules: &[SpiRule], single_max: u32) -> Option<Program> {
    spi_filter_with(layout, rules, Some(single_max))
}

/// The filter that passes only packets of `rules` (at most [`MAX_SPIS`]; `None` with more) and, for rules with a
/// floor or a ceiling, only counters within them. Packets too short to hold the SPI (and counter) are dropped.
pub fn spi_filter(layout: Layout, rules: &[SpiRule]) -> Option<Program> {
    spi_filter_with(layout, rules, None)
}

/// A 64-bit comparison of the counter (high word at `hi_at`, low at `lo_at`, loaded with `ld`) with `v`: jumps to
/// `yes` if it is greater (`lo_op` = `JGT_K`) or greater or equal (`JGE_K`) than `v`, else to `no`. `scratch` are
/// two fresh labels.
fn cmp64(
    ops: &mut Vec<Op>,
    (ld, hi_at, lo_at): (u16, u32, u32),
    lo_op: u16,
    v: u64,
    (yes, no): (usize, usize),
    (eq, lo): (usize, usize),
) {
    let hi = (v >> 32) as u32;
    ops.push(Op::I(ld, hi_at));
    ops.push(Op::J(JGT_K, hi, yes, eq));
    ops.push(Op::L(eq));
    ops.push(Op::J(JEQ_K, hi, lo, no));
    ops.push(Op::L(lo));
    ops.push(Op::I(ld, lo_at));
    ops.push(Op::J(lo_op, v as u32, yes, no));
}

fn spi_filter_with(layout: Layout, rules: &[SpiRule], single_max: Option<u32>) -> Option<Program> {
    if rules.len() > MAX_SPIS {
        return None;
    }
    // Loads: (instruction code, offset) of the SPI and of the counter (high word first for PSP's 64-bit IV).
    let (ld, spi_at, ctr_at) = match layout {
        Layout::EspInUdp => (LD_W_ABS, 8, 12),
        Layout::PspInUdp => (LD_W_ABS, 12, 16),
        Layout::EspRawV4 => (LD_W_IND, 0, 4),
        Layout::EspRawV6 => (LD_W_ABS, 0, 4),
        Layout::AhRawV4 => (LD_W_IND, 4, 8),
        Layout::AhRawV6 => (LD_W_ABS, 4, 8),
    };
    const DROP: usize = 0;
    const ACCEPT_L: usize = 1;
    const RAND: usize = 2;
    let mut labels = 3usize;
    let mut label = || {
        labels += 1;
        labels
    };
    let mut ops = Vec::new();
    if let Some(m) = single_max {
        let filtered = label();
        ops.push(Op::I(LD_W_LEN, 0));
        ops.push(Op::J(JGT_K, m, ACCEPT_L, filtered));
        ops.push(Op::L(filtered));
    }
    if layout.after_ipv4() {
        // X = the IPv4 header length.
        ops.push(Op::I(LDX_B_MSH, 0));
    }
    ops.push(Op::I(ld, spi_at));
    let blocks: Vec<usize> = rules.iter().map(|_| label()).collect();
    for (i, r) in rules.iter().enumerate() {
        let next = if i + 1 < rules.len() { label() } else { DROP };
        ops.push(Op::J(JEQ_K, r.spi, blocks[i], next));
        if next != DROP {
            ops.push(Op::L(next));
        }
    }
    if rules.is_empty() {
        ops.push(Op::Ret(0));
    }
    let clamp = |v: u64| v.min(u64::from(u32::MAX)) as u32;
    for (i, r) in rules.iter().enumerate() {
        let ceil = label();
        ops.push(Op::L(blocks[i]));
        match layout {
            Layout::PspInUdp => {
                // 64-bit comparisons, high word first.
                let (hi_at, lo_at) = (ctr_at, ctr_at + 4);
                let at = (ld, hi_at, lo_at);
                if let Some(f) = r.floor {
                    // At or above the floor: on to the ceiling.
                    cmp64(&mut ops, at, JGE_K, f, (ceil, DROP), (label(), label()));
                }
                ops.push(Op::L(ceil));
                match r.ceiling {
                    // Above the ceiling: the random draw.
                    Some(c) => cmp64(&mut ops, at, JGT_K, c, (RAND, ACCEPT_L), (label(), label())),
                    None => ops.push(Op::Ret(ACCEPT)),
                }
            }
            _ => {
                if r.floor.is_some() || r.ceiling.is_some() {
                    ops.push(Op::I(ld, ctr_at));
                }
                if let Some(f) = r.floor {
                    ops.push(Op::J(JGE_K, clamp(f), ceil, DROP));
                }
                ops.push(Op::L(ceil));
                match r.ceiling {
                    Some(c) if c < u64::from(u32::MAX) => {
                        ops.push(Op::J(JGT_K, clamp(c), RAND, ACCEPT_L))
                    }
                    _ => ops.push(Op::Ret(ACCEPT)),
                }
            }
        }
    }
    ops.push(Op::L(RAND));
    ops.push(Op::I(LD_W_ABS, RANDOM_K));
    ops.push(Op::J(JGE_K, RANDOM_PASS_FROM, ACCEPT_L, DROP));
    ops.push(Op::L(ACCEPT_L));
    ops.push(Op::Ret(ACCEPT));
    ops.push(Op::L(DROP));
    ops.push(Op::Ret(0));
    let p = assemble(&ops)?;
    Some(Program(
        p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect(),
    ))
}

/// Runs `p` on `pkt` as the kernel would (for tests): true if the packet passes. The kernel's random number is 0
/// here (see [`run_with_random`]).
pub fn run(p: &Program, pkt: &[u8]) -> bool {
    run_with_random(p, pkt, 0)
}

/// [`run`] with `random` as the kernel's per-packet random number.
pub fn run_with_random(p: &Program, pkt: &[u8], random: u32) -> bool {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let word = |at: usize| -> Option<u32> {
        pkt.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    while let Some(&(code, jt, jf, k)) = p.0.get(pc) {
        pc += 1;
        let jump = |c: bool| if c { jt as usize } else { jf as usize };
        match code {
            LD_W_ABS if k == RANDOM_K => a = random,
            LD_W_ABS => match word(k as usize) {
                Some(v) => a = v,
                None => return false,
            },
            LD_W_LEN => a = pkt.len() as u32,
            LD_W_IND => match word(x as usize + k as usize) {
                Some(v) => a = v,
                None => return false,
            },
            LDX_B_MSH => match pkt.get(k as usize) {
                Some(b) => x = 4 * u32::from(b & 0x0f), // check-ip-offsets: allow (BPF semantics)
                None => return false,
            },
            JEQ_K => pc += jump(a == k),
            JGT_K => pc += jump(a > k),
            JGE_K => pc += jump(a >= k),
            RET_K => return k != 0,
            _ => return false,
        }
    }
    false
}

/// Attaches `p` to the socket `fd` (replacing any filter), or detaches with `None`.
pub(crate) fn attach(fd: BorrowedFd<'_>, p: Option<&Program>) -> io::Result<()> {
    match p {
        Some(p) => {
            let insns: Vec<Insn> =
                p.0.iter()
                    .map(|&(code, jt, jf, k)| insn(code, jt, jf, k))
                    .collect();
            let prog = libc::sock_fprog {
                len: insns.len() as u16,
                filter: insns.as_ptr() as *mut Insn,
            };
            // `prog` points at `insns`, which lives until the call returns (the kernel copies the program).
            crate::sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, prog)
        }
        None => {
            match crate::sys::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_DETACH_FILTER,
                0 as libc::c_int,
            ) {
                // ENOENT: there was none.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
                r => r,
            }
        }
    }
}

impl crate::UdpSocket {
    /// Attaches a socket filter (see [`spi_filter`]), or detaches it with `None`.
    pub fn attach_filter(&self, p: Option<&Program>) -> io::Result<()> {
        attach(self.as_fd(), p)
    }

    /// Packets the kernel dropped before this socket: refused by its filter, or with the receive buffer full
    /// (a 32-bit counter that wraps).
    pub fn kernel_drops(&self) -> io::Result<u32> {
        crate::sys::socket_drops(self.as_fd())
    }
}

impl crate::RawSocket {
    /// Attaches a socket filter (see [`spi_filter`]), or detaches it with `None`.
    pub fn attach_filter(&self, p: Option<&Program>) -> io::Result<()> {
        attach(self.as_fd(), p)
    }

    /// As [`crate::UdpSocket::kernel_drops`].
    pub fn kernel_drops(&self) -> io::Result<u32> {
        crate::sys::socket_drops(self.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esp_udp(spi: u32, seq: u32) -> Vec<u8> {
        let mut p = vec![0x11, 0x94, 0x11, 0x94, 0, 40, 0, 0];
        p.extend_from_slice(&spi.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&[0xab; 24]);
        p
    }

    #[test]
    fn esp_spis_and_floors() {
        let p = spi_filter(
            Layout::EspInUdp,
            &[
                SpiRule {
                    spi: 0x1001,
                    ceiling: None,
                    floor: None,
                },
                SpiRule {
                    spi: 0x2001,
                    ceiling: None,
                    floor: Some(500),
                },
            ],
        )
        .unwrap();
        assert!(run(&p, &esp_udp(0x1001, 1)));
        assert!(run(&p, &esp_udp(0x2001, 500)));
        assert!(run(&p, &esp_udp(0x2001, 501)));
        assert!(!run(&p, &esp_udp(0x2001, 499)));
        assert!(!run(&p, &esp_udp(0x3001, 1000)));
        assert!(!run(&p, &esp_udp(0x3001, 1000)[..10]));
        // Nothing listed: nothing passes.
        let none = spi_filter(Layout::EspInUdp, &[]).unwrap();
        assert!(!run(&none, &esp_udp(0x1001, 1)));
        let many: Vec<SpiRule> = (0..=MAX_SPIS as u32)
            .map(|s| SpiRule {
                spi: s,
                ceiling: None,
                floor: None,
            })
            .collect();
        assert!(spi_filter(Layout::EspInUdp, &many).is_none());
        // The most SPIs, all with floors and ceilings: every jump still fits.
        let all: Vec<SpiRule> = (1..=MAX_SPIS as u32)
            .map(|s| SpiRule {
                spi: s,
                floor: Some(u64::from(s) * 10),
                ceiling: Some(u64::from(s) * 10 + 5),
            })
            .collect();
        let p = spi_filter(Layout::EspInUdp, &all).unwrap();
        for s in 1..=MAX_SPIS as u32 {
            assert!(run(&p, &esp_udp(s, s * 10)));
            assert!(run(&p, &esp_udp(s, s * 10 + 5)));
            assert!(!run(&p, &esp_udp(s, s * 10 - 1)));
            assert!(!run(&p, &esp_udp(s, s * 10 + 6)));
            // Above the ceiling, the random draw lets one in CEILING_LETS_THROUGH through; below the floor, none.
            assert!(run_with_random(&p, &esp_udp(s, s * 10 + 6), u32::MAX));
            assert!(!run_with_random(&p, &esp_udp(s, s * 10 - 1), u32::MAX));
        }
    }

    #[test]
    fn gro_merges_pass() {
        let p = spi_filter_gro(
            Layout::EspInUdp,
            &[SpiRule {
                spi: 0x1001,
                floor: None,
                ceiling: None,
            }],
            1000,
        )
        .unwrap();
        assert!(run(&p, &esp_udp(0x1001, 1)));
        assert!(!run(&p, &esp_udp(0x3001, 1)));
        let mut long = esp_udp(0x3001, 1);
        long.resize(1001, 0);
        assert!(run(&p, &long));
        long.truncate(1000);
        assert!(!run(&p, &long));
    }

    #[test]
    fn psp_64_bit_floors() {
        let psp = |spi: u32, iv: u64| {
            let mut p = vec![0xc3, 0x50, 0x03, 0xe8, 0, 40, 0, 0, 17, 1, 0, 1];
            p.extend_from_slice(&spi.to_be_bytes());
            p.extend_from_slice(&iv.to_be_bytes());
            p.extend_from_slice(&[0xab; 32]);
            p
        };
        let floor = (7u64 << 32) | 100;
        let p = spi_filter(
            Layout::PspInUdp,
            &[SpiRule {
                spi: 0x8000_0001,
                ceiling: None,
                floor: Some(floor),
            }],
        )
        .unwrap();
        assert!(run(&p, &psp(0x8000_0001, floor)));
        assert!(run(&p, &psp(0x8000_0001, floor + 1)));
        assert!(run(&p, &psp(0x8000_0001, 8 << 32)));
        assert!(!run(&p, &psp(0x8000_0001, floor - 1)));
        assert!(!run(&p, &psp(0x8000_0001, (6 << 32) | 0xffff_ffff)));
        assert!(!run(&p, &psp(0x8000_0002, floor)));
        // With a ceiling (and without a floor).
        let ceiling = (9u64 << 32) | 7;
        for fl in [Some(floor), None] {
            let p = spi_filter(
                Layout::PspInUdp,
                &[SpiRule {
                    spi: 0x8000_0001,
                    floor: fl,
                    ceiling: Some(ceiling),
                }],
            )
            .unwrap();
            assert!(run(&p, &psp(0x8000_0001, ceiling)));
            assert!(run(&p, &psp(0x8000_0001, 8 << 32)));
            assert!(run(&p, &psp(0x8000_0001, (9 << 32) | 6)));
            assert!(!run(&p, &psp(0x8000_0001, ceiling + 1)));
            assert!(!run(&p, &psp(0x8000_0001, 10 << 32)));
            assert_eq!(run(&p, &psp(0x8000_0001, floor - 1)), fl.is_none());
        }
    }

    #[test]
    fn raw_ipv4_with_options() {
        let p = spi_filter(
            Layout::EspRawV4,
            &[SpiRule {
                spi: 0x1001,
                ceiling: None,
                floor: Some(10),
            }],
        )
        .unwrap();
        for ihl in [5u8, 7] {
            let mut pkt = vec![0u8; usize::from(ihl) * 4];
            pkt[0] = 0x40 | ihl;
            pkt.extend_from_slice(&0x1001u32.to_be_bytes());
            pkt.extend_from_slice(&10u32.to_be_bytes());
            assert!(run(&p, &pkt), "ihl {ihl}");
            let n = pkt.len();
            pkt[n - 1] = 9;
            assert!(!run(&p, &pkt), "ihl {ihl}");
        }
    }
}
