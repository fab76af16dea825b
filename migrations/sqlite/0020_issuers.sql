-- Several issuers (issuer rotation; crates/storage/src/ca_state.rs, crls.rs, reservations.rs).
--
-- Each serial reservation and each certificate records the name of the issuer that signs it
-- (`issuer`, NULL: "default", the generated CA's intermediate or `ca.existing`, which signed
-- every certificate before this migration). A certificate is copied its issuer from its
-- reservation when it is stored. CRL shards are per (issuer, shard): every issuer publishes its
-- own CRLs, and the existing shards become "default"'s. `ca_state` holds the one active issuer
-- every instance reads before signing (`certeasy admin ca activate`); no row: the configured
-- `ca.active-issuer`.
-- Keep in step with migrations/postgres/0020_issuers.sql.

ALTER TABLE serial_reservations ADD COLUMN issuer TEXT;
ALTER TABLE certificates ADD COLUMN issuer TEXT;

CREATE TABLE crl_shards_by_issuer (
    issuer                 TEXT    NOT NULL DEFAULT 'default',
    shard                  INTEGER NOT NULL,
    number                 INTEGER NOT NULL DEFAULT 0,
    revocations            INTEGER NOT NULL DEFAULT 0,
    published_revocations  INTEGER NOT NULL DEFAULT 0,
    this_update            INTEGER,
    next_update            INTEGER,
    der                    BLOB,
    PRIMARY KEY (issuer, shard)
);
INSERT INTO crl_shards_by_issuer (issuer, shard, number, revocations, published_revocations,
        this_update, next_update, der)
    SELECT 'default', shard, number, revocations, published_revocations, this_update,
        next_update, der
    FROM crl_shards;
DROP TABLE crl_shards;
ALTER TABLE crl_shards_by_issuer RENAME TO crl_shards;

CREATE TABLE ca_state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    active_issuer  TEXT    NOT NULL,
    changed_at     INTEGER NOT NULL
);
