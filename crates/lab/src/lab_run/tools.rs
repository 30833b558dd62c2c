//! What `netveil lab` needs on the machine, per experiment: found, installed (`--install`), or named with how to get
//! it. A missing required tool stops the run before anything starts (exit 2); a missing peer (wireguard-go) only
//! leaves its cells without value, each saying why.

use std::process::{Command, Stdio};

use crate::lab::command_line;
use crate::{Error, Result};

/// A program the lab runs: its name, the Debian package that has it, and whether the experiments can go on without
/// it (its cells then say why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub program: &'static str,
    pub package: &'static str,
    pub optional: bool,
}

const fn req(program: &'static str, package: &'static str) -> Tool {
    Tool {
        program,
        package,
        optional: false,
    }
}

/// wireguard-go's Go module (Debian's package is from 2022 and not a fair peer).
pub const WIREGUARD_GO_MODULE: &str = "golang.zx2c4.com/wireguard@latest";

/// The error of a wireguard-go path where wireguard-go is not installed (its cells say so).
pub fn wireguard_go_missing() -> Error {
    Error::Missing {
        tool: "wireguard-go".into(),
        hint: format!("go install {WIREGUARD_GO_MODULE}"),
    }
}

/// The tools of one experiment.
pub fn tools(experiment: &str) -> Vec<Tool> {
    let mut t = vec![req("ip", "iproute2")];
    match experiment {
        "ping-rtt" => t.extend([req("ping", "iputils-ping"), req("arping", "iputils-arping")]),
        "overhead" => t.extend([
            req("ping", "iputils-ping"),
            req("tcpdump", "tcpdump"),
            req("iptables", "iptables"),
        ]),
        "loss" => t.extend([
            req("iperf3", "iperf3"),
            req("nft", "nftables"),
            req("openssl", "openssl"),
            req("curl", "curl"),
        ]),
        "http" => t.extend([
            req("nginx", "nginx-light"),
            req("curl", "curl"),
            req("openssl", "openssl"),
            req("python3", "python3"),
        ]),
        "mtu" => t.extend([
            req("nginx", "nginx-light"),
            req("curl", "curl"),
            req("python3", "python3"),
        ]),
        "delay" => t.extend([req("ping", "iputils-ping"), req("iptables", "iptables")]),
        // (PILSC's engine hands packets to itself through iptables' NFQUEUE.)
        "pilsc" => t.extend([req("iptables", "iptables")]),
        "iperf" => t.extend([
            req("iperf3", "iperf3"),
            req("ping", "iputils-ping"),
            req("ss", "iproute2"),
            req("tcpdump", "tcpdump"),
            req("tshark", "tshark"),
        ]),
        "scp" => t.extend([
            req("sshd", "openssh-server"),
            req("scp", "openssh-client"),
            req("ssh-keygen", "openssh-client"),
            req("time", "time"),
            req("ss", "iproute2"),
            req("tcpdump", "tcpdump"),
            req("tshark", "tshark"),
        ]),
        "voip" => t.extend([
            req("sipp", "sip-tester"),
            req("time", "time"),
            req("ss", "iproute2"),
            req("tcpdump", "tcpdump"),
            req("tshark", "tshark"),
        ]),
        "smtp" => t.extend([
            req("postfix", "postfix"),
            req("swaks", "swaks"),
            req("curl", "curl"),
            req("openssl", "openssl"),
            req("python3", "python3"),
        ]),
        _ => {}
    }
    if matches!(experiment, "ping-rtt" | "overhead" | "loss" | "delay") {
        t.push(Tool {
            program: "wg",
            package: "wireguard-tools",
            optional: true,
        });
    }
    t
}

