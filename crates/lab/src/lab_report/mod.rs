//! The overhead lab's report (`netveil lab`, see [`crate::lab_run`]): one [`Cell`] per measured figure, with the
//! machine and programs it was measured on, written as `report.json` (the schema below), `report.csv` and
//! `report.md`.
//!
//! Schema (version [`SCHEMA`]): `{schema, command, netveil, kernel, cpu, programs: {name: version line}, quick,
//! experiments: [name], started_unix, seconds, cells: [Cell]}`; a cell is `{experiment, path, metric, unit, value,
//! min, max, runs, reason, paper, paper_source, expected}`: `value` is the median of `runs` (its min and max beside),
//! or null with `reason` saying why the cell could not be measured; `paper` is the study's number for the same
//! measurement (from `paper_source`), `expected` what a formula predicts (the overhead cells). [`check`] holds a
//! report to this.
//!
//! The files: the cells and the report (`data`), the report's files (`files`), the studies' findings checked on a
//! run (`findings`), two runs compared (`compare`), and the figures and page ([`plot`], drawn by `chart`).

mod chart;
mod compare;
mod data;
mod files;
mod findings;
pub mod plot;
mod text;

#[cfg(test)]
mod tests;

pub use compare::{compare, compare_markdown, Change};
pub use data::{check, file_bytes, machine, version_line, Cell, Report, SCHEMA};
pub use files::{csv, markdown, read, write};
pub use findings::{findings, Finding, IDEAL_MTU, JITTER_LIMIT_MS};
