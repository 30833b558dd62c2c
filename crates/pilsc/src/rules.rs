//! The PILSC rule file (the paper's Fig. 2 and 3) and its key file.
//!
//! A rule file is a list of records. A record starts with its `Rule` tag and holds one of each tag:
//!
//! ```text
//! # web and FTP to 193.140.1.1 are protected; DNS to anywhere in 10.0.0.0/8 passes in clear
//! Rule = 1;  Security = true;  IP = 193.140.1.1;  Protocol = TCP;  Port = 20-21;
//!            Encryption = 1;   Applmode = Server; Key = 0xcda8;
//! Rule 2
//!   Security false
//!   IP 0a:00:00:00/8
//!   Protocol UDP
//!   Port 53
//!   Applmode Client
//! ```
//!
//! - Tags: `Tag = value`, or `Tag value`; tag names in any case; `;` ends a tag (optional at the end of a line),
//!   so a line may hold several; `#` starts a comment that runs to the end of the line.
//! - `Rule`: the rule's number, unique in the file (1 and up).
//! - `Security`: `true` (protect) or `false` (pass in clear: a hole in a wider protected rule).
//! - `IP`: the peer, dotted (`193.140.1.1`) or colon-hex as the paper writes it (`c1:8c:01:01`), with an optional
//!   prefix (`/16`; host bits must be zero). IPv6 is refused: PILSC marks packets with an IPv4 option.
//! - `Protocol`: `TCP`, `UDP`, `ICMP` or `any` (netveil's addition: every protocol).
//! - `Port`: one port or a range `lo-hi` (decimal or `0x` hex), for TCP and UDP only; without it, every port.
//! - `Applmode`: with `Port` only: `Server` (the port is ours: we serve it) or `Client` (the port is the peer's).
//! - `Encryption` and `Key`: with `Security = true` only, both required: an algorithm by number or name (see
//!   [`crate::cipher`]), and a key: `0x` followed by the algorithm's key length in hex, or the name of a key in the
//!   key file. A hex value shorter than the algorithm's key (the paper's `Key = 0xcda8`) is taken as a name; if
//!   the key file has no key of that name, the error gives its length, never its digits.
//!
//! Loading checks every record and reports every error with its line number; removes duplicates (a record equal
//! to an earlier one in everything but its number: reported, not an error); refuses two records that select the
//! same traffic differently; and sorts the rules most specific first: longer prefix, then a named protocol before
//! `any`, then the narrower port range (none: all 65536), then `Server` before `Client`, then the lower number.
//! The first rule that matches a packet in that order is the one that applies.
//!
//! The key file: `name = 0xHEX` lines (`;` optional, `#` comments); names are unique.
//!
//! No error shows a value of the file (a key pasted into the wrong tag would be printed): errors name the line, the
//! tag and what was expected; a tag or key name is shown only if it is a plain name that does not look like hex
//! (see [`shown_name`]).

use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::Ipv4Net;
use zeroize::Zeroizing;

