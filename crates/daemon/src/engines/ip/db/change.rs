//! Changes to the SAs and policies: the typed calls ([`crate::runtime::sa_port`]) that check, prepare and publish a change
//! whole, and the control socket's adapter onto them (`sa add|update` and `policy add` with the keys of a
//! `[[sa]]` or `[[policy]]` table, parsed by the configuration's parser into the typed parameters).

use super::check::{check_policy, check_sa};
use super::*;
use crate::runtime::sa_port::{AnySaParams, InboundSaParams, OutboundSaParams, PolicyParams, SaOp};

impl Tables {
    /// Refuses an SA of `p`'s name whose direction differs from that of a policy naming it: an outbound policy must
    /// never come to name an inbound SA (it would seal with the peer's keys), nor an inbound one an outbound SA.
    pub(super) fn check_policies_of(&self, p: &SaParams) -> Result<(), ConfigError> {
        let want = match p.direction {
            SaDir::Out => netveil_sa::policy::Direction::Out,
            SaDir::In => netveil_sa::policy::Direction::In,
        };
        if let Some(pol) = self
            .policies
            .iter()
            .find(|pol| pol.direction != want && pol.sa_names.contains(&p.name))
        {
            return Err(ConfigError {
                key: "sa.direction".into(),
                reason: format!(
                    "policy '{}' is an {}bound policy and names SA '{}': it can use only {}bound SAs, and this one \
                     is {}bound",
                    pol.name,
                    config::dir_word(p.direction.flip()),
                    p.name,
                    config::dir_word(p.direction.flip()),
                    config::dir_word(p.direction),
                ),
            });
        }
        Ok(())
    }

    /// What an SA needs of the engine's sockets, and keys of its own.
    pub(super) fn check_new(
        &self,
        p: &SaParams,
        replacing: Option<&str>,
    ) -> Result<(), ConfigError> {
        let e = |key: &str, reason: String| {
            Err(ConfigError {
                key: key.into(),
                reason,
            })
        };
        let sockets = self.sockets.unwrap_or(Sockets {
            v4: true,
            v6: true,
            nat_t: true,
        });
        if p.encap.is_some() && !sockets.nat_t {
            return e(
                "sa.encap",
                format!(
                    "this daemon has no ESP-in-UDP socket (port {}): it opens one when its configuration file has an \
                     SA with encap = \"udp\"",
                    self.interface.nat_t_port
                ),
            );
        }
        if let (netveil_ipsec::Mode::Tunnel { local, .. }, SaDir::In) = (p.mode, p.direction) {
            if (local.is_ipv4() && !sockets.v4) || (local.is_ipv6() && !sockets.v6) {
                return e(
                    "sa.local",
                    format!("this daemon has no receive socket for {local}'s address family"),
                );
            }
        }
        let keyed = !(p.enc_key.is_empty() && p.auth_key.is_empty());
        if let Some(o) = self
            .sas
            .iter()
            .map(|s| s.base())
            .chain(self.retiring.iter().map(|r| &**r.sa))
            .filter(|o| {
                Some(o.params.name.as_str()) != replacing || o.params.direction == SaDir::In
            })
            .find(|o| {
                keyed
                    && o.params.enc_key[..] == p.enc_key[..]
                    && o.params.auth_key[..] == p.auth_key[..]
            })
        {
            return e(
                if p.enc_key.is_empty() {
                    "sa.auth_key"
                } else {
                    "sa.enc_key"
                },
                format!(
                    "SA '{}' has the same keys: every SA needs its own",
                    o.params.name
                ),
            );
        }
        Ok(())
    }
}

impl Db {
    /// A new outbound SA (see [`crate::runtime::sa_port::SaPort::sa_add_out`]).
    pub fn sa_add_out(&self, p: OutboundSaParams, now: u64) -> Result<(), ChangeError> {
        self.batch(vec![SaOp::AddOut(p)], now)
    }

    /// A new inbound SA (see [`crate::runtime::sa_port::SaPort::sa_add_in`]).
    pub fn sa_add_in(&self, p: InboundSaParams, now: u64) -> Result<(), ChangeError> {
        self.batch(vec![SaOp::AddIn(p)], now)
    }

