-- A shard's CRL entries read from one covering index (crates/storage/src/crls.rs,
-- `revoked_in_crl_shard`). With only 0010's index on `crl_shard`, and the shard written as
-- `crl_shard = $1 OR ($1 = 0 AND crl_shard IS NULL)`, SQLite's planner walked the whole
-- certificates table in serial order (the UNIQUE index) to spare a sort: every shard's rebuild
-- read every certificate ever stored. The query now names the shard and the issuer as these
-- expressions, and this index, partial to revoked certificates (an issuance never writes it),
-- holds them in the order the CRL lists its entries, with every column the CRL needs.
-- Keep in step with migrations/postgres/0027_crl_entries_index.sql.

CREATE INDEX certificates_crl_entries ON certificates
    (COALESCE(issuer, 'default'), COALESCE(crl_shard, 0), serial, not_after, revoked_at,
     revocation_reason)
    WHERE revoked_at IS NOT NULL;