use crate::cipher::{parse_number, Cipher};

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

    fn has_ports(self) -> bool {
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
    /// The line of its `Rule` tag (1-based); for a rule loaded by [`from_toml`], its position in the array of
    /// tables (1-based: `pilsc.rule[line - 1]`).
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
    fn specificity(&self) -> (u8, u8, u32, u8, u32) {
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
    fn selector(&self) -> (Ipv4Net, Protocol, Option<(PortRange, ApplMode)>) {
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

/// The tags, as the documentation spells them.
const TAGS: [&str; 8] = [
    "Rule",
    "Security",
    "IP",
    "Protocol",
    "Port",
    "Encryption",
    "Applmode",
    "Key",
];

fn tag_of(name: &str) -> Option<&'static str> {
    TAGS.iter().copied().find(|t| t.eq_ignore_ascii_case(name))
}

/// A value and the line it was on.
type At<T> = Option<(T, usize)>;

/// A record as read, before its tags are checked against each other.
#[derive(Default)]
struct Partial {
    number: u32,
    line: usize,
    security: At<bool>,
    peer: At<Ipv4Net>,
    protocol: At<Protocol>,
    port: At<PortRange>,
    mode: At<ApplMode>,
    cipher: At<Cipher>,
    key: At<Zeroizing<String>>,
    /// Tags whose value was refused (already reported: not "missing" too).
    refused: Vec<&'static str>,
}

struct Parser {
    errors: Vec<LineError>,
    rules: Vec<Rule>,
    record: Option<Partial>,
    /// How a message names a place (`line 7` in a flat file, `pilsc.rule[6]` in TOML).
    at: fn(usize) -> String,
}

impl Parser {
    fn err(&mut self, line: usize, tag: Option<&'static str>, msg: impl Into<String>) {
        self.errors.push(LineError {
            line,
            tag,
            msg: msg.into(),
        });
    }

    fn statement(&mut self, line: usize, stmt: &str) {
        let (name, value) = match stmt.find(|c: char| c == '=' || c.is_whitespace()) {
            Some(i) => {
                let rest = stmt[i..].trim_start();
                let rest = rest.strip_prefix('=').unwrap_or(rest).trim();
                (&stmt[..i], rest)
            }
            None => (stmt, ""),
        };
        let Some(tag) = tag_of(name) else {
            let known = TAGS.join(", ");
            // A word alone is more likely a value (a key pasted on a line of its own) than a tag: not shown.
            let shown = if value.is_empty() {
                "(not shown: no value follows it)".into()
            } else {
                shown_name(name)
            };
            self.err(
                line,
                None,
                format!("unknown tag {shown} (the tags: {known})"),
            );
            return;
        };
        self.set(line, tag, value);
    }

    /// One tag of the record under way (`Rule` starts one).
    fn set(&mut self, line: usize, tag: &'static str, value: &str) {
        if value.is_empty() {
            self.err(line, Some(tag), "no value");
            return;
        }
        if tag == "Rule" {
            self.finish();
            match parse_number(value).and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => {
                    self.record = Some(Partial {
                        number: n,
                        line,
                        ..Partial::default()
                    })
                }
                _ => {
                    self.err(
                        line,
                        Some(tag),
                        "is not a rule number (1 and up; value not shown)",
                    );
                    // The record's tags still get checked, under a number no rule has.
                    self.record = Some(Partial {
                        number: 0,
                        line,
                        ..Partial::default()
                    });
                }
            }
            return;
        }
        let Some(mut r) = self.record.take() else {
            self.err(line, Some(tag), "comes before the first Rule tag");
            return;
        };
        let twice = match tag {
            "Security" => r.security.is_some(),
            "IP" => r.peer.is_some(),
            "Protocol" => r.protocol.is_some(),
            "Port" => r.port.is_some(),
            "Encryption" => r.cipher.is_some(),
            "Applmode" => r.mode.is_some(),
            _ => r.key.is_some(),
        };
        if twice {
            self.err(line, Some(tag), format!("given twice in rule {}", r.number));
            self.record = Some(r);
            return;
        }
        let result = match tag {
            "Security" => parse_bool(value).map(|v| r.security = Some((v, line))),
            "IP" => parse_peer(value).map(|v| r.peer = Some((v, line))),
            "Protocol" => parse_protocol(value).map(|v| r.protocol = Some((v, line))),
            "Port" => parse_ports(value).map(|v| r.port = Some((v, line))),
            "Encryption" => Cipher::parse(value)
                .ok_or_else(|| {
                    let names: Vec<String> = Cipher::ALL
                        .iter()
                        .map(|c| format!("{} ({})", c.number(), c.name()))
                        .collect();
                    format!(
                        "unknown algorithm (value not shown; the algorithms: {})",
                        names.join(", ")
                    )
                })
                .map(|v| r.cipher = Some((v, line))),
            "Applmode" => parse_mode(value).map(|v| r.mode = Some((v, line))),
            _ => {
                r.key = Some((Zeroizing::new(value.to_string()), line));
                Ok(())
            }
        };
        if let Err(msg) = result {
            self.err(line, Some(tag), msg);
            r.refused.push(tag);
        }
        self.record = Some(r);
    }

    /// Checks the record under way against itself and makes it a rule.
    fn finish(&mut self) {
        let Some(r) = self.record.take() else { return };
        let n = r.number;
        let mut ok = n > 0 && r.refused.is_empty();
        let mut need = |p: &mut Parser, present: bool, tag: &'static str| {
            if !present && !r.refused.contains(&tag) {
                p.err(r.line, Some(tag), format!("missing in rule {n}"));
                ok = false;
            }
        };
        need(self, r.security.is_some(), "Security");
        need(self, r.peer.is_some(), "IP");
        need(self, r.protocol.is_some(), "Protocol");
        let (Some((security, _)), Some((peer, _)), Some((protocol, pline))) =
            (r.security, r.peer, r.protocol)
        else {
            return;
        };
        let port = match (r.port, r.mode) {
            (Some((_, line)), _) if !protocol.has_ports() => {
                let p = format!("{protocol:?}").to_uppercase();
                self.err(
                    line,
                    Some("Port"),
                    format!(
                        "rule {n}: {p} has no ports (Port is for TCP and UDP; Protocol at {})",
                        (self.at)(pline)
                    ),
                );
                ok = false;
                None
            }
            (Some((ports, _)), Some((mode, _))) => Some((ports, mode)),
            (Some((_, line)), None) => {
                self.err(
                    line,
                    Some("Applmode"),
                    format!(
                        "missing in rule {n}: is the port ours (Server) or the peer's (Client)?"
                    ),
                );
                ok = false;
                None
            }
            (None, Some((_, line))) => {
                self.err(
                    line,
                    Some("Applmode"),
                    format!("rule {n} has no Port for it to apply to"),
                );
                ok = false;
                None
            }
            (None, None) => None,
        };
        let protect = if security {
            match (r.cipher, r.key) {
                (Some((cipher, _)), Some((key, kline))) => match key_ref(cipher, &key) {
                    Ok(key) => Some(Protection { cipher, key }),
                    Err(msg) => {
                        self.err(kline, Some("Key"), format!("rule {n}: {msg}"));
                        ok = false;
                        None
                    }
                },
                (c, k) => {
                    for (present, tag) in [(c.is_some(), "Encryption"), (k.is_some(), "Key")] {
                        if !present && !r.refused.contains(&tag) {
                            self.err(
                                r.line,
                                Some(tag),
                                format!("missing in rule {n} (Security = true needs Encryption and Key)"),
                            );
                        }
                    }
                    ok = false;
                    None
                }
            }
        } else {
            for (at, tag) in [
                (r.cipher.map(|c| c.1), "Encryption"),
                (r.key.as_ref().map(|k| k.1), "Key"),
            ] {
                if let Some(line) = at {
                    self.err(
                        line,
                        Some(tag),
                        format!("rule {n} has Security = false: its traffic passes in clear, with no {tag}"),
                    );
                    ok = false;
                }
            }
            None
        };
        if ok {
            self.rules.push(Rule {
                number: n,
                line: r.line,
                peer,
                protocol,
                port,
                protect,
            });
        }
    }
}

