-- `challenges.token` loses its UNIQUE index: tokens are 128 random bits, never looked up by
-- value, and as random keys each of an order's challenges wrote to a different index page.
-- (`order_authorizations` needs no change here: a PostgreSQL table is a heap beside its primary
-- key index either way.)
-- Keep in step with migrations/sqlite/0005_lean_writes.sql.
ALTER TABLE challenges DROP CONSTRAINT IF EXISTS challenges_token_key;
