#![no_main]

use libfuzzer_sys::fuzz_target;
use netveil_wire::ip;

fuzz_target!(|data: &[u8]| {
    let flow = ip::flow_key(data);
    let Ok(p) = ip::Packet::new_checked(data) else {
        assert!(flow.is_err());
        return;
    };
    let _ = (
        p.version(),
        p.src_addr(),
        p.dst_addr(),
        p.hop_limit(),
        p.next_header(),
        p.payload(),
    );
    assert!(p.total_len() <= data.len());
    if let Ok(f) = flow {
        assert!(f.l4_offset <= p.total_len());
        assert_eq!(f.src, p.src_addr());
        assert_eq!(f.dst, p.dst_addr());
        if f.src_port != 0 || f.dst_port != 0 {
            assert!(f.l4_offset + 4 <= p.total_len());
        }
    }
});
