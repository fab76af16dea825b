//! Decoding rows into model types, and the loaders every operation reuses inside its transaction.

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

macro_rules! certificate_cols {
    () => {
        "id, account_id, order_id, serial, der, chain_pem, set_hash, not_before, not_after, issued_at, revoked_at, revocation_reason, renew_early_at"
    };
}

macro_rules! challenge_cols {
    () => {
        "id, authz_id, type, token, status, validated_at, error_type, error_detail"
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

pub(crate) async fn load_order(conn: &mut Conn, id: OrderId) -> Result<Option<Order>> {
    let Some(row) = sql::query(
        "SELECT id, account_id, status, identifiers, set_hash, not_before, not_after, expires_at, \
         error_type, error_detail, certificate_id, created_at, replaces, profile FROM orders WHERE id = $1",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let authz_ids = sql::query_scalar::<i64>(
        "SELECT authz_id FROM order_authorizations WHERE order_id = $1 ORDER BY position",
    )
    .bind(id.0)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(AuthzId)
    .collect();
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
    }))
}

fn challenge(row: &Row) -> Result<Challenge> {
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

pub(crate) async fn load_authorization(
    conn: &mut Conn,
    id: AuthzId,
) -> Result<Option<Authorization>> {
    let Some(row) = sql::query(
        "SELECT id, account_id, identifier_type, identifier_value, status, expires_at \
         FROM authorizations WHERE id = $1",
    )
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let challenges = sql::query(concat!(
        "SELECT ",
        challenge_cols!(),
        " FROM challenges WHERE authz_id = $1 ORDER BY id"
    ))
    .bind(id.0)
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(challenge)
    .collect::<Result<Vec<_>>>()?;
    Ok(Some(Authorization {
        id,
        account_id: AccountId(row.try_get("account_id")?),
        identifier: codec::identifier(
            &row.try_get::<String, _>("identifier_type")?,
            &row.try_get::<String, _>("identifier_value")?,
        )?,
        status: codec::parse(&row.try_get::<String, _>("status")?)?,
        expires_at: codec::time_from_unix(row.try_get("expires_at")?)?,
        challenges,
    }))
}

/// A certificate row's `serial` column (hex).
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

fn certificate(row: &Row) -> Result<Certificate> {
    Ok(Certificate {
        id: CertificateId(row.try_get("id")?),
        account_id: AccountId(row.try_get("account_id")?),
        order_id: OrderId(row.try_get("order_id")?),
        serial: serial_column(row)?,
        der: row.try_get("der")?,
        chain_pem: row.try_get("chain_pem")?,
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
    let row = sql::query(concat!(
        "SELECT ",
        certificate_cols!(),
        " FROM certificates WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(certificate).transpose()
}

pub(crate) async fn load_certificate_by_serial(
    conn: &mut Conn,
    serial: &Serial,
) -> Result<Option<Certificate>> {
    let row = sql::query(concat!(
        "SELECT ",
        certificate_cols!(),
        " FROM certificates WHERE serial = $1"
    ))
    .bind(serial.to_hex())
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(certificate).transpose()
}
