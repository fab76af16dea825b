-- Operators' listings of certificates (crates/storage/src/admin_queries.rs): keyset pages on the
-- id, newest first. An account's certificates (`certeasy admin certificates list|revoke
-- --account N`) are read in id order from `certificates_account` instead of sorting all of them
-- for every page (`certificates_duplicates` holds the account, but not in id order), and
-- certificates expiring in a range (`--expires-after/--expires-before`) from
-- `certificates_expiry`. Each costs an issuance one more index entry; a certificate is written
-- once, unlike the orders, authorizations and challenges of 0005_lean_writes.
-- Keep in step with migrations/postgres/0009_admin_listings.sql.

CREATE INDEX certificates_account ON certificates (account_id, id);
CREATE INDEX certificates_expiry ON certificates (not_after);
