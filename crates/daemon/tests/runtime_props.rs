//! Runtime changes against a model (issue 21): random sequences of `sa add|update|del`, `policy add|del`, traffic,
//! ticks, crashes and clean restarts, applied to a real engine's database and data plane (`Shared`, as the control
//! socket and the data-plane threads drive it) and to a small model of what an operator installed. After every step:
//!
//! - every change is accepted or refused exactly as the model says (a refused one changes nothing);
//! - an outbound policy's bundle holds only outbound SAs, each with the keys the model installed under that name
//!   as outbound; an inbound policy's only inbound SAs (and the SA listing is the model's);
//! - traffic an outbound policy selects is either dropped as the model says or sealed under the SPI of the outbound
//!   SA the model has for that policy, never under an inbound SA's SPI (the peer's keys);
//! - no (key, sequence number) pair is ever sealed twice, across crashes (the engine dropped without its clean-stop
//!   `finish`) and restarts from the same configuration file and state directory, with the SAs added at runtime
//!   added again with the same keys as a key manager would; the peer's own use of its keys (the keys of our
//!   inbound SAs) counts too;
//! - the fail-closed nftables table has, in policy order, an output-chain rule for every outbound policy (a drop
//!   for protect and discard) and an input-chain drop for every inbound protect policy.

use netveil_daemon::engines::ip::config::Config;
use netveil_daemon::engines::ip::db::{Installed, RETIRE_SECONDS};
use netveil_daemon::engines::ip::{FragCache, Shared, TxRecord};
use netveil_daemon::runtime::state::{StateDir, SEQ_BLOCK};
use netveil_ipsec::bundle::{Bundle, SaRef};
use netveil_ipsec::sa::Direction as SaDir;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

mod props_model;
use props_model::*;

/// One engine's life under a sequence of operations, with the model beside it.
struct Run {
    dir: PathBuf,
    text: String,
    sh: Option<Shared>,
    m: Model,
    now: u64,
    /// Every (key, sequence number) sealed so far: ours, and the peer's under its keys.
    used: HashSet<(u32, u64)>,
    /// Packets sealed so far.
    sealed: u64,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.sh = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The engine as `netveil up` builds it from the file: outbound SAs continue above their marks in the state
/// directory (reserved before use), and the data plane is armed.
fn start(text: &str) -> Shared {
    let mut cfg = Config::parse(text).unwrap();
    // As `netveil up --fresh-keys`: the test's state directories are new, and so are its keys.
    cfg.interface.state_dir.fresh_keys = true;
    let (seq, rx, starts) = netveil_daemon::runtime::state::start(
        StateDir::open(&cfg.interface.state_dir, "interface.state_dir").unwrap(),
        &cfg.sas,
    )
    .unwrap();
    let (sad, at) = cfg.build_sad_reserved(0, &starts).unwrap();
    let sh = Shared::with_sas(cfg, Installed::of(&sad, &at), Some((seq, rx)));
    sh.db.arm();
    sh
}

type Check = Result<(), TestCaseError>;
/// An SA as listed: name, outbound, SPI, retiring.
type Listed = (String, bool, u32, bool);

impl Run {
    fn new(tag: &str) -> Run {
        let dir = scratch(tag);
        let text = file_text(&dir.join("state"));
        let mut used = HashSet::new();
        for k in 0..KEYS_PER_SIDE {
            for seq in 1..=PEER_SENT {
                used.insert((PEER_KEYS + k, seq));
            }
        }
        Run {
            sh: Some(start(&text)),
            dir,
            text,
            m: Model::file(),
            now: 0,
            used,
            sealed: 0,
        }
    }

    fn sh(&self) -> &Shared {
        self.sh.as_ref().expect("running")
    }

    /// A change: accepted exactly when the model says so (the model then follows), refused changing nothing.
    fn change(
        &mut self,
        what: &str,
        ok: bool,
        f: impl FnOnce(&Shared, u64) -> Result<(), netveil_daemon::engines::ip::config::ConfigError>,
        then: impl FnOnce(&mut Model),
    ) -> Check {
        let before = self.listing();
        let r = f(self.sh(), self.now);
        match (&r, ok) {
            (Ok(()), true) => then(&mut self.m),
            (Err(_), false) => {
                prop_assert_eq!(self.listing(), before, "refused {} changed something", what)
            }
            (Ok(()), false) => {
                return Err(TestCaseError::fail(format!(
                    "{what}: accepted, but the model refuses it ({:?})",
                    self.m
                )))
            }
            (Err(e), true) => {
                return Err(TestCaseError::fail(format!(
                    "{what}: refused ({e}), but the model accepts it ({:?})",
                    self.m
                )))
            }
        }
        self.check()
    }

