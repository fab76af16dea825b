-- Paused (account, identifier) pairs: zombie clients whose validations keep failing. A row with
-- unpaused_at NULL is a current pause; an unpaused row is kept so that a re-pause can honour the
-- grace period after a self-service unpause.
-- Keep in step with migrations/postgres/0002_paused.sql.

CREATE TABLE paused (
    account_id        INTEGER NOT NULL REFERENCES accounts (id),
    identifier_type   TEXT    NOT NULL,
    identifier_value  TEXT    NOT NULL,
    paused_at         INTEGER NOT NULL,
    unpaused_at       INTEGER,
    PRIMARY KEY (account_id, identifier_type, identifier_value)
);

-- An account's current pauses, oldest first (the unpause page, account-wide unpause). Partial, so
-- that it holds only current pauses and so that the planner never prefers it over the primary key
-- for lookups of given identifiers, which do not all filter on unpaused_at: with a fresh table's
-- statistics PostgreSQL otherwise scanned an account's whole index for each such statement.
CREATE INDEX paused_current ON paused (account_id, paused_at) WHERE unpaused_at IS NULL;
