//! What a rule file loads to ([`Rule`], [`RuleFile`]), the errors of loading one ([`LineError`], [`Errors`]),
//! and how an error shows a name that may be a key ([`shown_name`]).

use std::fmt;

use ipnet::Ipv4Net;
use zeroize::Zeroizing;

use crate::cipher::Cipher;

/// The protocol a rule selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Icmp,
    /// Every protocol.
    Any,
}

impl Protocol {
    /// The IP protocol number (`None` for `any`).
    pub fn number(self) -> Option<u8> {
        match self {
            Protocol::Tcp => Some(6),
            Protocol::Udp => Some(17),
            Protocol::Icmp => Some(1),
            Protocol::Any => None,
        }
    }

    pub(super) fn has_ports(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp)
    }
}

/// Whose port `Port` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ApplMode {
    /// The port is ours (we serve it): the source port of what we send, the destination port of what we receive.
    Server,
    /// The port is the peer's.
    Client,
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    pub lo: u16,
    pub hi: u16,
}

impl PortRange {
    /// How many ports it holds (1 to 65536).
    pub fn span(self) -> u32 {
        u32::from(self.hi) - u32::from(self.lo) + 1
    }

    pub fn contains(self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

/// A rule's key: bytes written in the rule, or the name of a key in the key file.
#[derive(Clone, PartialEq, Eq)]
pub enum KeyRef {
    Literal(Zeroizing<Vec<u8>>),
    Name(String),
}

impl fmt::Debug for KeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyRef::Literal(k) => write!(f, "Literal({} bytes)", k.len()),
            KeyRef::Name(n) => f.debug_tuple("Name").field(&shown_name(n)).finish(),
        }
    }
}

/// How a `Security = true` rule protects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub cipher: Cipher,
    pub key: KeyRef,
}

/// One rule of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub number: u32,
    /// The line of its `Rule` tag (1-based); for a rule loaded by [`from_toml`](super::from_toml), its position in
    /// the array of tables (1-based: `pilsc.rule[line - 1]`).
    pub line: usize,
    pub peer: Ipv4Net,
    pub protocol: Protocol,
    /// `Port` and `Applmode`; `None`: every port.
    pub port: Option<(PortRange, ApplMode)>,
    /// `None`: `Security = false`, the traffic passes in clear.
    pub protect: Option<Protection>,
}

impl Rule {
    /// The order of the rule file once loaded: most specific first (see the module documentation).
    pub(super) fn specificity(&self) -> (u8, u8, u32, u8, u32) {
        let (span, mode) = match self.port {
            Some((r, ApplMode::Server)) => (r.span(), 0),
            Some((r, ApplMode::Client)) => (r.span(), 1),
            None => (65536, 2),
        };
        (
            32 - self.peer.prefix_len(),
            u8::from(self.protocol == Protocol::Any),
            span,
            mode,
            self.number,
        )
    }

    /// What the rule selects: two rules with the same selector select the same traffic.
    pub(super) fn selector(&self) -> (Ipv4Net, Protocol, Option<(PortRange, ApplMode)>) {
        (self.peer, self.protocol, self.port)
    }
}

/// A record dropped because an earlier one says the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub number: u32,
    pub line: usize,
    /// The rule kept.
    pub same_as: u32,
    pub same_as_line: usize,
}

/// A loaded rule file: its rules most specific first, and the duplicates that were dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFile {
    pub rules: Vec<Rule>,
    pub duplicates: Vec<Duplicate>,
}

/// One error of a rule or key file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based.
    pub line: usize,
    /// The tag the error is about, as the file's documentation spells it (`None`: the line's syntax).
    pub tag: Option<&'static str>,
    pub msg: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tag {
            Some(t) => write!(f, "line {}: {t}: {}", self.line, self.msg),
            None => write!(f, "line {}: {}", self.line, self.msg),
        }
    }
}

/// Every error found in a file, in line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Errors(pub Vec<LineError>);

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Errors {}

/// A name as an error may show it: quoted if it is a plain name (letters, digits, `_ . -`, at most 64) that does not
/// look like a key (0x and hex, or 16 or more hex digits); otherwise `(name not shown)`: it may be a key written in the wrong place.
pub fn shown_name(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if plain && !looks_hex(name) {
        format!("{name:?}")
    } else {
        "(name not shown)".into()
    }
}

/// What a key looks like: `0x` and hex digits, or 16 hex digits or more (half the shortest key: a name such as
/// `cafe` or `a` is shown).
pub(super) fn looks_hex(s: &str) -> bool {
    let hex = |h: &str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit());
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => hex(h),
        None => s.len() >= 16 && hex(s),
    }
}
