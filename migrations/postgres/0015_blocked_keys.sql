-- Public keys the operator blocked (`certeasy admin keys block`): no account may hold one and
-- no certificate may carry one. A key is named by the SHA-256 of its SubjectPublicKeyInfo DER,
-- in lowercase hex; the primary key is the index every new-account, key change and finalize
-- looks it up by. Times are unix seconds.
-- Keep in step with migrations/sqlite/0015_blocked_keys.sql. Integers are BIGINT for the Any driver.

CREATE TABLE blocked_keys (
    spki_sha256  TEXT    PRIMARY KEY,
    reason       TEXT    NOT NULL DEFAULT '',
    created_at   BIGINT  NOT NULL
);
