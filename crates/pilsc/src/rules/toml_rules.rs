//! The same rules in netveil's TOML (`[[pilsc.rule]]`, [`from_toml`]), errors named by key.

use std::fmt;

use super::model::{shown_name, Errors, RuleFile};
use super::parser::{Parser, Partial};

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
