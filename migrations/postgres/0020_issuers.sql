-- Several issuers (issuer rotation; crates/storage/src/ca_state.rs, crls.rs, reservations.rs).
--
-- Each serial reservation and each certificate records the name of the issuer that signs it
-- (`issuer`, NULL: "default", the generated CA's intermediate or `ca.existing`, which signed
-- every certificate before this migration). A certificate is copied its issuer from its
-- reservation when it is stored. CRL shards are per (issuer, shard): every issuer publishes its
-- own CRLs, and the existing shards become "default"'s. `ca_state` holds the one active issuer
-- every instance reads before signing (`certeasy admin ca activate`); no row: the configured
-- `ca.active-issuer`.
-- Keep in step with migrations/sqlite/0020_issuers.sql.

ALTER TABLE serial_reservations ADD COLUMN issuer TEXT;
ALTER TABLE certificates ADD COLUMN issuer TEXT;

ALTER TABLE crl_shards ADD COLUMN issuer TEXT NOT NULL DEFAULT 'default';
ALTER TABLE crl_shards DROP CONSTRAINT crl_shards_pkey;
ALTER TABLE crl_shards ADD PRIMARY KEY (issuer, shard);

CREATE TABLE ca_state (
    id             BIGINT PRIMARY KEY CHECK (id = 1),
    active_issuer  TEXT   NOT NULL,
    changed_at     BIGINT NOT NULL
);

-- `reservations::reserve_ready`, as in migration 0014, recording the issuer (`p_issuer`) too.
DROP FUNCTION certeasy_reserve_ready(BIGINT, BYTEA, BIGINT, BIGINT, TEXT, BIGINT, BIGINT, BIGINT, BIGINT);
CREATE FUNCTION certeasy_reserve_ready(
    p_order BIGINT, p_csr BYTEA, p_now BIGINT, p_lease_until BIGINT, p_serial TEXT,
    p_chain BIGINT, p_not_before BIGINT, p_not_after BIGINT, p_crl_shard BIGINT, p_issuer TEXT
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
    UPDATE orders o SET status = 'processing', csr = p_csr, updated_at = p_now
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

-- `orders::complete`, as in migration 0014; the certificate takes its reservation's issuer.
CREATE OR REPLACE FUNCTION certeasy_complete_reserved(
    p_order BIGINT, p_serial TEXT, p_der BYTEA, p_chain BIGINT, p_not_before BIGINT,
    p_not_after BIGINT, p_crl_shard BIGINT, p_now BIGINT, p_job BIGINT, p_attempts BIGINT
)
RETURNS TABLE (
    outcome TEXT, order_status TEXT,
    id BIGINT, account_id BIGINT, order_id BIGINT, serial TEXT, der BYTEA, chain_pem TEXT,
    set_hash TEXT, not_before BIGINT, not_after BIGINT, issued_at BIGINT, revoked_at BIGINT,
    revocation_reason BIGINT, renew_early_at BIGINT
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_order orders%ROWTYPE;
    v_res serial_reservations%ROWTYPE;
    v_cert certificates%ROWTYPE;
BEGIN
    SELECT * INTO v_order FROM orders o WHERE o.id = p_order FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    order_status := v_order.status;
    IF v_order.status = 'valid' THEN
        IF p_job IS NOT NULL THEN
            DELETE FROM jobs j WHERE j.id = p_job AND j.attempts = p_attempts;
        END IF;
        outcome := 'valid';
        id := v_order.certificate_id;
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_order.status <> 'processing' THEN
        outcome := 'state';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT * INTO v_res FROM serial_reservations r
        WHERE r.order_id = p_order AND r.state = 'reserved';
    IF NOT FOUND OR v_res.serial <> p_serial THEN
        outcome := 'not_reserved';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_res.not_before <> p_not_before OR v_res.not_after <> p_not_after
        OR v_res.issuer_chain_id <> p_chain
        OR v_res.crl_shard IS DISTINCT FROM p_crl_shard THEN
        outcome := 'mismatch';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO certificates (account_id, order_id, serial, der, chain_pem, issuer_chain_id,
            set_hash, not_before, not_after, issued_at, crl_shard, issuer)
        VALUES (v_order.account_id, p_order, p_serial, p_der, '', p_chain, v_order.set_hash,
            p_not_before, p_not_after, p_now, p_crl_shard, v_res.issuer)
        RETURNING * INTO v_cert;
    UPDATE orders o SET status = 'valid', certificate_id = v_cert.id, updated_at = p_now
        WHERE o.id = p_order;
    UPDATE serial_reservations r SET state = 'issued', certificate_id = v_cert.id,
            settled_at = p_now
        WHERE r.serial = p_serial AND r.state = 'reserved';
    IF p_job IS NOT NULL THEN
        DELETE FROM jobs j WHERE j.id = p_job AND j.attempts = p_attempts;
    END IF;
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
