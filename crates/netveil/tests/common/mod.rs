//! Helpers shared by the namespace tests (each test file that uses them declares `mod common;`).

pub mod ike_pair;
