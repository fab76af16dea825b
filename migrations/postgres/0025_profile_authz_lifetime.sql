-- Per-profile validation policy (issue 30): an authorization created for an order of a profile
-- with its own `valid-authorization-lifetime` keeps it, in seconds, and expires that long after
-- its validation (the orders holding it no later). NULL: the CA-wide
-- `acme.valid-authorization-lifetime` the validation is recorded with, as before.
-- Keep in step with migrations/sqlite/0025_profile_authz_lifetime.sql and, for the functions,
-- with crates/storage/src/orders/create.rs (`insert`, `insert_authz`) and
-- crates/storage/src/authz.rs (`authz_validated`), which run the same statements on SQLite.

ALTER TABLE authorizations ADD COLUMN valid_lifetime BIGINT;

-- `certeasy_create_order` (migration 0013) writing the order's authorization lifetime with
-- each authorization it creates: one more argument, the rest unchanged.
DROP FUNCTION certeasy_create_order(BIGINT, TEXT, TEXT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT,
    TEXT, TEXT, TEXT, TEXT, TEXT, TEXT, TEXT);
CREATE FUNCTION certeasy_create_order(
    p_account BIGINT, p_status TEXT, p_identifiers TEXT, p_set_hash TEXT, p_not_before BIGINT,
    p_not_after BIGINT, p_expires BIGINT, p_now BIGINT, p_replaces TEXT, p_profile TEXT,
    p_authz_types TEXT, p_authz_values TEXT, p_authz_expires TEXT, p_authz_reused TEXT,
    p_challenges TEXT, p_valid_lifetime BIGINT
)
RETURNS TABLE (outcome TEXT, account_status TEXT, order_id BIGINT, authz_ids TEXT)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_status TEXT;
    v_order BIGINT;
    v_types TEXT[] := string_to_array(p_authz_types, E'\n');
    v_values TEXT[] := string_to_array(p_authz_values, E'\n');
    v_expires BIGINT[] := string_to_array(p_authz_expires, E'\n')::BIGINT[];
    v_reused BIGINT[] := string_to_array(p_authz_reused, E'\n')::BIGINT[];
    v_challenges TEXT[] := string_to_array(p_challenges, E'\n');
    v_ids BIGINT[] := '{}';
    v_id BIGINT;
BEGIN
    SELECT a.status INTO v_status FROM accounts a WHERE a.id = p_account FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    account_status := v_status;
    IF v_status <> 'valid' THEN
        outcome := 'account';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO orders (account_id, status, identifiers, set_hash, not_before, not_after,
            expires_at, created_at, updated_at, replaces, profile)
        VALUES (p_account, p_status, p_identifiers, p_set_hash, p_not_before, p_not_after,
            p_expires, p_now, p_now, p_replaces, p_profile)
        RETURNING orders.id INTO v_order;
    FOR i IN 1 .. coalesce(array_length(v_types, 1), 0) LOOP
        IF v_reused[i] <> 0 THEN
            v_id := v_reused[i];
        ELSE
            INSERT INTO authorizations (account_id, identifier_type, identifier_value, status,
                    expires_at, created_at, valid_lifetime)
                VALUES (p_account, v_types[i], v_values[i], 'pending', v_expires[i], p_now,
                    p_valid_lifetime)
                RETURNING authorizations.id INTO v_id;
            -- In the order given: challenge ids are the order an authorization lists them in
            -- (identity values follow the sorted rows; the storage tests check the order).
            INSERT INTO challenges (authz_id, type, token, status)
                SELECT v_id, split_part(line, ' ', 2), split_part(line, ' ', 3), 'pending'
                FROM unnest(v_challenges) WITH ORDINALITY AS lines (line, k)
                WHERE split_part(line, ' ', 1) = i::TEXT
                ORDER BY k;
        END IF;
        INSERT INTO order_authorizations (order_id, authz_id, position) VALUES (v_order, v_id, i - 1);
        v_ids := v_ids || v_id;
    END LOOP;
    outcome := 'created';
    order_id := v_order;
    authz_ids := array_to_string(v_ids, ',');
    RETURN NEXT;
END
$$;

-- The four-argument `certeasy_record_valid_at_once` (migration 0019): an authorization that
-- keeps its own valid lifetime expires that long after `p_now` instead of at `p_valid_until`,
-- as `authz_validated` decides on SQLite. The three-argument function it calls is unchanged.
CREATE OR REPLACE FUNCTION certeasy_record_valid_at_once(
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
    v_until BIGINT;
BEGIN
    SELECT p_now + a.valid_lifetime INTO v_until
        FROM challenges c JOIN authorizations a ON a.id = c.authz_id
        WHERE c.id = p_challenge;
    FOR r IN SELECT * FROM certeasy_record_valid_at_once(p_challenge, p_now,
            least(v_until, p_valid_until)) LOOP
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
