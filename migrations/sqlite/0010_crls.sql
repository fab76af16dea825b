-- CRLs (crates/storage/src/crls.rs, crates/workers/src/crl.rs). A certificate keeps the CRL
-- shard its distribution point names (NULL: issued before CRLs, listed in shard 0). Revoked
-- certificates are found per shard through a partial index, which an issuance never writes.
-- `crl_shards` holds each shard's published CRL and its CAS counter `number`; `revocations` is
-- raised in the transaction of every revocation in the shard and `published_revocations` is the
-- value the last published CRL was built after, so a shard is stale while they differ.
-- Keep in step with migrations/postgres/0010_crls.sql.

ALTER TABLE certificates ADD COLUMN crl_shard INTEGER;
CREATE INDEX certificates_revoked_shard ON certificates (crl_shard) WHERE revoked_at IS NOT NULL;

CREATE TABLE crl_shards (
    shard                  INTEGER PRIMARY KEY,
    number                 INTEGER NOT NULL DEFAULT 0,
    revocations            INTEGER NOT NULL DEFAULT 0,
    published_revocations  INTEGER NOT NULL DEFAULT 0,
    this_update            INTEGER,
    next_update            INTEGER,
    der                    BLOB
);
