-- The certificate profile an order was created under (draft-ietf-acme-profiles): the
-- finalization signs with that profile's usages and validity, whatever the default is by then.
-- NULL for orders created before profiles existed: they are signed with the default profile.
-- Keep in step with migrations/postgres/0007_order_profile.sql.
ALTER TABLE orders ADD COLUMN profile TEXT;
