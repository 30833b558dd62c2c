//! The control hook with a fake machine and installer (no sockets): `initiate` answers once the CHILD_SA is up or
//! with the failure as the log says it, `terminate` once the SAs are gone, unknown names are refused at once; and
//! the failure messages of [`explain`], one per kind, say what to check with both sides' values.

use super::*;
use crate::runtime::sa_port::SaPort;
use netveil_ike::config::TsSpec;
use netveil_ike::event::{ChildSa, EspSa, Failure, Transmit};
use netveil_ike::keys::Secret;
use netveil_ike::proposal::{Proposal, Protocol};
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Default)]
struct Fake {
    initiated: Vec<String>,
    terminated: Vec<IkeSaId>,
    up: Vec<IkeSaId>,
    /// What `start_child` answers (None: a new IKE SA, as `initiate`).
    started: Option<Started>,
}

impl Machine for Fake {
    fn start_child(&mut self, c: &str, ch: Option<&str>, now: Instant) -> Result<Started, String> {
        match self.started {
            Some(s) => Ok(s),
            None => self.initiate(c, ch, now).map(Started::New),
        }
    }
    fn initiate(&mut self, c: &str, _: Option<&str>, _: Instant) -> Result<IkeSaId, String> {
        if c != "site" {
            return Err(format!("no connection named '{c}'"));
        }
        self.initiated.push(c.into());
        Ok(IkeSaId(7))
    }
    fn terminate(&mut self, id: IkeSaId, _: Instant) -> Result<(), String> {
        self.terminated.push(id);
        Ok(())
    }
    fn handle_datagram(&mut self, _: Instant, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_transmit(&mut self) -> Option<Transmit> {
        None
    }
    fn poll_event(&mut self) -> Option<Event> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn status(&self, _: Instant) -> Vec<netveil_ike::machine::IkeSaStatus> {
        self.up
            .iter()
            .map(|id| netveil_ike::machine::IkeSaStatus {
                id: *id,
                connection: "site".into(),
                state: "ESTABLISHED",
                initiator: true,
                spi_i: 1,
                spi_r: 2,
                local: "10.0.0.1:500".parse().unwrap(),
                remote: "10.0.0.2:500".parse().unwrap(),
                proposal: String::new(),
                nat: false,
                nat_local: false,
                nat_remote: false,
                age: Duration::ZERO,
                rekey_in: None,
                local_id: "a".into(),
                remote_id: "b".into(),
                children: Vec::new(),
            })
            .collect()
    }
}

/// An SA port that refuses everything (the hook only asks the installer for instances).
struct NoPort;

fn no() -> Result<(), crate::runtime::sa_port::ChangeError> {
    Err(crate::engines::ip::config::ConfigError {
        key: String::new(),
        reason: "test".into(),
    })
}

impl SaPort for NoPort {
    fn sa_add_out(
        &self,
        _: crate::runtime::sa_port::OutboundSaParams,
    ) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn sa_add_in(
        &self,
        _: crate::runtime::sa_port::InboundSaParams,
    ) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn sa_update(
        &self,
        _: crate::runtime::sa_port::AnySaParams,
    ) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn sa_del(&self, _: &str) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn policy_add(
        &self,
        _: crate::runtime::sa_port::PolicyParams,
        _: Option<usize>,
    ) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn policy_del(&self, _: &str) -> Result<(), crate::runtime::sa_port::ChangeError> {
        no()
    }
    fn psp_rx(&self, _: &mut dyn FnMut(&mut netveil_psp::Device)) -> Result<(), String> {
        Err("test".into())
    }
    fn psp_install_tx(&self, _: netveil_psp::TxSa) -> Result<(), String> {
        Err("test".into())
    }
    fn psp_kx_state(&self) -> Option<Arc<crate::runtime::sa_port::PspKxState>> {
        None
    }
}

fn child_up(id: IkeSaId) -> Event {
    Event::ChildSaUp(Box::new(ChildSa {
        ike_sa: id,
        connection: "site".into(),
        child: "net".into(),
        proposal: Proposal::parse(Protocol::Esp, "aes128gcm16").unwrap(),
        mode: netveil_ike::config::Mode::Tunnel,
        local: "10.0.0.1:4500".parse().unwrap(),
        remote: "10.0.0.2:4500".parse().unwrap(),
        udp_encap: false,
        inbound: EspSa {
            spi: 0xc000_0001,
            encr_key: Secret::new(&[1; 20]),
            integ_key: Secret::new(&[]),
        },
        outbound: EspSa {
            spi: 0xd000_0001,
            encr_key: Secret::new(&[2; 20]),
            integ_key: Secret::new(&[]),
        },
        local_ts: Vec::new(),
        remote_ts: Vec::new(),
        replay_window: 32,
        replaces: None,
    }))
}

fn setup() -> (Hook, Fake, Installer) {
    let (hook, _control) = pair(vec![("site".into(), vec!["net".into(), "web".into()])]);
    (hook, Fake::default(), Installer::new(Arc::new(NoPort)))
}

/// Sends `cmd` through a fresh pair's hook and returns the hook and the answer's receiver.
fn run(
    hook: &mut Hook,
    m: &mut Fake,
    inst: &mut Installer,
    cmd: impl FnOnce(SyncSender<Outcome>) -> Command,
) -> Receiver<Outcome> {
    let (tx, rx) = mpsc::sync_channel(1);
    let (ctl_tx, ctl_rx) = mpsc::channel();
    ctl_tx.send(cmd(tx)).unwrap();
    // The hook's own channel is replaced by one this test holds.
    hook.rx = ctl_rx;
    hook.service(m, inst, Instant::now());
    rx
}

#[test]
fn initiate_answers_when_the_child_is_up() {
    let (mut hook, mut m, mut inst) = setup();
    let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Initiate {
        connection: "site".into(),
        child: None,
        done,
    });
    assert_eq!(m.initiated, ["site"]);
    hook.settle();
    assert!(rx.try_recv().is_err(), "no answer before the outcome");
    hook.notice(&Event::IkeSaUp {
        ike_sa: IkeSaId(7),
        connection: "site".into(),
    });
    hook.notice(&child_up(IkeSaId(8)));
    hook.settle();
    assert!(rx.try_recv().is_err(), "another IKE SA's child is not ours");
    hook.notice(&child_up(IkeSaId(7)));
    hook.settle();
    let Outcome::Done(ok) = rx.try_recv().unwrap() else {
        panic!("not done")
    };
    assert!(
        ok.contains(
            "CHILD_SA net of connection site established (IKE SA #7, SPIs in c0000001 out d0000001"
        ),
        "{ok}"
    );
}

