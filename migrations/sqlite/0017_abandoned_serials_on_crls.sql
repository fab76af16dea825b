-- Abandoned serials are revoked on their shard's CRL (crates/storage/src/crls.rs).
--
-- A reservation marked `abandoned` after its signing was begun (`signings > 0`, which every
-- reservation has) names a serial the issuing key may have signed and that no certificate row
-- holds, so nothing could revoke it. From this migration on a shard's CRL lists them too, each
-- revoked as of when it was abandoned (no reasonCode), and marking one abandoned raises its
-- shard's `revocations` in the same transaction, as a revocation does. They are found per shard
-- through a partial index, which reserving and issuing never write. Shards that hold
-- serials abandoned before this migration are made stale once here, so that their next CRL
-- lists them. A NULL shard (reserved while no CRL was published) is shard 0, as for
-- certificates.
-- Keep in step with migrations/postgres/0017_abandoned_serials_on_crls.sql.

CREATE INDEX serial_reservations_abandoned_shard ON serial_reservations (crl_shard)
    WHERE state = 'abandoned';

UPDATE crl_shards SET revocations = revocations + 1
    WHERE shard IN (SELECT COALESCE(crl_shard, 0) FROM serial_reservations
        WHERE state = 'abandoned' AND signings > 0);
