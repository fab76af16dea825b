-- Certeasy schema, SQLite flavour. Times are unix seconds, booleans 0/1, lists newline-separated.
-- Keep in step with migrations/postgres/0001_init.sql: same tables, columns and constraints.

CREATE TABLE accounts (
    id          INTEGER PRIMARY KEY,
    thumbprint  TEXT    NOT NULL UNIQUE,
    jwk         TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    contacts    TEXT    NOT NULL DEFAULT '',
    tos_agreed  INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);

CREATE TABLE certificates (
    id                 INTEGER PRIMARY KEY,
    account_id         INTEGER NOT NULL REFERENCES accounts (id),
    order_id           INTEGER NOT NULL UNIQUE REFERENCES orders (id),
    serial             TEXT    NOT NULL UNIQUE,
    der                BLOB    NOT NULL,
    chain_pem          TEXT    NOT NULL,
    set_hash           TEXT    NOT NULL,
    not_before         INTEGER NOT NULL,
    not_after          INTEGER NOT NULL,
    issued_at          INTEGER NOT NULL,
    revoked_at         INTEGER,
    revocation_reason  INTEGER
);

CREATE INDEX certificates_duplicates ON certificates (account_id, set_hash, issued_at);

CREATE TABLE orders (
    id              INTEGER PRIMARY KEY,
    account_id      INTEGER NOT NULL REFERENCES accounts (id),
    status          TEXT    NOT NULL,
    identifiers     TEXT    NOT NULL,
    set_hash        TEXT    NOT NULL,
    not_before      INTEGER,
    not_after       INTEGER,
    expires_at      INTEGER NOT NULL,
    error_type      TEXT,
    error_detail    TEXT,
    certificate_id  INTEGER REFERENCES certificates (id),
    csr             BLOB,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE INDEX orders_account_set ON orders (account_id, set_hash);
CREATE INDEX orders_account_id ON orders (account_id, id);

CREATE TABLE authorizations (
    id                INTEGER PRIMARY KEY,
    account_id        INTEGER NOT NULL REFERENCES accounts (id),
    identifier_type   TEXT    NOT NULL,
    identifier_value  TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    expires_at        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL
);

CREATE INDEX authorizations_pending ON authorizations (account_id, status, expires_at);
CREATE INDEX authorizations_reuse ON authorizations (account_id, identifier_value, identifier_type);

CREATE TABLE order_authorizations (
    order_id  INTEGER NOT NULL REFERENCES orders (id),
    authz_id  INTEGER NOT NULL REFERENCES authorizations (id),
    position  INTEGER NOT NULL,
    PRIMARY KEY (order_id, position)
);

CREATE INDEX order_authorizations_authz ON order_authorizations (authz_id);

CREATE TABLE challenges (
    id            INTEGER PRIMARY KEY,
    authz_id      INTEGER NOT NULL REFERENCES authorizations (id),
    type          TEXT    NOT NULL,
    token         TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL,
    validated_at  INTEGER,
    error_type    TEXT,
    error_detail  TEXT
);

CREATE INDEX challenges_authz ON challenges (authz_id);

CREATE TABLE jobs (
    id           INTEGER PRIMARY KEY,
    kind         TEXT    NOT NULL,
    target_id    INTEGER NOT NULL,
    run_at       INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    lease_until  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    UNIQUE (kind, target_id)
);

CREATE INDEX jobs_due ON jobs (run_at);
