-- Issuer chains stored once (crates/storage/src/issuer_chains.rs, docs/performance.md).
--
-- A certificate's download is its leaf followed by the CA certificates above it. Every
-- certificate signed under one CA configuration shares that tail, which was written out again in
-- each row's `chain_pem`: about 1,900 of a kept certificate's 2,700 bytes, and two overflow
-- pages per issuance. From this migration on a certificate row keeps only its leaf (`der`) and
-- names its tail in `issuer_chain_id`; its `chain_pem` is empty and the download is the leaf's PEM
-- followed by the chain's. Rows written before keep their whole `chain_pem` and no chain id, and
-- are served as they are. Chains are never deleted: certificates are kept.
-- Keep in step with migrations/postgres/0012_issuer_chains.sql.

CREATE TABLE issuer_chains (
    id      INTEGER PRIMARY KEY,
    -- SHA-256 of `pem`, hex: the key a chain is found by (PostgreSQL cannot index long texts).
    digest  TEXT    NOT NULL UNIQUE,
    pem     TEXT    NOT NULL
);

ALTER TABLE certificates ADD COLUMN issuer_chain_id INTEGER REFERENCES issuer_chains (id);
