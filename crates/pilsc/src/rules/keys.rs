//! The key file ([`Keys`]): names to key bytes, and a rule's key resolved against it.

use std::collections::HashMap;
use std::fmt;

use zeroize::Zeroizing;

use super::model::{looks_hex, shown_name, Errors, KeyRef, LineError, Rule};
use super::values::{decode_hex, fmt_lens, statements};
use crate::cipher::Cipher;

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