    /// Replaces the SA of `p`'s name (same direction; new SPI and keys). Make-before-break: see the module
    /// documentation.
    pub fn sa_replace(&self, p: AnySaParams, now: u64) -> Result<(), ChangeError> {
        // Checked before it is looked up (errors and events may show it).
        crate::runtime::names::check_name("sa.name", p.name())?;
        let keys = p.keys();
        let p = p.into_params();
        let name = p.name.clone();
        let name = name.as_str();
        let mut t = self.tables();
        let i = t.index(name).ok_or_else(|| no_sa(name))?;
        let old = t.sas[i].clone();
        let old_dir = old.params().direction;
        let others: Vec<&SaParams> = t
            .sas
            .iter()
            .map(|s| s.params())
            .filter(|s| s.name != name)
            .collect();
        check_sa(&p, &t.interface, &others)?;
        if p.direction != old_dir {
            return Err(ConfigError {
                key: "sa.direction".into(),
                reason: format!(
                    "'{name}' is an {}bound SA: an update keeps the direction",
                    config::dir_word(old_dir)
                ),
            });
        }
        if p.direction == SaDir::In {
            if let Some(o) = t
                .retiring
                .iter()
                .map(|r| &**r.sa)
                .chain(std::iter::once(old.base()))
                .find(|o| o.spi() == p.spi && o.protocol() == p.protocol())
            {
                return Err(spi_taken(&p, o));
            }
        }
        t.check_policies_of(&p)?;
        t.check_new(&p, Some(name))?;
        let sa = t.build_sa(p, keys, now)?;
        let mut next = Self::next(&t);
        next.sas[i] = sa.clone();
        if let Installed::In(o) = &old {
            next.retiring.push(Retiring {
                sa: o.clone(),
                successor: name.to_string(),
                until: now + RETIRE_SECONDS,
            });
        }
        self.publish(&mut t, next).inspect_err(|_| t.untrack(&sa))?;
        // A replaced inbound SA keeps receiving (and its floor followed) until it retires.
        if let Installed::Out(_) = old {
            t.untrack(&old);
        }
        t.push_event(sa_event("sa-replaced", sa.base()), now);
        Ok(())
    }

    /// `sa del NAME`: removes the SA (and the inbound SAs it replaced that are still retiring). Policies that use
    /// it keep their place and drop their traffic (reported as acquires) until an SA of that name is added.
    pub fn sa_del(&self, name: &str, now: u64) -> Result<(), ChangeError> {
        self.batch(vec![SaOp::DelSa(name.to_string())], now)
    }

    /// A new policy at `position` (0: first; default: last); stored in the state directory before it takes effect.
    pub fn policy_add_params(
        &self,
        params: PolicyParams,
        position: Option<usize>,
        now: u64,
    ) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let sas: Vec<&SaParams> = t.sas.iter().map(|s| s.params()).collect();
        let p = check_policy(&params, t.psp.is_some(), &sas)?;
        if t.policies.iter().any(|o| o.name == p.name) {
            return Err(ConfigError {
                key: "policy.name".into(),
                reason: format!("'{}' is used by another policy", p.name),
            });
        }
        let at = position.unwrap_or(t.policies.len());
        if at > t.policies.len() {
            return Err(ConfigError {
                key: "position".into(),
                reason: format!(
                    "{at} is past the end (there are {} policies)",
                    t.policies.len()
                ),
            });
        }
        let name = p.name.clone();
        let mut next = Self::next(&t);
        next.policies.insert(at, Arc::new(p));
        // Stored before it takes effect: a crash from here on leaves it covered by the successor too.
        let mut runtime = t.runtime.clone();
        runtime.push((name.clone(), params.to_table()));
        t.save_runtime(&next.policies, &runtime)?;
        if let Err(e) = self.publish(&mut t, next) {
            let _ = t.save_runtime(&t.policies, &t.runtime);
            return Err(e);
        }
        t.runtime = runtime;
        t.push_event(
            Event {
                policy: Some(name),
                ..Event::new("policy-added")
            },
            now,
        );
        Ok(())
    }

    /// A policy in memory only, before the policy `cover` and the ones bound under it (the newest first; same
    /// direction, both protecting with IPsec SAs), whose selector must contain `params`'s: `cover`'s nftables rules already keep its traffic fail-closed, so
    /// the table is not rewritten (no `nft` run) and nothing is stored in the state directory (`cover` is). What
    /// the IKE driver binds a negotiated CHILD_SA's (maybe narrowed) selectors with, under the policy it installed
    /// at start from the configured ones. Removed by [`Db::policy_del`]; `cover` cannot be removed while policies
    /// are bound to it.
    pub fn policy_bind(
        &self,
        params: PolicyParams,
        cover: &str,
        now: u64,
    ) -> Result<(), ChangeError> {
        self.batch(
            vec![SaOp::Bind {
                policy: params,
                cover: cover.to_string(),
            }],
            now,
        )
    }

    /// The key-exchange drivers' expected peers (see [`crate::engines::ip::nft::KxPeers`]): the nftables table follows now,
    /// so that the SAs negotiated with them later do not change it.
    pub fn set_kx_peers(&self, peers: crate::engines::ip::nft::KxPeers) -> Result<(), ChangeError> {
        let mut t = self.tables();
        let old = std::mem::replace(&mut t.kx_peers, peers);
        let next = Self::next(&t);
        self.publish(&mut t, next).inspect_err(|_| t.kx_peers = old)
    }

    /// A key-exchange driver owns the SAs and policies whose names start with `prefix` while it runs (`None`:
    /// not any more): the control socket's `sa` and `policy` changes to them are refused, naming `owner`.
    pub fn claim(&self, prefix: &str, owner: Option<&str>) {
        let mut t = self.tables();
        t.owners.retain(|(p, _)| p != prefix);
        if let Some(o) = owner {
            t.owners.push((prefix.to_string(), o.to_string()));
        }
    }

    /// The names of the policies added at runtime (kept in the state directory) that start with `prefix`.
    pub fn runtime_policies(&self, prefix: &str) -> Vec<String> {
        self.tables()
            .runtime
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The owner of a name (see [`Db::claim`]), if a driver owns it.
    pub fn owner_of(&self, name: &str) -> Option<String> {
        self.tables()
            .owners
            .iter()
            .find(|(p, _)| name.starts_with(p.as_str()))
            .map(|(_, o)| o.clone())
    }

    /// `policy del NAME`.
    pub fn policy_del(&self, name: &str, now: u64) -> Result<(), ChangeError> {
        self.batch(vec![SaOp::DelPolicy(name.to_string())], now)
    }
}

