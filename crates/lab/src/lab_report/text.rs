//! How the report's text forms write a value and a table cell.

/// A value with four decimals, or nothing.
pub(super) fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v:.4}"))
}

/// A Markdown table cell (no `|` or line break inside).
pub(super) fn md(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}
