//! PSP's key-exchange driver against a port that offers nothing but PSP's device and transmit SA.

use super::*;
use crate::engines::ip::config::PspConfig;
use crate::engines::ip::psp_state::PspState;
use crate::runtime::engine::{Engine, Undo};
use crate::runtime::sa_port::{
    AnySaParams, ChangeError, InboundSaParams, OutboundSaParams, PolicyParams,
};
use crate::runtime::sa_port::{PspKxState, SaPort};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A port with a PSP device and nothing else, counting what the driver does through it; the IPsec calls panic
/// (the driver has no business there), which ends the driver's thread.
struct PspOnly {
    st: PspState,
    rx_calls: AtomicU64,
    tx_installs: AtomicU64,
}

impl SaPort for PspOnly {
    fn sa_add_out(&self, _: OutboundSaParams) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver installs no IPsec SA")
    }
    fn sa_add_in(&self, _: InboundSaParams) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver installs no IPsec SA")
    }
    fn sa_update(&self, _: AnySaParams) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver installs no IPsec SA")
    }
    fn sa_del(&self, _: &str) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver installs no IPsec SA")
    }
    fn policy_add(
        &self,
        _: PolicyParams,
        _: Option<usize>,
    ) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver adds no policy")
    }
    fn policy_del(&self, _: &str) -> std::result::Result<(), ChangeError> {
        panic!("the PSP driver removes no policy")
    }
    fn psp_rx(
        &self,
        f: &mut dyn FnMut(&mut netveil_psp::Device),
    ) -> std::result::Result<(), String> {
        self.rx_calls.fetch_add(1, Relaxed);
        self.st.with_device(f)
    }
    fn psp_install_tx(&self, sa: netveil_psp::TxSa) -> std::result::Result<(), String> {
        self.tx_installs.fetch_add(1, Relaxed);
        self.st.install_tx(sa);
        Ok(())
    }
    fn psp_kx_state(&self) -> Option<Arc<PspKxState>> {
        Some(self.st.kx.clone())
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < Duration::from_secs(15), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two drivers over loopback TLS, each with its own port: each side's transmit SA, installed through its port, is
/// a receive SA the other side's device allocated through its port; a `rotate` request (the shared state the
/// engine's answer moves) rotates the requester's keys and the peer switches to the new SPI. The drivers stop
/// when asked.
#[test]
fn two_drivers_associate_and_rotate_through_their_ports_only() {
    // The key-exchange sockets carry a mark.
    if !netveil_testkit::require_root_for(&netveil_testkit::this_test(), "SO_MARK") {
        return;
    }
    let dir = crate::runtime::state::test_dir("psp-kx-driver");
    let (crt_a, key_a) = keygen("a.kx.test", &dir).unwrap();
    let (crt_b, key_b) = keygen("b.kx.test", &dir).unwrap();
    let port = 41000 + (std::process::id() % 2000) as u16;
    let cfg = |local: &str, remote: &str, crt: &Path, key: &Path, ca: &Path, peer: &str| {
        crate::engines::ip::config::Config::parse(&format!(
            "[interface]\n[psp]\nmode = \"tunnel\"\nlocal = \"{local}\"\nremote = \"{remote}\"\ncontrol_port = {port}\n\
             cert = \"{}\"\nkey = \"{}\"\npeer_ca = \"{}\"\npeer_name = \"{peer}\"\n",
            crt.display(),
            key.display(),
            ca.display()
        ))
        .unwrap()
        .psp
        .unwrap()
    };
    let ca = cfg(
        "127.0.0.1",
        "127.0.0.2",
        &crt_a,
        &key_a,
        &crt_b,
        "b.kx.test",
    );
    let cb = cfg(
        "127.0.0.2",
        "127.0.0.1",
        &crt_b,
        &key_b,
        &crt_a,
        "a.kx.test",
    );
    let side = |c: &PspConfig| {
        Arc::new(PspOnly {
            st: PspState::new(c.clone()),
            rx_calls: AtomicU64::new(0),
            tx_installs: AtomicU64::new(0),
        })
    };
    let (pa, pb) = (side(&ca), side(&cb));
    let mut da = start_driver(ca.clone(), tls(&ca).unwrap(), pa.clone(), 0).unwrap();
    let mut db = start_driver(cb.clone(), tls(&cb).unwrap(), pb.clone(), 0).unwrap();
    let rx_spis = |p: &PspOnly| -> Vec<u32> {
        p.st.device
            .read()
            .unwrap()
            .rx_spis()
            .iter()
            .map(|(s, _)| *s)
            .collect()
    };
    // Each side sends the SPI it allocated; the other installs it as its transmit SA.
    wait_for("both transmit SAs", || {
        pa.st.tx_spi.load(Relaxed) != 0 && pb.st.tx_spi.load(Relaxed) != 0
    });
    assert!(rx_spis(&pb).contains(&pa.st.tx_spi.load(Relaxed)));
    assert!(rx_spis(&pa).contains(&pb.st.tx_spi.load(Relaxed)));
    assert_eq!(pb.st.tx_spi.load(Relaxed), pa.st.kx.rx_spi.load(Relaxed));
    for p in [&pa, &pb] {
        assert!(p.st.kx.connected.load(Relaxed));
        assert!(p.rx_calls.load(Relaxed) >= 1);
        assert_eq!(p.tx_installs.load(Relaxed), 1);
    }
    // `netveil rotate` on a: a's device rotates and hands out a new SPI, which b switches to.
    let before = pb.st.tx_spi.load(Relaxed);
    pa.st.kx.rotate_requests.fetch_add(1, Relaxed);
    wait_for("a's rotation reaches b", || {
        pa.st.kx.rotations.load(Relaxed) == 1 && pb.st.tx_spi.load(Relaxed) != before
    });
    assert_eq!(pb.st.tx_spi.load(Relaxed), pa.st.kx.rx_spi.load(Relaxed));
    assert!(rx_spis(&pa).contains(&pb.st.tx_spi.load(Relaxed)));
    assert!(da.tick() && db.tick(), "the drivers run");
    let mut undo = Undo::default();
    Box::new(da).stop(&mut undo, false);
    Box::new(db).stop(&mut undo, false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `psp.key` is read as a secret and `psp.peer_ca` as rules, through [`crate::runtime::secret_file`]: every refusal names its
/// key and the file, never the key.
#[test]
fn key_and_ca_files_are_checked_as_opened() {
    use crate::runtime::secret_file::{tests::every_refusal, Level};
    let dir = crate::runtime::state::test_dir("psp-kx-files");
    let (crt, key) = keygen("a.kx.test", &dir).unwrap();
    let cfg = |key: &Path, ca: &Path| {
        let c = crate::engines::ip::config::Config::parse(&format!(
            "[interface]\n[psp]\nmode = \"tunnel\"\nlocal = \"127.0.0.1\"\nremote = \"127.0.0.2\"\n\
             cert = \"{}\"\nkey = \"{}\"\npeer_ca = \"{}\"\npeer_name = \"a.kx.test\"\n",
            crt.display(),
            key.display(),
            ca.display()
        ))
        .unwrap();
        tls(c.psp.as_ref().unwrap())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let key_pem = std::fs::read(&key).unwrap();
    let key_line = String::from_utf8_lossy(&key_pem)
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    every_refusal(
        "psp-key",
        Level::Secret,
        "psp.key",
        &key_pem,
        &key_line,
        true,
        &|p| cfg(p, &crt),
    );
    let ca_pem = std::fs::read(&crt).unwrap();
    let ca_line = String::from_utf8_lossy(&ca_pem)
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    every_refusal(
        "psp-peer-ca",
        Level::Rules,
        "psp.peer_ca",
        &ca_pem,
        &ca_line,
        true,
        &|p| cfg(&key, p),
    );
    let _ = std::fs::remove_dir_all(dir);
}
