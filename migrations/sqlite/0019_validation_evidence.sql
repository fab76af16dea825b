-- Validation evidence (issue 29): what the validator reached and saw for each identifier of a
-- certificate, kept for `database.evidence-retention` (never less than the certificate's life).
--
-- `challenges.evidence` is the JSON (addresses, observed, caa) of the attempt that made the
-- challenge valid. Challenges and authorizations are pruned a week after they expire, so when a
-- certificate is stored, in the same transaction, the evidence of each of its order's
-- authorizations is copied into `certificate_evidence`, which only the pruner deletes, past
-- `kept_until`. No foreign key: the rows outlive everything they were copied from but the
-- certificate, which is never deleted.
ALTER TABLE challenges ADD COLUMN evidence TEXT;

CREATE TABLE certificate_evidence (
    id               INTEGER PRIMARY KEY,
    certificate_id   INTEGER NOT NULL,
    serial           TEXT    NOT NULL,
    identifier_type  TEXT    NOT NULL,
    identifier_value TEXT    NOT NULL,
    method           TEXT    NOT NULL,
    validated_at     INTEGER NOT NULL,
    evidence         TEXT    NOT NULL,
    kept_until       INTEGER NOT NULL
);

CREATE INDEX certificate_evidence_serial ON certificate_evidence (serial);
CREATE INDEX certificate_evidence_kept_until ON certificate_evidence (kept_until);