#[test]
fn initiate_answers_the_failure_as_the_log_says_it() {
    let (mut hook, mut m, mut inst) = setup();
    let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Initiate {
        connection: "site".into(),
        child: Some("net".into()),
        done,
    });
    // The SA's end and the failure come in one batch: the failure is the answer.
    hook.notice(&Event::IkeSaDown {
        ike_sa: IkeSaId(7),
        connection: "site".into(),
    });
    hook.notice(&Event::Failed {
        connection: "site".into(),
        ike_sa: Some(IkeSaId(7)),
        child: None,
        failure: Failure::AuthenticationFailed {
            id: "a.example".into(),
            by_peer: true,
        },
    });
    hook.settle();
    let Outcome::Failed(e) = rx.try_recv().unwrap() else {
        panic!("not failed")
    };
    assert!(
        e.contains("the peer refused our authentication as a.example"),
        "{e}"
    );
}

/// `initiate --child web` while the connection's IKE SA is up or being set up: the child goes in it (the machine
/// says where), and the answer waits for that child: another child's failure in the same IKE SA is not its
/// answer, its own is, and so is the IKE SA's.
#[test]
fn initiate_of_a_child_in_the_connections_ike_sa_waits_for_that_child() {
    let failed = |child: Option<&str>| Event::Failed {
        connection: "site".into(),
        ike_sa: Some(IkeSaId(7)),
        child: child.map(str::to_string),
        failure: Failure::PeerError {
            notify: 24,
            name: "TS_UNACCEPTABLE".into(),
        },
    };
    for (other, own, answered) in [
        (Some("net"), Some("web"), true),
        (Some("net"), None, true),
        (Some("net"), Some("net"), false),
    ] {
        let (mut hook, mut m, mut inst) = setup();
        m.started = Some(Started::Queued(IkeSaId(7)));
        let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Initiate {
            connection: "site".into(),
            child: Some("web".into()),
            done,
        });
        assert!(m.initiated.is_empty(), "no new IKE SA");
        hook.notice(&failed(other));
        hook.notice(&child_up(IkeSaId(7)));
        hook.settle();
        assert!(rx.try_recv().is_err(), "net's outcome is not web's");
        hook.notice(&failed(own));
        hook.settle();
        assert_eq!(
            matches!(rx.try_recv(), Ok(Outcome::Failed(_))),
            answered,
            "{own:?}"
        );
    }
    // Up already: answered at once, nothing started.
    let (mut hook, mut m, mut inst) = setup();
    m.started = Some(Started::Up(IkeSaId(7)));
    let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Initiate {
        connection: "site".into(),
        child: None,
        done,
    });
    let Outcome::Done(ok) = rx.try_recv().unwrap() else {
        panic!("not done")
    };
    assert!(
        ok.contains("CHILD_SA net of connection site is up already (IKE SA #7)"),
        "{ok}"
    );
}

