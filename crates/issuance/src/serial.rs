//! Random certificate serial numbers.

use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;

use crate::error::Error;

/// Length of every serial Certeasy assigns: 16 bytes leaves 127 random bits, far above the 64
/// that the CA/Browser Forum requires, and under the 20-byte limit of RFC 5280.
pub(crate) const SERIAL_LEN: usize = 16;

/// A fresh positive serial of exactly [`SERIAL_LEN`] DER content bytes.
///
/// The top bit is cleared so the INTEGER stays positive without a padding byte, and the first
/// byte is non-zero so DER does not shorten it: every serial then has the same length.
pub(crate) fn random_serial() -> Result<[u8; SERIAL_LEN], Error> {
    let rng = SystemRandom::new();
    let mut bytes = [0u8; SERIAL_LEN];
    loop {
        rng.fill(&mut bytes)
            .map_err(|_| Error::Signing("the system random number generator failed".to_owned()))?;
        bytes[0] &= 0x7f;
        if bytes[0] != 0 {
            return Ok(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::random_serial;

    #[test]
    fn serials_are_positive_full_length_and_distinct() {
        let a = random_serial().unwrap();
        let b = random_serial().unwrap();
        assert_ne!(a, b);
        for s in [a, b] {
            assert!(s[0] != 0 && s[0] < 0x80);
        }
    }
}
