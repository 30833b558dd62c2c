//! `[interface]`: the TUN device and the daemon's settings (control socket, state directory, marks).

use super::values::*;
use super::*;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInterface {
    name: Option<String>,
    #[serde(default)]
    addresses: Vec<String>,
    mtu: Option<i64>,
    #[serde(default)]
    routes: Vec<String>,
    fwmark: Option<i64>,
    nat_t_port: Option<i64>,
    #[serde(default)]
    allow_null_null: bool,
    default_policy: Option<String>,
    offload: Option<bool>,
    control_socket: Option<String>,
    control_group: Option<String>,
    state_dir: Option<String>,
    #[serde(default)]
    allow_volatile_state: bool,
    block_when_stopped: Option<bool>,
}

/// The TUN interface and daemon settings.
#[derive(Debug, Clone)]
pub struct Interface {
    pub name: String,
    pub addresses: Vec<IpNet>,
    pub mtu: u16,
    pub routes: Vec<IpNet>,
    pub fwmark: Option<u32>,
    pub nat_t_port: u16,
    pub allow_null_null: bool,
    pub default_action: sa_policy::Action,
    pub offload: bool,
    pub control_socket: String,
    /// `control_group`: the group id (resolved from its name when the file is read) whose processes may use the
    /// control socket besides root's; the socket is then mode 0660 of that group.
    pub control_group: Option<u32>,
    /// Where the daemon keeps what must survive a restart (sequence-number marks of static-key SAs): `state_dir`,
    /// `allow_volatile_state`, and `netveil up --fresh-keys`.
    pub state_dir: crate::runtime::state::StateLocation,
    /// Keep dropping covered traffic after a clean stop too, until `netveil down` (a crash always leaves it
    /// blocked).
    pub block_when_stopped: bool,
}

impl Interface {
    /// The mark the daemon's own sockets carry (`fwmark`, or [`DEFAULT_SOCKET_MARK`]).
    pub fn socket_mark(&self) -> u32 {
        self.fwmark.unwrap_or(DEFAULT_SOCKET_MARK)
    }

    /// The name of the nftables table (`inet`) of this interface's filters.
    pub fn nft_table(&self) -> String {
        format!("netveil_{}", crate::runtime::engine::nft_ident(&self.name))
    }
}

/// Parses the `[interface]` section.
pub(crate) fn parse_interface(ri: RawInterface) -> Result<Interface, ConfigError> {
    let name = ri.name.unwrap_or_else(|| "nv0".into());
    crate::runtime::names::check_ifname("interface.name", &name)?;
    let addresses = ri
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| parse_net(&format!("interface.addresses[{i}]"), a))
        .collect::<Result<Vec<_>, _>>()?;
    let routes = ri
        .routes
        .iter()
        .enumerate()
        .map(|(i, a)| parse_net(&format!("interface.routes[{i}]"), a))
        .collect::<Result<Vec<_>, _>>()?;
    let mtu = match ri.mtu {
        None => DEFAULT_MTU,
        Some(m) => int_in("interface.mtu", m, 576, 65000)? as u16,
    };
    let fwmark = match ri.fwmark {
        None => None,
        Some(m) => Some(int_in("interface.fwmark", m, 1, u32::MAX as i64)? as u32),
    };
    let nat_t_port = int_in(
        "interface.nat_t_port",
        ri.nat_t_port.unwrap_or(4500),
        1,
        65535,
    )? as u16;
    let default_action = match ri.default_policy.as_deref().unwrap_or("discard") {
        "bypass" => sa_policy::Action::Bypass,
        "discard" => sa_policy::Action::Discard,
        _ => return err("interface.default_policy", "must be 'bypass' or 'discard'"),
    };
    let control_socket = ri
        .control_socket
        .unwrap_or_else(|| format!("{RUN_DIR}/{name}.sock"));
    // Both may reach log lines.
    crate::runtime::names::check_text("interface.control_socket", &control_socket)?;
    if let Some(d) = &ri.state_dir {
        crate::runtime::names::check_text("interface.state_dir", d)?;
    }
    Ok(Interface {
        name,
        addresses,
        mtu,
        routes,
        fwmark,
        nat_t_port,
        allow_null_null: ri.allow_null_null,
        default_action,
        offload: ri.offload.unwrap_or(true),
        control_socket,
        control_group: ri
            .control_group
            .map(|g| control_group("interface.control_group", &g))
            .transpose()?,
        state_dir: crate::runtime::state::StateLocation {
            allow_volatile: ri.allow_volatile_state,
            ..crate::runtime::state::StateLocation::new(match ri.state_dir {
                Some(d) if d.is_empty() => return err("interface.state_dir", "must not be empty"),
                Some(d) => d,
                None => crate::runtime::state::DEFAULT_STATE_DIR.into(),
            })
        },
        block_when_stopped: ri.block_when_stopped.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use crate::engines::ip::config::*;

    /// `[interface] state_dir` and `allow_volatile_state` (default: refused); `--fresh-keys` is never read from the
    /// file (a key of that name is unknown).
    #[test]
    fn state_dir_and_allow_volatile_state() {
        let c = Config::parse("[interface]\n").unwrap();
        assert_eq!(
            c.interface.state_dir,
            crate::runtime::state::StateLocation::new(crate::runtime::state::DEFAULT_STATE_DIR)
        );
        let c =
            Config::parse("[interface]\nstate_dir = \"/run/nv\"\nallow_volatile_state = true\n")
                .unwrap();
        assert_eq!(c.interface.state_dir.path, std::path::Path::new("/run/nv"));
        assert!(c.interface.state_dir.allow_volatile && !c.interface.state_dir.fresh_keys);
        for k in ["fresh_keys", "allow_volatile_state = \"yes\""] {
            let text = if k.contains('=') {
                format!("[interface]\n{k}\n")
            } else {
                format!("[interface]\n{k} = true\n")
            };
            assert!(Config::parse(&text).is_err(), "{k}");
        }
    }
}
