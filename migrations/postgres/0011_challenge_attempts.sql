-- Challenge retries (crates/workers/src/runner.rs, docs/ARCHITECTURE.md): a validation attempt that
-- fails for a transient reason is repeated later, within the authorization's lifetime.
--
-- `challenge_attempts` holds the attempts that failed and were retried, one row each, written in
-- the transaction that reschedules the job: nothing is written for an attempt that succeeds, so a
-- first-attempt success costs what it did before (docs/performance.md §7). The final attempt is
-- the challenge's `error`, whose detail also lists these rows. Rows go with their challenge
-- (pruning deletes challenges; the cascade uses the primary key).
--
-- `jobs.retries` counts the claims of a job that ended in a scheduled retry, so they are not held
-- against `validation.max-attempts`, which bounds claims that ended without a verdict
-- (crashes, storage errors): a job is exhausted once `attempts - retries` exceeds it.
-- Keep in step with migrations/sqlite/0011_challenge_attempts.sql.

CREATE TABLE challenge_attempts (
    challenge_id  BIGINT  NOT NULL REFERENCES challenges (id) ON DELETE CASCADE,
    attempt       BIGINT  NOT NULL,
    attempted_at  BIGINT  NOT NULL,
    error_type    TEXT    NOT NULL,
    error_detail  TEXT    NOT NULL,
    PRIMARY KEY (challenge_id, attempt)
);

ALTER TABLE jobs ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