/// The key a rule writes: bytes if the hex is the algorithm's key length, a name otherwise.
fn key_ref(cipher: Cipher, value: &str) -> Result<KeyRef, String> {
    let lens = cipher.key_len();
    if let Some(h) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        let bytes = decode_hex(h)
            .ok_or_else(|| "not hexadecimal (0x and pairs of hex digits)".to_string())?;
        if bytes.len() > *lens.end() {
            return Err(format!(
                "{} bytes is longer than {cipher} takes ({})",
                bytes.len(),
                fmt_lens(cipher)
            ));
        }
        if lens.contains(&bytes.len()) {
            return Ok(KeyRef::Literal(bytes));
        }
        // Too short to be a key: the name of one (the paper's `Key = 0xcda8`).
        return Ok(KeyRef::Name(value.to_string()));
    }
    if !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        Ok(KeyRef::Name(value.to_string()))
    } else {
        Err("neither 0x and hex digits nor a key name (letters, digits, _ . -)".into())
    }
}

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
fn looks_hex(s: &str) -> bool {
    let hex = |h: &str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit());
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => hex(h),
        None => s.len() >= 16 && hex(s),
    }
}

/// The error of a rule whose key name is not in the key file. A `0x` value too short for the algorithm is taken as
/// a name (the paper's `Key = 0xcda8`); missing from the key file, it is most likely a key of the wrong length:
/// the error says so by its length, without its digits.
fn missing_key(rule: u32, cipher: Cipher, name: &str) -> String {
    match name.strip_prefix("0x").or_else(|| name.strip_prefix("0X")) {
        Some(h) if looks_hex(name) => format!(
            "rule {rule}: key of {} bytes, {cipher} needs {} (value not shown; a 0x value shorter than the key is \
             looked up as a name in the key file, which has no such name)",
            h.len() / 2,
            fmt_lens(cipher)
        ),
        _ => format!(
            "rule {rule}: no key named {} in the key file",
            shown_name(name)
        ),
    }
}

