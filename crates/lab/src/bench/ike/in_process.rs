//! netveil's exchange alone: initiator and responder Endpoints in this process passing datagrams in memory.

use super::row::{IkeRow, Sizes};
use super::suites::{initiator_conn, suite_creds, Suite, CONN};
use crate::bench::ping;
use crate::lab::Lab;
use crate::strongswan::Credential;
use crate::{Error, Result};
use netveil_ike::event::{Event, IkeSaId};
use netveil_ike::machine::Endpoint;
use std::time::{Duration, Instant, SystemTime};

/// time from `initiate` to the initiator's CHILD_SA event, and the time spent in the responder's
/// `handle_datagram`; each IKE SA deleted before the next (not timed).
pub(super) fn exchange_in_process(
    s: &Suite,
    creds: Option<&[Credential; 2]>,
    n: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let now = Instant::now();
    let mut ep = [
        Endpoint::new(
            vec![initiator_conn(s, 0, creds)?],
            Box::new(netveil_crypto::rand::OsRng),
            now,
        )
        .with_wall_clock(now, SystemTime::now()),
        Endpoint::new(
            vec![initiator_conn(s, 1, creds)?],
            Box::new(netveil_crypto::rand::OsRng),
            now,
        )
        .with_wall_clock(now, SystemTime::now()),
    ];
    let mut total = Vec::with_capacity(n);
    let mut responder = Vec::with_capacity(n);
    // Delivers until nothing is in flight; returns the responder's time and whether `id` got its child.
    fn pump(ep: &mut [Endpoint; 2], id: IkeSaId) -> Result<(Duration, bool)> {
        let mut resp = Duration::ZERO;
        let mut up = false;
        for _ in 0..64 {
            let mut moved = false;
            for i in 0..2 {
                while let Some(t) = ep[i].poll_transmit() {
                    moved = true;
                    let t0 = Instant::now();
                    ep[1 - i].handle_datagram(t0, t.remote, t.local, &t.bytes);
                    if i == 0 {
                        resp += t0.elapsed();
                    }
                }
                while let Some(e) = ep[i].poll_event() {
                    match e {
                        Event::ChildSaUp(c) if i == 0 && c.ike_sa == id => up = true,
                        Event::Failed { failure, .. } => {
                            return Err(Error::refused(
                                "in-process exchange",
                                format!("{failure:?}"),
                            ))
                        }
                        _ => {}
                    }
                }
            }
            if !moved || up {
                return Ok((resp, up));
            }
        }
        Err(Error::measurement(
            "in-process exchange",
            "no end to the datagrams",
        ))
    }
    for _ in 0..n {
        let t0 = Instant::now();
        let id = ep[0]
            .initiate(CONN, None, t0)
            .map_err(|e| Error::refused("initiate", e))?;
        let (resp, up) = pump(&mut ep, id)?;
        let t = t0.elapsed();
        if !up {
            return Err(Error::measurement("in-process exchange", "no CHILD_SA"));
        }
        total.push(t.as_secs_f64() * 1e3);
        responder.push(resp.as_secs_f64() * 1e3);
        ep[0]
            .terminate(id, Instant::now())
            .map_err(|e| Error::refused("terminate", e))?;
        pump(&mut ep, id)?;
    }
    Ok((total, responder))
}

pub(super) fn measure_in_process(s: &Suite, z: Sizes) -> Result<IkeRow> {
    let mut row = IkeRow::empty(format!("netveil ike {} (exchange, in process)", s.name));
    // Certificates need a directory (no namespaces are made): a lab's, removed with it.
    let lab = if s.cert {
        Some(Lab::new("nvbikp")?)
    } else {
        None
    };
    let creds = match &lab {
        Some(l) => suite_creds(s, l.dir())?,
        None => None,
    };
    let creds = creds.as_ref();
    // Warm-up (first-use costs of the allocator and the crypto library), then the measured runs.
    exchange_in_process(s, creds, 5)?;
    let (total, resp) = exchange_in_process(s, creds, z.setups.max(z.handshakes / 4))?;
    row.setups(&total);
    row.responder_ms = Some(ping::median(&resp));
    let mean_resp = resp.iter().sum::<f64>() / resp.len().max(1) as f64;
    row.handshakes_per_s = 1e3 / mean_resp.max(1e-9);
    Ok(row)
}
