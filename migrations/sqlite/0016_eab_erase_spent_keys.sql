-- A single-use external account binding key can never verify a binding again once it has bound
-- its account, so its HMAC key is erased (the bind transaction does so from now on, see
-- storage/src/eab.rs). This erases those bound before. The column stays NOT NULL: an erased key
-- is the empty value.
-- Keep in step with migrations/postgres/0016_eab_erase_spent_keys.sql.

UPDATE eab_keys SET hmac_key = X''
WHERE reusable = 0
  AND EXISTS (SELECT 1 FROM accounts a WHERE a.eab_kid = eab_keys.kid);