fn fmt_lens(c: Cipher) -> String {
    let l = c.key_len();
    if l.start() == l.end() {
        format!("{} bytes", l.start())
    } else {
        format!("{} to {} bytes", l.start(), l.end())
    }
}

fn decode_hex(h: &str) -> Option<Zeroizing<Vec<u8>>> {
    if h.is_empty() || !h.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Zeroizing::new(Vec::with_capacity(h.len() / 2));
    for pair in h.as_bytes().chunks(2) {
        let s = std::str::from_utf8(pair).ok()?;
        out.push(u8::from_str_radix(s, 16).ok()?);
    }
    Some(out)
}

fn parse_bool(v: &str) -> Result<bool, String> {
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err("is neither true nor false (value not shown)".into())
    }
}

fn parse_protocol(v: &str) -> Result<Protocol, String> {
    match v.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Protocol::Tcp),
        "udp" => Ok(Protocol::Udp),
        "icmp" => Ok(Protocol::Icmp),
        "any" => Ok(Protocol::Any),
        _ => Err("is not one of TCP, UDP, ICMP, any (value not shown)".into()),
    }
}

fn parse_mode(v: &str) -> Result<ApplMode, String> {
    if v.eq_ignore_ascii_case("server") {
        Ok(ApplMode::Server)
    } else if v.eq_ignore_ascii_case("client") {
        Ok(ApplMode::Client)
    } else {
        Err("is neither Server (the port is ours) nor Client (the peer's) (value not shown)".into())
    }
}

fn parse_port(v: &str) -> Result<u16, String> {
    parse_number(v)
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| "is not a port (0 to 65535, or 0x0 to 0xffff; value not shown)".into())
}

fn parse_ports(v: &str) -> Result<PortRange, String> {
    let (lo, hi) = match v.split_once('-') {
        Some((a, b)) => (parse_port(a.trim())?, parse_port(b.trim())?),
        None => {
            let p = parse_port(v)?;
            (p, p)
        }
    };
    if lo > hi {
        return Err(format!("the range ends below its start ({lo}-{hi})"));
    }
    Ok(PortRange { lo, hi })
}

/// `193.140.1.1`, `c1:8c:01:01`, either with `/len`.
fn parse_peer(v: &str) -> Result<Ipv4Net, String> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => {
            let len =
                l.parse::<u8>().ok().filter(|l| *l <= 32).ok_or_else(|| {
                    "the prefix length must be 0 to 32 (value not shown)".to_string()
                })?;
            (a, len)
        }
        None => (v, 32),
    };
    let ip = if let Ok(a) = addr.parse::<Ipv4Addr>() {
        a
    } else if let Some(a) = colon_hex(addr) {
        a
    } else if addr.parse::<Ipv6Addr>().is_ok() {
        return Err(
            "is IPv6: PILSC protects IPv4 only (it marks packets with the IPv4 security option, type 130)".into(),
        );
    } else {
        return Err(
            "is not an IPv4 address (193.140.1.1 or c1:8c:01:01, optionally /len; value not shown)"
                .into(),
        );
    };
    let net = Ipv4Net::new(ip, len).map_err(|e| e.to_string())?;
    if net.network() != ip {
        return Err(format!(
            "{ip} has bits set past its /{len} prefix (did you mean {}?)",
            net.trunc()
        ));
    }
    Ok(net)
}

