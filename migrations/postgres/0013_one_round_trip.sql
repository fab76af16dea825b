-- Write transactions of the issuance path as functions (docs/performance.md section 7, step 23).
--
-- On PostgreSQL a write transaction costs a round trip per statement plus BEGIN and COMMIT, and
-- PostgreSQL's CPU on the issuance path is per round trip, not per row (step 10). Each function
-- here is one of the storage crate's transactions, statement for statement and lock for lock,
-- called in one round trip outside an explicit transaction (a statement is its own transaction,
-- so the function's writes commit together or not at all). The storage crate calls each one
-- beside the Rust code that runs the same transaction statement by statement on SQLite, where a
-- statement costs microseconds (crates/storage/src/authz.rs, orders.rs); the storage tests run
-- every case against both backends. PostgreSQL only: SQLite has no stored procedures, and its
-- migrations have no counterpart to this file.

-- `authz::record_valid_at_once`: a validation that succeeded before anything was recorded.
-- Locks as every path takes them: the orders holding the authorization in id order, then the
-- authorization, which is expired first when its time has passed (with the unfinished orders
-- holding it). Then the challenge is read again under those locks and moves pending -> valid
-- unless it has left pending (`left`, returned as it is), the authorization is not pending
-- (`refused`), or a sibling challenge has left pending (`sibling`). When it moved (`started`),
-- a pending authorization becomes valid until `p_valid_until`, the unfinished orders holding it
-- expire no later, and those whose authorizations are now all valid become ready.
-- No row: the challenge (or its authorization) does not exist.
CREATE FUNCTION certeasy_record_valid_at_once(p_challenge BIGINT, p_now BIGINT, p_valid_until BIGINT)
RETURNS TABLE (
    outcome TEXT, authz_status TEXT,
    id BIGINT, authz_id BIGINT, type TEXT, token TEXT, status TEXT, validated_at BIGINT,
    error_type TEXT, error_detail TEXT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_authz BIGINT;
    v_status TEXT;
    v_expires BIGINT;
    v_ch challenges%ROWTYPE;
BEGIN
    SELECT c.authz_id INTO v_authz FROM challenges c WHERE c.id = p_challenge;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM orders o
        WHERE o.id IN (SELECT oa.order_id FROM order_authorizations oa WHERE oa.authz_id = v_authz)
        ORDER BY o.id FOR UPDATE;
    SELECT a.status, a.expires_at INTO v_status, v_expires
        FROM authorizations a WHERE a.id = v_authz FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_status IN ('pending', 'valid') AND v_expires <= p_now THEN
        UPDATE authorizations a SET status = 'expired'
            WHERE a.id = v_authz AND a.status IN ('pending', 'valid') AND a.expires_at <= p_now;
        IF FOUND THEN
            UPDATE orders o SET status = 'invalid', error_type = NULL, error_detail = NULL,
                    updated_at = p_now
                WHERE o.status IN ('pending', 'ready')
                AND o.id IN (SELECT oa.order_id FROM order_authorizations oa WHERE oa.authz_id = v_authz);
            v_status := 'expired';
        END IF;
    END IF;
    SELECT * INTO v_ch FROM challenges c WHERE c.id = p_challenge;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_ch.status <> 'pending' THEN
        outcome := 'left';
    ELSIF v_status <> 'pending' THEN
        outcome := 'refused';
    ELSE
        UPDATE challenges c SET status = 'valid', validated_at = p_now
            WHERE c.id = p_challenge AND c.status = 'pending'
            AND NOT EXISTS (SELECT 1 FROM challenges other
                WHERE other.authz_id = v_authz AND other.status <> 'pending');
        IF NOT FOUND THEN
            outcome := 'sibling';
        ELSE
            outcome := 'started';
            v_ch.status := 'valid';
            v_ch.validated_at := p_now;
            UPDATE authorizations a SET status = 'valid', expires_at = p_valid_until
                WHERE a.id = v_authz AND a.status = 'pending';
            IF FOUND THEN
                UPDATE orders o SET expires_at = p_valid_until
                    WHERE o.status IN ('pending', 'ready') AND o.expires_at > p_valid_until
                    AND o.id IN (SELECT oa.order_id FROM order_authorizations oa WHERE oa.authz_id = v_authz);
                UPDATE orders o SET status = 'ready', updated_at = p_now
                    WHERE o.status = 'pending' AND o.expires_at > p_now
                    AND o.id IN (SELECT oa.order_id FROM order_authorizations oa WHERE oa.authz_id = v_authz)
                    AND NOT EXISTS (SELECT 1 FROM order_authorizations oa
                        JOIN authorizations a ON a.id = oa.authz_id
                        WHERE oa.order_id = o.id AND a.status <> 'valid');
            END IF;
        END IF;
    END IF;
    authz_status := v_status;
    id := v_ch.id;
    authz_id := v_ch.authz_id;
    type := v_ch.type;
    token := v_ch.token;
    status := v_ch.status;
    validated_at := v_ch.validated_at;
    error_type := v_ch.error_type;
    error_detail := v_ch.error_detail;
    RETURN NEXT;
END
$$;

-- `orders::issue_ready`: a certificate signed before anything about the finalization was
-- recorded. The order's account is share-locked first (a deactivation commits before or after,
-- never between) and must be valid (`account`, with its status); then the order moves
-- ready -> processing with the CSR, as `take_ready` does, only when it is still ready, unexpired
-- and all its authorizations valid and unexpired (`not_ready` otherwise, nothing written); then
-- the certificate is stored and the order becomes valid with it (`issued`, with the stored row).
-- No row: the order does not exist.
CREATE FUNCTION certeasy_issue_ready(
    p_order BIGINT, p_csr BYTEA, p_now BIGINT, p_serial TEXT, p_der BYTEA, p_chain BIGINT,
    p_not_before BIGINT, p_not_after BIGINT, p_crl_shard BIGINT
)
RETURNS TABLE (
    outcome TEXT, account_status TEXT,
    id BIGINT, account_id BIGINT, order_id BIGINT, serial TEXT, der BYTEA, chain_pem TEXT,
    set_hash TEXT, not_before BIGINT, not_after BIGINT, issued_at BIGINT, revoked_at BIGINT,
    revocation_reason BIGINT, renew_early_at BIGINT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_account TEXT;
    v_account_id BIGINT;
    v_set_hash TEXT;
    v_cert certificates%ROWTYPE;
BEGIN
    SELECT a.status INTO v_account FROM accounts a
        WHERE a.id = (SELECT o.account_id FROM orders o WHERE o.id = p_order) FOR SHARE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    account_status := v_account;
    IF v_account <> 'valid' THEN
        outcome := 'account';
        RETURN NEXT;
        RETURN;
    END IF;
    UPDATE orders o SET status = 'processing', csr = p_csr, updated_at = p_now
        WHERE o.id = p_order AND o.status = 'ready' AND o.expires_at > p_now
        AND NOT EXISTS (SELECT 1 FROM order_authorizations oa
            JOIN authorizations a ON a.id = oa.authz_id
            WHERE oa.order_id = o.id AND (a.status <> 'valid' OR a.expires_at <= p_now))
        RETURNING o.account_id, o.set_hash INTO v_account_id, v_set_hash;
    IF NOT FOUND THEN
        outcome := 'not_ready';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO certificates (account_id, order_id, serial, der, chain_pem, issuer_chain_id,
            set_hash, not_before, not_after, issued_at, crl_shard)
        VALUES (v_account_id, p_order, p_serial, p_der, '', p_chain, v_set_hash, p_not_before,
            p_not_after, p_now, p_crl_shard)
        RETURNING * INTO v_cert;
    UPDATE orders o SET status = 'valid', certificate_id = v_cert.id, updated_at = p_now
        WHERE o.id = p_order;
    outcome := 'issued';
    id := v_cert.id;
    account_id := v_cert.account_id;
    order_id := v_cert.order_id;
    serial := v_cert.serial;
    der := v_cert.der;
    chain_pem := v_cert.chain_pem;
    set_hash := v_cert.set_hash;
    not_before := v_cert.not_before;
    not_after := v_cert.not_after;
    issued_at := v_cert.issued_at;
    revoked_at := v_cert.revoked_at;
    revocation_reason := v_cert.revocation_reason;
    renew_early_at := v_cert.renew_early_at;
    RETURN NEXT;
END
$$;

-- `orders::create`, from the account's lock on: the account must be valid (`account`, with its
-- status, otherwise), then the order, each authorization it does not reuse with its challenges,
-- and the order's links to its authorizations in position order (`created`, with the order's id
-- and its authorization ids, comma-separated). Called on its own when the order needs no reads
-- under the lock (no reuse, no guard), and inside the caller's transaction after them otherwise.
-- The lists are newline-separated, one line per authorization: `p_authz_reused` holds the id of a
-- reused authorization or 0; `p_challenges` holds `position type token` lines, position counted
-- from 1. No row: the account does not exist.
CREATE FUNCTION certeasy_create_order(
    p_account BIGINT, p_status TEXT, p_identifiers TEXT, p_set_hash TEXT, p_not_before BIGINT,
    p_not_after BIGINT, p_expires BIGINT, p_now BIGINT, p_replaces TEXT, p_profile TEXT,
    p_authz_types TEXT, p_authz_values TEXT, p_authz_expires TEXT, p_authz_reused TEXT,
    p_challenges TEXT
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
                    expires_at, created_at)
                VALUES (p_account, v_types[i], v_values[i], 'pending', v_expires[i], p_now)
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
