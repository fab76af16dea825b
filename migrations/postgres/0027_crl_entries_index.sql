-- A shard's CRL entries read from one covering index (crates/storage/src/crls.rs,
-- `revoked_in_crl_shard`): the shard and the issuer as the query names them, in the order the
-- CRL lists its entries (no sort), with every column the CRL needs, partial to revoked
-- certificates (an issuance never writes it). On SQLite the previous form of the query walked
-- the whole certificates table; here it read the revoked rows of the shard through 0010's index
-- and sorted them.
-- Keep in step with migrations/sqlite/0027_crl_entries_index.sql.

CREATE INDEX certificates_crl_entries ON certificates
    ((COALESCE(issuer, 'default')), (COALESCE(crl_shard, 0)), serial)
    INCLUDE (not_after, revoked_at, revocation_reason)
    WHERE revoked_at IS NOT NULL;