/// The paper's `00:00:00:00 .. ff:ff:ff:ff`: four groups of one or two hex digits.
fn colon_hex(s: &str) -> Option<Ipv4Addr> {
    let mut b = [0u8; 4];
    let mut n = 0;
    for g in s.split(':') {
        if n == 4 || g.is_empty() || g.len() > 2 {
            return None;
        }
        b[n] = u8::from_str_radix(g, 16).ok()?;
        n += 1;
    }
    (n == 4).then_some(Ipv4Addr::from(b))
}

/// Splits a line into its statements: the comment dropped, `;` separating.
fn statements(line: &str) -> impl Iterator<Item = &str> {
    let line = line.split('#').next().unwrap_or("");
    line.split(';').map(str::trim).filter(|s| !s.is_empty())
}

/// Loads a rule file (see the module documentation): every error with its line, or the rules most specific
/// first and the duplicates dropped.
pub fn parse(text: &str) -> Result<RuleFile, Errors> {
    let mut p = Parser::new(|line| format!("line {line}"));
    for (i, line) in text.lines().enumerate() {
        for stmt in statements(line) {
            p.statement(i + 1, stmt);
        }
    }
    p.load()
}

impl Parser {
    fn new(at: fn(usize) -> String) -> Parser {
        Parser {
            errors: Vec::new(),
            rules: Vec::new(),
            record: None,
            at,
        }
    }

    /// The records read made a rule file: checked against each other, duplicates dropped, sorted.
    fn load(mut self) -> Result<RuleFile, Errors> {
        self.finish();
        let at = self.at;
        let p = self;
        let mut errors = p.errors;
        // Numbers unique; equal selectors: the same protection is a duplicate, another one a conflict.
        let mut by_number: HashMap<u32, usize> = HashMap::new();
        let mut by_selector: HashMap<_, usize> = HashMap::new();
        let mut rules = Vec::with_capacity(p.rules.len());
        let mut duplicates = Vec::new();
        for r in p.rules {
            if let Some(&line) = by_number.get(&r.number) {
                errors.push(LineError {
                    line: r.line,
                    tag: Some("Rule"),
                    msg: format!("rule number {} is already used at {}", r.number, at(line)),
                });
                continue;
            }
            by_number.insert(r.number, r.line);
            if let Some(&k) = by_selector.get(&r.selector()) {
                let first: &Rule = &rules[k];
                if first.protect == r.protect {
                    duplicates.push(Duplicate {
                        number: r.number,
                        line: r.line,
                        same_as: first.number,
                        same_as_line: first.line,
                    });
                } else {
                    errors.push(LineError {
                    line: r.line,
                    tag: Some("Rule"),
                    msg: format!(
                        "rule {} selects the same traffic as rule {} ({}) (same IP, Protocol, Port and \
                         Applmode) but protects it differently",
                        r.number,
                        first.number,
                        at(first.line)
                    ),
                });
                }
                continue;
            }
            by_selector.insert(r.selector(), rules.len());
            rules.push(r);
        }
        if !errors.is_empty() {
            errors.sort_by_key(|e| e.line);
            return Err(Errors(errors));
        }
        rules.sort_by_key(Rule::specificity);
        Ok(RuleFile { rules, duplicates })
    }
}

/// Where netveil's TOML configuration holds PILSC rules: an array of tables, `[[pilsc.rule]]`.
pub const TOML_KEY: &str = "pilsc.rule";

