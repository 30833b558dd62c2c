//! Two runs compared cell by cell.

use super::data::{Cell, Report};
use super::text::md;

/// One cell of two reports (by experiment, path and metric): its value in each (`None`: not measured there, or not
/// in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub experiment: String,
    pub path: String,
    pub metric: String,
    pub unit: String,
    pub old: Option<f64>,
    pub new: Option<f64>,
}

impl Change {
    /// The change in percent of the old value, where both have one (and the old is not 0).
    pub fn percent(&self) -> Option<f64> {
        match (self.old, self.new) {
            (Some(o), Some(n)) if o != 0.0 => Some((n / o - 1.0) * 100.0),
            _ => None,
        }
    }
}

/// Every cell of `new` with its value in `old`, then the cells only `old` has.
pub fn compare(old: &Report, new: &Report) -> Vec<Change> {
    let key = |c: &Cell| (c.experiment.clone(), c.path.clone(), c.metric.clone());
    let olds: std::collections::HashMap<_, _> = old.cells.iter().map(|c| (key(c), c)).collect();
    let news: std::collections::HashSet<_> = new.cells.iter().map(key).collect();
    let change = |c: &Cell, old: Option<f64>, new: Option<f64>| Change {
        experiment: c.experiment.clone(),
        path: c.path.clone(),
        metric: c.metric.clone(),
        unit: c.unit.clone(),
        old,
        new,
    };
    let mut out: Vec<Change> = new
        .cells
        .iter()
        .map(|c| change(c, olds.get(&key(c)).and_then(|o| o.value), c.value))
        .collect();
    out.extend(
        old.cells
            .iter()
            .filter(|c| !news.contains(&key(c)))
            .map(|c| change(c, c.value, None)),
    );
    out
}

/// The comparison as Markdown: one line per cell, the change in percent where both reports measured it.
pub fn compare_markdown(old_name: &str, changes: &[Change]) -> String {
    let mut out = format!(
        "# netveil lab: this run against {}\n\n| experiment | path | metric | before | now | change |\n|---|---|---|---|---|---|\n",
        md(old_name)
    );
    let v =
        |x: Option<f64>, unit: &str| x.map_or("-".to_string(), |x| format!("{x:.3} {}", md(unit)));
    for c in changes {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            md(&c.experiment),
            md(&c.path),
            md(&c.metric),
            v(c.old, &c.unit),
            v(c.new, &c.unit),
            c.percent().map_or("-".to_string(), |p| format!("{p:+.1}%"))
        );
    }
    out
}
