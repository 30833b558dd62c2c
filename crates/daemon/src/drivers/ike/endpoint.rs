//! The one place that calls the IKE state machine ([`netveil_ike::machine::Endpoint`]): it plugs the endpoint
//! into the driver's [`Machine`] trait (through which the loop is also tested with a scripted machine).

use super::machine::Machine;
use netveil_ike::config::Connection;

/// The state machine of `connections`, its randomness from the operating system.
pub fn new(connections: Vec<Connection>) -> Result<Box<dyn Machine>, String> {
    let rng = Box::new(netveil_crypto::rand::OsRng);
    let now = std::time::Instant::now();
    Ok(Box::new(Endpoint(
        netveil_ike::machine::Endpoint::new(connections, rng, now)
            // Certificates are checked against the wall clock (read here, at the instant the machine starts).
            .with_wall_clock(now, std::time::SystemTime::now()),
    )))
}

struct Endpoint(netveil_ike::machine::Endpoint);

impl Machine for Endpoint {
    fn initiate(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: std::time::Instant,
    ) -> Result<netveil_ike::event::IkeSaId, String> {
        self.0
            .initiate(connection, child, now)
            .map_err(|e| e.to_string())
    }
    fn start_child(
        &mut self,
        connection: &str,
        child: Option<&str>,
        now: std::time::Instant,
    ) -> Result<netveil_ike::machine::Started, String> {
        self.0
            .start_child(connection, child, now)
            .map_err(|e| e.to_string())
    }
    fn terminate(
        &mut self,
        ike_sa: netveil_ike::event::IkeSaId,
        now: std::time::Instant,
    ) -> Result<(), String> {
        self.0.terminate(ike_sa, now).map_err(|e| e.to_string())
    }
    fn handle_datagram(
        &mut self,
        now: std::time::Instant,
        local: std::net::SocketAddr,
        remote: std::net::SocketAddr,
        bytes: &[u8],
    ) {
        // Certificates are checked against the wall clock: keep the machine's current (one clock read per
        // datagram; IKE's rate is low).
        self.0.set_wall_clock(now, std::time::SystemTime::now());
        self.0.handle_datagram(now, local, remote, bytes)
    }
    fn handle_timeout(&mut self, now: std::time::Instant) {
        self.0.handle_timeout(now)
    }
    fn poll_transmit(&mut self) -> Option<netveil_ike::event::Transmit> {
        self.0.poll_transmit()
    }
    fn poll_event(&mut self) -> Option<netveil_ike::event::Event> {
        self.0.poll_event()
    }
    fn child_traffic(&mut self, inbound_spis: &[u32], now: std::time::Instant) {
        self.0.child_traffic(inbound_spis, now)
    }
    fn poll_timeout(&self) -> Option<std::time::Instant> {
        self.0.poll_timeout()
    }
    fn ike_proposal(&self, ike_sa: netveil_ike::event::IkeSaId) -> Option<String> {
        self.0.ike_proposal(ike_sa)
    }
    fn status(&self, now: std::time::Instant) -> Vec<netveil_ike::machine::IkeSaStatus> {
        self.0.status(now)
    }
    fn wireshark_keys(
        &self,
    ) -> Vec<(
        netveil_ike::event::IkeSaId,
        netveil_ike::machine::WiresharkKeys,
    )> {
        self.0.wireshark_keys()
    }
    fn delete_child(
        &mut self,
        ike_sa: netveil_ike::event::IkeSaId,
        inbound_spi: u32,
        now: std::time::Instant,
    ) -> Result<(), String> {
        self.0
            .delete_child(ike_sa, inbound_spi, now)
            .map_err(|e| e.to_string())
    }
}
