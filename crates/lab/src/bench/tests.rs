use super::*;

fn row(path: &str, g: f64, times: &[f64]) -> Row {
    Row {
        path: path.into(),
        encap: "udp 4500".into(),
        gbit_per_s: g,
        retransmits: g as u64,
        ping: vec![ping::stat(56, times.len() as u32, times)],
        netveil_bin: None,
        rounds: 1,
    }
}

#[test]
fn rounds_merge_per_path_in_first_order() {
    // Round 2 ran the base binary first: the merged table keeps round 1's order.
    let all = vec![
        row("esp", 1.0, &[0.1]),
        row("esp (base)", 4.0, &[0.4]),
        row("esp (base)", 6.0, &[0.6]),
        row("esp", 3.0, &[0.3]),
        row("esp", 2.0, &[0.2, 0.25]),
    ];
    let m = merge_rows(all);
    assert_eq!(m.len(), 2);
    assert_eq!((m[0].path.as_str(), m[0].rounds), ("esp", 3));
    assert_eq!((m[0].gbit_per_s, m[0].retransmits), (2.0, 2));
    assert_eq!((m[0].ping[0].received, m[0].ping[0].median_ms), (4, 0.225));
    assert_eq!(
        (m[1].path.as_str(), m[1].rounds, m[1].gbit_per_s),
        ("esp (base)", 2, 5.0)
    );
}

#[test]
fn binaries_take_turns_going_first() {
    let bins = [
        Bin {
            path: "new".into(),
            label: "",
        },
        Bin {
            path: "old".into(),
            label: " (base)",
        },
    ];
    let first = |r| turns(&bins, r)[0].label;
    assert_eq!([first(0), first(1), first(2)], ["", " (base)", ""]);
    assert_eq!(turns(&bins[..1], 1).len(), 1);
}
