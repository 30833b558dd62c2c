//! What every section's parser shares: secrets as written, TOML errors and serde errors without the values they
//! would quote, and the checks of plain values (ranges, addresses, prefixes, hex).

pub use super::error::ConfigError;
use ipnet::IpNet;
pub use netveil_control::RUN_DIR;
use serde::Deserialize;
use std::net::IpAddr;

pub(crate) fn err<T>(key: impl Into<String>, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        key: key.into(),
        reason: reason.into(),
    })
}

/// A key as written in the file (hex): zeroized when dropped, never printed.
pub struct Secret(zeroize::Zeroizing<String>);

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(SecretVisitor)
    }
}

/// Takes a string only; any other value is refused with an error that does not show it (serde's own would quote
/// it: a key written as a number, say).
struct SecretVisitor;

impl SecretVisitor {
    fn refuse<E: serde::de::Error>(what: &str) -> E {
        E::custom(format_args!(
            "expected a hex string, found {what} (value not shown)"
        ))
    }
}

impl<'de> serde::de::Visitor<'de> for SecretVisitor {
    type Value = Secret;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a hex string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret(zeroize::Zeroizing::new(v.to_owned())))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret(zeroize::Zeroizing::new(v)))
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(Self::refuse("a boolean"))
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(Self::refuse("an integer"))
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(Self::refuse("an integer"))
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(Self::refuse("a float"))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(Self::refuse("an array"))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(Self::refuse("a table"))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::ops::Deref for Secret {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// A TOML error without the excerpt of the file that the toml crate would print (the line may hold a key): the
/// position and the reason only.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(s) => {
            let before = &text[..s.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!(
                "invalid configuration at line {line}, column {col}: {}",
                e.message().trim_end()
            )
        }
        None => format!("invalid configuration: {}", e.message().trim_end()),
    }
}

/// Deserializes one table of the configuration (`[interface]`, one `[[sa]]`, a runtime `sa add`'s keys) into its
/// raw struct. Errors name the key (`what.FIELD`) and say what was expected, never what was given: serde's own
/// messages quote the value (`invalid type: string "..."`), so they are rewritten (see [`serde_reason`]).
pub fn typed<T: serde::de::DeserializeOwned>(v: toml::Value, what: &str) -> Result<T, ConfigError> {
    v.try_into().map_err(|e: toml::de::Error| {
        // The toml crate names the path of the failing value after the message ("in `lifetime.soft_bytes`"): the
        // path holds field names of the struct only (an unknown key fails before it is added).
        let shown = e.to_string();
        let path = shown
            .strip_prefix(e.message())
            .map(str::trim)
            .and_then(|r| r.strip_prefix("in `"))
            .and_then(|r| r.strip_suffix('`'))
            .filter(|p| p.split('.').all(crate::runtime::names::is_name));
        let (field, reason) = serde_reason(e.message());
        let key = [Some(what), path, field.as_deref()]
            .into_iter()
            .flatten()
            .filter(|k| !k.is_empty())
            .collect::<Vec<_>>()
            .join(".");
        ConfigError { key, reason }
    })
}

/// A serde error message without the value it quotes: `invalid type: string "...", expected i64` becomes
/// `expected an integer, found a string (value not shown)`. An unknown key is named when it is a plain name (it
/// is returned as the field at fault). Messages of other shapes pass only without quotes in them.
pub fn serde_reason(m: &str) -> (Option<String>, String) {
    let m = m.trim_end();
    let expected = |e: &str| -> String {
        match e.trim() {
            "i64" | "u64" | "i32" | "u32" | "u16" | "u8" | "an integer" => "an integer".into(),
            "a boolean" | "bool" => "a boolean (true or false)".into(),
            "a sequence" => "an array".into(),
            "a map" => "a table".into(),
            s if s.starts_with("struct ") => "a table".into(),
            s if s.starts_with("a string") => "a string".into(),
            s if !s.contains(['"', '`', '\'']) => s.into(),
            _ => "another type".into(),
        }
    };
    let found = |u: &str| -> &'static str {
        let u = u.trim_start();
        if u.starts_with("string") || u.starts_with("character") {
            "a string"
        } else if u.starts_with("integer") {
            "an integer"
        } else if u.starts_with("floating point") {
            "a float"
        } else if u.starts_with("boolean") {
            "a boolean"
        } else if u.starts_with("sequence") {
            "an array"
        } else if u.starts_with("map") {
            "a table"
        } else {
            "another type"
        }
    };
    for (prefix, what) in [("invalid type: ", "found"), ("invalid value: ", "invalid:")] {
        if let Some(rest) = m.strip_prefix(prefix) {
            // The expected part is ours (a type); the value comes first and may hold anything, ", expected "
            // included: the last one separates them.
            let Some(i) = rest.rfind(", expected ") else {
                return (None, "invalid value (not shown)".into());
            };
            let (u, e) = (&rest[..i], &rest[i + ", expected ".len()..]);
            return (
                None,
                if what == "found" {
                    format!(
                        "expected {}, found {} (value not shown)",
                        expected(e),
                        found(u)
                    )
                } else {
                    format!("expected {} (value not shown)", expected(e))
                },
            );
        }
    }
    if let Some(rest) = m.strip_prefix("unknown field `") {
        let (name, known) = match rest.rfind("`, expected ") {
            Some(i) => (&rest[..i], Some(&rest[i + "`, expected ".len()..])),
            None => (rest.rsplit_once('`').map_or(rest, |(n, _)| n), None),
        };
        let known = known.map_or(String::new(), |k| format!(" ({k})"));
        return if crate::runtime::names::is_name(name) {
            (Some(name.to_string()), format!("unknown key{known}"))
        } else {
            (
                None,
                format!("unknown key (not shown: not a plain name){known}"),
            )
        };
    }
    if m.starts_with("missing field `")
        || m.starts_with("invalid length ")
        || !m.contains(['"', '`', '\''])
    {
        return (None, m.to_string());
    }
    (None, "invalid value (not shown)".into())
}

