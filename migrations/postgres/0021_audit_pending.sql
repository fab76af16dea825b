-- Audit records waiting to be chained (issue 29), on PostgreSQL only.
--
-- An audited transaction inserts its record here, with no seq and no hash, instead of appending
-- to `audit_log` itself: appending takes `audit_head`'s row lock, which was then held from the
-- transaction's last statement to its commit, so every audited commit in the cluster waited for
-- the one before it to reach the disk (15 % of issuance throughput at 32 concurrent). An insert
-- here takes no shared lock, and commits group again.
--
-- The sealer (`Storage::seal_audit`, run every quarter second by every instance and before every
-- read of the log) takes the head's lock, moves committed pending rows into `audit_log`, numbering
-- them after the head (in `id` order within one batch; a row that commits late joins a later
-- batch) and hashing them, and deletes them here, all in one transaction. While sealing works a
-- record is chained within a fraction of a second of its commit, and a crash in between leaves it
-- here for the next sealer: it is never lost.
--
-- Every row is inserted and soon deleted: a queue. Vacuum it by row count, not by the table's
-- size (which stays near zero), so that dead rows do not pile up under the sealer's scans.
--
-- The columns are `audit_log`'s, less `seq` and the hashes. Keep in step with
-- migrations/postgres/0018_audit_log.sql and crates/storage/src/audit.rs.

CREATE TABLE audit_pending (
    id           BIGSERIAL PRIMARY KEY,
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
    detail       TEXT    NOT NULL
);

ALTER TABLE audit_pending SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
