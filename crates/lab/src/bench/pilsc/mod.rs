//! `netveil bench --pilsc`: PILSC's per-packet lookup in process at 10 to 100,000 rules ([`lookup`]), then on the
//! wire between two namespaces: transfers through it and the bytes it adds to a packet ([`net`]); the rows and
//! their table in `rows`.

pub mod lookup;
pub mod net;
mod rows;

pub use lookup::{lookup_rows, Classifier, Effort, Verdict, LOOKUP_SIZES};
pub use rows::{goal, render, PilscRow};

use crate::bench::args::BenchArgs;
use crate::{Error, Result};

pub fn run(a: &BenchArgs) -> Result<Vec<PilscRow>> {
    let e = if a.quick { Effort::QUICK } else { Effort::FULL };
    println!(
        "netveil bench --pilsc: per-packet classification (flow key, policy lookup naming rule and key) at {} rules: {} \
         distinct packets, {} lookups per run, median of {} runs; the linear scan of the same database beside it",
        LOOKUP_SIZES.map(|n| n.to_string()).join(", "),
        e.packets,
        e.lookups,
        e.runs
    );
    let mut rows = lookup_rows(&LOOKUP_SIZES, e)?;
    print!("{}", render(&rows));
    // On the wire: the daemons of `--daemon-bin` (default: this binary) in namespaces.
    let bin = match &a.daemon_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(Error::io("current exe"))?,
    };
    println!();
    println!(
        "1 MB TCP transfers without PILSC and through it (authenticated, AES-128) at {} rules, {} each, median; \
         bytes each protocol adds to a packet, from a capture; the paper's numbers beside (its Tables 7 and 8)",
        net::TRANSFER_RULES.map(|n| n.to_string()).join(", "),
        if a.quick { 3 } else { 15 }
    );
    let mut wire = net::overhead_rows(&bin)?;
    wire.extend(net::transfer_rows(
        &bin,
        &net::TRANSFER_RULES,
        if a.quick { 3 } else { 15 },
    )?);
    print!("{}", render(&wire));
    rows.extend(wire);
    // (--quick is too short to judge the goal by.)
    if let Some(g) = goal(&rows).filter(|_| !a.quick) {
        println!();
        println!("goal of issue 24 on this machine:");
        println!("  {g}");
    }
    if let Some(p) = &a.json {
        let v = serde_json::json!({ "pilsc": rows });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(Error::io(format!("cannot write {}", p.display())))?;
    }
    Ok(rows)
}
