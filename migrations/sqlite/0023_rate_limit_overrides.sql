-- Rate-limit overrides kept in the database (`certeasy admin overrides add|remove`), beside the
-- overrides file: one row per (limit, bucket), which every instance reads again within
-- `rate-limiting.overrides-refresh` and applies without a reload. `bucket` is the id's canonical
-- text (an address alone, a range in CIDR form, an account in decimal), so one bucket is one
-- row. Unset numbers (NULL) take the limit's configured default. `period_ns` is nanoseconds;
-- times are unix seconds; `expires_at` NULL never expires. Rows are inserted and deleted, never
-- updated, and ids are never reused, so (count, max id) changes with every change: the refresh
-- reads the rows only then.
-- Keep in step with migrations/postgres/0023_rate_limit_overrides.sql.

CREATE TABLE rate_limit_overrides (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    limit_name  TEXT    NOT NULL,
    bucket      TEXT    NOT NULL,
    burst       INTEGER,
    count       INTEGER,
    period_ns   INTEGER,
    comment     TEXT    NOT NULL,
    expires_at  INTEGER,
    created_at  INTEGER NOT NULL,
    created_by  TEXT    NOT NULL,
    UNIQUE (limit_name, bucket)
);
