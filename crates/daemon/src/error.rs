//! Configuration errors: the key at fault and why.

/// A configuration error: the key it concerns and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.key, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}
