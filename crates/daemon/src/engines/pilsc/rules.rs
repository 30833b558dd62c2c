//! The netfilter queues' iptables rules: what is queued (the rule file's protected peers, ICMP errors), without
//! fail-open or bypass, installed and removed with whichever iptables works here.

use super::config::PilscConfig;
use crate::runtime::engine::run;
use crate::{Error, Result};
use ipnet::Ipv4Net;

/// The iptables command that works here: `pilsc.iptables`, or the first of iptables-nft and iptables-legacy that
/// lists the mangle table.
pub(super) fn iptables(cfg: &PilscConfig) -> Result<String> {
    let works = |t: &str| {
        std::process::Command::new(t)
            .args(["-w", "-t", "mangle", "-S", "POSTROUTING"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let candidates: Vec<&str> = match &cfg.iptables {
        Some(t) => vec![t.as_str()],
        None => vec!["iptables-nft", "iptables-legacy"],
    };
    candidates
        .iter()
        .find(|t| works(t))
        .map(|t| t.to_string())
        .ok_or_else(|| {
            Error::Unsupported {
                what: "PILSC needs netfilter queues through the xtables NFQUEUE target".into(),
                hint: format!(
                    "{} did not work here (install Debian's iptables package; the kernel needs \
                     NETFILTER_NETLINK_QUEUE and NETFILTER_XT_TARGET_NFQUEUE, with NFT_COMPAT for iptables-nft). \
                     nftables' own `queue` statement is not used: many kernels (this kind included) lack NFT_QUEUE",
                    candidates.join(" and ")
                ),
            }
        })
}

/// Removes the chains of queue `cfg.queue` and the jumps to them, wherever a previous run left them.
pub(super) fn remove_rules(ipt: &str, cfg: &PilscConfig) {
    let (out, inp) = cfg.chains();
    for (table, hook, chain) in [("mangle", "POSTROUTING", &out), ("raw", "PREROUTING", &inp)] {
        let quiet = |args: &[&str]| {
            std::process::Command::new(ipt)
                .arg("-w")
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        while quiet(&["-t", table, "-D", hook, "-j", chain]) {}
        quiet(&["-t", table, "-F", chain]);
        quiet(&["-t", table, "-X", chain]);
    }
}

/// The ICMP types that are errors (they quote a packet): queued to and from everywhere, since an error about a
/// protected flow may come from or go to another address than the peer's (a router, a source route, a forger).
pub(super) const ICMP_ERRORS: [u8; 5] = [3, 4, 5, 11, 12];

/// The contents of the two chains (queue `queue` out, `queue + 1` in) for `prefixes` (`None`: all of the host's own
/// unicast traffic), as `iptables-restore --noflush` input that replaces them in one transaction.
pub(super) fn chain_rules(
    out: &str,
    inp: &str,
    queue: u16,
    prefixes: &Option<Vec<Ipv4Net>>,
) -> String {
    let (qo, qi) = (queue, queue + 1);
    let mut t = format!(
        "*mangle\n-F {out}\n-A {out} -o lo -j RETURN\n-A {out} -m addrtype ! --src-type LOCAL -j RETURN\n\
         -A {out} -m addrtype ! --dst-type UNICAST -j RETURN\n"
    );
    match prefixes {
        Some(ps) => {
            for p in ps {
                t += &format!("-A {out} -d {p} -j NFQUEUE --queue-num {qo}\n");
            }
            for ty in ICMP_ERRORS {
                t += &format!(
                    "-A {out} -p icmp -m icmp --icmp-type {ty} -j NFQUEUE --queue-num {qo}\n"
                );
            }
        }
        None => t += &format!("-A {out} -j NFQUEUE --queue-num {qo}\n"),
    }
    t += &format!(
        "COMMIT\n*raw\n-F {inp}\n-A {inp} -i lo -j RETURN\n-A {inp} -m addrtype ! --dst-type LOCAL -j RETURN\n"
    );
    match prefixes {
        Some(ps) => {
            for p in ps {
                t += &format!("-A {inp} -s {p} -j NFQUEUE --queue-num {qi}\n");
            }
            for ty in ICMP_ERRORS {
                t += &format!(
                    "-A {inp} -p icmp -m icmp --icmp-type {ty} -j NFQUEUE --queue-num {qi}\n"
                );
            }
        }
        None => t += &format!("-A {inp} -j NFQUEUE --queue-num {qi}\n"),
    }
    t += "COMMIT\n";
    t
}

/// Replaces the chains' contents in one transaction (`IPT-restore --noflush`).
pub(super) fn load_chains(ipt: &str, text: &str) -> Result<()> {
    let restore = format!("{ipt}-restore");
    crate::runtime::engine::run_stdin(&[&restore, "-w", "--noflush"], text)
}

/// Installs the queue rules (see the module documentation): the chains, their rules, then the jumps to them.
pub(super) fn install_rules(ipt: &str, cfg: &PilscConfig) -> Result<()> {
    let (out, inp) = cfg.chains();
    let w = |args: &[&str]| -> Result<()> {
        let mut v = vec![ipt, "-w"];
        v.extend_from_slice(args);
        run(&v)
    };
    w(&["-t", "mangle", "-N", &out])?;
    w(&["-t", "raw", "-N", &inp])?;
    load_chains(
        ipt,
        &chain_rules(&out, &inp, cfg.queue, &cfg.queued_prefixes()),
    )?;
    w(&["-t", "mangle", "-I", "POSTROUTING", "-j", &out])?;
    w(&["-t", "raw", "-I", "PREROUTING", "-j", &inp])?;
    Ok(())
}