/// The control socket's adapter: the keys of a `[[sa]]` or `[[policy]]` table, parsed and checked by the
/// configuration's parser (errors name `sa.KEY`, `policy.KEY`), then the typed call.
impl Db {
    /// `sa add`: a new SA (the keys of a `[[sa]]` table).
    pub fn sa_add(&self, table: toml::Table, now: u64) -> Result<(), ChangeError> {
        let p = {
            let t = self.tables();
            config::sa_from_table(table, &t.interface, &t.params())?
        };
        match AnySaParams::from_params(p) {
            AnySaParams::Out(o) => self.sa_add_out(o, now),
            AnySaParams::In(i) => self.sa_add_in(i, now),
        }
    }

    /// `sa update NAME`: replaces the SA named `name` with the keys of a `[[sa]]` table (its `name`, if given,
    /// must be `name`).
    pub fn sa_update(&self, name: &str, table: toml::Table, now: u64) -> Result<(), ChangeError> {
        let p = {
            let t = self.tables();
            t.index(name).ok_or_else(|| no_sa(name))?;
            if table.get("name").is_some_and(|n| n.as_str() != Some(name)) {
                return Err(ConfigError {
                    key: "sa.name".into(),
                    reason: format!("an update keeps the SA's name ('{name}')"),
                });
            }
            let mut table = table;
            table.insert("name".into(), toml::Value::String(name.into()));
            let others: Vec<SaParams> = t
                .sas
                .iter()
                .filter(|s| s.params().name != name)
                .map(|s| s.params().clone())
                .collect();
            config::sa_from_table(table, &t.interface, &others)?
        };
        self.sa_replace(AnySaParams::from_params(p), now)
    }

    /// `policy add`: a new policy (the keys of a `[[policy]]` table) at `position` (0: first; default: last).
    pub fn policy_add(
        &self,
        table: toml::Table,
        position: Option<usize>,
        now: u64,
    ) -> Result<(), ChangeError> {
        let p = {
            let t = self.tables();
            config::policy_from_table(table, t.psp.is_some(), &t.params())?
        };
        self.policy_add_params(PolicyParams::from_rule(p), position, now)
    }
}

pub(super) fn no_sa(name: &str) -> ConfigError {
    ConfigError {
        key: "name".into(),
        reason: format!("no SA named '{name}'"),
    }
}

pub(super) fn spi_taken(_p: &SaParams, o: &SaBase) -> ConfigError {
    ConfigError {
        key: "sa.spi".into(),
        reason: format!(
            "still taken by inbound SA '{}' (a replaced SA keeps its SPI for {RETIRE_SECONDS} s): use a new SPI",
            o.params.name
        ),
    }
}
