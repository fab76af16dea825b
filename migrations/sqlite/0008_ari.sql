-- ACME Renewal Information (RFC 9773). An order may name the certificate it replaces
-- (`replaces`, its ARI certificate identifier, echoed in the order); a certificate may be marked by an operator for early
-- renewal (`renew_early_at`). The partial index keeps the "already replaced?" lookup to the few
-- orders that name a predecessor. Keep in step with migrations/postgres/0008_ari.sql.
ALTER TABLE orders ADD COLUMN replaces TEXT;
ALTER TABLE certificates ADD COLUMN renew_early_at INTEGER;
CREATE INDEX orders_replaces ON orders (replaces) WHERE replaces IS NOT NULL;
