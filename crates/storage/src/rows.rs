//! Decoding rows into model types, and the loaders every operation reuses inside its transaction.

use std::net::IpAddr;

use crate::sql;
use crate::sql::Conn;
use crate::sql::Row;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::ChallengeId;
use acme_core::ids::EabKid;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::status::RevocationReason;

use crate::Result;
use crate::codec;
use crate::error::Error;
use crate::model::Account;
use crate::model::Authorization;
use crate::model::Certificate;
use crate::model::Challenge;
use crate::model::Order;

/// Column lists as macros, because queries must be `&'static str` and `concat!` only takes literals.
macro_rules! account_cols {
    () => {
        "id, thumbprint, jwk, status, contacts, tos_agreed, created_at, eab_kid"
    };
}
pub(crate) use account_cols;

/// A certificate row as an INSERT returns it; [`certificate_stored`] decodes it.
macro_rules! certificate_cols {
    () => {
        "id, account_id, order_id, serial, der, chain_pem, set_hash, not_before, not_after, issued_at, revoked_at, revocation_reason, renew_early_at"
    };
}
pub(crate) use certificate_cols;

/// A certificate row with the text of its issuer chain (`certificates c`, `issuer_chains ic`);
/// [`certificate`] decodes it.
macro_rules! certificate_select {
    () => {
        "SELECT c.id, c.account_id, c.order_id, c.serial, c.der, c.chain_pem, c.set_hash, \
         c.not_before, c.not_after, c.issued_at, c.revoked_at, c.revocation_reason, \
         c.renew_early_at, ic.pem AS issuer_chain_pem \
         FROM certificates c LEFT JOIN issuer_chains ic ON ic.id = c.issuer_chain_id"
    };
}

macro_rules! challenge_cols {
    () => {
        "id, authz_id, type, token, status, validated_at, error_type, error_detail"
    };
}

/// An authorization left-joined to its challenges; the caller adds the `WHERE` on `a`.
macro_rules! authorization_select {
    () => {
        "SELECT a.id AS a_id, a.account_id AS a_account_id, \
         a.identifier_type AS a_identifier_type, a.identifier_value AS a_identifier_value, \
         a.status AS a_status, a.expires_at AS a_expires_at, \
         c.id AS id, c.authz_id AS authz_id, c.type AS type, c.token AS token, \
         c.status AS status, c.validated_at AS validated_at, \
         c.error_type AS error_type, c.error_detail AS error_detail \
         FROM authorizations a LEFT JOIN challenges c ON c.authz_id = a.id"
    };
}

pub(crate) fn account(row: &Row) -> Result<Account> {
    Ok(Account {
        id: AccountId(row.try_get("id")?),
        status: codec::parse(&row.try_get::<String, _>("status")?)?,
        jwk_json: row.try_get("jwk")?,
        thumbprint: row.try_get("thumbprint")?,
        contacts: codec::decode_list(&row.try_get::<String, _>("contacts")?),
        tos_agreed: row.try_get::<i64, _>("tos_agreed")? != 0,
        created_at: codec::time_from_unix(row.try_get("created_at")?)?,
        eab_kid: row.try_get::<Option<String>, _>("eab_kid")?.map(EabKid),
    })
}

