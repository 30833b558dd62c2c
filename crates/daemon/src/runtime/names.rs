//! The one rule for names: every name that enters the daemon (SA and policy names, the SA names a policy lists,
//! interface names: `interface.name`, `l2sec.interface`, `l2sec.tap`), from the configuration file or the control
//! socket, is 1 to [`NAME_MAX`] characters of `[A-Za-z0-9._-]` ([`IFNAME_MAX`] for interfaces, the kernel's limit).
//! Names reach nftables rules (comments, interface matches), log lines, events and status; with this charset none
//! of them can end a string, a statement or a line there. Errors name the key and the rule, never the value.
//!
//! Free text that reaches a log line (paths: `interface.control_socket`, `state_dir`) is checked by [`check_text`]:
//! no control characters (a newline would start a forged log line).

use crate::runtime::error::ConfigError;

/// The longest SA or policy name.
pub const NAME_MAX: usize = 64;
/// The longest interface name (the kernel's IFNAMSIZ less the terminating zero).
pub const IFNAME_MAX: usize = 15;

/// What a name may hold, as errors say it.
const RULE: &str = "of A-Z a-z 0-9 . _ -";

fn charset_ok(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `s` is a valid SA or policy name (see [`check_name`]).
pub fn is_name(s: &str) -> bool {
    (1..=NAME_MAX).contains(&s.len()) && charset_ok(s)
}

/// An SA or policy name (`key` names it in the error): 1 to [`NAME_MAX`] characters of `[A-Za-z0-9._-]`.
pub fn check_name(key: &str, s: &str) -> Result<(), ConfigError> {
    if is_name(s) {
        return Ok(());
    }
    Err(ConfigError {
        key: key.to_string(),
        reason: format!("must be 1-{NAME_MAX} characters {RULE} (value not shown)"),
    })
}

/// An interface name (`key` names it in the error): the same characters as [`check_name`], 1 to [`IFNAME_MAX`] of
/// them, and not `.` or `..` (the kernel refuses those).
pub fn check_ifname(key: &str, s: &str) -> Result<(), ConfigError> {
    if (1..=IFNAME_MAX).contains(&s.len()) && charset_ok(s) && s != "." && s != ".." {
        return Ok(());
    }
    Err(ConfigError {
        key: key.to_string(),
        reason: format!(
            "must be an interface name: 1-{IFNAME_MAX} characters {RULE}, not . or .. (value not shown)"
        ),
    })
}

/// Free text that may reach a log line (a path): not empty, no control characters.
pub fn check_text(key: &str, s: &str) -> Result<(), ConfigError> {
    if !s.is_empty() && !s.chars().any(char::is_control) {
        return Ok(());
    }
    Err(ConfigError {
        key: key.to_string(),
        reason: "must not be empty nor hold control characters (value not shown)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule, at its edges: the charset, the lengths, and the hostile names of issue 21 (a quote, a newline, a
    /// semicolon, an nft rule) refused without the value in the error.
    #[test]
    fn names_follow_one_rule() {
        for ok in [
            "a",
            "a-to-b",
            "sa0",
            "policy12",
            "A.b_c-9",
            &"x".repeat(NAME_MAX),
        ] {
            assert!(check_name("policy.name", ok).is_ok(), "{ok}");
        }
        let hostile = [
            "",
            &"x".repeat(NAME_MAX + 1),
            "a b",
            "x\"",
            "x\nmeta l4proto != 255 accept comment \"",
            "x;y",
            "x}",
            "x{",
            "x*",
            "x\\",
            "x'",
            "x/y",
            "x:y",
            "x\u{0}",
            "x\t",
            "é",
            "x\r",
            "SECRETVALUE123\"",
        ];
        for bad in hostile {
            let e = check_name("policy.name", bad).unwrap_err();
            assert_eq!(e.key, "policy.name");
            assert!(e.reason.contains("A-Z a-z 0-9 . _ -"), "{e}");
            if bad.len() > 1 {
                assert!(!e.to_string().contains(bad), "{e}");
            }
            assert!(!e.to_string().contains("SECRETVALUE"), "{e}");
            assert!(check_ifname("interface.name", bad).is_err(), "{bad:?}");
        }
        for ok in ["nv0", "veth-a", "l2s0", "a.b", &"i".repeat(IFNAME_MAX)] {
            assert!(check_ifname("interface.name", ok).is_ok(), "{ok}");
        }
        for bad in [".", "..", &"i".repeat(IFNAME_MAX + 1)] {
            assert_eq!(check_ifname("l2sec.tap", bad).unwrap_err().key, "l2sec.tap");
        }
        assert!(check_text("interface.control_socket", "/run/netveil/a b.sock").is_ok());
        for bad in ["", "/run/x\n2026-01-01 INFO forged", "/run/\u{1b}[2J"] {
            let e = check_text("interface.control_socket", bad).unwrap_err();
            assert!(!bad.is_empty() && !e.to_string().contains(bad) || bad.is_empty());
        }
    }
}
