//! Why the IP engine dropped a packet: ESP/AH's own reasons ([`netveil_ipsec::Drop`], included under their names)
//! and what the engine decides around them (policies, forwarding). `netveil status` shows one counter per reason
//! and direction, `tx:NAME` and `rx:NAME`.

netveil_sa::drop_reasons! {
    /// Why the IP engine dropped a packet (see the [module documentation](self)).
    pub enum Drop {
        /// What ESP, AH and SA processing decided, under its own names. PSP's drops are counted under the names
        /// of their IPsec counterparts (`From<netveil_psp::RxDrop>`); the PSP device keeps its own counters too.
        Ipsec(netveil_ipsec::Drop),
        /// Decapsulated traffic not allowed by the inbound policy for the SAs (or PSP) it came through.
        PolicyMismatch => "policy-mismatch",
        /// Clear traffic a protect policy covers. The engine's nftables input chain drops it before the data
        /// plane sees it: `status` shows that chain's counter under `rx:` this name.
        ClearCovered => "clear-but-protected",
        /// A discard policy matched (or, for PSP traffic, PSP is not configured).
        PolicyDiscard => "policy-discard",
        /// A bypassed packet's TTL or hop limit ran out (netveil forwards bypassed TUN traffic like a router).
        TtlExceeded => "ttl-exceeded",
        /// No SA is installed yet for traffic a protect policy covers (e.g. PSP before the peer's association).
        NoSa => "no-sa",
        /// A later fragment whose first fragment was not seen (or is forgotten), where policies select by port:
        /// its policy cannot be known, so it is not sent (RFC 4301 section 7).
        FragmentNoState => "fragment-without-first",
        /// Protected and ready, but the kernel refused to send it: no route to the peer, the socket's buffer full,
        /// or the sealed packet larger than the route's MTU (`EMSGSIZE`) where the path-MTU check let it through
        /// (the route's MTU fell since it was asked; an IPv6 packet of 1,280 bytes or less through raw ESP/AH,
        /// which is not fragmented after encapsulation).
        SendRefused => "send-refused",
        /// Sealed, it would not fit the route to its peer: it is not sealed, and its sender gets ICMP
        /// "fragmentation needed" (IPv4) or "packet too big" (IPv6) with the largest size that fits (at most 20
        /// messages per second per thread).
        TooBigForPath => "too-big-for-path",
    }
}

impl From<netveil_psp::Error> for Drop {
    /// A PSP transform error, counted as its IPsec counterpart: authentication, IV space used up, and
    /// everything else as malformed.
    fn from(e: netveil_psp::Error) -> Drop {
        Drop::Ipsec(match e {
            netveil_psp::Error::Auth => netveil_ipsec::Drop::AuthFailed,
            netveil_psp::Error::IvExhausted => netveil_ipsec::Drop::SeqExhausted,
            _ => netveil_ipsec::Drop::Malformed,
        })
    }
}

impl From<netveil_psp::RxDrop> for Drop {
    /// A drop of the PSP device, counted as its IPsec counterpart.
    fn from(d: netveil_psp::RxDrop) -> Drop {
        match d {
            netveil_psp::RxDrop::Psp(e) => e.into(),
            netveil_psp::RxDrop::UnknownSpi => Drop::Ipsec(netveil_ipsec::Drop::UnknownSpi),
            netveil_psp::RxDrop::Replay => Drop::Ipsec(netveil_ipsec::Drop::Replayed),
            netveil_psp::RxDrop::WrongVersion => Drop::Ipsec(netveil_ipsec::Drop::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Drop;
    use netveil_ipsec::Drop as Ipsec;
    use netveil_psp::{Error, RxDrop};

    /// Every name the IP engine counts under, in counter order: what `netveil status` shows as `tx:NAME` and
    /// `rx:NAME` and what scripts read. A rename, a removal or a reason moved between layers must fail here.
    #[test]
    fn names_are_pinned() {
        // ESP/AH's reasons first, under their own names (pinned in netveil-ipsec), then the engine's.
        assert_eq!(Drop::NAMES[..Ipsec::COUNT], Ipsec::NAMES);
        assert_eq!(
            Drop::NAMES[Ipsec::COUNT..],
            [
                "policy-mismatch",
                "clear-but-protected",
                "policy-discard",
                "ttl-exceeded",
                "no-sa",
                "fragment-without-first",
                "send-refused",
                "too-big-for-path",
            ]
        );
        assert_eq!(Drop::from(Ipsec::AuthFailed).to_string(), "auth-failed");
        assert_eq!(Drop::from_name("no-sa"), Some(Drop::NoSa));
    }

    #[test]
    fn psp_drops_count_as_their_ipsec_counterparts() {
        for (d, want) in [
            (RxDrop::Psp(Error::Auth), Ipsec::AuthFailed),
            (RxDrop::UnknownSpi, Ipsec::UnknownSpi),
            (RxDrop::Replay, Ipsec::Replayed),
            (RxDrop::WrongVersion, Ipsec::Malformed),
            (RxDrop::Psp(Error::Malformed), Ipsec::Malformed),
            (RxDrop::Psp(Error::CryptOffset), Ipsec::Malformed),
            (RxDrop::Psp(Error::NotPsp), Ipsec::Malformed),
        ] {
            assert_eq!(Drop::from(d), Drop::Ipsec(want), "{d}");
        }
        assert_eq!(
            Drop::from(Error::IvExhausted),
            Drop::Ipsec(Ipsec::SeqExhausted)
        );
        assert_eq!(Drop::from(Error::NoRoom), Drop::Ipsec(Ipsec::Malformed));
    }
}