pub(crate) async fn load_account(conn: &mut Conn, id: AccountId) -> Result<Option<Account>> {
    let row = sql::query(concat!(
        "SELECT ",
        account_cols!(),
        " FROM accounts WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(account).transpose()
}

/// One statement: the order and its authorizations' ids (as a comma-separated list, in order),
/// so that a poll costs one round trip on PostgreSQL and one step on SQLite, and the two are read
/// from one snapshot. `string_agg` with `ORDER BY` is spelled the same in both (SQLite ≥ 3.44).
pub(crate) async fn load_order(conn: &mut Conn, id: OrderId) -> Result<Option<Order>> {
    let Some(row) = sql::query(
        "SELECT id, account_id, status, identifiers, set_hash, not_before, not_after, expires_at, \
         error_type, error_detail, certificate_id, created_at, replaces, profile, \
         finalize_client_ip, \
         (SELECT string_agg(CAST(authz_id AS TEXT), ',' ORDER BY position) \
          FROM order_authorizations WHERE order_id = orders.id) AS authz_ids \
         FROM orders WHERE id = $1",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let authz_ids = row
        .try_get::<Option<String>, _>("authz_ids")?
        .unwrap_or_default()
        .split(',')
        .filter(|part| !part.is_empty())
        .map(|part| {
            part.parse::<i64>()
                .map(AuthzId)
                .map_err(|_| Error::Corrupt(format!("order {id}: authorization id {part:?}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Order {
        id,
        account_id: AccountId(row.try_get("account_id")?),
        status: codec::parse(&row.try_get::<String, _>("status")?)?,
        identifiers: codec::decode_identifiers(&row.try_get::<String, _>("identifiers")?)?,
        set_hash: row.try_get("set_hash")?,
        not_before: codec::opt_time_from_unix(row.try_get("not_before")?)?,
        not_after: codec::opt_time_from_unix(row.try_get("not_after")?)?,
        expires_at: codec::time_from_unix(row.try_get("expires_at")?)?,
        error: codec::decode_problem(row.try_get("error_type")?, row.try_get("error_detail")?)?,
        certificate_id: row
            .try_get::<Option<i64>, _>("certificate_id")?
            .map(CertificateId),
        replaces: row.try_get("replaces")?,
        authz_ids,
        created_at: codec::time_from_unix(row.try_get("created_at")?)?,
        profile: row.try_get("profile")?,
        finalize_client_ip: row
            .try_get::<Option<String>, _>("finalize_client_ip")?
            .map(|ip| {
                ip.parse::<IpAddr>().map_err(|e| {
                    Error::Corrupt(format!("order {id}: finalize_client_ip {ip:?}: {e}"))
                })
            })
            .transpose()?,
    }))
}

pub(crate) fn challenge(row: &Row) -> Result<Challenge> {
    Ok(Challenge {
        id: ChallengeId(row.try_get("id")?),
        authz_id: AuthzId(row.try_get("authz_id")?),
        kind: codec::parse(&row.try_get::<String, _>("type")?)?,
        token: row.try_get("token")?,
        status: codec::parse(&row.try_get::<String, _>("status")?)?,
        validated_at: codec::opt_time_from_unix(row.try_get("validated_at")?)?,
        error: codec::decode_problem(row.try_get("error_type")?, row.try_get("error_detail")?)?,
    })
}

pub(crate) async fn load_challenge(conn: &mut Conn, id: ChallengeId) -> Result<Option<Challenge>> {
    let row = sql::query(concat!(
        "SELECT ",
        challenge_cols!(),
        " FROM challenges WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(challenge).transpose()
}

/// Which authorization to load: by its id, or as the one holding a challenge.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AuthzKey {
    Id(AuthzId),
    OfChallenge(ChallengeId),
}

/// One statement: the authorization joined to its challenges (one row per challenge, the
/// authorization's columns prefixed `a_`), for the same reasons as [`load_order`].
pub(crate) async fn load_authorization(
    conn: &mut Conn,
    id: AuthzId,
) -> Result<Option<Authorization>> {
    load_authorization_by(conn, AuthzKey::Id(id)).await
}

pub(crate) async fn load_authorization_by(
    conn: &mut Conn,
    key: AuthzKey,
) -> Result<Option<Authorization>> {
    let query = match key {
        AuthzKey::Id(id) => sql::query(concat!(
            authorization_select!(),
            " WHERE a.id = $1 ORDER BY c.id"
        ))
        .bind(id.0),
        AuthzKey::OfChallenge(id) => sql::query(concat!(
            authorization_select!(),
            " WHERE a.id = (SELECT authz_id FROM challenges WHERE id = $1) ORDER BY c.id"
        ))
        .bind(id.0),
    };
    let rows = query.fetch_all(&mut *conn).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let mut challenges = Vec::with_capacity(rows.len());
    for row in &rows {
        // An authorization without challenges comes back as one row of NULL challenge columns.
        if row.try_get::<Option<i64>, _>("id")?.is_some() {
            challenges.push(challenge(row)?);
        }
    }
    Ok(Some(Authorization {
        id: AuthzId(first.try_get("a_id")?),
        account_id: AccountId(first.try_get("a_account_id")?),
        identifier: codec::identifier(
            &first.try_get::<String, _>("a_identifier_type")?,
            &first.try_get::<String, _>("a_identifier_value")?,
        )?,
        status: codec::parse(&first.try_get::<String, _>("a_status")?)?,
        expires_at: codec::time_from_unix(first.try_get("a_expires_at")?)?,
        challenges,
    }))
}

pub(crate) fn serial_column(row: &Row) -> Result<Serial> {
    let serial_hex: String = row.try_get("serial")?;
    Serial::from_hex(&serial_hex).ok_or_else(|| Error::Corrupt(format!("serial {serial_hex:?}")))
}

/// A certificate row's `revocation_reason` column (an RFC 5280 code, or NULL).
pub(crate) fn revocation_reason_column(row: &Row) -> Result<Option<RevocationReason>> {
    row.try_get::<Option<i64>, _>("revocation_reason")?
        .map(|code| {
            RevocationReason::from_code(code)
                .ok_or_else(|| Error::Corrupt(format!("revocation reason {code}")))
        })
        .transpose()
}

/// A row of [`certificate_select`].
pub(crate) fn certificate(row: &Row) -> Result<Certificate> {
    let issuer_chain: Option<String> = row.try_get("issuer_chain_pem")?;
    certificate_stored(row, issuer_chain.as_deref())
}

/// A row of [`certificate_cols`], stored with `issuer_chain` (migration 0012) or, before it,
/// with its whole chain in `chain_pem`.
pub(crate) fn certificate_stored(row: &Row, issuer_chain: Option<&str>) -> Result<Certificate> {
    let der: Vec<u8> = row.try_get("der")?;
    let chain_pem = match issuer_chain {
        Some(issuer_chain) => crate::issuer_chains::full_chain(&der, issuer_chain),
        None => row.try_get("chain_pem")?,
    };
    Ok(Certificate {
        id: CertificateId(row.try_get("id")?),
        account_id: AccountId(row.try_get("account_id")?),
        order_id: OrderId(row.try_get("order_id")?),
        serial: serial_column(row)?,
        der,
        chain_pem,
        set_hash: row.try_get("set_hash")?,
        not_before: codec::time_from_unix(row.try_get("not_before")?)?,
        not_after: codec::time_from_unix(row.try_get("not_after")?)?,
        issued_at: codec::time_from_unix(row.try_get("issued_at")?)?,
        revoked_at: codec::opt_time_from_unix(row.try_get("revoked_at")?)?,
        revocation_reason: revocation_reason_column(row)?,
        renew_early_at: codec::opt_time_from_unix(row.try_get("renew_early_at")?)?,
    })
}

pub(crate) async fn load_certificate(
    conn: &mut Conn,
    id: CertificateId,
) -> Result<Option<Certificate>> {
    let row = sql::query(concat!(certificate_select!(), " WHERE c.id = $1"))
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(certificate).transpose()
}

pub(crate) async fn load_certificate_by_serial(
    conn: &mut Conn,
    serial: &Serial,
) -> Result<Option<Certificate>> {
    let row = sql::query(concat!(certificate_select!(), " WHERE c.serial = $1"))
        .bind(serial.to_hex())
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(certificate).transpose()
}
