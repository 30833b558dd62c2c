//! Network-namespace labs.
