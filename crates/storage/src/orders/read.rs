//! Reading orders: one order (expiry applied), how its authorizations were validated, an
//! account's order ids, and the stored CSR.

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::OrderId;
use acme_core::status::OrderStatus;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::model::Order;
use crate::model::OrderValidation;
use crate::rows;
use crate::sql;
use crate::state;

impl Storage {
    /// Reads an order, first applying expiry (pending/ready past `expires_at` become invalid).
    pub async fn order(&self, id: OrderId, now: OffsetDateTime) -> Result<Option<Order>> {
        get(self, id, now).await
    }

    /// How each authorization of the order was validated (its valid challenge's type and time),
    /// in the order's authorization order, in one read. `Error::Corrupt` when one has no valid,
    /// dated challenge, which no order that reached `ready` can hold.
    pub async fn order_validations(&self, id: OrderId) -> Result<Vec<OrderValidation>> {
        validations(self, id).await
    }

    /// Ids of the account's orders, ascending, strictly after `after`, at most `limit`.
    pub async fn account_orders(
        &self,
        account: AccountId,
        after: Option<OrderId>,
        limit: u32,
    ) -> Result<Vec<OrderId>> {
        of_account(self, account, after, limit).await
    }

    /// The stored CSR of an order in processing.
    pub async fn order_csr(&self, id: OrderId) -> Result<Option<Vec<u8>>> {
        csr(self, id).await
    }
}

async fn get(s: &Storage, id: OrderId, now: OffsetDateTime) -> Result<Option<Order>> {
    let mut conn = s.db.acquire().await?;
    let Some(order) = rows::load_order(&mut conn, id).await? else {
        return Ok(None);
    };
    let expired = matches!(order.status, OrderStatus::Pending | OrderStatus::Ready)
        && order.expires_at <= now;
    if !expired {
        return Ok(Some(order));
    }
    // A single conditional statement: safe without a transaction, and a no-op if a concurrent
    // request already moved the order on.
    state::expire_order(&mut conn, id, codec::unix(now)).await?;
    rows::load_order(&mut conn, id).await
}

async fn validations(s: &Storage, id: OrderId) -> Result<Vec<OrderValidation>> {
    let rows = sql::query(
        "SELECT a.id, a.identifier_type, a.identifier_value, c.type, c.validated_at \
         FROM order_authorizations oa JOIN authorizations a ON a.id = oa.authz_id \
         LEFT JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' \
         WHERE oa.order_id = $1 ORDER BY oa.position",
    )
    .bind(id.0)
    .fetch_all(&s.db)
    .await?;
    rows.iter()
        .map(|row| {
            let authz_id = AuthzId(row.try_get("id")?);
            let method = row.try_get::<Option<String>, _>("type")?;
            let validated_at = row.try_get::<Option<i64>, _>("validated_at")?;
            let (Some(method), Some(validated_at)) = (method, validated_at) else {
                return Err(Error::Corrupt(format!(
                    "authorization {authz_id} of order {id} has no dated valid challenge"
                )));
            };
            Ok(OrderValidation {
                authz_id,
                identifier: codec::identifier(
                    &row.try_get::<String, _>("identifier_type")?,
                    &row.try_get::<String, _>("identifier_value")?,
                )?,
                method: codec::parse(&method)?,
                validated_at: codec::time_from_unix(validated_at)?,
            })
        })
        .collect()
}

async fn of_account(
    s: &Storage,
    account: AccountId,
    after: Option<OrderId>,
    limit: u32,
) -> Result<Vec<OrderId>> {
    let ids = sql::query_scalar::<i64>(
        "SELECT id FROM orders WHERE account_id = $1 AND id > $2 ORDER BY id LIMIT $3",
    )
    .bind(account.0)
    .bind(after.map_or(0, |o| o.0))
    .bind(i64::from(limit))
    .fetch_all(&s.db)
    .await?;
    Ok(ids.into_iter().map(OrderId).collect())
}

async fn csr(s: &Storage, id: OrderId) -> Result<Option<Vec<u8>>> {
    let csr = sql::query_scalar::<Option<Vec<u8>>>("SELECT csr FROM orders WHERE id = $1")
        .bind(id.0)
        .fetch_optional(&s.db)
        .await?;
    Ok(csr.flatten())
}
