-- Fewer pages written per new order. Every page a write transaction touches is appended whole
-- to the WAL and copied again by the next checkpoint, so each index costs a new order one more
-- page (4 KiB) in its commit:
-- - `challenges.token` loses its UNIQUE index: tokens are 128 random bits (never looked up by
--   value, never equal in practice), and as random keys each of an order's challenges landed
--   on a different page of that index.
-- - `order_authorizations` becomes WITHOUT ROWID: the primary key is the table, instead of a
--   table plus an index that both take a page per insert.
-- Keep in step with migrations/postgres/0005_lean_writes.sql.

CREATE TABLE challenges_new (
    id            INTEGER PRIMARY KEY,
    authz_id      INTEGER NOT NULL REFERENCES authorizations (id),
    type          TEXT    NOT NULL,
    token         TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    validated_at  INTEGER,
    error_type    TEXT,
    error_detail  TEXT
);
INSERT INTO challenges_new (id, authz_id, type, token, status, validated_at, error_type, error_detail)
    SELECT id, authz_id, type, token, status, validated_at, error_type, error_detail FROM challenges;
DROP TABLE challenges;
ALTER TABLE challenges_new RENAME TO challenges;
CREATE INDEX challenges_authz ON challenges (authz_id);

CREATE TABLE order_authorizations_new (
    order_id  INTEGER NOT NULL REFERENCES orders (id),
    authz_id  INTEGER NOT NULL REFERENCES authorizations (id),
    position  INTEGER NOT NULL,
    PRIMARY KEY (order_id, position)
) WITHOUT ROWID;
INSERT INTO order_authorizations_new (order_id, authz_id, position)
    SELECT order_id, authz_id, position FROM order_authorizations;
DROP TABLE order_authorizations;
ALTER TABLE order_authorizations_new RENAME TO order_authorizations;
CREATE INDEX order_authorizations_authz ON order_authorizations (authz_id);
