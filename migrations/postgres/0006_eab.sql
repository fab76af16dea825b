-- External account binding keys (RFC 8555 §7.3.4) and the key each account was bound with.
-- Times are unix seconds, booleans 0/1, lists newline-separated. The HMAC key is stored as
-- raw bytes: the server needs it to verify bindings, so it cannot be hashed.
-- Keep in step with migrations/sqlite/0006_eab.sql. Integers are BIGINT for the Any driver.

CREATE TABLE eab_keys (
    kid                TEXT   PRIMARY KEY,
    hmac_key           BYTEA  NOT NULL,
    allowed_domains    TEXT   NOT NULL DEFAULT '',
    allowed_cidrs      TEXT   NOT NULL DEFAULT '',
    allowed_profiles   TEXT   NOT NULL DEFAULT '',
    max_validity_secs  BIGINT,
    expires_at         BIGINT,
    reusable           BIGINT NOT NULL DEFAULT 0,
    revoked_at         BIGINT,
    created_at         BIGINT NOT NULL
);

ALTER TABLE accounts ADD COLUMN eab_kid TEXT REFERENCES eab_keys (kid);

-- The accounts bound with a key: the single-use check and `eab list`. Partial, so accounts
-- without a binding (the usual case) cost nothing to write.
CREATE INDEX accounts_eab_kid ON accounts (eab_kid) WHERE eab_kid IS NOT NULL;
