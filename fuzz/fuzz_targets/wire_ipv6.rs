#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::ip_proto;
use netveil_wire::ipv6::{self, ExtHeaderIter, Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let walked = ipv6::walk(data);
    let Ok(p) = Packet::new_checked(data) else {
        assert!(walked.is_err());
        return;
    };
    let _ = (
        p.version(),
        p.traffic_class(),
        p.flow_label(),
        p.payload_len(),
        p.next_header(),
        p.hop_limit(),
    );
    let _ = (p.src_addr(), p.dst_addr(), p.total_len(), p.payload());
    if let Ok(w) = walked {
        assert!(w.upper_offset <= p.total_len());
        assert_eq!(data[w.next_header_offset], w.upper_proto);
        let _ = w.is_later_fragment();
        assert_eq!(p.ext_headers(), Ok(w));
    }
    if let Ok(it) = ExtHeaderIter::new(data) {
        for h in it {
            let Ok(h) = h else { break };
            assert!(h.offset + h.len <= p.total_len());
            if h.kind == ip_proto::HOPOPT || h.kind == ip_proto::IPV6_OPTS {
                let hdr = &data[h.offset..h.offset + h.len];
                for o in ipv6::options(hdr).expect("walked header holds its options") {
                    if let Ok(o) = o {
                        assert!(o.data_offset() + o.data.len() <= hdr.len());
                        let _ = (o.may_change(), o.unknown_action());
                    }
                }
            }
        }
    }
    // The options parser on arbitrary bytes.
    if let Ok(it) = ipv6::options(data) {
        for o in it.flatten() {
            let _ = o.may_change();
        }
    }
    if let Ok(r) = Repr::parse(&p) {
        let mut buf = vec![0u8; r.buffer_len()];
        let mut q = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut q);
        q.payload_mut().copy_from_slice(p.payload());
        let q = Packet::new_checked(&buf[..]).expect("emitted packet parses");
        assert_eq!(Repr::parse(&q), Ok(r));
        assert_eq!(ipv6::walk(&buf).ok(), ipv6::walk(data).ok());
    }
    let mut copy = data.to_vec();
    let mut m = Packet::new_checked(&mut copy[..]).unwrap();
    m.set_traffic_class(0xff);
    m.set_flow_label(u32::MAX);
    m.payload_mut().fill(0);
});
