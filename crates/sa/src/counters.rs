//! Lock-free counters for SAs and drop reasons, and the registry of drop reasons.
//!
//! # One registry of drop reasons
//!
//! Every data-plane drop is counted under a stable name (what `netveil status` shows and scripts read). Each
//! layer that decides drops declares its reasons with [`drop_reasons!`](crate::drop_reasons), one list of
//! `Variant => "stable-name"`; an engine that counts a protocol's reasons and its own *includes* the protocol's
//! enum as one variant instead of repeating its reasons:
//!
//! ```
//! netveil_sa::drop_reasons! {
//!     /// What the protocol decides.
//!     pub enum ProtoDrop {
//!         /// Too short.
//!         Malformed => "malformed",
//!         /// The ICV did not verify.
//!         AuthFailed => "auth-failed",
//!     }
//! }
//! netveil_sa::drop_reasons! {
//!     /// What the engine decides, and the protocol's reasons.
//!     pub enum EngineDrop {
//!         /// The protocol's reasons, under their own names.
//!         Proto(ProtoDrop),
//!         /// No policy allows it.
//!         PolicyDiscard => "policy-discard",
//!     }
//! }
//! use netveil_sa::counters::DropCounters;
//! assert_eq!(EngineDrop::NAMES, ["malformed", "auth-failed", "policy-discard"]);
//! assert_eq!(EngineDrop::from(ProtoDrop::AuthFailed).index(), 1);
//! assert_eq!(EngineDrop::from_name("policy-discard"), Some(EngineDrop::PolicyDiscard));
//! let c = DropCounters::<EngineDrop>::default();
//! c.count(ProtoDrop::AuthFailed.into());
//! assert_eq!(c.snapshot()[1], ("auth-failed", 1));
//! ```
//!
//! The names of a registry enum, included ones too, are checked when it is compiled: each must be
//! [`valid_name`] and appear once, so a composed enum cannot count two reasons under one name:
//!
//! ```compile_fail
//! netveil_sa::drop_reasons! {
//!     pub enum ProtoDrop { Malformed => "malformed" }
//! }
//! netveil_sa::drop_reasons! {
//!     pub enum EngineDrop { Proto(ProtoDrop), Short => "malformed" }
//! }
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Traffic counters of one SA (one direction).
#[derive(Debug, Default)]
pub struct SaCounters {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    /// Packets dropped for this SA (any reason).
    pub dropped: AtomicU64,
    pub auth_failed: AtomicU64,
    pub replayed: AtomicU64,
}

