-- The audit log (issue 29): one row per decision that changed something (an issuance, a
-- revocation, an account or EAB key change, a pause, a limit, a config reload, an admin action),
-- written in the same transaction as the change it records, and never pruned.
--
-- Rows are hash-chained: `hash` is SHA-256 over `prev_hash`, `seq` and a canonical, versioned
-- encoding (`format`) of every other column (crates/storage/src/audit.rs, `Columns::body`), and
-- `prev_hash` is the hash of record `seq - 1` (64 zeros for record 1). `audit_head` is the one
-- row every append updates: the last seq and hash, so that deleting the newest records is seen,
-- and, on PostgreSQL, the row lock that serializes appenders into one chain.
-- Times are unix MILLISECONDS (`at_ms`): records of one second are told apart for an auditor.
-- Keep in step with migrations/sqlite/0018_audit_log.sql. Integers are BIGINT for the Any driver.

CREATE TABLE audit_log (
    seq          BIGINT  PRIMARY KEY,
    format       BIGINT  NOT NULL,
    at_ms        BIGINT  NOT NULL,
    kind         TEXT    NOT NULL,
    actor_kind   TEXT    NOT NULL,
    actor        TEXT    NOT NULL,
    operator     TEXT,
    client_ip    TEXT,
    account_id   BIGINT,
    serial       TEXT,
    names        TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    detail       TEXT    NOT NULL,
    prev_hash    TEXT    NOT NULL,
    hash         TEXT    NOT NULL
);

-- `admin audit list --account` and `--serial` (and `audit show --serial`); the other filters
-- scan from the newest record back, which a page of recent records stops early.
CREATE INDEX audit_log_account ON audit_log (account_id) WHERE account_id IS NOT NULL;
CREATE INDEX audit_log_serial ON audit_log (serial) WHERE serial IS NOT NULL;

CREATE TABLE audit_head (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    seq        BIGINT  NOT NULL,
    hash       TEXT    NOT NULL,
    prev_hash  TEXT    NOT NULL
);

INSERT INTO audit_head (id, seq, hash, prev_hash) VALUES (
    1, 0,
    '0000000000000000000000000000000000000000000000000000000000000000',
    '0000000000000000000000000000000000000000000000000000000000000000'
);
