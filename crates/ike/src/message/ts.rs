//! Traffic Selector payloads (TSi, TSr; RFC 7296 3.13): address ranges with an IP protocol and a port range.

use super::buf::{len16, Reader, Writer};
use super::error::{Error, MAX_TRAFFIC_SELECTORS};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Traffic selector types (RFC 7296 3.13.1, RFC 9478).
pub mod ts_type {
    pub const IPV4_ADDR_RANGE: u8 = 7;
    pub const IPV6_ADDR_RANGE: u8 = 8;
    /// RFC 9478 (security labels); carried opaque.
    pub const SECLABEL: u8 = 10;
}

/// "Any protocol" in a selector.
pub const ANY_PROTOCOL: u8 = 0;

/// The port range of RFC 7296 3.13.1 for OPAQUE ports: start 65535, end 0 (the one range whose start may exceed
/// its end).
pub const OPAQUE_PORTS: (u16, u16) = (65535, 0);

const IPV4_SELECTOR_LEN: usize = 16;
const IPV6_SELECTOR_LEN: usize = 40;

/// A traffic selector's address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrRange {
    V4 { start: Ipv4Addr, end: Ipv4Addr },
    V6 { start: Ipv6Addr, end: Ipv6Addr },
}

/// A traffic selector (RFC 7296 3.13.1). Parse rejects an address range whose start is above its end and a port
/// range whose start is above its end (except [`OPAQUE_PORTS`]); the same holds for emit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrafficSelector {
    Range {
        /// IP protocol number ([`ANY_PROTOCOL`] for all).
        ip_protocol: u8,
        start_port: u16,
        end_port: u16,
        addrs: AddrRange,
    },
    /// A selector type this codec does not interpret (e.g. RFC 9478 security labels): its type and the bytes
    /// after its 4-byte type/protocol/length header, kept as they came.
    Other {
        ts_type: u8,
        ip_protocol: u8,
        data: Vec<u8>,
    },
}

impl TrafficSelector {
    /// All addresses of a family, all protocols and ports.
    pub fn any_v4() -> TrafficSelector {
        TrafficSelector::Range {
            ip_protocol: ANY_PROTOCOL,
            start_port: 0,
            end_port: 65535,
            addrs: AddrRange::V4 {
                start: Ipv4Addr::UNSPECIFIED,
                end: Ipv4Addr::BROADCAST,
            },
        }
    }

    fn check(&self) -> Result<(), Error> {
        if let TrafficSelector::Range {
            start_port,
            end_port,
            addrs,
            ..
        } = self
        {
            if start_port > end_port && (*start_port, *end_port) != OPAQUE_PORTS {
                return Err(Error::BadValue {
                    what: "traffic selector port range (start > end)",
                });
            }
            let ordered = match addrs {
                AddrRange::V4 { start, end } => start <= end,
                AddrRange::V6 { start, end } => start <= end,
            };
            if !ordered {
                return Err(Error::BadValue {
                    what: "traffic selector address range (start > end)",
                });
            }
        }
        Ok(())
    }

    fn buffer_len(&self) -> usize {
        match self {
            TrafficSelector::Range {
                addrs: AddrRange::V4 { .. },
                ..
            } => IPV4_SELECTOR_LEN,
            TrafficSelector::Range {
                addrs: AddrRange::V6 { .. },
                ..
            } => IPV6_SELECTOR_LEN,
            TrafficSelector::Other { data, .. } => 4 + data.len(),
        }
    }

