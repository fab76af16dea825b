-- The names each certificate holds, one row per name, so that an operator's `--name` filter
-- (crates/storage/src/admin_queries.rs) reads the certificates of one name from an index
-- instead of scanning every order's `identifiers` list (Boulder keeps issuedNames for the same
-- reason). A name is written as the order's list holds it (`type:value`, e.g.
-- `dns:www.example.com`), by the transaction that stores the certificate
-- (`orders/finalize.rs`: `store_certificate`, and on PostgreSQL the statement around
-- `certeasy_complete_reserved`); the primary key is the index, newest certificate last, so a
-- keyset page on the certificate id is one range read. "C" collation: names are compared for
-- equality only, byte for byte. Rows live as long as their certificate: certificates are kept
-- for good today, and whatever deletes one deletes its names (by (name, certificate_id), from
-- the order's list). No foreign key: it would cost every certificate deletion a scan of this
-- table, which has no index on the id alone.
-- The existing certificates' names are filled in here, from their orders.
-- Keep in step with migrations/sqlite/0026_certificate_names.sql.

CREATE TABLE certificate_names (
    name            TEXT COLLATE "C" NOT NULL,
    certificate_id  BIGINT           NOT NULL,
    PRIMARY KEY (name, certificate_id)
);

INSERT INTO certificate_names (name, certificate_id)
SELECT n.name, c.id
FROM certificates c
JOIN orders o ON o.id = c.order_id
CROSS JOIN LATERAL unnest(string_to_array(o.identifiers, chr(10))) AS n (name)
WHERE n.name <> ''
ON CONFLICT DO NOTHING;
