//! Why a packet could not be encapsulated or decapsulated: [`Error`], re-exported at the crate root.

netveil_sa::drop_reasons! {
    /// Why a packet could not be encapsulated or decapsulated (the transform's reasons; the device adds its own
    /// in [`crate::RxDrop`]). [`Error::name`] gives stable names for counters.
    pub enum Error {
        /// Not a PSP packet (not UDP to port 1000): not a failure of PSP, the caller may pass it on.
        NotPsp => "not-psp",
        /// A header or length field is inconsistent, or the packet is too short.
        Malformed => "malformed",
        /// A PSP version this implementation does not know (4..=15).
        UnsupportedVersion => "unsupported-version",
        /// The crypt offset reaches past the end of the payload.
        CryptOffset => "crypt-offset-too-large",
        /// Not enough head- or tailroom in the buffer, or the packet would exceed 65535 bytes.
        NoRoom => "no-room",
        /// The ICV did not verify.
        Auth => "auth-failed",
        /// The IV counter is exhausted: the SA must be rekeyed.
        IvExhausted => "iv-exhausted",
        /// Transport mode cannot carry an IPv4 fragment (tunnel mode can).
        Fragment => "fragment-in-transport-mode",
    }
}
