//! How the demos print: a section's header, and a step's failure named after the step.

use crate::Result;

pub(super) fn header(title: &str) {
    println!(
        "\n== {title} {}",
        "=".repeat(70usize.saturating_sub(title.len()))
    );
}

pub(super) fn step<T>(what: &str, r: Result<T>) -> Result<T> {
    r.map_err(|e| e.within(format!("demo: {what}")))
}