#[test]
fn unknown_names_are_refused_at_once() {
    let (mut hook, mut m, mut inst) = setup();
    let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Initiate {
        connection: "nope".into(),
        child: None,
        done,
    });
    assert_eq!(
        rx.try_recv().unwrap(),
        Outcome::Refused("no connection named 'nope'".into())
    );
    for (t, want) in [
        (
            Target::Connection("nope".into()),
            "no connection named 'nope'",
        ),
        (
            Target::Child("nope".into()),
            "no child named 'nope' in any connection",
        ),
        (
            Target::Connection("site".into()),
            "no IKE SA of this connection to terminate",
        ),
        (Target::IkeSa(9), "no IKE SA #9"),
        (
            Target::Child("net".into()),
            "no CHILD_SA named 'net' to terminate",
        ),
    ] {
        let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Terminate {
            target: t.clone(),
            done,
        });
        assert_eq!(
            rx.try_recv().unwrap(),
            Outcome::Refused(want.into()),
            "{t:?}"
        );
    }
    assert!(m.terminated.is_empty());
}

#[test]
fn terminate_answers_when_the_ike_sas_are_gone() {
    let (mut hook, mut m, mut inst) = setup();
    m.up = vec![IkeSaId(3), IkeSaId(4)];
    let rx = run(&mut hook, &mut m, &mut inst, |done| Command::Terminate {
        target: Target::Connection("site".into()),
        done,
    });
    assert_eq!(m.terminated, [IkeSaId(3), IkeSaId(4)]);
    // Our own delete: their children going down must not get the close_action (start would bring them back).
    assert!(inst.closing.contains(&IkeSaId(3)) && inst.closing.contains(&IkeSaId(4)));
    hook.notice(&Event::IkeSaDown {
        ike_sa: IkeSaId(3),
        connection: "site".into(),
    });
    hook.settle();
    assert!(rx.try_recv().is_err(), "one of two is gone");
    hook.notice(&Event::IkeSaDown {
        ike_sa: IkeSaId(4),
        connection: "site".into(),
    });
    hook.settle();
    assert_eq!(
        rx.try_recv().unwrap(),
        Outcome::Done("IKE SA terminated".into())
    );
}

#[test]
fn explain_no_proposal_chosen_shows_both_lists_or_says_where_the_peers_is() {
    let e = explain(&Failure::NoProposalChosen {
        ours: vec![
            "aes128gcm16-prfsha256-x25519".into(),
            "aes256-sha256-modp2048".into(),
        ],
        theirs: vec!["3des-sha1-modp1024".into()],
    });
    assert_eq!(
        e,
        "no proposal in common: ours aes128gcm16-prfsha256-x25519, aes256-sha256-modp2048, the peer's \
         3des-sha1-modp1024 (align proposals / esp_proposals with the peer's)"
    );
    // The initiator: the responder answered NO_PROPOSAL_CHOSEN without its list.
    let e = explain(&Failure::NoProposalChosen {
        ours: vec!["aes128gcm16".into()],
        theirs: vec![],
    });
    assert_eq!(
        e,
        "the peer answered NO_PROPOSAL_CHOSEN: none of ours is acceptable to it, ours aes128gcm16 (it does not \
         send its own: its log lists them; align proposals / esp_proposals with the peer's)"
    );
}

#[test]
fn explain_ts_unacceptable_shows_both_sets() {
    let ts = |a: &str, p: u8, proto: u8, ports: (u16, u16)| TsSpec {
        addr: a.parse().unwrap(),
        prefix: p,
        protocol: proto,
        ports,
    };
    let e = explain(&Failure::TsUnacceptable {
        ours: vec![
            ts("10.1.0.0", 16, 0, (0, 65535)),
            ts("10.2.0.0", 16, 6, (443, 443)),
        ],
        theirs: vec![ts("192.168.0.0", 24, 0, (0, 65535))],
    });
    assert_eq!(
        e,
        "traffic selectors do not intersect: ours 10.1.0.0/16, 10.2.0.0/16[6/443-443], the peer's 192.168.0.0/24 \
         (check local_ts / remote_ts on both sides)"
    );
    let e = explain(&Failure::TsUnacceptable {
        ours: vec![ts("10.1.0.0", 16, 0, (0, 65535))],
        theirs: vec![],
    });
    assert_eq!(
        e,
        "the peer answered TS_UNACCEPTABLE: our traffic selectors do not intersect its, ours 10.1.0.0/16 (it \
         does not send its own: its log lists them; check local_ts / remote_ts on both sides)"
    );
}

#[test]
fn explain_authentication_failed_names_the_id() {
    assert_eq!(
        explain(&Failure::AuthenticationFailed {
            id: "b.example".into(),
            by_peer: false
        }),
        "the peer failed to authenticate as b.example (check the pre-shared key and remote.id)"
    );
    assert_eq!(
        explain(&Failure::AuthenticationFailed {
            id: "a.example".into(),
            by_peer: true
        }),
        "the peer refused our authentication as a.example (check the pre-shared key and local.id, and the \
         peer's remote id)"
    );
}