    fn sa_add(&mut self, s: MSa) -> Check {
        let ok = self.m.sa_add_ok(&s);
        let t = sa_table(&s);
        self.change(
            &format!("sa add {s:?}"),
            ok,
            |sh, now| sh.db.sa_add(t, now),
            |m| m.sas.push(s),
        )
    }

    fn policy_add(&mut self, p: MPolicy, pos: Option<usize>) -> Check {
        let ok = self.m.policy_add_ok(&p, pos);
        let t = policy_table(&p);
        self.change(
            &format!("policy add {p:?} at {pos:?}"),
            ok,
            |sh, now| sh.db.policy_add(t, pos, now),
            |m| m.policies.insert(pos.unwrap_or(m.policies.len()), p),
        )
    }

    fn sa_del(&mut self, name: &str) -> Check {
        let ok = self.m.sa(name).is_some();
        self.change(
            &format!("sa del {name}"),
            ok,
            |sh, now| sh.db.sa_del(name, now),
            |m| {
                m.sas.retain(|s| s.name != name);
                m.retiring.retain(|r| r.1 != name);
            },
        )
    }

    fn apply(&mut self, op: &Op) -> Check {
        match *op {
            Op::SaAdd { name, dir, key } => self.sa_add(MSa {
                name: SA_NAMES[name].into(),
                dir,
                key: dir.keys() + key,
            }),
            Op::SaUpdate { name, dir, key } => {
                let s = MSa {
                    name: SA_NAMES[name].into(),
                    dir,
                    key: dir.keys() + key,
                };
                let ok = self.m.sa_update_ok(&s);
                let mut t = sa_table(&s);
                t.remove("name");
                let now = self.now;
                let name = s.name.clone();
                self.change(
                    &format!("sa update {s:?}"),
                    ok,
                    |sh, now| sh.db.sa_update(&name, t, now),
                    |m| {
                        let i = m.sas.iter().position(|o| o.name == s.name).unwrap();
                        let old = std::mem::replace(&mut m.sas[i], s);
                        if old.dir == Dir::In {
                            m.retiring.push((old.key, old.name, now + RETIRE_SECONDS));
                        }
                    },
                )
            }
            Op::SaDel { name } => self.sa_del(SA_NAMES[name]),
            Op::PolicyAdd {
                name,
                dir,
                net,
                act,
                sa,
                pos,
            } => self.policy_add(
                MPolicy {
                    name: POLICY_NAMES[name].into(),
                    dir,
                    net,
                    act,
                    sa: SA_NAMES[sa].into(),
                },
                pos,
            ),
            Op::PolicyDel { name } => {
                let name = POLICY_NAMES[name];
                let ok = self.m.policies.iter().any(|p| p.name == name);
                self.change(
                    &format!("policy del {name}"),
                    ok,
                    |sh, now| sh.db.policy_del(name, now),
                    |m| m.policies.retain(|p| p.name != name),
                )
            }
            Op::Seal { dst, n } => self.seal(dst, n),
            Op::Tick { dt } => {
                self.now += dt;
                let problems = self.sh().db.tick(self.now, false, false);
                prop_assert!(problems.is_empty(), "{:?}", problems);
                let now = self.now;
                self.m.retiring.retain(|r| r.2 > now);
                self.check()
            }
            Op::Crash => {
                // Dropped as a killed process would leave it: no `finish`, the marks stay where they were synced.
                self.sh = None;
                self.restart()
            }
            Op::Restart => {
                self.sh().db.finish();
                self.sh = None;
                self.restart()
            }
            Op::Provision {
                name,
                key,
                policy,
                net,
            } => {
                self.sa_add(MSa {
                    name: SA_NAMES[name].into(),
                    dir: Dir::Out,
                    key: OUR_KEYS + key,
                })?;
                self.policy_add(
                    MPolicy {
                        name: POLICY_NAMES[policy].into(),
                        dir: Dir::Out,
                        net,
                        act: Act::Protect,
                        sa: SA_NAMES[name].into(),
                    },
                    Some(0),
                )
            }
            Op::Attack { name, peer } => {
                let name = SA_NAMES[name];
                let key = PEER_KEYS + peer;
                self.policy_add(
                    MPolicy {
                        name: format!("to-{name}"),
                        dir: Dir::Out,
                        net: 1,
                        act: Act::Protect,
                        sa: name.into(),
                    },
                    Some(0),
                )?;
                if let Some(holder) = self.m.sas.iter().find(|s| s.key == key).cloned() {
                    self.sa_del(&holder.name)?;
                }
                self.sa_add(MSa {
                    name: name.into(),
                    dir: Dir::In,
                    key,
                })?;
                self.seal(1, 2)
            }
        }
    }

