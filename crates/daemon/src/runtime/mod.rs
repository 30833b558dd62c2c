//! What the engines and drivers share: the registry they plug into, the lifecycle of `netveil up`, `down` and
//! `check`, the typed SA port, the control socket's plumbing, logs, names, shared configuration values and errors,
//! the one reader of secret files and the state directory (sequence marks, receive floors) every engine uses.
//!
//! Nothing here names an engine or a driver: they name this.

// layers: lifecycle > registry > sa_port > engine, log, state, secret_file > names, config > error
pub mod config;
pub mod engine;
pub mod error;
pub mod lifecycle;
pub mod log;
pub mod names;
pub mod registry;
pub mod sa_port;
pub mod secret_file;
pub mod state;
