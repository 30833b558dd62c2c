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

// layers: keys, toml_rules > parser > values > model
mod keys;
mod model;
mod parser;
mod toml_rules;
mod values;

pub use keys::Keys;
pub use model::{
    shown_name, ApplMode, Duplicate, Errors, KeyRef, LineError, PortRange, Protection, Protocol,
    Rule, RuleFile,
};
pub use parser::parse;
pub use toml_rules::{from_toml, KeyError, KeyErrors, TOML_KEY};
