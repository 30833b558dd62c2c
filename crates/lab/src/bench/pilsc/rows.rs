//! The rows of `netveil bench --pilsc` (a figure and its unit, the paper's beside), their table, and the goal
//! against them.

/// One row: a figure and its unit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PilscRow {
    /// `pilsc lookup 10 rules`, ...
    pub row: String,
    /// The median of `runs`.
    pub value: f64,
    pub unit: &'static str,
    /// Every run's figure.
    pub runs: Vec<f64>,
    /// The paper's number for the same measurement, where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper: Option<f64>,
}

/// The goal against the rows: the 100,000-rule lookup within 10% of the 10-rule one.
pub fn goal(rows: &[PilscRow]) -> Option<String> {
    let find = |name: &str| rows.iter().find(|r| r.row == name).map(|r| r.value);
    let (small, big) = (
        find("pilsc lookup 10 rules")?,
        find("pilsc lookup 100000 rules")?,
    );
    let growth = (big / small - 1.0) * 100.0;
    let mut line = format!(
        "100,000-rule lookup within 10% of the 10-rule one: {big:.1} ns vs {small:.1} ns = {growth:+.1}%: {}",
        if growth <= 10.0 { "met" } else { "NOT met" }
    );
    // A flow's first packet (a cache miss) pays the flat lookup: said beside, so that nothing hides behind the cache.
    if let (Some(s), Some(b)) = (
        find("pilsc lookup_uncached 10 rules"),
        find("pilsc lookup_uncached 100000 rules"),
    ) {
        line += &format!(
            " (a flow's first packet, uncached: {b:.1} ns vs {s:.1} ns = {:+.1}%)",
            (b / s - 1.0) * 100.0
        );
    }
    Some(line)
}

pub fn render(rows: &[PilscRow]) -> String {
    let mut t = format!(
        "{:<46} {:>12} {:>8} {:>7}   runs\n",
        "row", "value", "unit", "paper"
    );
    for r in rows {
        let mut runs: Vec<String> = r.runs.iter().take(16).map(|v| format!("{v:.1}")).collect();
        if r.runs.len() > 16 {
            runs.push("...".into());
        }
        t += &format!(
            "{:<46} {:>12.1} {:>8} {:>7}   {}\n",
            r.row,
            r.value,
            r.unit,
            r.paper.map_or("-".to_string(), |p| format!("{p}")),
            runs.join(" ")
        );
    }
    t
}
