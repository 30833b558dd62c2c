//! Network-namespace labs for `netveil demo`, `netveil bench` and the integration tests.
//!
//! A [`Lab`] owns a set of network namespaces (named `PREFIX<pid>-<n>-<host>`, so that labs of parallel tests and
//! processes never collide) and a scratch directory. Everything it creates is removed when it is dropped, also while
//! unwinding from a panic: processes still running in its namespaces are killed, the namespaces deleted, the
//! directory removed. [`Daemon`] (a running `netveil up`) and [`Capture`] (a running tcpdump) stop their process on
//! drop. [`HostPair`] generates the two configurations of a point-to-point setup (random keys of the right lengths)
//! and [`TwoHosts`] brings the whole thing up.
//!
//! Addresses are from the documentation ranges only: outer 192.0.2.0/24 or 2001:db8:1::/64 on a veth pair, inner
//! 198.51.100.0/24 or 2001:db8:2::/64 on the TUN devices.
//!
//! The files: [`Lab`] and its commands (`netns`), the daemons (`daemon`), captures (`capture`), the configuration
//! generator (`config`), the two-host setups (`hosts`), traffic (`traffic`), running programs (`process`), and the
//! registry that tears down what a signal interrupts (`cleanup`).

mod capture;
mod cleanup;
mod config;
mod daemon;
mod hosts;
mod netns;
mod process;
mod traffic;

#[cfg(test)]
mod tests;

pub use capture::{tshark_frames, Capture, Frame};
pub use cleanup::{clean_up_on_signals, remove_all_and_exit, LAB_BASE};
pub use config::{
    wireshark_can_decrypt, Family, HostAddrs, HostPair, Mode, Protocol, TRANSPORT_FWMARK,
};
pub use daemon::Daemon;
pub use hosts::{Router, TwoHosts};
pub use netns::Lab;
pub(crate) use process::{command_line, run_ok};
pub use process::{have_tool, is_root, netveil_binary, spawn_in_ns, Held};
pub use traffic::{iperf, iperf3_server, self_signed_cert, tcp_transfer, Transfer};