    /// A start from the same file and state directory; then the key manager adds again what was added at runtime
    /// (same keys), in the order it was there.
    fn restart(&mut self) -> Check {
        self.sh = Some(start(&self.text));
        let before = std::mem::replace(&mut self.m, Model::file());
        self.check()?;
        for s in before.sas {
            if !self.m.sas.contains(&s) {
                self.sa_add(s)?;
            }
        }
        for p in before.policies {
            if !self.m.policies.contains(&p) {
                self.policy_add(p, None)?;
            }
        }
        Ok(())
    }

    /// Seals `n` packets to `DSTS[dst]`: each as the model says, and never a (key, sequence number) twice.
    fn seal(&mut self, dst: usize, n: u32) -> Check {
        let (pol, want) = self.m.expect_out(DSTS[dst]);
        let pol = pol.map(|p| p.name.clone());
        for _ in 0..n {
            let sh = self.sh();
            let snap = sh.db.load();
            let mut pkt = packet(DSTS[dst]);
            let got = sh.process_out(&snap, &mut pkt, self.now, &mut FragCache::default());
            let d = pkt.data();
            if got.is_ok() && d[9] == 50 {
                // ESP on the wire: whose SPI, and which sequence number under that SA's key.
                let spi = u32::from_be_bytes(d[20..24].try_into().unwrap());
                let seq = u64::from(u32::from_be_bytes(d[24..28].try_into().unwrap()));
                let Some(sa) = self.m.sas.iter().find(|s| s.key == spi) else {
                    return Err(TestCaseError::fail(format!(
                        "sealed under SPI {spi:#x}, which no SA of the model has ({:?})",
                        self.m
                    )));
                };
                prop_assert_eq!(
                    sa.dir,
                    Dir::Out,
                    "traffic of {:?} to {:?} sealed with inbound SA {:?} (the peer's keys)",
                    pol,
                    DSTS[dst],
                    sa
                );
                prop_assert!(
                    self.used.insert((sa.key, seq)),
                    "key {:#x} sealed sequence number {} twice",
                    sa.key,
                    seq
                );
                self.sealed += 1;
                prop_assert_eq!(Ok(Some(spi)), want, "policy {:?}", pol);
            } else {
                prop_assert_eq!(
                    got.map(|o| {
                        assert_eq!(o, TxRecord::Raw4);
                        None
                    }),
                    want,
                    "to {:?} (policy {:?})",
                    DSTS[dst],
                    pol
                );
            }
        }
        self.check()
    }

    /// The SAs in force as the database lists them: (name, direction, SPI, retiring).
    fn listing(&self) -> (BTreeSet<Listed>, Vec<String>) {
        let snap = self.sh().db.load();
        (
            snap.sad
                .iter()
                .map(|r| {
                    let b = r.base();
                    (
                        b.params.name.clone(),
                        b.params.direction == SaDir::Out,
                        b.spi(),
                        matches!(r, SaRef::In(_, true)),
                    )
                })
                .collect(),
            snap.policies.iter().map(|p| p.rule.name.clone()).collect(),
        )
    }

