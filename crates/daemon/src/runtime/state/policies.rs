//! The policies added at runtime, kept in the state directory.

use super::*;

/// The file in which the IP engine keeps the policies added at runtime (see [`save_runtime_policies`]).
pub fn policies_file(interface: &str) -> String {
    format!("policies-{interface}.toml")
}

/// One policy added at runtime: where it stood among all policies, and its keys (a `[[policy]]` table).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedPolicy {
    pub position: usize,
    pub policy: toml::Table,
}

#[derive(serde::Serialize, serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SavedPolicies {
    #[serde(default)]
    runtime: Vec<SavedPolicy>,
}

/// Stores the policies added at runtime to interface `interface`'s engine (they hold no keys: selectors, actions
/// and SA names), durably, before they take effect: a killed daemon's successor restores them, so the traffic they
/// cover stays covered (see the README's "Restarts and crashes"). None: the file goes.
pub fn save_runtime_policies(
    dir: &StateDir,
    interface: &str,
    policies: &[SavedPolicy],
) -> std::io::Result<()> {
    let file = dir.path().join(policies_file(interface));
    if policies.is_empty() {
        return match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let text = toml::to_string(&SavedPolicies {
        runtime: policies.to_vec(),
    })
    .map_err(std::io::Error::other)?;
    netveil_control::write_private(&file, text.as_bytes())
}

/// The policies [`save_runtime_policies`] stored for `interface` (none if there is no file). A file that does not
/// parse is an error naming it (never ignored: it may be all that keeps covered traffic covered).
pub fn load_runtime_policies(
    dir: &StateDir,
    interface: &str,
) -> Result<Vec<SavedPolicy>, ConfigError> {
    let file = dir.path().join(policies_file(interface));
    match std::fs::read_to_string(&file) {
        Ok(t) => toml::from_str::<SavedPolicies>(&t)
            .map(|s| s.runtime)
            .map_err(|_| {
                cerr(
                    "interface.state_dir",
                    format!(
                        "{} is damaged: it holds the policies added at runtime before the last stop or crash; \
                         `netveil down` removes it (and lifts their block)",
                        file.display()
                    ),
                )
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(cerr(
            "interface.state_dir",
            format!("cannot read {}: {e}", file.display()),
        )),
    }
}
