-- `orders_account_set` was never read: orders are listed by `orders_account_id`, and the
-- duplicate-certificate guard counts certificates (`certificates_duplicates`). Every new order
-- still paid for it, one more index page written in its transaction.
-- Keep in step with migrations/sqlite/0004_unused_index.sql.
DROP INDEX IF EXISTS orders_account_set;
