//! Why ESP, AH or SA processing dropped a packet: [`Drop`], re-exported at the crate root.

netveil_sa::drop_reasons! {
    /// Why ESP, AH or SA processing dropped a packet: what this crate decides itself. Policy decisions (discard,
    /// mismatch, missing SAs) and forwarding are the engine's, counted by the daemon's IP engine with these reasons
    /// included under the same names.
    pub enum Drop {
        /// Not a well-formed IP/ESP/AH packet (too short, bad lengths, bad version).
        Malformed => "malformed",
        /// No SA for the SPI (and destination).
        UnknownSpi => "unknown-spi",
        /// Sequence number already seen.
        Replayed => "replayed",
        /// Sequence number left of the anti-replay window.
        TooOld => "too-old",
        /// ICV did not verify.
        AuthFailed => "auth-failed",
        /// Decrypted trailer inconsistent (pad length, padding bytes).
        BadPadding => "bad-padding",
        /// Decrypted next header not what the SA's mode allows.
        BadNextHeader => "bad-next-header",
        /// A TFC dummy packet (next header 59): dropped by design.
        Dummy => "tfc-dummy",
        /// The SA reached a hard lifetime limit.
        SaExpired => "sa-expired",
        /// The SA's sequence numbers are used up: it needs a rekey.
        SeqExhausted => "seq-exhausted",
        /// The buffer had not enough head- or tailroom, or the result would exceed the maximum IP packet size.
        TooBig => "too-big",
        /// An AH/ESP packet for another protocol's SA, a fragment of one, a non-ESP UDP datagram, or an
        /// unsupported header.
        Unsupported => "unsupported",
        /// Outbound: the SA's next sequence number is above its durable reservation (the daemon has not synced the
        /// next high-water mark yet): the packet is dropped rather than risk a number a restart could repeat.
        /// Inbound: an authenticated packet's number is above the durable receive floor's ceiling (the daemon has
        /// not synced the next floor yet): dropped rather than accept a number a restart could accept again.
        SeqNotReserved => "seq-not-reserved",
    }
}
