-- The address of the client whose finalize request took an order from ready to processing
-- (issue 29): the `certificate_issued` audit record names it, and the certificate is often
-- signed by a worker long after the request was answered (the queue, a restart in between), so
-- it is kept with the order rather than in the request's memory. NULL for orders finalized
-- before this migration and for orders not finalized yet.
-- Keep in step with migrations/sqlite/0022_finalize_client_ip.sql.

ALTER TABLE orders ADD COLUMN finalize_client_ip TEXT;

-- `reservations::reserve_ready`, as in migration 0020, recording the finalize request's address
-- (`p_client_ip`) with the order in the same statement.
DROP FUNCTION certeasy_reserve_ready(BIGINT, BYTEA, BIGINT, BIGINT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT, TEXT);
CREATE FUNCTION certeasy_reserve_ready(
    p_order BIGINT, p_csr BYTEA, p_now BIGINT, p_lease_until BIGINT, p_serial TEXT,
    p_chain BIGINT, p_not_before BIGINT, p_not_after BIGINT, p_crl_shard BIGINT, p_issuer TEXT,
    p_client_ip TEXT
)
RETURNS TABLE (
    outcome TEXT, account_status TEXT, job_id BIGINT,
    serial TEXT, order_id BIGINT, account_id BIGINT, identifiers TEXT, issuer_chain_id BIGINT,
    not_before BIGINT, not_after BIGINT, crl_shard BIGINT, reserved_at BIGINT, signings BIGINT,
    state TEXT, certificate_id BIGINT, issuer TEXT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_account TEXT;
    v_job BIGINT;
    v_res serial_reservations%ROWTYPE;
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
    UPDATE orders o SET status = 'processing', csr = p_csr, finalize_client_ip = p_client_ip,
            updated_at = p_now
        WHERE o.id = p_order AND o.status = 'ready' AND o.expires_at > p_now
        AND NOT EXISTS (SELECT 1 FROM order_authorizations oa
            JOIN authorizations a ON a.id = oa.authz_id
            WHERE oa.order_id = o.id AND (a.status <> 'valid' OR a.expires_at <= p_now));
    IF NOT FOUND THEN
        outcome := 'not_ready';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO jobs (kind, target_id, run_at, attempts, lease_until, created_at)
        VALUES ('finalize', p_order, p_now, 1, p_lease_until, p_now)
        ON CONFLICT (kind, target_id) DO NOTHING
        RETURNING jobs.id INTO v_job;
    IF v_job IS NULL THEN
        RAISE EXCEPTION 'order % was ready with a finalization job', p_order;
    END IF;
    INSERT INTO serial_reservations (serial, order_id, account_id, identifiers, issuer_chain_id,
            not_before, not_after, crl_shard, reserved_at, signings, state, issuer)
        SELECT p_serial, o.id, o.account_id, o.identifiers, p_chain, p_not_before, p_not_after,
            p_crl_shard, p_now, 1, 'reserved', p_issuer
        FROM orders o WHERE o.id = p_order
        RETURNING * INTO v_res;
    outcome := 'reserved';
    job_id := v_job;
    serial := v_res.serial;
    order_id := v_res.order_id;
    account_id := v_res.account_id;
    identifiers := v_res.identifiers;
    issuer_chain_id := v_res.issuer_chain_id;
    not_before := v_res.not_before;
    not_after := v_res.not_after;
    crl_shard := v_res.crl_shard;
    reserved_at := v_res.reserved_at;
    signings := v_res.signings;
    state := v_res.state;
    certificate_id := v_res.certificate_id;
    issuer := v_res.issuer;
    RETURN NEXT;
END
$$;
