-- Indexes for the pruner (crates/storage/src/prune.rs), so that each of its batches reads only the
-- rows it may delete instead of scanning whole tables. Partial, so that the rows kept for good
-- (orders of issued certificates, once trimmed) leave the indexes the pruner walks.
-- Keep in step with migrations/postgres/0003_prune.sql.

-- Orders without a certificate: deleted once expired for longer than the retention.
CREATE INDEX orders_prunable ON orders (expires_at) WHERE certificate_id IS NULL;

-- Orders still holding their CSR (processing, or valid and not yet trimmed): an issued order is
-- trimmed (CSR and authorization links dropped) once expired for longer than the retention.
CREATE INDEX orders_untrimmed ON orders (expires_at) WHERE csr IS NOT NULL;

-- Authorizations (and their challenges): deleted once expired for longer than the retention.
CREATE INDEX authorizations_expiry ON authorizations (expires_at);
