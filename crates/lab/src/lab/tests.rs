use super::hosts::network;
use super::*;

#[test]
fn a_routed_pair_puts_side_b_behind_the_router() {
    let p = HostPair::default().via_router();
    assert_eq!(p.addrs(0).outer.to_string(), "192.0.2.1");
    assert_eq!(p.addrs(1).outer.to_string(), "203.0.113.2");
    assert_eq!(Router::address(&p, 1).0.to_string(), "203.0.113.254");
    assert_eq!(network(p.addrs(1).outer, 24), "203.0.113.0/24");
    let p6 = HostPair {
        outer: Family::V6,
        ..HostPair::default().via_router()
    };
    assert_eq!(p6.addrs(1).outer.to_string(), "2001:db8:3::2");
    assert_eq!(Router::address(&p6, 0).0.to_string(), "2001:db8:1::fe");
    assert_eq!(network(p6.addrs(1).outer, 64), "2001:db8:3::/64");
    assert_eq!(HostPair::default().addrs(1).outer.to_string(), "192.0.2.2");
}