/// A rule's TOML keys and the flat file's tags they stand for.
const TOML_KEYS: [(&str, &str); 8] = [
    ("rule", "Rule"),
    ("security", "Security"),
    ("ip", "IP"),
    ("protocol", "Protocol"),
    ("port", "Port"),
    ("encryption", "Encryption"),
    ("applmode", "Applmode"),
    ("key", "Key"),
];

/// One error of rules written in TOML, named by its key (`pilsc.rule[3].port`, the index from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    pub key: String,
    pub msg: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.msg)
    }
}

/// Every error found in TOML rules, in the order of the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyErrors(pub Vec<KeyError>);

impl fmt::Display for KeyErrors {
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

impl std::error::Error for KeyErrors {}

impl Errors {
    /// These errors named by TOML key, for rules that [`from_toml`] loaded (whose `line` is their position in
    /// `[[pilsc.rule]]`, from 1): e.g. the key table's errors about them.
    pub fn in_toml(&self) -> KeyErrors {
        KeyErrors(
            self.0
                .iter()
                .map(|e| KeyError {
                    key: toml_path(e.line, e.tag),
                    msg: e.msg.clone(),
                })
                .collect(),
        )
    }
}

/// `pilsc.rule[i]` for the rule at position `line` (from 1), with the key of `tag` if any.
fn toml_path(line: usize, tag: Option<&str>) -> String {
    let entry = format!("{TOML_KEY}[{}]", line.saturating_sub(1));
    match tag.and_then(|t| TOML_KEYS.iter().find(|(_, tg)| *tg == t)) {
        Some((key, _)) => format!("{entry}.{key}"),
        None => entry,
    }
}

/// A TOML value as the flat file writes it: `security` a boolean; `rule` an integer; `port` and `encryption` an
/// integer or a string (`"20-21"`, `"AES-256"`); the others strings. `None` and what was expected otherwise
/// (the value is not shown: it may be a key).
fn toml_text<'a>(tag: &str, v: &'a toml::Value) -> Result<std::borrow::Cow<'a, str>, String> {
    use toml::Value;
    match (tag, v) {
        ("Security", Value::Boolean(b)) => Ok(b.to_string().into()),
        ("Rule" | "Port" | "Encryption", Value::Integer(n)) => Ok(n.to_string().into()),
        ("IP" | "Protocol" | "Port" | "Encryption" | "Applmode" | "Key", Value::String(s)) => {
            Ok(s.as_str().into())
        }
        _ => {
            let expected = match tag {
                "Security" => "a boolean (true or false)",
                "Rule" => "an integer",
                "Port" => "an integer or a string (\"lo-hi\")",
                "Encryption" => {
                    "an integer (the paper's number) or a string (the algorithm's name)"
                }
                _ => "a string",
            };
            Err(format!(
                "expected {expected}, found {} (value not shown)",
                v.type_str()
            ))
        }
    }
}

/// Loads rules written in netveil's TOML (each table of `[[pilsc.rule]]`: the flat file's tags as lowercase keys:
/// `rule`, `security`, `ip`, `protocol`, `port`, `encryption`, `applmode`, `key`) into exactly the rule file that
/// the same rules in a flat file, one record per line, load to: the same checks, duplicate removal and order; a
/// rule's `line` is its position in the array (from 1).
/// Errors name the key (`pilsc.rule[3].port`, the index from 0); unknown keys are refused with the known ones.
///
/// ```toml
/// [[pilsc.rule]]
/// rule = 1
/// security = true
/// ip = "193.140.1.1"
/// protocol = "tcp"
/// port = "20-21"
/// encryption = 1
/// applmode = "server"
/// key = "0xcda8"
/// ```
pub fn from_toml(tables: &[toml::Table]) -> Result<RuleFile, KeyErrors> {
    let mut p = Parser::new(|line| toml_path(line, None));
    for (i, table) in tables.iter().enumerate() {
        let line = i + 1;
        // `rule` starts the record; without a valid one, the other keys are still checked, under number 0 (no rule
        // has it: the record makes no rule).
        let number = table.get("rule").map(|v| toml_text("Rule", v));
        match number {
            Some(Ok(n)) => p.set(line, "Rule", &n),
            _ => {
                p.finish();
                match number {
                    Some(Err(msg)) => p.err(line, Some("Rule"), msg),
                    _ => p.err(line, Some("Rule"), "missing: every rule has a number"),
                }
                p.record = Some(Partial {
                    number: 0,
                    line,
                    ..Partial::default()
                });
            }
        }
        for (key, tag) in &TOML_KEYS[1..] {
            let Some(v) = table.get(*key) else { continue };
            match toml_text(tag, v) {
                Ok(text) => p.set(line, tag, &text),
                Err(msg) => {
                    p.err(line, Some(tag), msg);
                    if let Some(r) = &mut p.record {
                        r.refused.push(tag);
                    }
                }
            }
        }
        for key in table.keys() {
            if TOML_KEYS.iter().all(|(k, _)| k != key) {
                let known = TOML_KEYS.map(|(k, _)| k).join(", ");
                let shown = shown_name(key);
                p.err(
                    line,
                    None,
                    format!("unknown key {shown} (the keys: {known})"),
                );
            }
        }
    }
    p.load().map_err(|e| e.in_toml())
}

