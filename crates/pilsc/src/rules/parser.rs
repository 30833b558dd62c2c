//! The records of a rule file, read tag by tag, checked against themselves and each other, and sorted
//! ([`Parser`], which [`from_toml`](super::from_toml) feeds too), and the flat file ([`parse`]).

use std::collections::HashMap;

use ipnet::Ipv4Net;
use zeroize::Zeroizing;

use super::model::{
    shown_name, ApplMode, Duplicate, Errors, LineError, PortRange, Protection, Protocol, Rule,
    RuleFile,
};
use super::values::{
    key_ref, parse_bool, parse_mode, parse_peer, parse_ports, parse_protocol, statements,
};
use crate::cipher::{parse_number, Cipher};

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
pub(super) type At<T> = Option<(T, usize)>;

/// A record as read, before its tags are checked against each other.
#[derive(Default)]
pub(super) struct Partial {
    pub(super) number: u32,
    pub(super) line: usize,
    pub(super) security: At<bool>,
    pub(super) peer: At<Ipv4Net>,
    pub(super) protocol: At<Protocol>,
    pub(super) port: At<PortRange>,
    pub(super) mode: At<ApplMode>,
    pub(super) cipher: At<Cipher>,
    pub(super) key: At<Zeroizing<String>>,
    /// Tags whose value was refused (already reported: not "missing" too).
    pub(super) refused: Vec<&'static str>,
}

pub(super) struct Parser {
    pub(super) errors: Vec<LineError>,
    pub(super) rules: Vec<Rule>,
    pub(super) record: Option<Partial>,
    /// How a message names a place (`line 7` in a flat file, `pilsc.rule[6]` in TOML).
    pub(super) at: fn(usize) -> String,
}

impl Parser {
    pub(super) fn err(&mut self, line: usize, tag: Option<&'static str>, msg: impl Into<String>) {
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
    pub(super) fn set(&mut self, line: usize, tag: &'static str, value: &str) {
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
    pub(super) fn finish(&mut self) {
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
    pub(super) fn new(at: fn(usize) -> String) -> Parser {
        Parser {
            errors: Vec::new(),
            rules: Vec::new(),
            record: None,
            at,
        }
    }

    /// The records read made a rule file: checked against each other, duplicates dropped, sorted.
    pub(super) fn load(mut self) -> Result<RuleFile, Errors> {
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
