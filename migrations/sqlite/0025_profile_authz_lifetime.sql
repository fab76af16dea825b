-- Per-profile validation policy (issue 30): an authorization created for an order of a profile
-- with its own `valid-authorization-lifetime` keeps it, in seconds, and expires that long after
-- its validation (the orders holding it no later). NULL: the CA-wide
-- `acme.valid-authorization-lifetime` the validation is recorded with, as before.
-- Keep in step with migrations/postgres/0025_profile_authz_lifetime.sql.

ALTER TABLE authorizations ADD COLUMN valid_lifetime INTEGER;