    /// The invariants of the snapshot in force and of the nftables table.
    fn check(&self) -> Check {
        let snap = self.sh().db.load();
        // The SAs are the model's (the retiring ones under their successors' names).
        let want: BTreeSet<Listed> = self
            .m
            .sas
            .iter()
            .map(|s| (s.name.clone(), s.dir == Dir::Out, s.key, false))
            .chain(
                self.m
                    .retiring
                    .iter()
                    .map(|r| (r.1.clone(), false, r.0, true)),
            )
            .collect();
        prop_assert_eq!(&self.listing().0, &want);
        let names: Vec<&str> = snap.policies.iter().map(|p| p.rule.name.as_str()).collect();
        let model: Vec<&str> = self.m.policies.iter().map(|p| p.name.as_str()).collect();
        prop_assert_eq!(names, model);
        for (p, mp) in snap.policies.iter().zip(&self.m.policies) {
            let installed = self.m.sa(&mp.sa).filter(|s| s.dir == mp.dir);
            prop_assert_eq!(
                !p.sas.is_empty(),
                mp.act == Act::Protect && installed.is_some(),
                "policy {}: {:?}",
                &p.rule.name,
                &p.sas
            );
            match mp.dir {
                Dir::Out => {
                    prop_assert!(
                        !matches!(p.sas, Bundle::In(_)),
                        "outbound policy {} has an inbound bundle",
                        &p.rule.name
                    );
                    for (j, &i) in p.sas.outbound().iter().enumerate() {
                        let sa = snap.sad.out(i);
                        let ms = installed.expect("checked above");
                        prop_assert_eq!(&sa.params.name, &p.rule.sa_names[j]);
                        prop_assert_eq!(sa.params.direction, SaDir::Out);
                        prop_assert_eq!(sa.params.spi, ms.key);
                        prop_assert_eq!(
                            hex::encode(&sa.params.enc_key[..]),
                            key_hex(ms.key),
                            "policy {} seals with keys the model did not install as {} outbound",
                            &p.rule.name,
                            &ms.name
                        );
                    }
                }
                Dir::In => {
                    prop_assert!(
                        !matches!(p.sas, Bundle::Out(_)),
                        "inbound policy {} has an outbound bundle",
                        &p.rule.name
                    );
                    for (j, &i) in p.sas.inbound().iter().enumerate() {
                        let sa = snap.sad.inb(i);
                        let ms = installed.expect("checked above");
                        prop_assert_eq!(&sa.params.name, &p.rule.sa_names[j]);
                        prop_assert_eq!(sa.params.direction, SaDir::In);
                        prop_assert_eq!(hex::encode(&sa.params.enc_key[..]), key_hex(ms.key));
                    }
                }
            }
        }
        self.check_nft()
    }

    /// The fail-closed table covers what the policies cover.
    fn check_nft(&self) -> Check {
        let text = self.sh().db.nft_text(NFT_TABLE);
        let needs = self.m.policies.iter().any(|p| {
            (p.dir == Dir::Out && p.act != Act::Bypass)
                || (p.dir == Dir::In && p.act == Act::Protect)
        });
        let Some(text) = text else {
            prop_assert!(!needs, "no nftables table for {:?}", self.m.policies);
            return Ok(());
        };
        let output = chain(&text, "output");
        let input = chain(&text, "input");
        // Output: one rule per outbound policy, in policy order.
        let order: Vec<&str> = dedup(output.iter().map(|l| comment(l)));
        let want: Vec<&str> = self
            .m
            .policies
            .iter()
            .filter(|p| p.dir == Dir::Out)
            .map(|p| p.name.as_str())
            .collect();
        prop_assert_eq!(order, want, "{}", &text);
        // Input: the inbound protect and bypass policies' rules, in policy order.
        let order: Vec<&str> = dedup(input.iter().map(|l| comment(l)));
        let want: Vec<&str> = self
            .m
            .policies
            .iter()
            .filter(|p| p.dir == Dir::In && p.act != Act::Discard)
            .map(|p| p.name.as_str())
            .collect();
        prop_assert_eq!(order, want, "{}", &text);
        for p in &self.m.policies {
            let rules: Vec<&&str> = match p.dir {
                Dir::Out => &output,
                Dir::In => &input,
            }
            .iter()
            .filter(|l| comment(l) == p.name)
            .collect();
            let net = NETS[p.net];
            let covered = |l: &&&str| match p.dir {
                Dir::Out => l.contains(&format!("ip daddr {net} ")) && l.contains(" counter drop"),
                Dir::In => {
                    l.contains(&format!("ip saddr {net} ip daddr 10.1.0.0/16 "))
                        && l.contains(" counter drop")
                }
            };
            match (p.dir, p.act) {
                (Dir::Out, Act::Protect | Act::Discard) | (Dir::In, Act::Protect) => {
                    prop_assert!(
                        rules.iter().any(covered),
                        "policy {} has no drop rule for {}: {}",
                        &p.name,
                        net,
                        &text
                    )
                }
                (Dir::Out, Act::Bypass) => prop_assert!(
                    rules.iter().all(|l| l.contains(" accept ")) && !rules.is_empty(),
                    "{}",
                    &text
                ),
                // Inbound bypass: an accept in policy order (before the drops of protect policies below it).
                (Dir::In, Act::Bypass) => prop_assert!(
                    rules.iter().all(|l| l.contains(" accept ")) && !rules.is_empty(),
                    "{}",
                    &text
                ),
                (Dir::In, _) => prop_assert!(rules.is_empty(), "{}", &text),
            }
        }
        Ok(())
    }
}

/// The rules of chain `name`.
fn chain<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let at = text
        .find(&format!("chain {name} {{"))
        .expect("every chain is there");
    text[at..]
        .lines()
        .skip(2)
        .take_while(|l| l.trim() != "}")
        .collect()
}

