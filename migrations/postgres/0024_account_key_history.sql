-- The keys an account had before its current one (issue 30): dns-persist-01
-- (draft-ietf-acme-dns-persist-02 §4.2) makes a CA accept records computed with any key the
-- account has used, so a standing record keeps working after a key change. A key change writes
-- the replaced key's thumbprint here in its transaction; the current key stays in accounts.
-- Keys replaced before this migration are not known.
-- Keep in step with migrations/sqlite/0024_account_key_history.sql.

CREATE TABLE account_key_history (
    account_id  BIGINT NOT NULL REFERENCES accounts (id),
    thumbprint  TEXT    NOT NULL,
    retired_at  BIGINT NOT NULL,
    PRIMARY KEY (account_id, thumbprint)
);