/// The key file: names to key bytes.
pub struct Keys(HashMap<String, Zeroizing<Vec<u8>>>);

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        f.debug_struct("Keys").field("names", &names).finish()
    }
}

impl Keys {
    /// Loads a key file: `name = 0xHEX` per line.
    pub fn parse(text: &str) -> Result<Keys, Errors> {
        let mut keys = HashMap::new();
        let mut lines_of: HashMap<String, usize> = HashMap::new();
        let mut errors = Vec::new();
        for (i, line) in text.lines().enumerate() {
            for stmt in statements(line) {
                let mut err = |msg: String| {
                    errors.push(LineError {
                        line: i + 1,
                        tag: None,
                        msg,
                    })
                };
                let Some((name, value)) = stmt.split_once('=') else {
                    err("expected name = 0xHEX".into());
                    continue;
                };
                let (name, value) = (name.trim(), value.trim());
                let Some(bytes) = value
                    .strip_prefix("0x")
                    .or_else(|| value.strip_prefix("0X"))
                    .and_then(decode_hex)
                else {
                    err(format!(
                        "key {}: the value is not 0x and pairs of hex digits (value not shown)",
                        shown_name(name)
                    ));
                    continue;
                };
                if name.is_empty() {
                    err("a key with no name".into());
                    continue;
                }
                if let Some(l) = lines_of.get(name) {
                    err(format!(
                        "key {} is already defined at line {l}",
                        shown_name(name)
                    ));
                    continue;
                }
                lines_of.insert(name.to_string(), i + 1);
                keys.insert(name.to_string(), bytes);
            }
        }
        if errors.is_empty() {
            Ok(Keys(keys))
        } else {
            Err(Errors(errors))
        }
    }

    /// No keys (for rule files that write every key).
    pub fn none() -> Keys {
        Keys(HashMap::new())
    }

    /// The bytes of a rule's key, checked against its algorithm's key length.
    pub fn resolve<'a>(&'a self, rule: &'a Rule) -> Result<Option<&'a [u8]>, LineError> {
        let Some(p) = &rule.protect else {
            return Ok(None);
        };
        let bytes: &[u8] = match &p.key {
            KeyRef::Literal(k) => k,
            KeyRef::Name(n) => self.0.get(n).ok_or_else(|| LineError {
                line: rule.line,
                tag: Some("Key"),
                msg: missing_key(rule.number, p.cipher, n),
            })?,
        };
        if !p.cipher.key_len().contains(&bytes.len()) {
            return Err(LineError {
                line: rule.line,
                tag: Some("Key"),
                msg: format!(
                    "rule {}: the key is {} bytes; {} takes {}",
                    rule.number,
                    bytes.len(),
                    p.cipher,
                    fmt_lens(p.cipher)
                ),
            });
        }
        Ok(Some(bytes))
    }
}
