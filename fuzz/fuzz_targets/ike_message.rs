#![no_main]

//! The IKEv2 codec on arbitrary bytes: parsing never panics; whatever parses has buffer_len() equal to its
//! header's length, emits into exactly that many bytes and parses back to an equal Message, and its emitted form
//! is a fixed point. The same for a chain of payloads as found inside an opened SK payload.

use libfuzzer_sys::fuzz_target;
use netveil_ike::message::{chain, chain_len, emit_chain, header, parse_chain, Chain, Message};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = header::Packet::new_checked(data) {
        let _ = (
            h.initiator_spi(),
            h.responder_spi(),
            h.next_payload(),
            h.major_version(),
            h.exchange_type(),
            h.flags(),
            h.message_id(),
            h.payload(),
        );
    }
    if let Ok(v) = chain::Packet::new_checked(data) {
        assert_eq!(v.body().len() + 4, usize::from(v.payload_len()));
        let _ = (v.next_payload(), v.critical());
    }
    if let Ok(m) = Message::parse(data) {
        let stated = header::Packet::new_checked(data).unwrap().length() as usize;
        assert_eq!(m.buffer_len(), stated);
        assert_eq!(stated, data.len());
        let mut buf = vec![0u8; m.buffer_len()];
        assert_eq!(m.emit(&mut buf), Ok(buf.len()));
        let again = Message::parse(&buf).expect("an emitted message parses");
        assert_eq!(again, m);
        assert_eq!(again.to_vec().unwrap(), buf);
    }

    // A chain as inside an SK payload: the first byte names the first payload.
    if let Some((&first, rest)) = data.split_first() {
        let mut covered = 0usize;
        for p in Chain::new(first, rest) {
            match p {
                Ok(p) => covered += 4 + p.body.len(),
                Err(_) => break,
            }
        }
        assert!(covered <= rest.len());
        if let Ok(payloads) = parse_chain(first, rest) {
            assert_eq!(covered, rest.len());
            assert_eq!(chain_len(&payloads), rest.len());
            let mut buf = vec![0u8; chain_len(&payloads)];
            assert_eq!(emit_chain(&payloads, &mut buf), Ok(buf.len()));
            assert_eq!(parse_chain(first, &buf).as_ref(), Ok(&payloads));
        }
    }
});
