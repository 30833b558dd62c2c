//! The keys of a loaded rule file, each with one sealer and one opener: rules that name the same key (by name or
//! by the same bytes) under the same algorithm share them, so a key's counter is one counter whatever the number
//! of rules, and no (key, nonce) pair can come out twice (see [`crate::packet`]). Built once per rule file load;
//! refused, with the lines of the rules concerned, when a key is missing or of the wrong length, when one key is
//! named under two algorithms, or when two keys whose ids collide protect traffic of overlapping peers (a receiver
//! could not tell which one a packet is under).

use std::collections::HashMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use zeroize::Zeroizing;

use crate::cipher::Cipher;
use crate::packet::{key_id, Mode, Opener, Sealer};
use crate::rules::{Errors, Keys, LineError, RuleFile};

/// One key of the rule file.
pub struct KeySlot {
    pub id: u16,
    pub cipher: Cipher,
    pub sealer: Sealer,
    pub opener: Opener,
    /// The peers of the rules under this key (to find the key of a received packet).
    pub peers: Vec<Ipv4Net>,
}

/// The keys of a rule file and which rule uses which.
pub struct Table {
    /// Per rule of [`RuleFile::rules`]: its key's index in `keys` (`None` for `Security = false`).
    pub rule_key: Vec<Option<usize>>,
    pub keys: Vec<KeySlot>,
    by_id: HashMap<u16, Vec<usize>>,
}

/// A key met while building: its bytes, its slot, the line of the first rule naming it.
type Seen = (Zeroizing<Vec<u8>>, usize, usize);

/// How the table's sealers and openers are made.
pub struct Settings {
    pub mode: Mode,
    /// Replay window per source, in packets.
    pub window: u32,
    /// Most sources per key.
    pub max_sources: usize,
}

impl Table {
    /// Builds the table of `file` with the key file `keys`; `counter(id, cipher, key)` gives the counter each key's
    /// sealer starts from (the daemon's mark after a restart) and the end it must stop before.
    pub fn build(
        file: &RuleFile,
        keys: &Keys,
        s: &Settings,
        mut counter: impl FnMut(u16, Cipher, &[u8]) -> (u64, u64),
    ) -> Result<Table, Errors> {
        let mut errors = Vec::new();
        let mut rule_key = Vec::with_capacity(file.rules.len());
        // Key id -> the keys with that id.
        let mut seen: HashMap<u16, Vec<Seen>> = HashMap::new();
        let mut slots: Vec<KeySlot> = Vec::new();
        for r in &file.rules {
            let bytes = match keys.resolve(r) {
                Ok(None) => {
                    rule_key.push(None);
                    continue;
                }
                Ok(Some(b)) => Zeroizing::new(b.to_vec()),
                Err(e) => {
                    errors.push(e);
                    rule_key.push(None);
                    continue;
                }
            };
            let cipher = r
                .protect
                .as_ref()
                .map(|p| p.cipher)
                .expect("a protected rule");
            let id = key_id(&bytes);
            let known = seen
                .get(&id)
                .and_then(|v| v.iter().find(|(b, _, _)| *b == bytes))
                .map(|&(_, i, line)| (i, line));
            if let Some((i, line)) = known {
                if slots[i].cipher != cipher {
                    errors.push(LineError {
                        line: r.line,
                        tag: Some("Key"),
                        msg: format!(
                            "rule {}: its key is used under {} by the rule at line {line}: one key, one algorithm",
                            r.number, slots[i].cipher
                        ),
                    });
                }
                slots[i].peers.push(r.peer);
                rule_key.push(Some(i));
                continue;
            }
            let (next, end) = counter(id, cipher, &bytes);
            let made = Sealer::new(cipher, s.mode, &bytes, next, end).and_then(|sealer| {
                Ok((
                    sealer,
                    Opener::new(cipher, s.mode, &bytes, s.window, s.max_sources)?,
                ))
            });
            match made {
                Ok((sealer, opener)) => {
                    seen.entry(id)
                        .or_default()
                        .push((bytes, slots.len(), r.line));
                    rule_key.push(Some(slots.len()));
                    slots.push(KeySlot {
                        id,
                        cipher,
                        sealer,
                        opener,
                        peers: vec![r.peer],
                    });
                }
                Err(e) => {
                    errors.push(LineError {
                        line: r.line,
                        tag: Some("Key"),
                        msg: format!("rule {}: {e}", r.number),
                    });
                    rule_key.push(None);
                }
            }
        }
        let mut by_id: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, k) in slots.iter().enumerate() {
            by_id.entry(k.id).or_default().push(i);
        }
        // Colliding ids: refused where the peers overlap (the receiver would not know the key).
        for same in by_id.values().filter(|v| v.len() > 1) {
            for (x, &a) in same.iter().enumerate() {
                for &b in &same[x + 1..] {
                    let overlap = slots[a].peers.iter().any(|p| {
                        slots[b]
                            .peers
                            .iter()
                            .any(|q| p.contains(&q.network()) || q.contains(&p.network()))
                    });
                    if overlap {
                        let line_of = |slot: usize| {
                            let n = rule_key.iter().position(|k| *k == Some(slot)).unwrap_or(0);
                            (file.rules[n].number, file.rules[n].line)
                        };
                        let ((na, la), (nb, lb)) = (line_of(a), line_of(b));
                        errors.push(LineError {
                            line: lb,
                            tag: Some("Key"),
                            msg: format!(
                                "rule {nb}: its key and rule {na}'s (line {la}) have the same key id {:#06x} and \
                                 their peers overlap: a receiver could not tell them apart; change one key",
                                slots[a].id
                            ),
                        });
                    }
                }
            }
        }
        if !errors.is_empty() {
            errors.sort_by_key(|e| e.line);
            return Err(Errors(errors));
        }
        Ok(Table {
            rule_key,
            keys: slots,
            by_id,
        })
    }

    /// The key a packet from `src` marked with key id `id` is under.
    pub fn key_for(&self, id: u16, src: Ipv4Addr) -> Option<usize> {
        self.by_id
            .get(&id)?
            .iter()
            .copied()
            .find(|&i| self.keys[i].peers.iter().any(|p| p.contains(&src)))
    }
}