impl SaCounters {
    pub fn add(&self, bytes: usize) {
        self.packets.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }
    pub fn snapshot(&self) -> SaCountersSnapshot {
        SaCountersSnapshot {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            auth_failed: self.auth_failed.load(Relaxed),
            replayed: self.replayed.load(Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SaCountersSnapshot {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub auth_failed: u64,
    pub replayed: u64,
}

/// Counters indexed by a reason enum `R` that maps itself to `0..R::COUNT`. Implemented by
/// [`drop_reasons!`](crate::drop_reasons).
pub trait Reason: Copy {
    const COUNT: usize;
    fn index(self) -> usize;
    fn name(index: usize) -> &'static str;
}

/// Whether `name` can be a drop reason's stable name: lowercase ASCII letters, digits and single `-` between
/// them (`auth-failed`), so that it reads the same in JSON keys, text and shell scripts.
pub const fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || b[0] == b'-' || b[b.len() - 1] == b'-' {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let ok = b[i].is_ascii_lowercase()
            || b[i].is_ascii_digit()
            || (b[i] == b'-' && b[i - 1] != b'-');
        if !ok {
            return false;
        }
        i += 1;
    }
    true
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of the first name that is not [`valid_name`] or repeats an earlier one (`None`: all good).
/// [`drop_reasons!`](crate::drop_reasons) refuses to compile a registry with such a name.
pub const fn first_bad_name(names: &[&str]) -> Option<usize> {
    let mut i = 0;
    while i < names.len() {
        if !valid_name(names[i]) {
            return Some(i);
        }
        let mut j = 0;
        while j < i {
            if same(names[i], names[j]) {
                return Some(i);
            }
            j += 1;
        }
        i += 1;
    }
    None
}

/// Declares a drop-reason enum from one list of reasons, each `Variant => "stable-name"` with its doc comment,
/// optionally preceded by *included* registry enums, each `Variant(Type)`, whose reasons are counted under their
/// own names (see the [module documentation](crate::counters)).
///
/// Generated for `enum E`: the enum (`Debug, Clone, Copy, PartialEq, Eq, Hash`); `E::COUNT`; `E::ALL` and
/// `E::NAMES` in index order; `const fn index(self)` and `const fn name(self)`; `E::from_index` and
/// `E::from_name`; `Display` (the name), `std::error::Error`; [`Reason`] (for [`DropCounters`]); and
/// `From<Included> for E` for every included enum.
///
/// Index layout: the included enums first, one after the other in the order written (each keeps its own order),
/// then the enum's own reasons. Included types must themselves come from `drop_reasons!`. The names (included
/// ones too) are checked at compile time: [`valid_name`], and no name twice. A registry needs one reason at least.
#[macro_export]
macro_rules! drop_reasons {
    // Entry: the enum header, then the items, sorted below into includes and own reasons.
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident { $($items:tt)* }
    ) => {
        $crate::drop_reasons!(@parse [$(#[$m])*] [$vis] [$name] [] [] $($items)*);
    };

    // An included registry enum (only before the own reasons).
    (@parse $head:tt $vis:tt $name:tt [$($inc:tt)*] []
        $(#[$im:meta])* $iv:ident ( $it:ty ) $(, $($rest:tt)*)?
    ) => {
        $crate::drop_reasons!(@parse $head $vis $name [$($inc)* [$(#[$im])*] $iv ($it);] [] $($($rest)*)?);
    };
    (@parse $head:tt $vis:tt $name:tt $inc:tt [$($own:tt)+]
        $(#[$im:meta])* $iv:ident ( $it:ty ) $(, $($rest:tt)*)?
    ) => {
        ::core::compile_error!(::core::concat!(
            "drop_reasons!: the included enum `", ::core::stringify!($iv),
            "` must come before the enum's own reasons"
        ));
    };
    // One of the enum's own reasons.
    (@parse $head:tt $vis:tt $name:tt $inc:tt [$($own:tt)*]
        $(#[$vm:meta])* $v:ident => $s:literal $(, $($rest:tt)*)?
    ) => {
        $crate::drop_reasons!(@parse $head $vis $name $inc [$($own)* [$(#[$vm])*] $v $s;] $($($rest)*)?);
    };
    // Everything sorted: generate.
    (@parse [$(#[$m:meta])*] [$vis:vis] [$name:ident]
        [$([$(#[$im:meta])*] $iv:ident ($it:ty);)*]
        [$([$(#[$vm:meta])*] $v:ident $s:literal;)*]
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$im])* $iv($it),)*
            $($(#[$vm])* $v,)*
        }

        const _: () = {
            /// The included enums and the own reasons, numbered in the order written.
            #[allow(dead_code)]
            enum Included { $($iv,)* }
            #[allow(dead_code)]
            enum Own { $($v,)* }
            /// The number of reasons of each included enum.
            const INCLUDED_COUNTS: &[usize] = &[$(<$it>::COUNT,)*];
            /// The first index of the `k`-th included enum.
            const fn included_offset(k: usize) -> usize {
                let mut sum = 0;
                let mut i = 0;
                while i < k {
                    sum += INCLUDED_COUNTS[i];
                    i += 1;
                }
                sum
            }
            /// The first index of the own reasons.
            const OWN_OFFSET: usize = included_offset(INCLUDED_COUNTS.len());
            const OWN_NAMES: &[&str] = &[$($s,)*];

            // Not every user needs every function (a private registry in a test, say).
            #[allow(dead_code)]
            impl $name {
                /// The number of reasons (included ones too).
                pub const COUNT: usize = OWN_OFFSET + OWN_NAMES.len();

                /// Every reason, in index order.
                pub const ALL: [$name; $name::COUNT] = {
                    let mut all = [match $name::from_index(0) {
                        Some(r) => r,
                        None => ::core::panic!("a drop-reason registry needs one reason at least"),
                    }; $name::COUNT];
                    let mut i = 0;
                    while i < $name::COUNT {
                        all[i] = match $name::from_index(i) {
                            Some(r) => r,
                            None => ::core::panic!("drop_reasons!: an index without a reason"),
                        };
                        i += 1;
                    }
                    all
                };

                /// The stable name of every reason, in index order.
                pub const NAMES: [&'static str; $name::COUNT] = {
                    let mut names = [""; $name::COUNT];
                    let mut i = 0;
                    while i < $name::COUNT {
                        names[i] = $name::ALL[i].name();
                        i += 1;
                    }
                    names
                };

                /// The reason's place in `0..COUNT` (a counter's index).
                pub const fn index(self) -> usize {
                    match self {
                        $($name::$iv(r) => {
                            const OFFSET: usize = included_offset(Included::$iv as usize);
                            OFFSET + r.index()
                        })*
                        $($name::$v => {
                            const INDEX: usize = OWN_OFFSET + Own::$v as usize;
                            INDEX
                        })*
                    }
                }

                /// The reason at `index` (`None` past the end).
                pub const fn from_index(index: usize) -> Option<$name> {
                    $({
                        const OFFSET: usize = included_offset(Included::$iv as usize);
                        if index >= OFFSET && index - OFFSET < <$it>::COUNT {
                            return match <$it>::from_index(index - OFFSET) {
                                Some(r) => Some($name::$iv(r)),
                                None => None,
                            };
                        }
                    })*
                    $(if index == OWN_OFFSET + Own::$v as usize {
                        return Some($name::$v);
                    })*
                    None
                }

                /// The stable name (counters, `status`).
                pub const fn name(self) -> &'static str {
                    match self {
                        $($name::$iv(r) => r.name(),)*
                        $($name::$v => $s,)*
                    }
                }

                /// The reason of a stable name.
                pub fn from_name(name: &str) -> Option<$name> {
                    $name::ALL.iter().copied().find(|r| r.name() == name)
                }
            }

            // Checked at compile time: every index maps back to its reason, and every name is valid and unique (a
            // failure names the constant below and shows the first bad name).
            const _: () = {
                let mut i = 0;
                while i < $name::COUNT {
                    if $name::ALL[i].index() != i {
                        ::core::panic!("drop_reasons!: index and from_index disagree");
                    }
                    i += 1;
                }
            };
            const DROP_REASON_NAME_REPEATED_OR_NOT_LOWERCASE_WITH_DASHES: () =
                match $crate::counters::first_bad_name(&$name::NAMES) {
                    Some(i) => ::core::panic!("{}", $name::NAMES[i]),
                    None => (),
                };
            const _: () = DROP_REASON_NAME_REPEATED_OR_NOT_LOWERCASE_WITH_DASHES;

            impl ::core::fmt::Display for $name {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str(self.name())
                }
            }

            impl ::std::error::Error for $name {}

            impl $crate::counters::Reason for $name {
                const COUNT: usize = $name::COUNT;
                fn index(self) -> usize {
                    $name::index(self)
                }
                fn name(index: usize) -> &'static str {
                    $name::NAMES.get(index).copied().unwrap_or("?")
                }
            }

            $(impl ::core::convert::From<$it> for $name {
                fn from(r: $it) -> $name {
                    $name::$iv(r)
                }
            })*
        };
    };
}

/// One atomic counter per drop reason.
pub struct DropCounters<R: Reason> {
    counts: Box<[AtomicU64]>,
    _r: core::marker::PhantomData<R>,
}

impl<R: Reason> Default for DropCounters<R> {
    fn default() -> Self {
        DropCounters {
            counts: (0..R::COUNT).map(|_| AtomicU64::new(0)).collect(),
            _r: core::marker::PhantomData,
        }
    }
}

impl<R: Reason> DropCounters<R> {
    pub fn count(&self, r: R) {
        self.counts[r.index()].fetch_add(1, Relaxed);
    }
    /// Counts `n` drops for `r` at once.
    pub fn count_n(&self, r: R, n: u64) {
        if n > 0 {
            self.counts[r.index()].fetch_add(n, Relaxed);
        }
    }
    pub fn get(&self, r: R) -> u64 {
        self.counts[r.index()].load(Relaxed)
    }
    /// (name, count) of every reason, in index order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        self.counts
            .iter()
            .enumerate()
            .map(|(i, c)| (R::name(i), c.load(Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    crate::drop_reasons! {
        /// A protocol's reasons.
        enum Why {
            /// Too short.
            Short => "short",
            /// Bad ICV.
            Auth => "auth",
            Replay => "replay",
        }
    }

    crate::drop_reasons! {
        /// Another protocol's.
        pub(crate) enum Other {
            Late => "late",
        }
    }

    crate::drop_reasons! {
        /// An engine's: two protocols' reasons, then its own.
        enum Engine {
            /// The first protocol's.
            Why(Why),
            Other(Other),
            /// Its own.
            NoPolicy => "no-policy",
            Discard => "discard",
        }
    }

    #[test]
    fn sa_counters() {
        let c = SaCounters::default();
        assert_eq!(c.snapshot(), SaCountersSnapshot::default());
        c.add(100);
        c.add(50);
        c.dropped.fetch_add(2, Relaxed);
        c.auth_failed.fetch_add(1, Relaxed);
        c.replayed.fetch_add(1, Relaxed);
        assert_eq!(
            c.snapshot(),
            SaCountersSnapshot {
                packets: 2,
                bytes: 150,
                dropped: 2,
                auth_failed: 1,
                replayed: 1
            }
        );
    }

    #[test]
    fn sa_counters_concurrent() {
        let c = Arc::new(SaCounters::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || (0..1000).for_each(|_| c.add(10)))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let s = c.snapshot();
        assert_eq!((s.packets, s.bytes), (4000, 40_000));
    }

    #[test]
    fn drop_counters() {
        let d = DropCounters::<Why>::default();
        d.count(Why::Auth);
        d.count(Why::Auth);
        d.count(Why::Replay);
        assert_eq!(d.get(Why::Short), 0);
        assert_eq!(d.get(Why::Auth), 2);
        assert_eq!(d.get(Why::Replay), 1);
        assert_eq!(d.snapshot(), vec![("short", 0), ("auth", 2), ("replay", 1)]);
    }

    #[test]
    fn registry_layout() {
        assert_eq!(Why::COUNT, 3);
        assert_eq!(Why::ALL, [Why::Short, Why::Auth, Why::Replay]);
        assert_eq!(Why::NAMES, ["short", "auth", "replay"]);
        assert_eq!(Engine::COUNT, 6);
        assert_eq!(
            Engine::ALL,
            [
                Engine::Why(Why::Short),
                Engine::Why(Why::Auth),
                Engine::Why(Why::Replay),
                Engine::Other(Other::Late),
                Engine::NoPolicy,
                Engine::Discard,
            ]
        );
        assert_eq!(
            Engine::NAMES,
            ["short", "auth", "replay", "late", "no-policy", "discard"]
        );
        for (i, r) in Engine::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
            assert_eq!(<Engine as Reason>::index(r), i);
            assert_eq!(Engine::from_index(i), Some(r));
            assert_eq!(<Engine as Reason>::name(i), r.name());
            assert_eq!(r.to_string(), r.name());
            assert_eq!(Engine::from_name(r.name()), Some(r));
        }
        assert_eq!(Engine::from_index(6), None);
        assert_eq!(<Engine as Reason>::name(6), "?");
        assert_eq!(Engine::from_name("nope"), None);
        assert_eq!(Engine::from(Other::Late), Engine::Other(Other::Late));
        assert_eq!(Engine::from(Why::Replay).index(), 2);
    }

    #[test]
    fn composed_counters_share_one_table() {
        let d = DropCounters::<Engine>::default();
        d.count(Why::Auth.into());
        d.count(Engine::Discard);
        d.count(Other::Late.into());
        d.count(Other::Late.into());
        assert_eq!(
            d.snapshot(),
            vec![
                ("short", 0),
                ("auth", 1),
                ("replay", 0),
                ("late", 2),
                ("no-policy", 0),
                ("discard", 1)
            ]
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("auth-failed"));
        assert!(valid_name("x25519"));
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "Auth",
            "auth failed",
            "auth_failed",
            "rx:auth",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert_eq!(first_bad_name(&[]), None);
        assert_eq!(first_bad_name(&["a", "b", "c"]), None);
        assert_eq!(first_bad_name(&["a", "b", "a"]), Some(2));
        assert_eq!(first_bad_name(&["a", "ab", "b", "ab"]), Some(3));
        assert_eq!(first_bad_name(&["a", "B"]), Some(1));
    }
}