/// The policy name in a rule's comment (`comment "NAME"` or `comment "NAME (what)"`).
fn comment(rule: &str) -> &str {
    let c = rule
        .rsplit_once("comment \"")
        .map_or("", |(_, c)| c.trim_end().trim_end_matches('"'));
    c.split(" (").next().unwrap_or(c)
}

fn dedup<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = Vec::new();
    for x in it {
        if v.last() != Some(&x) {
            v.push(x);
        }
    }
    v
}

fn run(tag: &str, ops: &[Op]) -> Check {
    let mut r = Run::new(tag);
    r.check()?;
    for op in ops {
        r.apply(op)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn runtime_changes_keep_directions_nonces_and_the_table(ops in proptest::collection::vec(op(), 1..48)) {
        run("random", &ops)?;
    }
}

/// The reported sequence of issue 21 as the generator may produce it, and the other order (inbound SA first, then
/// the outbound policy naming it): both refused where they would put the peer's key on our outbound path, and the
/// traffic waits (no-sa).
#[test]
fn the_reported_sequence_never_seals_with_the_peers_key() {
    let ops = [
        Op::Attack { name: 2, peer: 0 },
        Op::Seal { dst: 1, n: 3 },
        Op::SaAdd {
            name: 4,
            dir: Dir::In,
            key: 3,
        },
        Op::PolicyAdd {
            name: 2,
            dir: Dir::Out,
            net: 3,
            act: Act::Protect,
            sa: 4,
            pos: Some(0),
        },
        Op::Seal { dst: 3, n: 3 },
        Op::Crash,
        Op::Seal { dst: 0, n: 3 },
        Op::Attack { name: 0, peer: 1 },
        Op::Seal { dst: 0, n: 3 },
    ];
    run("attack", &ops).unwrap();
}

/// Sequence numbers across reservation blocks: an outbound SA from the file and one added at runtime each seal past
/// half a block, the tick tops their reservations up, and crashes (before and after the top-up) and a clean restart
/// never let a (key, sequence number) come again.
#[test]
fn sequence_numbers_stay_unique_across_blocks_crashes_and_restarts() {
    let mut r = Run::new("blocks");
    let bulk = (SEQ_BLOCK / 2 + 8) as u32;
    let ops = [
        // The file's `a` (10.2/16) past half its first block; a crash before any top-up.
        Op::Seal { dst: 0, n: bulk },
        Op::Crash,
        Op::Seal { dst: 0, n: 2 },
        // A runtime SA `b` with policy p0 (10.4/16), past half a block, topped up, then a crash.
        Op::SaAdd {
            name: 1,
            dir: Dir::Out,
            key: 1,
        },
        Op::PolicyAdd {
            name: 2,
            dir: Dir::Out,
            net: 3,
            act: Act::Protect,
            sa: 1,
            pos: None,
        },
        Op::Seal { dst: 3, n: bulk },
        Op::Tick { dt: 1 },
        Op::Seal { dst: 3, n: 3 },
        Op::Crash,
        Op::Seal { dst: 3, n: 3 },
        Op::Seal { dst: 0, n: 3 },
        // A clean restart continues right above what was used.
        Op::Restart,
        Op::Seal { dst: 3, n: 3 },
        Op::Seal { dst: 0, n: 3 },
    ];
    for op in &ops {
        r.apply(op).unwrap();
    }
    assert!(r.sealed > 2 * u64::from(bulk));
    // Above the first block of each key: the reservations were followed.
    assert!(r.used.iter().any(|&(k, s)| k == OUR_KEYS && s > SEQ_BLOCK));
    assert!(r
        .used
        .iter()
        .any(|&(k, s)| k == OUR_KEYS + 1 && s > SEQ_BLOCK));
}
