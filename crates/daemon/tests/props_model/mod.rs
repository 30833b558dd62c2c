//! The model of `runtime_props.rs`: what an operator installed, the operations and their strategies, and the
//! configuration, SAs, policies and packets they turn into.

use netveil_daemon::engines::ip::drop::Drop as IpDrop;
use netveil_wire::PacketBuf;
use proptest::prelude::*;
use std::path::PathBuf;
/// SA names the operations pick from (the configuration file has `a` outbound and `x` inbound).
pub const SA_NAMES: [&str; 5] = ["a", "b", "c", "x", "y"];
/// Policy names (the file has `p-out` and `p-in`).
pub const POLICY_NAMES: [&str; 5] = ["p-out", "p-in", "p0", "p1", "p2"];
/// The networks policies select: an outbound policy's destination, an inbound policy's source (the other end is
/// always 10.1.0.0/16, ours).
pub const NETS: [&str; 5] = [
    "10.2.0.0/16",
    "10.3.0.0/16",
    "10.3.0.9/32",
    "10.4.0.0/16",
    "10.0.0.0/8",
];
/// Where traffic goes (from 10.1.0.1).
pub const DSTS: [[u8; 4]; 5] = [
    [10, 2, 0, 1],
    [10, 3, 0, 1],
    [10, 3, 0, 9],
    [10, 4, 0, 1],
    [10, 5, 0, 1],
];
/// Keys are known by a number that is also their SA's SPI (so a sealed packet's SPI says which key sealed it):
/// ours (outbound SAs) from `OUR_KEYS`, the peer's sending keys (what our inbound SAs hold) from `PEER_KEYS`.
pub const OUR_KEYS: u32 = 0x1000;
pub const PEER_KEYS: u32 = 0x2000;
pub const KEYS_PER_SIDE: u32 = 6;
/// The sequence numbers the peer has already sent under each of its keys.
pub const PEER_SENT: u64 = 16;
pub const NFT_TABLE: &str = "netveil_props";

