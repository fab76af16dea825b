-- Validation evidence (issue 29): what the validator reached and saw for each identifier of a
-- certificate, kept for `database.evidence-retention` (never less than the certificate's life).
--
-- `challenges.evidence` is the JSON (addresses, observed, caa) of the attempt that made the
-- challenge valid. Challenges and authorizations are pruned a week after they expire, so when a
-- certificate is stored, in the same statement as `certeasy_complete_reserved` (a data-modifying
-- CTE, see storage's orders/finalize.rs), the evidence of each of its order's authorizations is
-- copied into `certificate_evidence`, which only the pruner deletes, past `kept_until`. No
-- foreign key: the rows outlive everything they were copied from but the certificate, which is
-- never deleted.
ALTER TABLE challenges ADD COLUMN evidence TEXT;

CREATE TABLE certificate_evidence (
    id               BIGSERIAL PRIMARY KEY,
    certificate_id   BIGINT NOT NULL,
    serial           TEXT   NOT NULL,
    identifier_type  TEXT   NOT NULL,
    identifier_value TEXT   NOT NULL,
    method           TEXT   NOT NULL,
    validated_at     BIGINT NOT NULL,
    evidence         TEXT   NOT NULL,
    kept_until       BIGINT NOT NULL
);

CREATE INDEX certificate_evidence_serial ON certificate_evidence (serial);
CREATE INDEX certificate_evidence_kept_until ON certificate_evidence (kept_until);

-- `certeasy_record_valid_at_once` (migration 0013) keeping the evidence with the challenge when
-- it moved (`started`), in the same transaction and round trip. The three-argument function
-- stays as it is; this one calls it.
CREATE FUNCTION certeasy_record_valid_at_once(
    p_challenge BIGINT, p_now BIGINT, p_valid_until BIGINT, p_evidence TEXT
)
RETURNS TABLE (
    outcome TEXT, authz_status TEXT,
    id BIGINT, authz_id BIGINT, type TEXT, token TEXT, status TEXT, validated_at BIGINT,
    error_type TEXT, error_detail TEXT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r RECORD;
BEGIN
    FOR r IN SELECT * FROM certeasy_record_valid_at_once(p_challenge, p_now, p_valid_until) LOOP
        IF r.outcome = 'started' THEN
            UPDATE challenges SET evidence = p_evidence WHERE challenges.id = p_challenge;
        END IF;
        outcome := r.outcome;
        authz_status := r.authz_status;
        id := r.id;
        authz_id := r.authz_id;
        type := r.type;
        token := r.token;
        status := r.status;
        validated_at := r.validated_at;
        error_type := r.error_type;
        error_detail := r.error_detail;
        RETURN NEXT;
    END LOOP;
END
$$;
