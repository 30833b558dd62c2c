#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::ipv4::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp_ecn(),
        p.total_len(),
        p.ident(),
        p.flags(),
    );
    let _ = (
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
        p.ttl(),
        p.protocol(),
    );
    let _ = (
        p.checksum(),
        p.src_addr(),
        p.dst_addr(),
        p.verify_checksum(),
    );
    assert!(p.options().len() + p.payload().len() <= data.len());
    for o in p.options_iter() {
        if let Ok(o) = o {
            assert!(o.offset + o.len() <= p.options().len());
            let _ = o.copied();
        }
    }
    if let Ok(r) = Repr::parse(&p) {
        let mut buf = vec![0u8; r.buffer_len()];
        let mut q = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut q);
        q.payload_mut().copy_from_slice(p.payload());
        let q = Packet::new_checked(&buf[..]).expect("emitted packet parses");
        assert!(q.verify_checksum());
        assert_eq!(Repr::parse(&q), Ok(r));
    }
    let mut copy = data.to_vec();
    let mut m = Packet::new_checked(&mut copy[..]).unwrap();
    m.fill_checksum();
    assert!(m.verify_checksum());
    m.options_mut().fill(1);
    m.payload_mut().fill(0);
});