pub fn key_hex(id: u32) -> String {
    format!("{id:08x}00112233445566778899aabb01020304")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Dir {
    Out,
    In,
}

impl Dir {
    pub fn word(self) -> &'static str {
        match self {
            Dir::Out => "out",
            Dir::In => "in",
        }
    }
    pub fn keys(self) -> u32 {
        match self {
            Dir::Out => OUR_KEYS,
            Dir::In => PEER_KEYS,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Act {
    Protect,
    Discard,
    Bypass,
}

/// An SA as the model knows it: `key` is its key's number and its SPI.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MSa {
    pub name: String,
    pub dir: Dir,
    pub key: u32,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MPolicy {
    pub name: String,
    pub dir: Dir,
    pub net: usize,
    pub act: Act,
    /// The SA a protect policy names.
    pub sa: String,
}

/// What the model says is installed.
#[derive(Clone, Default, Debug)]
pub struct Model {
    pub sas: Vec<MSa>,
    /// Replaced inbound SAs still taking the peer's packets: (key, successor, until).
    pub retiring: Vec<(u32, String, u64)>,
    pub policies: Vec<MPolicy>,
}

impl Model {
    /// The configuration file's SAs and policies.
    pub fn file() -> Model {
        Model {
            sas: vec![
                MSa {
                    name: "a".into(),
                    dir: Dir::Out,
                    key: OUR_KEYS,
                },
                MSa {
                    name: "x".into(),
                    dir: Dir::In,
                    key: PEER_KEYS,
                },
            ],
            retiring: Vec::new(),
            policies: vec![
                MPolicy {
                    name: "p-out".into(),
                    dir: Dir::Out,
                    net: 0,
                    act: Act::Protect,
                    sa: "a".into(),
                },
                MPolicy {
                    name: "p-in".into(),
                    dir: Dir::In,
                    net: 0,
                    act: Act::Protect,
                    sa: "x".into(),
                },
            ],
        }
    }

    pub fn sa(&self, name: &str) -> Option<&MSa> {
        self.sas.iter().find(|s| s.name == name)
    }

    /// A key some installed or retiring SA has (every SA needs its own keys).
    pub fn key_taken(&self, key: u32, except: Option<&str>) -> bool {
        self.sas
            .iter()
            .any(|s| s.key == key && Some(s.name.as_str()) != except)
            || self.retiring.iter().any(|r| r.0 == key)
    }

    /// A protect policy of the other direction names `name`.
    pub fn named_by_other_direction(&self, name: &str, dir: Dir) -> bool {
        self.policies
            .iter()
            .any(|p| p.act == Act::Protect && p.sa == name && p.dir != dir)
    }

    pub fn sa_add_ok(&self, s: &MSa) -> bool {
        self.sa(&s.name).is_none()
            && !self.key_taken(s.key, None)
            && !self.named_by_other_direction(&s.name, s.dir)
    }

    pub fn sa_update_ok(&self, s: &MSa) -> bool {
        let Some(old) = self.sa(&s.name) else {
            return false;
        };
        // An outbound SA may be updated to its own keys (it continues above their mark); an inbound one needs a
        // new SPI, and here the SPI comes with the key.
        let except = (old.dir == Dir::Out).then_some(s.name.as_str());
        old.dir == s.dir
            && !self.key_taken(s.key, except)
            && !self.named_by_other_direction(&s.name, s.dir)
    }

    pub fn policy_add_ok(&self, p: &MPolicy, pos: Option<usize>) -> bool {
        !self.policies.iter().any(|o| o.name == p.name)
            && pos.is_none_or(|i| i <= self.policies.len())
            && !(p.act == Act::Protect && self.sa(&p.sa).is_some_and(|s| s.dir != p.dir))
    }

    /// What the data plane must do with a packet from 10.1.0.1 to `dst`: `Ok(Some(spi))` sealed under that SPI,
    /// `Ok(None)` bypassed, or the drop.
    pub fn expect_out(&self, dst: [u8; 4]) -> (Option<&MPolicy>, Result<Option<u32>, IpDrop>) {
        let dst = std::net::Ipv4Addr::from(dst);
        let Some(p) = self.policies.iter().find(|p| {
            p.dir == Dir::Out
                && NETS[p.net]
                    .parse::<ipnet::Ipv4Net>()
                    .unwrap()
                    .contains(&dst)
        }) else {
            // The interface's default policy: discard.
            return (None, Err(IpDrop::PolicyDiscard));
        };
        let r = match p.act {
            Act::Discard => Err(IpDrop::PolicyDiscard),
            Act::Bypass => Ok(None),
            Act::Protect => match self.sa(&p.sa) {
                Some(s) if s.dir == Dir::Out => Ok(Some(s.key)),
                _ => Err(IpDrop::NoSa),
            },
        };
        (Some(p), r)
    }
}

#[derive(Clone, Debug)]
pub enum Op {
    SaAdd {
        name: usize,
        dir: Dir,
        key: u32,
    },
    SaUpdate {
        name: usize,
        dir: Dir,
        key: u32,
    },
    SaDel {
        name: usize,
    },
    PolicyAdd {
        name: usize,
        dir: Dir,
        net: usize,
        act: Act,
        sa: usize,
        pos: Option<usize>,
    },
    PolicyDel {
        name: usize,
    },
    /// Seal `n` packets to `DSTS[dst]`.
    Seal {
        dst: usize,
        n: u32,
    },
    /// The engine's tick, `dt` seconds later.
    Tick {
        dt: u64,
    },
    /// The engine dies (no clean stop) and starts again.
    Crash,
    /// A clean stop and a start.
    Restart,
    /// What a key manager does for a new peer: an outbound SA `name` with our key `key`, and an outbound policy
    /// `POLICY_NAMES[policy]` to `NETS[net]` using it, in front.
    Provision {
        name: usize,
        key: u32,
        policy: usize,
        net: usize,
    },
    /// Issue 21's reported sequence: an outbound policy naming SA `name` (not installed, or not outbound), the
    /// inbound SA holding peer key `peer` removed, then an inbound SA `name` with that key added.
    Attack {
        name: usize,
        peer: u32,
    },
}

pub fn dir() -> impl Strategy<Value = Dir> {
    prop_oneof![3 => Just(Dir::Out), 2 => Just(Dir::In)]
}

pub fn op() -> impl Strategy<Value = Op> {
    let act = prop_oneof![4 => Just(Act::Protect), 1 => Just(Act::Discard), 1 => Just(Act::Bypass)];
    prop_oneof![
        5 => (0..SA_NAMES.len(), dir(), 0..KEYS_PER_SIDE)
            .prop_map(|(name, dir, key)| Op::SaAdd { name, dir, key }),
        2 => (0..SA_NAMES.len(), dir(), 0..KEYS_PER_SIDE)
            .prop_map(|(name, dir, key)| Op::SaUpdate { name, dir, key }),
        2 => (0..SA_NAMES.len()).prop_map(|name| Op::SaDel { name }),
        4 => (
            0..POLICY_NAMES.len(),
            dir(),
            0..NETS.len(),
            act,
            0..SA_NAMES.len(),
            proptest::option::of(0..4usize)
        )
            .prop_map(|(name, dir, net, act, sa, pos)| Op::PolicyAdd { name, dir, net, act, sa, pos }),
        2 => (0..POLICY_NAMES.len()).prop_map(|name| Op::PolicyDel { name }),
        6 => (0..DSTS.len(), 1..12u32).prop_map(|(dst, n)| Op::Seal { dst, n }),
        1 => (0..8u64).prop_map(|dt| Op::Tick { dt }),
        3 => (0..SA_NAMES.len(), 0..KEYS_PER_SIDE, 0..POLICY_NAMES.len(), 0..NETS.len())
            .prop_map(|(name, key, policy, net)| Op::Provision { name, key, policy, net }),
        2 => Just(Op::Crash),
        2 => Just(Op::Restart),
        1 => (0..SA_NAMES.len(), 0..KEYS_PER_SIDE).prop_map(|(name, peer)| Op::Attack { name, peer }),
    ]
}

pub fn sa_table(s: &MSa) -> toml::Table {
    toml::from_str(&format!(
        "name = \"{}\"\ndirection = \"{}\"\nspi = {}\nlocal = \"192.0.2.1\"\nremote = \"192.0.2.2\"\n\
         suite = \"aes128gcm16\"\nenc_key = \"{}\"\n",
        s.name,
        s.dir.word(),
        s.key,
        key_hex(s.key)
    ))
    .unwrap()
}

pub fn policy_table(p: &MPolicy) -> toml::Table {
    let (src, dst) = match p.dir {
        Dir::Out => ("10.1.0.0/16", NETS[p.net]),
        Dir::In => (NETS[p.net], "10.1.0.0/16"),
    };
    let (action, sas) = match p.act {
        Act::Protect => ("protect", format!("sas = [\"{}\"]\n", p.sa)),
        Act::Discard => ("discard", String::new()),
        Act::Bypass => ("bypass", String::new()),
    };
    toml::from_str(&format!(
        "name = \"{}\"\ndirection = \"{}\"\nsrc = \"{src}\"\ndst = \"{dst}\"\naction = \"{action}\"\n{sas}",
        p.name,
        p.dir.word()
    ))
    .unwrap()
}

/// The configuration file: the model's [`Model::file`].
pub fn file_text(state_dir: &std::path::Path) -> String {
    let m = Model::file();
    let mut t = format!("[interface]\nstate_dir = \"{}\"\n", state_dir.display());
    for s in &m.sas {
        t.push_str("[[sa]]\n");
        t.push_str(&toml::to_string(&sa_table(s)).unwrap());
    }
    for p in &m.policies {
        t.push_str("[[policy]]\n");
        t.push_str(&toml::to_string(&policy_table(p)).unwrap());
    }
    t
}

/// A UDP packet 10.1.0.1 -> `dst`.
pub fn packet(dst: [u8; 4]) -> PacketBuf {
    let mut p = vec![
        0x45, 0, 0, 32, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, dst[0], dst[1], dst[2], dst[3],
        0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0, 1, 2, 3, 4,
    ];
    let c = netveil_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    PacketBuf::from_slice(&p, 256, 640)
}

/// A state directory for one run (not the system's temporary directory: state wants a directory of its own).
pub fn scratch(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let d = netveil_daemon::runtime::state::test_scratch_base(std::path::Path::new(env!(
        "CARGO_TARGET_TMPDIR"
    )))
    .join(format!(
        "netveil-props-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}
