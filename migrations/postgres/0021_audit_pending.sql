-- Audit records waiting to be chained (issue 29), on PostgreSQL only.
--
-- An audited transaction inserts its record here, with no seq and no hash, instead of appending
-- to `audit_log` itself: appending takes `audit_head`'s row lock, which was then held from the
-- transaction's last statement to its commit, so every audited commit in the cluster waited for
-- the one before it to reach the disk (15 % of issuance throughput at 32 concurrent). An insert
-- here takes no shared lock, and commits group again.
--
-- The sealer (`Storage::seal_audit`, run every quarter second by every instance and before every
-- read of the log) takes the head's lock, moves the committed pending rows into `audit_log` in
-- `id` order, numbering and hashing them, and deletes them here, all in one transaction. A
-- record is therefore in the log, chained, within a fraction of a second of its commit, and a
-- crash in between leaves it here for the next sealer: it is never lost.
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
