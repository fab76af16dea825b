-- Every serial is recorded before it is signed (crates/storage/src/reservations.rs).
--
-- A certificate was signed first and stored after; a refusal or a crash in between left a
-- certificate the issuing key had signed and the database had never seen, which a CA cannot
-- revoke, list in a CRL or account for. From this migration on a finalization first records
-- what it will sign, in a transaction that commits before the signature: the serial, the order
-- and its account, the names, the exact notBefore and notAfter, the issuer (the chain the
-- issuing CA heads) and the CRL shard. Then it signs exactly that, and stores the certificate
-- against the reservation, which becomes `issued`. A reservation still `reserved` names a serial
-- that may have been signed and not stored yet: a worker that resumes the order's job signs the
-- same serial and window again (counted in `signings`); one that can no longer do so, or an
-- order that fails, marks it `abandoned`. Reservations are never deleted, nor changed once
-- settled, and outlive pruned orders (hence no foreign key to `orders`).
-- Keep in step with migrations/postgres/0014_serial_reservations.sql.

CREATE TABLE serial_reservations (
    id               INTEGER PRIMARY KEY,
    serial           TEXT    NOT NULL UNIQUE,
    order_id         INTEGER NOT NULL,
    account_id       INTEGER NOT NULL REFERENCES accounts (id),
    -- The order's identifiers, as `orders.identifiers` holds them.
    identifiers      TEXT    NOT NULL,
    issuer_chain_id  INTEGER NOT NULL REFERENCES issuer_chains (id),
    not_before       INTEGER NOT NULL,
    not_after        INTEGER NOT NULL,
    crl_shard        INTEGER,
    reserved_at      INTEGER NOT NULL,
    -- How many times signing this reservation was begun: 1, more after a resumed job.
    signings         INTEGER NOT NULL,
    -- reserved | issued | abandoned
    state            TEXT    NOT NULL,
    certificate_id   INTEGER REFERENCES certificates (id),
    settled_at       INTEGER
);

-- One open reservation per order: a resumed job finds it and signs it again.
CREATE UNIQUE INDEX serial_reservations_open ON serial_reservations (order_id)
    WHERE state = 'reserved';
CREATE INDEX serial_reservations_order ON serial_reservations (order_id);
