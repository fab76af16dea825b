//! The CA certificates that follow a leaf in its download, stored once per distinct chain
//! (migration 0012).
//!
//! Every certificate signed under one CA configuration ends with the same issuer chain, so a row
//! per certificate keeps only its leaf and the id of its chain. The ids a process has stored or
//! found are kept in memory: a chain row is never changed or deleted, so an id once committed
//! names the same text for good, on every instance sharing the database. The chain is looked up
//! in a statement of its own before the transaction that stores the certificate, because that
//! transaction holds SQLite's only writer connection; a chain stored for a certificate whose
//! transaction then fails stays, unused and harmless.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;

use crate::Result;
use crate::Storage;
use crate::sql;

/// Distinct chains kept in memory at most. A server signs under one chain at a time and changes
/// it only on restart with another CA; the bound only keeps a misuse from growing the map.
const CAPACITY: usize = 64;

/// Chain text to its row id.
#[derive(Debug, Default)]
pub(crate) struct IssuerChains {
    ids: Mutex<HashMap<String, i64>>,
}

impl IssuerChains {
    fn get(&self, pem: &str) -> Option<i64> {
        self.ids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(pem)
            .copied()
    }

    fn keep(&self, pem: &str, id: i64) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.len() >= CAPACITY {
            ids.clear();
        }
        ids.insert(pem.to_owned(), id);
    }
}

/// The id of the stored chain `pem`, storing it first if it is new. Committed before it returns.
pub(crate) async fn id_of(s: &Storage, pem: &str) -> Result<i64> {
    if let Some(id) = s.issuer_chains.get(pem) {
        return Ok(id);
    }
    let digest = hex::encode(aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        pem.as_bytes(),
    ));
    // ON CONFLICT: two instances (or two finalizations) may store the same new chain at once.
    sql::query(
        "INSERT INTO issuer_chains (digest, pem) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING",
    )
    .bind(&digest)
    .bind(pem)
    .execute(&s.db)
    .await?;
    let id = sql::query_scalar::<i64>("SELECT id FROM issuer_chains WHERE digest = $1")
        .bind(&digest)
        .fetch_one(&s.db)
        .await?;
    s.issuer_chains.keep(pem, id);
    Ok(id)
}

/// The download of a certificate: its leaf as PEM followed by `issuer_chain`.
pub(crate) fn full_chain(leaf_der: &[u8], issuer_chain: &str) -> String {
    let leaf = pem::encode_config(
        &pem::Pem::new("CERTIFICATE", leaf_der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    );
    let mut out = String::with_capacity(leaf.len() + issuer_chain.len());
    out.push_str(&leaf);
    out.push_str(issuer_chain);
    out
}

#[cfg(test)]
mod tests {
    use super::full_chain;

    #[test]
    fn the_leaf_is_pem_with_64_character_lines_before_the_chain() {
        let der: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        let chain = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let text = full_chain(&der, chain);
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(text.ends_with(chain));
        let leaf = &text[..text.len() - chain.len()];
        assert!(leaf.ends_with("-----END CERTIFICATE-----\n"));
        assert!(leaf.lines().all(|l| l.len() <= 64));
        assert!(!leaf.contains('\r'));
        let parsed = pem::parse(leaf).unwrap();
        assert_eq!(parsed.tag(), "CERTIFICATE");
        assert_eq!(parsed.contents(), der.as_slice());
    }
}
