//! The driver with a scripted machine ([`driver`]) and two drivers with the real one ([`e2e`]).

mod driver;
mod e2e;
