//! The studies' qualitative findings, checked on a run's cells.

use super::data::{file_bytes, Cell, Report};
use super::text::num;

/// The jitter limit of good voice quality the L2 study judges by, ms.
pub const JITTER_LIMIT_MS: f64 = 40.0;
/// The ideal (largest non-fragmenting) interface MTU of the `mtu` experiment's suite on a 1,500-byte link.
pub const IDEAL_MTU: u16 = 1438;

/// A study's qualitative finding, checked on a run's cells.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub finding: &'static str,
    /// `None`: the run has not the cells to tell.
    pub holds: Option<bool>,
    pub detail: String,
}

impl Finding {
    pub fn verdict(&self) -> &'static str {
        match self.holds {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "not measured in this run",
        }
    }
}

/// The highest loss level of the run's `loss` cells with a `kind` ("udp" or "tcp") share for `path`: (level, share).
fn kept_at_most_loss(report: &Report, path: &str, kind: &str) -> Option<(f64, f64)> {
    report
        .cells
        .iter()
        .filter(|c| c.experiment == "loss" && c.path == path)
        .filter_map(|c| {
            let level: f64 = c
                .metric
                .strip_prefix(&format!("{kind} kept "))?
                .strip_suffix("% loss")?
                .parse()
                .ok()?;
            Some((level, c.value?))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The studies' findings that the run's cells can check (issue 25's list, as far as the experiments go).
pub fn findings(report: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    let formula: Vec<&Cell> = report
        .cells
        .iter()
        .filter(|c| c.experiment == "overhead" && c.expected.is_some() && c.value.is_some())
        .collect();
    let off: Vec<String> = formula
        .iter()
        .filter(|c| c.value != c.expected)
        .map(|c| {
            format!(
                "{}: {} B, formula {} B",
                c.path,
                num(c.value),
                num(c.expected)
            )
        })
        .collect();
    out.push(Finding {
        finding: "overhead bytes per packet equal each protocol's formula",
        holds: (!formula.is_empty()).then_some(off.is_empty()),
        detail: if formula.is_empty() {
            "no overhead cell in this run".into()
        } else if off.is_empty() {
            format!(
                "{} protocols measured, each equal to its formula",
                formula.len()
            )
        } else {
            off.join("; ")
        },
    });
    let psp = kept_at_most_loss(report, "netveil psp aes-gcm-128", "udp");
    out.push(Finding {
        finding: "PSP keeps most of its throughput under loss (the PSP study: 81.2% at 25% loss)",
        holds: psp.map(|(_, k)| k >= 50.0),
        detail: match psp {
            Some((l, k)) => format!("PSP's datagrams kept {k:.1}% of their goodput at {l}% loss"),
            None => "no PSP loss cells".into(),
        },
    });
    let tls = kept_at_most_loss(report, "tls1.3", "tcp");
    out.push(Finding {
        finding: "TLS over TCP loses more of its throughput to loss than PSP's datagrams (the PSP study: TLS 1.3 \
                  keeps 16.3% at 0.2% loss, PSP all)",
        holds: match (tls, psp) {
            (Some((lt, t)), Some((lp, p))) if lt == lp => Some(t < p),
            _ => None,
        },
        detail: match (tls, psp) {
            (Some((lt, t)), Some((lp, p))) => {
                format!("at {lt}% loss TLS 1.3 kept {t:.1}%; at {lp}% PSP's datagrams {p:.1}%")
            }
            _ => "no TLS or PSP loss cells".into(),
        },
    });
    // The IPsec web/email study (Table 4.2): 1 KB files +20-30% network load, 10 MB +5-8%, HTTP.
    let mut paths: Vec<&str> = Vec::new();
    for c in report.cells.iter().filter(|c| c.experiment == "http") {
        if c.metric.starts_with("overhead random ") && !paths.contains(&c.path.as_str()) {
            paths.push(&c.path);
        }
    }
    let small_large: Vec<(String, f64, f64)> = paths
        .into_iter()
        .filter_map(|p| {
            let mut v: Vec<(f64, f64)> = report
                .cells
                .iter()
                .filter(|c| c.experiment == "http" && c.path == p)
                .filter_map(|c| {
                    let size = file_bytes(c.metric.strip_prefix("overhead random ")?)?;
                    Some((size, c.value?))
                })
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (v.len() >= 2).then(|| (p.to_string(), v[0].1, v[v.len() - 1].1))
        })
        .collect();
    let worse: Vec<String> = small_large
        .iter()
        .filter(|(_, small, large)| small <= large)
        .map(|(p, s, l)| format!("{p}: {s:.1}% smallest vs {l:.1}% largest"))
        .collect();
    out.push(Finding {
        finding: "small files pay relatively more than large ones (the IPsec web study, Table 4.2: 1 KB +20-30% \
                  network load, 10 MB +5-8%; random files here)",
        holds: (!small_large.is_empty()).then_some(worse.is_empty()),
        detail: if small_large.is_empty() {
            "no http overhead cells".into()
        } else if worse.is_empty() {
            small_large
                .iter()
                .map(|(p, s, l)| format!("{p}: {s:.1}% smallest, {l:.1}% largest"))
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            worse.join("; ")
        },
    });
    out.push(smtp_over_http(report));
    out.push(ah_over_esp_auth(report));
    out.push(esp_time_grows_with_size(report));
    out.push(latency_follows_delay(report));
    out.push(voip_jitter_below_limit(report));
    out.push(small_mtu_costs_load(report));
    out.push(user_space_costs_throughput(report));
    out.push(pilsc_fewer_bytes_than_ipsec(report));
    out
}

/// The value of the cell (experiment, path, metric), if measured.
fn value(report: &Report, experiment: &str, path: &str, metric: &str) -> Option<f64> {
    report
        .cells
        .iter()
        .find(|c| c.experiment == experiment && c.path == path && c.metric == metric)
        .and_then(|c| c.value)
}

/// The IPsec web/email study's "SMTP carries more overhead than HTTP" (Table 4.10: an SMTP transfer of a file carries
/// 40-113% more bytes than its HTTP transfer; Table 4.2: IPsec adds 26-36% to a 1 KB file's SMTP load, 20-30% to its
/// HTTP load): per path that both experiments ran and random file, the SMTP transfer's bytes above the HTTP
/// transfer's, and at the smallest file the protocol's share of bytes over clear higher for SMTP, in the data
/// direction (the acknowledgements going the other way vary by a packet or two from run to run, which at 1 KB is a
/// point or two of the share).
fn smtp_over_http(report: &Report) -> Finding {
    let finding = "SMTP carries more overhead than HTTP (the IPsec web/email study, Table 4.10: SMTP +40-113% bytes \
                   over HTTP for the same file; Table 4.2: IPsec +26-36% over clear at 1 KB with SMTP, +20-30% \
                   with HTTP; random files here, the data direction's share at the smallest)";
    let mut more = Vec::new();
    let mut fails = Vec::new();
    let mut small = Vec::new();
    let mut sizes: Vec<(f64, String)> = Vec::new();
    for c in report.cells.iter().filter(|c| c.experiment == "smtp") {
        if let Some(name) = c.metric.strip_prefix("bytes random ") {
            if let Some(b) = file_bytes(name) {
                if !sizes.iter().any(|(_, n)| n == name) {
                    sizes.push((b, name.to_string()));
                }
            }
        }
    }
    sizes.sort_by(|a, b| a.0.total_cmp(&b.0));
    for c in report.cells.iter().filter(|c| c.experiment == "smtp") {
        let Some(name) = c.metric.strip_prefix("bytes random ") else {
            continue;
        };
        let (Some(s), Some(h)) = (c.value, value(report, "http", &c.path, &c.metric)) else {
            continue;
        };
        if h > 0.0 {
            more.push((s / h - 1.0) * 100.0);
        }
        if s <= h {
            fails.push(format!("{} {name}: SMTP {s:.0} B, HTTP {h:.0} B", c.path));
        }
    }
    if let Some((_, name)) = sizes.first() {
        let metric = format!("overhead down random {name}");
        for c in report
            .cells
            .iter()
            .filter(|c| c.experiment == "smtp" && c.metric == metric)
        {
            let (Some(s), Some(h)) = (c.value, value(report, "http", &c.path, &metric)) else {
                continue;
            };
            small.push((c.path.clone(), s, h));
            if s <= h {
                fails.push(format!(
                    "{} {name}: +{s:.1}% over clear with SMTP, +{h:.1}% with HTTP (data direction)",
                    c.path
                ));
            }
        }
    }
    if more.is_empty() || small.is_empty() {
        return Finding {
            finding,
            holds: None,
            detail: "no pair of smtp and http cells".into(),
        };
    }
    let (lo, hi) = more
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    Finding {
        finding,
        holds: Some(fails.is_empty()),
        detail: if fails.is_empty() {
            format!(
                "SMTP carried {lo:+.0}% to {hi:+.0}% bytes over HTTP ({} transfers); at {}, over clear in the data \
                 direction: {}",
                more.len(),
                sizes.first().map_or("", |s| s.1.as_str()),
                small
                    .iter()
                    .map(|(p, s, h)| format!("{p} +{s:.1}% (SMTP) vs +{h:.1}% (HTTP)"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        } else {
            fails.join("; ")
        },
    }
}

/// The IPsec web/email study's "AH costs more bytes than ESP authentication" (Table 4.6: +4.47% network load from
/// ESP-3DES-SHA1 to ESP-3DES + AH-SHA1 for a 1 KB file over HTTP), on the wire: the bytes per packet of ESP
/// authenticating alone (no encryption) against ESP's framing with AH authenticating.
fn ah_over_esp_auth(report: &Report) -> Finding {
    let finding = "AH costs more bytes than ESP authentication (the IPsec web/email study, Table 4.6: +1.25-4.47% \
                   network load from ESP authentication to AH over HTTP)";
    let esp = value(report, "overhead", "esp transport null-sha1", "overhead");
    let ah = value(
        report,
        "overhead",
        "esp+ah transport null-null + sha1",
        "overhead",
    );
    // The transfers' change where they ran (informative: the finding is judged on the packets).
    let loads: Vec<String> = report
        .cells
        .iter()
        .filter(|c| c.metric.starts_with("auth esp to ah random "))
        .filter_map(|c| {
            Some(format!(
                "{} {}: {:+.2}%",
                c.experiment,
                c.metric.strip_prefix("auth esp to ah random ")?,
                c.value?
            ))
        })
        .collect();
    match (esp, ah) {
        (Some(e), Some(a)) => Finding {
            finding,
            holds: Some(a > e),
            detail: format!(
                "per packet: ESP authenticating {e:.0} B, AH over ESP's framing {a:.0} B{}",
                if loads.is_empty() {
                    String::new()
                } else {
                    format!("; load from ESP to AH authentication: {}", loads.join(", "))
                }
            ),
        },
        _ => Finding {
            finding,
            holds: None,
            detail: "no ESP-authentication or AH overhead cell".into(),
        },
    }
}

/// The distinct paths of `experiment`'s cells that start with `prefix`, in their first order.
fn paths_of<'a>(report: &'a Report, experiment: &str, prefix: &str) -> Vec<&'a str> {
    let mut paths: Vec<&str> = Vec::new();
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == experiment && c.path.starts_with(prefix))
    {
        if !paths.contains(&c.path.as_str()) {
            paths.push(&c.path);
        }
    }
    paths
}

/// The measured (x, value) of `path`'s cells in `experiment` whose metric `x_of` reads an x from, sorted by x.
fn series(
    report: &Report,
    experiment: &str,
    path: &str,
    x_of: impl Fn(&str) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = report
        .cells
        .iter()
        .filter(|c| c.experiment == experiment && c.path == path)
        .filter_map(|c| Some((x_of(&c.metric)?, c.value?)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// A finding judged case by case: it holds when no case failed (`bad`), and is not measured without a case; the
/// detail names the failed cases, or all of them.
fn judged(finding: &'static str, seen: Vec<String>, bad: Vec<String>, none: &str) -> Finding {
    Finding {
        finding,
        holds: (!seen.is_empty()).then_some(bad.is_empty()),
        detail: if seen.is_empty() {
            none.into()
        } else if bad.is_empty() {
            seen.join("; ")
        } else {
            bad.join("; ")
        },
    }
}

/// The bare-PC IPsec study's "ESP processing time grows with packet size" (Figs. 6 and 7, both directions, both
/// modes): per `ops` ESP path and direction, the total at the largest payload above the total at the smallest.
fn esp_time_grows_with_size(report: &Report) -> Finding {
    let finding = "ESP processing time grows with packet size (the bare-PC IPsec study, Figs. 6-7: incoming and \
                   outgoing, transport and tunnel mode)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for p in paths_of(report, "ops", "esp ") {
        for dir in ["in", "out"] {
            let prefix = format!("{dir} total ");
            let v = series(report, "ops", p, |m| {
                m.strip_prefix(&prefix)?.strip_suffix(" B")?.parse().ok()
            });
            let (Some(small), Some(large)) = (v.first(), v.last()) else {
                continue;
            };
            if v.len() < 2 {
                continue;
            }
            let line = format!(
                "{p} {dir}: {:.0} ns at {} B, {:.0} ns at {} B",
                small.1, small.0, large.1, large.0
            );
            if large.1 <= small.1 {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no ops cells")
}

/// The PSP study's "latency grows linearly with delay; PSP and TLS 1.2 measure roughly the sum of the delays on
/// both ends" (Figs. 4.6 and 4.7): per `delay` path and added one-side delay D, the median round trip gained over
/// the same path's at 0 is twice D, within 10% and half a millisecond.
fn latency_follows_delay(report: &Report) -> Finding {
    let finding = "round-trip time grows with the added delay by the delay on both ends (the PSP study, Figs. \
                   4.6-4.7: PSP and TLS 1.2 measure about the sum of the delays)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for p in paths_of(report, "delay", "") {
        let v = series(report, "delay", p, |m| {
            m.strip_prefix("rtt at ")?.strip_suffix(" ms")?.parse().ok()
        });
        let Some(&(0.0, base)) = v.first() else {
            continue;
        };
        for &(ms, rtt) in &v[1..] {
            let gained = rtt - base;
            let line = format!("{p}: +{gained:.2} ms at {ms} ms on each side");
            if (gained - 2.0 * ms).abs() > 0.1 * 2.0 * ms + 0.5 {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no delay cells")
}

/// The L2 study's "jitter stays below the 40 ms limit of good quality in every category" (Fig. 6.8): per `voip`
/// path, the largest RFC 3550 jitter of any of its RTP streams below the limit.
fn voip_jitter_below_limit(report: &Report) -> Finding {
    let finding = "VoIP jitter stays below the 40 ms limit of good quality on every path (the L2 study, Fig. 6.8)";
    let limit = JITTER_LIMIT_MS;
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == "voip" && c.metric == "rtp max jitter")
    {
        let Some(max) = c.max else { continue };
        let line = format!("{}: at most {max:.2} ms", c.path);
        if max >= limit {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no voip cells")
}

/// The IPsec web/email study's MTU sweep (Appendix C): an interface MTU below the ideal one costs more network load
/// (MTU 600: +16.7-18.1% over 1,438 for ESP). Per `mtu` cell `load vs ideal ... at mtu M` with M under the ideal:
/// above 0.
fn small_mtu_costs_load(report: &Report) -> Finding {
    let finding =
        "an interface MTU below the ideal one costs more network load (the IPsec web/email study, \
                   Appendix C: MTU 600 +16.7-18.1% over the ideal 1,438 with ESP)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report.cells.iter().filter(|c| c.experiment == "mtu") {
        let Some(rest) = c.metric.strip_prefix("load vs ideal ") else {
            continue;
        };
        let Some(mtu) = rest
            .rsplit_once(" at mtu ")
            .and_then(|(_, m)| m.parse::<u16>().ok())
        else {
            continue;
        };
        let (Some(v), true) = (c.value, mtu < IDEAL_MTU) else {
            continue;
        };
        let line = format!("{}: {v:+.1}%", rest);
        if v <= 0.0 {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no mtu cells below the ideal")
}

/// The L2 study's "running in user space, even without crypto, costs throughput" (Fig. 6.18: its program without
/// encryption and HMAC kept 30.69% of Ethernet's TCP throughput, with them 3.42%): per `iperf` path through l2sec,
/// the null suite's included, TCP throughput below the plain bridge's.
fn user_space_costs_throughput(report: &Report) -> Finding {
    let finding = "a user-space L2 protocol keeps less than the plain bridge's TCP throughput, even without crypto \
                   (the L2 study, Fig. 6.18: 30.69% without encryption and HMAC, 3.42% with)";
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    for c in report
        .cells
        .iter()
        .filter(|c| c.experiment == "iperf" && c.metric == "tcp throughput of the bridge's")
    {
        let Some(v) = c.value else { continue };
        let line = format!("{}: {v:.1}% of the bridge's", c.path);
        if v >= 100.0 {
            bad.push(line.clone());
        }
        seen.push(line);
    }
    judged(finding, seen, bad, "no iperf cells through l2sec")
}

/// The PILSC study's "IPsec packets carry 3-4 times more extra bytes than PILSC packets" (Table 8: PILSC 12, IPsec
/// 32-48, cited there): per `overhead` cell of PILSC (either mode), fewer bytes than every IPsec row that stands
/// beside the table (the ESP and ESP+AH rows with a paper value).
fn pilsc_fewer_bytes_than_ipsec(report: &Report) -> Finding {
    let finding =
        "PILSC adds fewer bytes per packet than IPsec (the PILSC study, Table 8: 12 against 32-48)";
    let over = |c: &&Cell| c.experiment == "overhead" && c.value.is_some();
    let ipsec: Vec<(&str, f64)> = report
        .cells
        .iter()
        .filter(over)
        .filter(|c| c.path.starts_with("esp") && c.paper.is_some())
        .filter_map(|c| Some((c.path.as_str(), c.value?)))
        .collect();
    let least = ipsec.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let (mut seen, mut bad) = (Vec::new(), Vec::new());
    if !ipsec.is_empty() {
        for c in report
            .cells
            .iter()
            .filter(over)
            .filter(|c| c.path.starts_with("pilsc"))
        {
            let Some(v) = c.value else { continue };
            let line = format!(
                "{}: {v:.0} B against IPsec's {least:.0} B or more ({} rows)",
                c.path,
                ipsec.len()
            );
            if v >= least {
                bad.push(line.clone());
            }
            seen.push(line);
        }
    }
    judged(finding, seen, bad, "no PILSC and IPsec overhead cells")
}