/// Whether `program` is on PATH (or in /usr/sbin and /sbin, where root's tools live).
fn have(program: &str) -> bool {
    crate::lab::have_tool(program)
        || ["/usr/sbin", "/sbin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(program).is_file())
}

/// The tools of `experiments` that are missing (each once), and whether wireguard-go is.
pub fn missing(experiments: &[String]) -> (Vec<Tool>, bool) {
    let mut out: Vec<Tool> = Vec::new();
    for e in experiments {
        for t in tools(e) {
            if !have(t.program) && !out.iter().any(|o| o.program == t.program) {
                out.push(t);
            }
        }
    }
    let wants_wg = experiments
        .iter()
        .any(|e| matches!(e.as_str(), "ping-rtt" | "overhead" | "loss"));
    (out, wants_wg && crate::bench::find_wireguard_go().is_none())
}

/// What is missing and how to get it, one line each.
pub fn describe(missing: &[Tool], no_wg_go: bool) -> Vec<String> {
    let mut lines: Vec<String> = missing
        .iter()
        .map(|t| {
            format!(
                "{}{}: apt-get install {}",
                t.program,
                if t.optional {
                    " (optional: its cells say why they are empty)"
                } else {
                    ""
                },
                t.package
            )
        })
        .collect();
    if no_wg_go {
        lines.push(format!(
            "wireguard-go (optional: the WireGuard peer's cells say why they are empty): go install {WIREGUARD_GO_MODULE}"
        ));
    }
    lines
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let st = cmd
        .stdin(Stdio::null())
        .status()
        .map_err(Error::io(format!("cannot run {what}")))?;
    if st.success() {
        Ok(())
    } else {
        Err(Error::command(command_line(cmd), Some(st), ""))
    }
}

/// Installs the missing Debian packages (apt-get; services the packages would start are refused while it runs,
/// as `.ci/setup` does) and wireguard-go (with `go`, when Go is installed).
pub fn install(missing: &[Tool], no_wg_go: bool) -> Result<()> {
    let mut pkgs: Vec<&str> = missing.iter().map(|t| t.package).collect();
    pkgs.dedup();
    if !pkgs.is_empty() {
        println!("lab: installing {}", pkgs.join(" "));
        let prc = std::path::Path::new("/usr/sbin/policy-rc.d");
        let own = !prc.exists();
        if own {
            std::fs::write(prc, "#!/bin/sh\nexit 101\n").map_err(Error::io("policy-rc.d"))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(prc, std::fs::Permissions::from_mode(0o755))
                .map_err(Error::io("policy-rc.d"))?;
        }
        // Postfix without a configuration of its own (the lab writes one per run); its installer asks otherwise.
        let preseed = || -> Result<()> {
            if !pkgs.contains(&"postfix") {
                return Ok(());
            }
            let mut c = Command::new("debconf-set-selections")
                .stdin(Stdio::piped())
                .spawn()
                .map_err(Error::io("cannot run debconf-set-selections"))?;
            if let Some(mut i) = c.stdin.take() {
                std::io::Write::write_all(
                    &mut i,
                    b"postfix postfix/main_mailer_type select No configuration\n",
                )
                .map_err(Error::io("debconf-set-selections"))?;
            }
            let st = c.wait().map_err(Error::io("debconf-set-selections"))?;
            if st.success() {
                Ok(())
            } else {
                Err(Error::command("debconf-set-selections", Some(st), ""))
            }
        };
        let r = preseed()
            .and_then(|_| {
                run(
                    Command::new("apt-get")
                        .args(["update", "-q"])
                        .env("DEBIAN_FRONTEND", "noninteractive"),
                    "apt-get update",
                )
            })
            .and_then(|_| {
                run(
                    Command::new("apt-get")
                        .args(["install", "-y", "-q", "--no-install-recommends"])
                        .args(&pkgs)
                        .env("DEBIAN_FRONTEND", "noninteractive"),
                    "apt-get install",
                )
            });
        if own {
            let _ = std::fs::remove_file(prc);
        }
        r?;
    }
    if no_wg_go {
        if have("go") {
            println!("lab: installing wireguard-go (go install {WIREGUARD_GO_MODULE})");
            run(
                Command::new("go").args(["install", WIREGUARD_GO_MODULE]),
                "go install wireguard-go",
            )?;
        } else {
            println!(
                "lab: wireguard-go not installed: Go is not installed (https://go.dev/dl/), then go install {WIREGUARD_GO_MODULE}"
            );
        }
    }
    Ok(())
}

/// Before a run: with `install`, installs what is missing; then refuses the run (a usage error, exit 2) while a
/// required tool is missing, naming each and its package, and names the missing optional ones.
pub fn preflight(experiments: &[String], install_missing: bool) -> Result<()> {
    let (mut miss, mut no_wg) = missing(experiments);
    if install_missing && (!miss.is_empty() || no_wg) {
        install(&miss, no_wg)?;
        (miss, no_wg) = missing(experiments);
    }
    let lines = describe(&miss, no_wg);
    if miss.iter().any(|t| !t.optional) {
        return Err(Error::Usage(format!(
            "netveil lab needs what is missing here (or run it with --install):\n  {}",
            lines.join("\n  ")
        )));
    }
    for l in lines {
        println!("lab: missing {l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_experiment_names_its_tools_and_packages() {
        for e in crate::lab_run::EXPERIMENTS {
            let t = tools(e);
            assert!(t.iter().any(|t| t.program == "ip"), "{e}");
            assert!(t.iter().all(|t| !t.package.is_empty()), "{e}");
        }
        assert!(tools("http").contains(&req("nginx", "nginx-light")));
        assert!(tools("iperf").contains(&req("iperf3", "iperf3")));
        assert!(tools("pilsc").contains(&req("iptables", "iptables")));
        let lines = describe(&[req("nginx", "nginx-light")], true);
        assert_eq!(lines[0], "nginx: apt-get install nginx-light");
        assert!(lines[1].contains("go install golang.zx2c4.com/wireguard@latest"));
    }
}
