//! Where relying parties find the CRL that would list a certificate, and which shard that is.
//!
//! A certificate names exactly one CRL (its shard) in its CRL distribution point, so each CRL
//! stays small however many certificates are revoked. The shard is fixed when the certificate is
//! signed and stored with it; a later change of the shard count therefore never moves an issued
//! certificate out of the CRL its distribution point names.

use acme_core::ids::Serial;
use aws_lc_rs::digest;

/// The CRL shards and the URL they are published under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlDistribution {
    /// The URL of the shard CRLs without the file name: `<base_url>/<shard>.crl`.
    pub base_url: String,
    /// How many shards new certificates are spread over (at least 1).
    pub shards: u16,
}

impl CrlDistribution {
    /// The URL of shard `shard`'s CRL.
    pub fn url(&self, shard: u16) -> String {
        crl_url(&self.base_url, shard)
    }

    /// The shard a certificate with `serial` is listed in, of `self.shards`.
    pub fn shard_of(&self, serial: &Serial) -> u16 {
        shard_of(serial, self.shards)
    }
}

/// `<base_url>/<shard>.crl`: the one place the file name of a shard is spelled.
pub fn crl_url(base_url: &str, shard: u16) -> String {
    format!("{}/{shard}.crl", base_url.trim_end_matches('/'))
}

/// The shard of `serial` among `shards`: a stable function of the serial alone (its SHA-256),
/// so that every instance, and a rebuild of the CRLs from the database, agrees. Hashing rather
/// than reading the serial's bytes keeps operators' own serial schemes (counters, dates) evenly
/// spread.
pub fn shard_of(serial: &Serial, shards: u16) -> u16 {
    let shards = u64::from(shards.max(1));
    let hash = digest::digest(&digest::SHA256, serial.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_ref()[..8]);
    // The remainder is below `shards`, which came from a u16.
    u16::try_from(u64::from_be_bytes(first) % shards).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_spread_and_in_range() {
        let mut counts = [0u32; 8];
        for i in 0u32..8000 {
            let serial = Serial::from_bytes(i.to_be_bytes().to_vec());
            let shard = shard_of(&serial, 8);
            assert_eq!(shard, shard_of(&serial, 8), "stable");
            counts[usize::from(shard)] += 1;
        }
        // Sequential serials still spread: every shard within 20 % of the mean.
        assert!(
            counts.iter().all(|&c| (800..=1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(shard_of(&Serial::from_bytes(vec![1, 2, 3]), 1), 0);
        assert_eq!(shard_of(&Serial::from_bytes(vec![1, 2, 3]), 0), 0);
    }

    #[test]
    fn the_url_names_the_shard_file() {
        let dist = CrlDistribution {
            base_url: "http://ca.internal:14002/crl/".to_owned(),
            shards: 4,
        };
        assert_eq!(dist.url(3), "http://ca.internal:14002/crl/3.crl");
    }
}
