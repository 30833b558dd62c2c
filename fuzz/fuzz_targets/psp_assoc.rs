//! The PSP key-exchange message decoder on arbitrary stream bytes: no panic; whatever decodes re-encodes to the
//! same bytes; a decoded key has the version's length and the SPI is never zero in its low 31 bits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use netveil_psp::assoc::decode;

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    while at < data.len() {
        match decode(&data[at..]) {
            Ok(Some((a, used))) => {
                assert!(used > 0 && at + used <= data.len());
                assert_eq!(a.key.len(), a.version.key_len());
                assert_ne!(a.spi & 0x7fff_ffff, 0);
                let mut m = Vec::new();
                a.encode(&mut m);
                assert_eq!(&m[..], &data[at..at + used]);
                at += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
