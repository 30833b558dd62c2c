#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::{ah, esp, udp_encap};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = esp::Packet::new_checked(data) {
        let _ = (p.spi(), p.seq_no(), p.payload());
        if let Ok(r) = esp::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut esp::Packet::new_unchecked(&mut buf[..]));
            assert_eq!(
                esp::Repr::parse(&esp::Packet::new_checked(&buf[..]).unwrap()),
                Ok(r)
            );
        }
    }
    if let Ok((pad_len, _nh, payload_len)) = esp::trailer(data) {
        assert_eq!(payload_len + pad_len as usize + 2, data.len());
        let _ = esp::check_padding(&data[payload_len..payload_len + pad_len as usize]);
    }
    let _ = esp::check_padding(data);

    if let Ok(p) = ah::Packet::new_checked(data) {
        let _ = (
            p.next_header(),
            p.payload_len(),
            p.header_len(),
            p.reserved(),
            p.spi(),
            p.seq_no(),
        );
        assert_eq!(
            p.icv().len() + p.payload().len() + ah::FIXED_LEN,
            data.len()
        );
        if let Ok(r) = ah::Repr::parse(&p) {
            let mut buf = vec![0u8; r.buffer_len()];
            let mut q = ah::Packet::new_unchecked(&mut buf[..]);
            r.emit(&mut q);
            q.icv_mut().copy_from_slice(p.icv());
            let q = ah::Packet::new_checked(&buf[..]).expect("emitted AH parses");
            assert_eq!(ah::Repr::parse(&q), Ok(r));
            assert_eq!(q.icv(), p.icv());
        }
    }

    let _ = udp_encap::classify(data);
});
