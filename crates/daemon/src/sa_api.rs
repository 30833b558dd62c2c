//! The typed SA/policy interface between the IP engine and the key-exchange drivers (placeholder: the trait the
//! registry's driver slot passes around; its methods come with the typed SA and policy parameters).

/// What a key-exchange driver installs SAs and policies through, offered by an engine that carries them (see
/// [`crate::registry::Started::sa_port`]).
pub trait SaPort: Send + Sync {}
