-- Nothing on SQLite: see migrations/postgres/0021_audit_pending.sql. A SQLite transaction that
-- writes already holds the database's only writer, so it appends its audit record to the chain
-- directly, and the pending table PostgreSQL needs to keep audited commits from serializing on
-- the chain head would only add a write. The number is kept so the two migration lists match.
SELECT 1;
