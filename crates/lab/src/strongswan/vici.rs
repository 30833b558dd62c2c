//! A small synchronous client of charon's vici socket ([`Vici`]) and the message tree it reads ([`Tree`]).

use crate::{Error, Result};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// A vici message (or `swanctl --pretty` output) as a tree: key/values, lists and sections, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    pub values: Vec<(String, String)>,
    pub lists: Vec<(String, Vec<String>)>,
    pub sections: Vec<(String, Tree)>,
}

impl Tree {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    pub fn list(&self, key: &str) -> Vec<String> {
        self.lists
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
    pub fn section(&self, key: &str) -> Option<&Tree> {
        self.sections.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }
}

const VICI_CMD_REQUEST: u8 = 0;
const VICI_CMD_RESPONSE: u8 = 1;
const VICI_CMD_UNKNOWN: u8 = 2;
const VICI_EVENT_REGISTER: u8 = 3;
const VICI_EVENT_CONFIRM: u8 = 5;
const VICI_EVENT: u8 = 7;
const VICI_SECTION_START: u8 = 1;
const VICI_SECTION_END: u8 = 2;
const VICI_KEY_VALUE: u8 = 3;
const VICI_LIST_START: u8 = 4;
const VICI_LIST_ITEM: u8 = 5;
const VICI_LIST_END: u8 = 6;
/// charon's own limit for one vici message.
const VICI_MAX: usize = 512 * 1024;

/// Encodes a request with flat key/values (all that initiate/terminate need).
pub fn vici_encode_request(cmd: &str, kvs: &[(&str, &str)]) -> Result<Vec<u8>> {
    let mut body = vec![VICI_CMD_REQUEST];
    let name = |b: &mut Vec<u8>, n: &str| -> Result<()> {
        let len =
            u8::try_from(n.len()).map_err(|_| Error::internal("vici name longer than 255"))?;
        b.push(len);
        b.extend_from_slice(n.as_bytes());
        Ok(())
    };
    name(&mut body, cmd)?;
    for (k, v) in kvs {
        body.push(VICI_KEY_VALUE);
        name(&mut body, k)?;
        let len =
            u16::try_from(v.len()).map_err(|_| Error::internal("vici value longer than 65535"))?;
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(v.as_bytes());
    }
    let mut out = u32::try_from(body.len())
        .map_err(|_| Error::internal("vici message too long"))?
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes a vici message body (after the packet type and name). Never panics; malformed input is an error.
pub fn vici_decode(mut b: &[u8]) -> Result<Tree> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
        if b.len() < n {
            return Err(Error::output("vici", "truncated message"));
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    fn name(b: &mut &[u8]) -> Result<String> {
        let n = take(b, 1)?[0] as usize;
        Ok(String::from_utf8_lossy(take(b, n)?).into_owned())
    }
    fn value(b: &mut &[u8]) -> Result<String> {
        let l = take(b, 2)?;
        let n = u16::from_be_bytes([l[0], l[1]]) as usize;
        Ok(String::from_utf8_lossy(take(b, n)?).into_owned())
    }
    // A stack of open sections; nesting is bounded by the input length (each level costs 2 bytes at least).
    let mut stack: Vec<(String, Tree)> = vec![(String::new(), Tree::default())];
    while !b.is_empty() {
        let t = take(&mut b, 1)?[0];
        match t {
            VICI_SECTION_START => {
                let n = name(&mut b)?;
                stack.push((n, Tree::default()));
            }
            VICI_SECTION_END => {
                if stack.len() < 2 {
                    return Err(Error::output("vici", "section end without start"));
                }
                let done = stack
                    .pop()
                    .ok_or_else(|| Error::output("vici", "empty stack"))?;
                if let Some(top) = stack.last_mut() {
                    top.1.sections.push(done);
                }
            }
            VICI_KEY_VALUE => {
                let k = name(&mut b)?;
                let v = value(&mut b)?;
                if let Some(top) = stack.last_mut() {
                    top.1.values.push((k, v));
                }
            }
            VICI_LIST_START => {
                let k = name(&mut b)?;
                let mut items = Vec::new();
                loop {
                    match take(&mut b, 1)?[0] {
                        VICI_LIST_ITEM => items.push(value(&mut b)?),
                        VICI_LIST_END => break,
                        x => {
                            return Err(Error::output("vici", format!("element {x} inside a list")))
                        }
                    }
                }
                if let Some(top) = stack.last_mut() {
                    top.1.lists.push((k, items));
                }
            }
            x => return Err(Error::output("vici", format!("unknown element type {x}"))),
        }
    }
    if stack.len() != 1 {
        return Err(Error::output("vici", "unterminated section"));
    }
    Ok(stack.pop().map(|s| s.1).unwrap_or_default())
}

/// A connection to charon's vici socket.
pub struct Vici {
    s: UnixStream,
}

impl Vici {
    pub fn connect(socket: &Path) -> Result<Vici> {
        let s = UnixStream::connect(socket)
            .map_err(Error::io(format!("connect {}", socket.display())))?;
        Ok(Vici { s })
    }

    /// Sends a command and waits (up to `timeout`) for its response.
    pub fn request(&mut self, cmd: &str, kvs: &[(&str, &str)], timeout: Duration) -> Result<Tree> {
        let msg = vici_encode_request(cmd, kvs)?;
        self.s.set_read_timeout(Some(timeout)).ok();
        self.s
            .write_all(&msg)
            .map_err(Error::io(format!("vici {cmd}")))?;
        loop {
            let buf = self.packet().map_err(|e| e.within(format!("vici {cmd}")))?;
            match buf[0] {
                VICI_CMD_RESPONSE => return vici_decode(&buf[1..]),
                VICI_CMD_UNKNOWN => {
                    return Err(Error::Refused {
                        request: format!("vici {cmd}"),
                        reason: "unknown command".into(),
                    })
                }
                VICI_EVENT => continue,
                t => {
                    return Err(Error::output(
                        format!("vici {cmd}"),
                        format!("unexpected packet type {t}"),
                    ))
                }
            }
        }
    }

    /// Registers for an event (`child-updown`, `ike-updown`, ...); [`Vici::event`] then reads them.
    pub fn register(&mut self, event: &str) -> Result<()> {
        let mut msg = vici_encode_request(event, &[])?;
        msg[4] = VICI_EVENT_REGISTER;
        self.s.set_read_timeout(Some(Duration::from_secs(5))).ok();
        self.s
            .write_all(&msg)
            .map_err(Error::io(format!("vici register {event}")))?;
        match self.packet()?.first() {
            Some(&VICI_EVENT_CONFIRM) => Ok(()),
            t => Err(Error::output(
                format!("vici register {event}"),
                format!("answer type {t:?}"),
            )),
        }
    }

    /// The next event (name, message), waiting up to `timeout`.
    pub fn event(&mut self, timeout: Duration) -> Result<(String, Tree)> {
        self.s.set_read_timeout(Some(timeout)).ok();
        loop {
            let p = self.packet()?;
            if p.first() != Some(&VICI_EVENT) {
                continue;
            }
            let n = *p
                .get(1)
                .ok_or_else(|| Error::output("vici", "event without a name"))?
                as usize;
            let name = p
                .get(2..2 + n)
                .ok_or_else(|| Error::output("vici", "truncated event name"))?;
            let name = String::from_utf8_lossy(name).into_owned();
            return Ok((name, vici_decode(&p[2 + n..])?));
        }
    }

    /// One packet (type byte first), at most [`VICI_MAX`] bytes.
    fn packet(&mut self) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.s
            .read_exact(&mut len)
            .map_err(Error::io("vici: reading a packet"))?;
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > VICI_MAX {
            return Err(Error::output("vici", format!("packet of {len} bytes")));
        }
        let mut buf = vec![0u8; len];
        self.s
            .read_exact(&mut buf)
            .map_err(Error::io("vici: reading a packet"))?;
        Ok(buf)
    }

    /// A command whose answer carries `success = yes` (else its `errmsg` is the error).
    pub fn command(&mut self, cmd: &str, kvs: &[(&str, &str)], timeout: Duration) -> Result<Tree> {
        let t = self.request(cmd, kvs, timeout)?;
        if t.get("success") != Some("yes") {
            return Err(Error::Refused {
                request: format!("vici {cmd}"),
                reason: t.get("errmsg").unwrap_or("(no errmsg)").to_string(),
            });
        }
        Ok(t)
    }
}