    fn parse(r: &mut Reader<'_>) -> Result<TrafficSelector, Error> {
        let ts_type = r.u8()?;
        let ip_protocol = r.u8()?;
        let len = usize::from(r.u16()?);
        if len < 4 {
            return Err(Error::BadLength {
                what: "traffic selector",
            });
        }
        let mut b = Reader::new(r.take(len - 4)?, "traffic selector");
        let want = match ts_type {
            ts_type::IPV4_ADDR_RANGE => IPV4_SELECTOR_LEN,
            ts_type::IPV6_ADDR_RANGE => IPV6_SELECTOR_LEN,
            _ => {
                return Ok(TrafficSelector::Other {
                    ts_type,
                    ip_protocol,
                    data: b.rest().to_vec(),
                })
            }
        };
        if len != want {
            return Err(Error::BadLength {
                what: "traffic selector",
            });
        }
        let start_port = b.u16()?;
        let end_port = b.u16()?;
        let addrs = if ts_type == ts_type::IPV4_ADDR_RANGE {
            AddrRange::V4 {
                start: Ipv4Addr::from(b.array::<4>()?),
                end: Ipv4Addr::from(b.array::<4>()?),
            }
        } else {
            AddrRange::V6 {
                start: Ipv6Addr::from(b.array::<16>()?),
                end: Ipv6Addr::from(b.array::<16>()?),
            }
        };
        let ts = TrafficSelector::Range {
            ip_protocol,
            start_port,
            end_port,
            addrs,
        };
        ts.check()?;
        Ok(ts)
    }

    fn emit(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        self.check()?;
        match self {
            TrafficSelector::Range {
                ip_protocol,
                start_port,
                end_port,
                addrs,
            } => {
                let t = match addrs {
                    AddrRange::V4 { .. } => ts_type::IPV4_ADDR_RANGE,
                    AddrRange::V6 { .. } => ts_type::IPV6_ADDR_RANGE,
                };
                w.u8(t)?;
                w.u8(*ip_protocol)?;
                w.u16(len16(self.buffer_len(), "traffic selector")?)?;
                w.u16(*start_port)?;
                w.u16(*end_port)?;
                match addrs {
                    AddrRange::V4 { start, end } => {
                        w.bytes(&start.octets())?;
                        w.bytes(&end.octets())
                    }
                    AddrRange::V6 { start, end } => {
                        w.bytes(&start.octets())?;
                        w.bytes(&end.octets())
                    }
                }
            }
            TrafficSelector::Other {
                ts_type,
                ip_protocol,
                data,
            } => {
                if matches!(
                    *ts_type,
                    ts_type::IPV4_ADDR_RANGE | ts_type::IPV6_ADDR_RANGE
                ) {
                    return Err(Error::BadValue {
                        what: "opaque traffic selector of an address range type",
                    });
                }
                w.u8(*ts_type)?;
                w.u8(*ip_protocol)?;
                w.u16(len16(self.buffer_len(), "traffic selector")?)?;
                w.bytes(data)
            }
        }
    }
}

/// A TSi or TSr payload: its selectors (at least one, at most [`MAX_TRAFFIC_SELECTORS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ts {
    pub selectors: Vec<TrafficSelector>,
}

impl Ts {
    pub fn parse(body: &[u8]) -> Result<Ts, Error> {
        let mut r = Reader::new(body, "traffic selector payload");
        let n = usize::from(r.u8()?);
        let _reserved = r.take(3)?;
        if n == 0 {
            return Err(Error::BadValue {
                what: "traffic selector payload without selectors",
            });
        }
        if n > MAX_TRAFFIC_SELECTORS {
            return Err(Error::TooMany {
                what: "traffic selectors",
                cap: MAX_TRAFFIC_SELECTORS,
            });
        }
        let mut selectors = Vec::new();
        for _ in 0..n {
            selectors.push(TrafficSelector::parse(&mut r)?);
        }
        if !r.is_empty() {
            return Err(Error::BadLength {
                what: "traffic selector payload (bytes after its selectors)",
            });
        }
        Ok(Ts { selectors })
    }

    pub fn buffer_len(&self) -> usize {
        4 + self
            .selectors
            .iter()
            .map(TrafficSelector::buffer_len)
            .sum::<usize>()
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        if self.selectors.is_empty() {
            return Err(Error::BadValue {
                what: "traffic selector payload without selectors",
            });
        }
        if self.selectors.len() > MAX_TRAFFIC_SELECTORS {
            return Err(Error::TooMany {
                what: "traffic selectors",
                cap: MAX_TRAFFIC_SELECTORS,
            });
        }
        let mut w = Writer::new(buf);
        // At most MAX_TRAFFIC_SELECTORS (under 256), checked above.
        w.u8(self.selectors.len() as u8)?;
        w.zeros(3)?;
        for s in &self.selectors {
            s.emit(&mut w)?;
        }
        Ok(w.written())
    }
}