pub(crate) fn int_in(key: &str, v: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    if v < lo || v > hi {
        return err(
            key,
            format!("is out of range ({lo}..={hi}; value not shown)"),
        );
    }
    Ok(v)
}

pub(crate) fn parse_ip(key: &str, s: &str) -> Result<IpAddr, ConfigError> {
    s.trim()
        .parse()
        .or_else(|_| err(key, "is not an IP address (value not shown)"))
}

pub(crate) fn parse_net(key: &str, s: &str) -> Result<IpNet, ConfigError> {
    let s = s.trim();
    if let Ok(n) = s.parse::<IpNet>() {
        return Ok(n);
    }
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(a));
    }
    err(
        key,
        "is not an address or prefix (e.g. 192.0.2.0/24; value not shown)",
    )
}

pub(crate) fn parse_hex(key: &str, s: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, ConfigError> {
    let t = s.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    let t = zeroize::Zeroizing::new(
        t.chars()
            .filter(|c| *c != ':' && !c.is_whitespace())
            .collect::<String>(),
    );
    match hex::decode(t.as_bytes()) {
        Ok(v) => Ok(zeroize::Zeroizing::new(v)),
        Err(_) => err(key, "is not a hexadecimal string"),
    }
}

/// The mark of the daemon's own sockets when `interface.fwmark` is not set: the fail-closed rules let packets
/// with the daemon's mark through.
pub const DEFAULT_SOCKET_MARK: u32 = 0x6e76_0001;

/// The group id of a `control_group` value (at `key`): the name of a group of this host (`/etc/group` or what NSS
/// knows), 1-32 of [A-Za-z0-9_.-], not starting with '-'.
pub fn control_group(key: &str, name: &str) -> Result<u32, ConfigError> {
    let valid = !name.is_empty()
        && name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if !valid {
        return err(
            key,
            "not a group name (1-32 of [A-Za-z0-9_.-], not starting with '-')",
        );
    }
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => err(key, "no group of that name on this host (value not shown)"),
        Err(e) => err(
            key,
            format!("cannot look up the group (value not shown): {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::engines::ip::config::*;

    /// A syntax error names the line and column and never prints the line (it may hold a key).
    #[test]
    fn syntax_errors_do_not_print_the_file() {
        let e = Config::parse("[interface]\nname = \"nv0\"\n[[sa]]\nenc_key = \"c0ffee5ecret\n")
            .unwrap_err();
        assert!(e.reason.contains("line 4"), "{e}");
        assert!(!e.reason.contains("c0ffee5ecret"), "{e}");
        // An unknown key is named (it is a plain name), its value is not.
        let e = Config::parse("[interface]\nbogus = \"c0ffee5ecret\"\n").unwrap_err();
        assert_eq!(e.key, "interface.bogus", "{e}");
        assert!(
            e.reason.starts_with("unknown key") && !e.to_string().contains("c0ffee5ecret"),
            "{e}"
        );
        // One that is not a plain name is not shown either.
        let e = Config::parse("[interface]\n\"c0ffee\\nsecret\" = 1\n").unwrap_err();
        assert_eq!(e.key, "interface", "{e}");
        assert!(!e.to_string().contains("c0ffee"), "{e}");
    }

    /// A key written as another type (a number, an array) is refused without its value.
    #[test]
    fn keys_of_the_wrong_type_are_not_printed() {
        for v in ["1234567890123", "[98765, 43210]", "9876.54321"] {
            let e = Config::parse(&format!(
                "[interface]\nname = \"nv0\"\n[[sa]]\nname = \"a\"\nenc_key = {v}\n"
            ))
            .unwrap_err();
            assert!(e.reason.contains("expected a hex string"), "{e}");
            for digits in ["12345", "98765", "43210", "9876"] {
                assert!(!e.to_string().contains(digits), "{e}");
            }
        }
    }
}
