-- The names each certificate holds, one row per name, so that an operator's `--name` filter
-- (crates/storage/src/admin_queries.rs) reads the certificates of one name from an index
-- instead of scanning every order's `identifiers` list (Boulder keeps issuedNames for the same
-- reason). A name is written as the order's list holds it (`type:value`, e.g.
-- `dns:www.example.com`), by the transaction that stores the certificate
-- (`orders/finalize.rs`: `store_certificate`, and on PostgreSQL the statement around
-- `certeasy_complete_reserved`); the primary key is the index, newest certificate last, so a
-- keyset page on the certificate id is one range read. Rows live as long as their certificate:
-- certificates are kept for good today, and whatever deletes one deletes its names (by
-- (name, certificate_id), from the order's list). No foreign key: it would cost every
-- certificate deletion a scan of this table, which has no index on the id alone.
-- The existing certificates' names are filled in here, from their orders.
-- Keep in step with migrations/postgres/0026_certificate_names.sql.

CREATE TABLE certificate_names (
    name            TEXT    NOT NULL,
    certificate_id  INTEGER NOT NULL,
    PRIMARY KEY (name, certificate_id)
) WITHOUT ROWID;

INSERT OR IGNORE INTO certificate_names (name, certificate_id)
WITH RECURSIVE split (certificate_id, name, rest) AS (
    SELECT c.id, NULL, o.identifiers || char(10)
    FROM certificates c JOIN orders o ON o.id = c.order_id
    UNION ALL
    SELECT certificate_id,
           substr(rest, 1, instr(rest, char(10)) - 1),
           substr(rest, instr(rest, char(10)) + 1)
    FROM split WHERE rest <> ''
)
SELECT name, certificate_id FROM split WHERE name IS NOT NULL AND name <> '';
