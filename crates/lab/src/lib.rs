//! netveil's lab: network namespaces, captures, workloads, `netveil bench`, `netveil demo` and `netveil lab`. It runs
//! the `netveil` binary (`up`, `status`, `keygen`, `flood`, ...) and reads what it prints; it never reaches into the
//! daemon.
//!
//! - [`lab_run`]: `netveil lab`, the studies' experiments in namespaces, one module each; [`lab_report`]: its
//!   report (cells, files, findings, comparison, figures).
//! - [`bench`](mod@bench), [`bench::ping`], [`bench::flood`], [`bench::split`], [`bench::ike`]: throughput,
//!   round-trip times, floods, where a packet's time goes, and IKEv2 setups against strongSwan's; [`bench::pilsc`]:
//!   PILSC's per-packet lookup from 10 to 100,000 rules.
//! - [`demo`]: `netveil demo` (ESP or PSP, `--l2sec`, `--pilsc`); [`demo_pilsc`]: the two-host PILSC lab it shares
//!   with the bench and the tests.
//! - [`strongswan`]: strongSwan's charon as a live IKEv2 peer in a namespace (`swanctl`, vici, `pki`).
//! - [`lan`]: a switched LAN of stations for l2sec.
//! - [`lab_proc`]: CPU time and memory of the lab's processes, from `/proc`.
//! - [`lab`]: namespaces, veth pairs, daemons, captures, two-host setups.
//! - [`seq_udp`]: a sequenced UDP stream for loss tests.
//! - [`pcap_tools`]: `netveil pcap`, ESP/AH and PSP applied to and removed from the packets of a capture.
//!
//! The `// layers:` line below declares the modules' order, top first: no module names anything in a module of a
//! higher group (`scripts/check-modules` holds the crate to it).

// layers: lab_run > lab_report > bench, demo > demo_pilsc, lab_proc, lan, strongswan > lab, pcap_tools, seq_udp

#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod demo_pilsc;
pub mod lab;
pub mod lab_proc;
pub mod lab_report;
pub mod lab_run;
pub mod lan;
pub mod pcap_tools;
pub mod seq_udp;
pub mod strongswan;

/// A failure of a lab. Bad arguments exit with code 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            _ => 1,
        }
    }
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// An [`Error::Other`] with `msg`.
pub(crate) fn other(msg: impl Into<String>) -> Error {
    Error::Other(msg.into())
}
