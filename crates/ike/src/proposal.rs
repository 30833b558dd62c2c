//! See the crate's documentation.
