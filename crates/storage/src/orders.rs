//! Orders: creation under the database-backed guards, expiry, finalization and its outcome.

use crate::sql;
use crate::sql::Conn;
use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::ids::Serial;
use acme_core::problem::Problem;
use acme_core::status::AccountStatus;
use acme_core::status::OrderStatus;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::issuer_chains;
use crate::model::Certificate;
use crate::model::DuplicateUsage;
use crate::model::Finalizing;
use crate::model::GuardExceeded;
use crate::model::GuardUsage;
use crate::model::Job;
use crate::model::JobKind;
use crate::model::NewCertificate;
use crate::model::NewOrder;
use crate::model::Order;
use crate::model::OrderCreation;
use crate::model::OrderGuards;
use crate::model::OrderValidation;
use crate::model::PendingAuthzGuard;
use crate::model::PendingAuthzUsage;
use crate::model::StatusChange;
use crate::reservation_rows;
use crate::rows;
use crate::state;

pub(crate) async fn create(
    s: &Storage,
    new: NewOrder,
    guards: &OrderGuards,
    now: OffsetDateTime,
) -> Result<OrderCreation> {
    let now_s = codec::unix(now);
    let reads_under_lock = new.reuse_valid_until.is_some()
        || guards.max_pending_authz.is_some()
        || guards.duplicate_certificates.is_some();
    if s.backend == Backend::Postgres && !reads_under_lock {
        // Nothing to read under the account's lock: the function takes it, checks the account
        // and writes the order, one statement and so one transaction of its own.
        let plan = Plan::of(&new, vec![None; new.authorizations.len()]);
        let mut conn = s.db.acquire().await?;
        let written = match insert_pg(&mut conn, &new, &plan, now_s).await? {
            Ok(written) => written,
            Err(status) => return Ok(OrderCreation::AccountNotValid(status)),
        };
        drop(conn);
        s.young_tables.order_created(&s.db);
        return Ok(OrderCreation::Created {
            order: Box::new(created(new, &plan, now_s, written)?),
            usage: GuardUsage::default(),
            exceeded: Vec::new(),
        });
    }
    let mut tx = s.begin_write().await?;
    // The account row lock serialises the guards of one account on PostgreSQL; on SQLite the
    // IMMEDIATE transaction already holds the database write lock.
    let lock = match s.backend {
        Backend::Postgres => {
            sql::query_scalar::<String>("SELECT status FROM accounts WHERE id = $1 FOR UPDATE")
        }
        Backend::Sqlite => sql::query_scalar::<String>("SELECT status FROM accounts WHERE id = $1"),
    };
    let status: AccountStatus = codec::parse(
        &lock
            .bind(new.account_id.0)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(Error::NotFound)?,
    )?;
    if status != AccountStatus::Valid {
        return Ok(OrderCreation::AccountNotValid(status));
    }

    let mut reused = Vec::with_capacity(new.authorizations.len());
    for authz in &new.authorizations {
        reused.push(match new.reuse_valid_until {
            Some(until) => {
                reusable_authz(
                    &mut tx,
                    new.account_id,
                    authz.identifier.kind().as_str(),
                    authz.identifier.value(),
                    codec::unix(until),
                )
                .await?
            }
            None => None,
        });
    }
    let fresh = reused.iter().filter(|r| r.is_none()).count();
    let fresh_expiry = new
        .authorizations
        .iter()
        .zip(&reused)
        .filter(|(_, r)| r.is_none())
        .map(|(a, _)| a.expires_at)
        .max();
    // Counted in this order; the first exceeded limit to refuse on ends the transaction, which
    // wrote nothing yet, so dropping it rolls nothing back.
    let mut exceeded = Vec::new();
    let pending = count_pending_authz(
        &mut tx,
        new.account_id,
        guards,
        (fresh, fresh_expiry),
        now,
        now_s,
    )
    .await?;
    let pending_authz = match pending {
        Counted::Within(usage) => usage,
        Counted::Exceeded(over, refuse) => {
            if refuse {
                return Ok(OrderCreation::WouldExceed {
                    exceeded: over,
                    also: exceeded,
                });
            }
            exceeded.push(over);
            None
        }
    };
    let duplicates = match count_duplicates(&mut tx, &new, guards, now).await? {
        Counted::Within(usage) => usage,
        Counted::Exceeded(over, refuse) => {
            if refuse {
                return Ok(OrderCreation::WouldExceed {
                    exceeded: over,
                    also: exceeded,
                });
            }
            exceeded.push(over);
            None
        }
    };
    let usage = GuardUsage {
        pending_authz,
        duplicates,
    };

    let plan = Plan::of(&new, reused);
    let written = match s.backend {
        Backend::Postgres => match insert_pg(&mut tx, &new, &plan, now_s).await? {
            Ok(written) => written,
            // The account was read valid under its lock just above.
            Err(status) => return Ok(OrderCreation::AccountNotValid(status)),
        },
        Backend::Sqlite => insert(&mut tx, &new, &plan, now_s).await?,
    };
    tx.commit().await?;
    if s.backend == Backend::Postgres {
        s.young_tables.order_created(&s.db);
    }
    Ok(OrderCreation::Created {
        order: Box::new(created(new, &plan, now_s, written)?),
        usage,
        exceeded,
    })
}

/// What counting one database-backed limit found.
enum Counted<U> {
    /// Within the cap (or not counted: `None`), with how full it is once the order is created.
    Within(Option<U>),
    /// Over the cap, and whether the caller asked to refuse the order then.
    Exceeded(GuardExceeded, bool),
}

/// An authorization an order reuses: its id and expiry.
type Reused = Option<(i64, i64)>;

/// The ids of a new order and of its authorizations, in position order.
type Written = (OrderId, Vec<AuthzId>);

/// What a new order is written as, decided before the write and the same on both backends.
struct Plan {
    /// Ready when the order reuses every authorization, pending otherwise.
    status: OrderStatus,
    /// No later than any of its authorizations (RFC 8555 §7.1.6: an order whose authorization
    /// expires becomes invalid, so a later `expires` would be untrue).
    expires_at: i64,
    /// Per authorization, in position order: the stored one it reuses, if any.
    reused: Vec<Reused>,
}

impl Plan {
    fn of(new: &NewOrder, reused: Vec<Reused>) -> Self {
        let expires_at = new
            .authorizations
            .iter()
            .zip(&reused)
            .map(|(authz, reused)| match reused {
                Some((_, expiry)) => *expiry,
                None => codec::unix(authz.expires_at),
            })
            .fold(codec::unix(new.expires_at), i64::min);
        let status = if !new.authorizations.is_empty() && reused.iter().all(Option::is_some) {
            OrderStatus::Ready
        } else {
            OrderStatus::Pending
        };
        Self {
            status,
            expires_at,
            reused,
        }
    }
}

/// Writes the order, the authorizations it does not reuse with their challenges, and its links to
/// its authorizations.
async fn insert(conn: &mut Conn, new: &NewOrder, plan: &Plan, now_s: i64) -> Result<Written> {
    let order_id: i64 = bind_order(
        sql::query(
            "INSERT INTO orders (account_id, status, identifiers, set_hash, not_before, not_after, expires_at, \
             created_at, updated_at, replaces, profile) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10) RETURNING id",
        ),
        new,
        plan,
        now_s,
    )
    .fetch_one(&mut *conn)
    .await?
    .try_get("id")?;

    let mut authz_ids = Vec::with_capacity(new.authorizations.len());
    for (position, (authz, existing)) in new.authorizations.iter().zip(&plan.reused).enumerate() {
        let authz_id = match existing {
            Some((id, _)) => *id,
            None => insert_authz(&mut *conn, new.account_id, authz, now_s).await?,
        };
        authz_ids.push(AuthzId(authz_id));
        sql::query(
            "INSERT INTO order_authorizations (order_id, authz_id, position) VALUES ($1, $2, $3)",
        )
        .bind(order_id)
        .bind(authz_id)
        .bind(
            i64::try_from(position)
                .map_err(|_| Error::Corrupt("too many authorizations".into()))?,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok((OrderId(order_id), authz_ids))
}

/// Binds the order's own columns as `$1` to `$10`, in the order both [`insert`] and
/// `certeasy_create_order` take them (`$8` is both its creation and its last update).
fn bind_order(query: sql::Query, new: &NewOrder, plan: &Plan, now_s: i64) -> sql::Query {
    query
        .bind(new.account_id.0)
        .bind(plan.status.as_str())
        .bind(codec::encode_identifiers(&new.identifiers))
        .bind(&new.set_hash)
        .bind(new.not_before.map(codec::unix))
        .bind(new.not_after.map(codec::unix))
        .bind(plan.expires_at)
        .bind(now_s)
        .bind(new.replaces.as_deref())
        .bind(&new.profile)
}

/// [`insert`] on PostgreSQL, with the account's status read under its lock before it: the
/// function `certeasy_create_order` (migration 0013), one round trip instead of three per
/// authorization and two more, whether on its own or inside the caller's transaction. The
/// account's status, when it is not valid and so nothing was written.
async fn insert_pg(
    conn: &mut Conn,
    new: &NewOrder,
    plan: &Plan,
    now_s: i64,
) -> Result<std::result::Result<Written, AccountStatus>> {
    let lists = AuthzLists::of(new, &plan.reused)?;
    let row = bind_order(
        sql::query(
            "SELECT * FROM certeasy_create_order($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        ),
        new,
        plan,
        now_s,
    )
    .bind(lists.types)
    .bind(lists.values)
    .bind(lists.expires)
    .bind(lists.reused)
    .bind(lists.challenges)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(Error::NotFound)?;
    match row.try_get::<String, _>("outcome")?.as_str() {
        "created" => {
            let authz_ids = row
                .try_get::<String, _>("authz_ids")?
                .split(',')
                .filter(|id| !id.is_empty())
                .map(|id| {
                    id.parse()
                        .map(AuthzId)
                        .map_err(|_| Error::Corrupt(format!("authorization id {id:?}")))
                })
                .collect::<Result<_>>()?;
            Ok(Ok((OrderId(row.try_get("order_id")?), authz_ids)))
        }
        "account" => Ok(Err(codec::parse(
            &row.try_get::<String, _>("account_status")?,
        )?)),
        other => Err(Error::Corrupt(format!(
            "certeasy_create_order answered {other}"
        ))),
    }
}

/// An order's authorizations as the newline-separated lists `certeasy_create_order` reads.
struct AuthzLists {
    types: String,
    values: String,
    expires: String,
    reused: String,
    challenges: String,
}

impl AuthzLists {
    fn of(new: &NewOrder, reused: &[Reused]) -> Result<Self> {
        let mut lists = AuthzLists {
            types: String::new(),
            values: String::new(),
            expires: String::new(),
            reused: String::new(),
            challenges: String::new(),
        };
        for (position, (authz, reused)) in new.authorizations.iter().zip(reused).enumerate() {
            let value = authz.identifier.value();
            // Identifiers and tokens were checked long before (a DNS name or an IP address, a
            // base64url token); a separator in one would shift every field after it.
            if value.contains(['\n', ' ']) {
                return Err(Error::Corrupt(format!("identifier {value:?}")));
            }
            if position > 0 {
                for list in [
                    &mut lists.types,
                    &mut lists.values,
                    &mut lists.expires,
                    &mut lists.reused,
                ] {
                    list.push('\n');
                }
            }
            lists.types.push_str(authz.identifier.kind().as_str());
            lists.values.push_str(value);
            lists
                .expires
                .push_str(&codec::unix(authz.expires_at).to_string());
            lists
                .reused
                .push_str(&reused.map_or(0, |(id, _)| id).to_string());
            for (kind, token) in &authz.challenges {
                if token.contains(['\n', ' ']) {
                    return Err(Error::Corrupt(format!("challenge token {token:?}")));
                }
                if !lists.challenges.is_empty() {
                    lists.challenges.push('\n');
                }
                lists
                    .challenges
                    .push_str(&format!("{} {} {token}", position + 1, kind.as_str()));
            }
        }
        Ok(lists)
    }
}

/// The order just written, built from what was written rather than read back: the same values,
/// in the stored whole seconds, without another statement.
fn created(new: NewOrder, plan: &Plan, now_s: i64, (id, authz_ids): Written) -> Result<Order> {
    Ok(Order {
        id,
        account_id: new.account_id,
        status: plan.status,
        identifiers: new.identifiers,
        set_hash: new.set_hash,
        not_before: new.not_before.map(stored_time).transpose()?,
        not_after: new.not_after.map(stored_time).transpose()?,
        expires_at: codec::time_from_unix(plan.expires_at)?,
        error: None,
        certificate_id: None,
        replaces: new.replaces,
        authz_ids,
        created_at: codec::time_from_unix(now_s)?,
        profile: Some(new.profile),
    })
}

/// A time as it reads back from the database: whole seconds.
fn stored_time(t: OffsetDateTime) -> Result<OffsetDateTime> {
    codec::time_from_unix(codec::unix(t))
}

/// Inserts for one to three challenges in one statement (an identifier is offered at most three
/// types), so an authorization costs two statements, not four. Static texts keep them in the
/// prepared-statement caches.
const INSERT_CHALLENGES: [&str; 3] = [
    "INSERT INTO challenges (authz_id, type, token, status) VALUES ($1, $2, $3, 'pending')",
    "INSERT INTO challenges (authz_id, type, token, status) VALUES ($1, $2, $3, 'pending'), \
     ($1, $4, $5, 'pending')",
    "INSERT INTO challenges (authz_id, type, token, status) VALUES ($1, $2, $3, 'pending'), \
     ($1, $4, $5, 'pending'), ($1, $6, $7, 'pending')",
];

/// The account's valid authorization for the identifier that lives longest, if it is still
/// valid at `until`: its id and expiry.
async fn reusable_authz(
    conn: &mut Conn,
    account: AccountId,
    kind: &str,
    value: &str,
    until: i64,
) -> Result<Option<(i64, i64)>> {
    let row = sql::query(
        "SELECT id, expires_at FROM authorizations WHERE account_id = $1 AND identifier_type = $2 \
         AND identifier_value = $3 AND status = 'valid' AND expires_at > $4 \
         ORDER BY expires_at DESC, id DESC LIMIT 1",
    )
    .bind(account.0)
    .bind(kind)
    .bind(value)
    .bind(until)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| Ok((r.try_get("id")?, r.try_get("expires_at")?)))
        .transpose()
}

async fn insert_authz(
    conn: &mut Conn,
    account: AccountId,
    authz: &crate::model::NewAuthz,
    now: i64,
) -> Result<i64> {
    let id: i64 = sql::query_scalar(
        "INSERT INTO authorizations (account_id, identifier_type, identifier_value, status, expires_at, created_at) \
         VALUES ($1, $2, $3, 'pending', $4, $5) RETURNING id",
    )
    .bind(account.0)
    .bind(authz.identifier.kind().as_str())
    .bind(authz.identifier.value())
    .bind(codec::unix(authz.expires_at))
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    for chunk in authz.challenges.chunks(INSERT_CHALLENGES.len()) {
        let mut insert = sql::query(INSERT_CHALLENGES[chunk.len() - 1]).bind(id);
        for (kind, token) in chunk {
            insert = insert.bind(kind.as_str()).bind(token);
        }
        insert.execute(&mut *conn).await?;
    }
    Ok(id)
}

/// An order that creates no new authorization never exceeds this limit: it adds nothing to the
/// pending count. `fresh` is how many it creates and when the last of them expires.
async fn count_pending_authz(
    conn: &mut Conn,
    account: AccountId,
    guards: &OrderGuards,
    fresh: (usize, Option<OffsetDateTime>),
    now: OffsetDateTime,
    now_s: i64,
) -> Result<Counted<PendingAuthzUsage>> {
    let Some(PendingAuthzGuard { max, refuse }) = guards.max_pending_authz else {
        return Ok(Counted::Within(None));
    };
    let (fresh, fresh_expiry) = fresh;
    let row = sql::query(
        "SELECT COUNT(*) AS n, MIN(expires_at) AS soonest, MAX(expires_at) AS latest \
         FROM authorizations WHERE account_id = $1 AND status = 'pending' AND expires_at > $2",
    )
    .bind(account.0)
    .bind(now_s)
    .fetch_one(&mut *conn)
    .await?;
    let pending = codec::count(row.try_get("n")?)?;
    let fresh = u32::try_from(fresh).unwrap_or(u32::MAX);
    if fresh > 0 && u64::from(pending) + u64::from(fresh) > u64::from(max) {
        let retry_at = match row.try_get::<Option<i64>, _>("soonest")? {
            Some(secs) => codec::time_from_unix(secs)?,
            None => now,
        };
        let over = GuardExceeded::PendingAuthz {
            pending,
            max,
            retry_at,
        };
        return Ok(Counted::Exceeded(over, refuse));
    }
    let latest = codec::opt_time_from_unix(row.try_get::<Option<i64>, _>("latest")?)?;
    Ok(Counted::Within(Some(PendingAuthzUsage {
        pending: pending.saturating_add(fresh),
        all_expired_at: latest.max(fresh_expiry),
    })))
}

/// The one definition of the duplicate-certificate window, used both to count and to say when to
/// retry. `issued_at` is stored in whole seconds (truncated), so a certificate recorded at second
/// `s` counts while `now < s + window` and leaves the window at exactly `s + window`
/// ([`leaves_window_at`]). For a whole `s`, `s > floor(now - window)` exactly when
/// `now < s + window`, so the query counts `issued_at > duplicate_cutoff(now, window)`. A client
/// that waits the `Retry-After` (the wait to `leaves_window_at`, rounded up to whole seconds)
/// finds the certificate gone, to the nanosecond.
fn duplicate_cutoff(now: OffsetDateTime, window: time::Duration) -> i64 {
    codec::unix(now - window)
}

/// When a certificate recorded at `issued_at` leaves the duplicate window (see
/// [`duplicate_cutoff`]).
fn leaves_window_at(issued_at: i64, window: time::Duration) -> Result<OffsetDateTime> {
    Ok(codec::time_from_unix(issued_at)? + window)
}

async fn count_duplicates(
    conn: &mut Conn,
    new: &NewOrder,
    guards: &OrderGuards,
    now: OffsetDateTime,
) -> Result<Counted<DuplicateUsage>> {
    let Some(guard) = guards.duplicate_certificates else {
        return Ok(Counted::Within(None));
    };
    let row = sql::query(
        "SELECT COUNT(*) AS n, MIN(issued_at) AS oldest, MAX(issued_at) AS newest \
         FROM certificates \
         WHERE account_id = $1 AND set_hash = $2 AND revoked_at IS NULL AND issued_at > $3",
    )
    .bind(new.account_id.0)
    .bind(&new.set_hash)
    .bind(duplicate_cutoff(now, guard.window))
    .fetch_one(&mut *conn)
    .await?;
    let count = codec::count(row.try_get("n")?)?;
    if count >= guard.max {
        let retry_at = match row.try_get::<Option<i64>, _>("oldest")? {
            Some(secs) => leaves_window_at(secs, guard.window)?,
            None => now,
        };
        let over = GuardExceeded::Duplicates {
            count,
            max: guard.max,
            retry_at,
        };
        return Ok(Counted::Exceeded(over, guard.refuse));
    }
    let all_left_at = row
        .try_get::<Option<i64>, _>("newest")?
        .map(|secs| leaves_window_at(secs, guard.window))
        .transpose()?;
    Ok(Counted::Within(Some(DuplicateUsage { count, all_left_at })))
}

pub(crate) async fn get(s: &Storage, id: OrderId, now: OffsetDateTime) -> Result<Option<Order>> {
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

pub(crate) async fn validations(s: &Storage, id: OrderId) -> Result<Vec<OrderValidation>> {
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

pub(crate) async fn of_account(
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

/// ready → processing with the CSR stored, when the order is still ready: of two concurrent
/// finalizations only one can see `ready`, and an order whose authorization is no longer valid
/// (expired since it became ready) is not finalized even if its own expiry has not come yet.
/// Returns the order's account and identifier-set hash when it moved.
pub(crate) async fn take_ready(
    conn: &mut Conn,
    id: OrderId,
    csr_der: &[u8],
    now_s: i64,
) -> Result<Option<(i64, String)>> {
    let row = sql::query(
        "UPDATE orders SET status = 'processing', csr = $2, updated_at = $3 \
         WHERE id = $1 AND status = 'ready' AND expires_at > $3 \
         AND NOT EXISTS (SELECT 1 FROM order_authorizations oa \
             JOIN authorizations a ON a.id = oa.authz_id \
             WHERE oa.order_id = orders.id AND (a.status <> 'valid' OR a.expires_at <= $3)) \
         RETURNING account_id, set_hash",
    )
    .bind(id.0)
    .bind(csr_der)
    .bind(now_s)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|row| Ok((row.try_get("account_id")?, row.try_get("set_hash")?)))
        .transpose()
}

/// Persists why an order is not ready: expired authorizations expire (and invalidate the
/// order), then the order's own expiry. Returns what the order now is; `Error::NotFound` when
/// there is no such order.
pub(crate) async fn not_ready(
    s: &Storage,
    conn: &mut Conn,
    id: OrderId,
    now_s: i64,
) -> Result<OrderStatus> {
    let authz_ids =
        sql::query_scalar::<i64>("SELECT authz_id FROM order_authorizations WHERE order_id = $1")
            .bind(id.0)
            .fetch_all(&mut *conn)
            .await?;
    for authz in authz_ids {
        let authz = AuthzId(authz);
        // Orders before the authorization, as every other path takes them.
        state::lock_orders_holding(conn, s.backend, authz).await?;
        state::expire_authz(conn, authz, now_s).await?;
    }
    state::expire_order(conn, id, now_s).await?;
    match rows::load_order(conn, id).await? {
        Some(order) => Ok(order.status),
        None => Err(Error::NotFound),
    }
}

/// `claim`: as for [`crate::authz::start_challenge`].
pub(crate) async fn begin_finalize(
    s: &Storage,
    id: OrderId,
    csr_der: &[u8],
    now: OffsetDateTime,
    claim: Option<time::Duration>,
) -> Result<Finalizing> {
    let now_s = codec::unix(now);
    let mut tx = s.begin_write().await?;
    if take_ready(&mut tx, id, csr_der, now_s).await?.is_none() {
        let status = not_ready(s, &mut tx, id, now_s).await?;
        tx.commit().await?;
        return Ok(Finalizing::NotReady(status));
    }
    let job = state::enqueue_job(&mut tx, JobKind::Finalize(id), now, claim).await?;
    let order = rows::load_order(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(Finalizing::Begun {
        order: Box::new(order),
        job,
    })
}

/// The status of the account that owns order `id`, locked before the order in the order account
/// deactivation takes them, so the two cannot deadlock. FOR SHARE makes a concurrent
/// deactivation wait for this commit (or this read wait for its commit): a serial is never
/// reserved, so nothing is signed, for an account that was deactivated first. SQLite's IMMEDIATE transaction already
/// serialises writers.
pub(crate) async fn account_of_order(
    s: &Storage,
    conn: &mut Conn,
    id: OrderId,
) -> Result<AccountStatus> {
    let account = match s.backend {
        Backend::Postgres => sql::query_scalar::<String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1) FOR SHARE",
        ),
        Backend::Sqlite => sql::query_scalar::<String>(
            "SELECT a.status FROM accounts a WHERE a.id = (SELECT account_id FROM orders WHERE id = $1)",
        ),
    };
    codec::parse(
        &account
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
            .ok_or(Error::NotFound)?,
    )
}

/// What a certificate row takes besides the certificate.
struct Stored<'a> {
    account_id: i64,
    set_hash: &'a str,
    /// The row of `cert.issuer_chain_pem` ([`issuer_chains::id_of`]).
    chain_id: i64,
    now_s: i64,
}

/// Stores the certificate of order `id` and makes the order valid with it. RETURNING the whole
/// row: the caller gets the stored certificate without reading it back. The row's `chain_pem`
/// stays empty: the download is assembled from the leaf and the issuer chain (migration 0012).
async fn store_certificate(
    conn: &mut Conn,
    id: OrderId,
    stored: Stored<'_>,
    cert: NewCertificate,
) -> Result<Certificate> {
    let Stored {
        account_id,
        set_hash,
        chain_id,
        now_s,
    } = stored;
    let row = sql::query(concat!(
        "INSERT INTO certificates (account_id, order_id, serial, der, chain_pem, issuer_chain_id, \
         set_hash, not_before, not_after, issued_at, crl_shard) \
         VALUES ($1, $2, $3, $4, '', $5, $6, $7, $8, $9, $10) RETURNING ",
        rows::certificate_cols!()
    ))
    .bind(account_id)
    .bind(id.0)
    .bind(cert.serial.to_hex())
    .bind(cert.der)
    .bind(chain_id)
    .bind(set_hash)
    .bind(codec::unix(cert.not_before))
    .bind(codec::unix(cert.not_after))
    .bind(now_s)
    .bind(cert.crl_shard.map(i64::from))
    .fetch_one(&mut *conn)
    .await?;
    let certificate = rows::certificate_stored(&row, Some(&cert.issuer_chain_pem))?;
    sql::query(
        "UPDATE orders SET status = 'valid', certificate_id = $2, updated_at = $3 WHERE id = $1",
    )
    .bind(id.0)
    .bind(certificate.id.0)
    .bind(now_s)
    .execute(&mut *conn)
    .await?;
    Ok(certificate)
}

pub(crate) async fn csr(s: &Storage, id: OrderId) -> Result<Option<Vec<u8>>> {
    let csr = sql::query_scalar::<Option<Vec<u8>>>("SELECT csr FROM orders WHERE id = $1")
        .bind(id.0)
        .fetch_optional(&s.db)
        .await?;
    Ok(csr.flatten())
}

/// Stores the certificate signed from the open reservation of its serial and makes the order
/// valid with it; the reservation becomes `issued`. Nothing checked when the serial was reserved
/// is checked again (the certificate exists now, and must be kept). `settle`: as for
/// [`crate::authz::record_validation`]. A repeat (an order already valid) returns the stored
/// certificate.
pub(crate) async fn complete(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    now: OffsetDateTime,
    settle: Option<&Job>,
) -> Result<Certificate> {
    let now_s = codec::unix(now);
    let chain_id = issuer_chains::id_of(s, &cert.issuer_chain_pem).await?;
    if s.backend == Backend::Postgres {
        return complete_pg(s, id, cert, chain_id, now_s, settle).await;
    }
    let mut tx = s.begin_write().await?;
    let read = match s.backend {
        Backend::Postgres => sql::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1 FOR UPDATE",
        ),
        Backend::Sqlite => sql::query(
            "SELECT status, account_id, set_hash, certificate_id FROM orders WHERE id = $1",
        ),
    };
    let row = read
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(Error::NotFound)?;
    let status: OrderStatus = codec::parse(&row.try_get::<String, _>("status")?)?;
    let certificate = match status {
        OrderStatus::Valid => {
            let existing: Option<i64> = row.try_get("certificate_id")?;
            let cert_id =
                CertificateId(existing.ok_or_else(|| {
                    Error::Corrupt(format!("valid order {id} without certificate"))
                })?);
            rows::load_certificate(&mut tx, cert_id)
                .await?
                .ok_or(Error::NotFound)?
        }
        OrderStatus::Processing => {
            let reserved = reservation_rows::open_for(&mut tx, id, &cert.serial)
                .await?
                .ok_or_else(|| not_reserved(id, &cert.serial))?;
            if (
                reserved.not_before,
                reserved.not_after,
                reserved.issuer_chain_id,
                reserved.crl_shard,
            ) != (cert.not_before, cert.not_after, chain_id, cert.crl_shard)
            {
                return Err(Error::Corrupt(format!(
                    "the certificate of serial {} differs from its reservation",
                    cert.serial.to_hex()
                )));
            }
            let account_id: i64 = row.try_get("account_id")?;
            let set_hash: String = row.try_get("set_hash")?;
            let stored = Stored {
                account_id,
                set_hash: &set_hash,
                chain_id,
                now_s,
            };
            let serial = cert.serial.clone();
            let certificate = store_certificate(&mut tx, id, stored, cert).await?;
            reservation_rows::mark_issued(&mut tx, &serial, certificate.id, now).await?;
            certificate
        }
        other => return Err(not_processing(id, other.as_str())),
    };
    if let Some(job) = settle {
        state::settle_job(&mut tx, job).await?;
    }
    tx.commit().await?;
    Ok(certificate)
}

/// [`complete`] on PostgreSQL: the same transaction, lock for lock, as the function
/// `certeasy_complete_reserved` (migration 0014), in one round trip; a repeat (the order already
/// valid) reads its certificate after it.
async fn complete_pg(
    s: &Storage,
    id: OrderId,
    cert: NewCertificate,
    chain_id: i64,
    now_s: i64,
    settle: Option<&Job>,
) -> Result<Certificate> {
    let row = sql::query(
        "SELECT * FROM certeasy_complete_reserved($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(id.0)
    .bind(cert.serial.to_hex())
    .bind(cert.der)
    .bind(chain_id)
    .bind(codec::unix(cert.not_before))
    .bind(codec::unix(cert.not_after))
    .bind(cert.crl_shard.map(i64::from))
    .bind(now_s)
    .bind(settle.map(|job| job.id.0))
    .bind(settle.map(|job| i64::from(job.attempts)))
    .fetch_optional(&s.db)
    .await?
    .ok_or(Error::NotFound)?;
    match row.try_get::<String, _>("outcome")?.as_str() {
        "issued" => rows::certificate_stored(&row, Some(&cert.issuer_chain_pem)),
        "valid" => {
            let existing: Option<i64> = row.try_get("id")?;
            let cert_id =
                CertificateId(existing.ok_or_else(|| {
                    Error::Corrupt(format!("valid order {id} without certificate"))
                })?);
            let mut conn = s.db.acquire().await?;
            rows::load_certificate(&mut conn, cert_id)
                .await?
                .ok_or(Error::NotFound)
        }
        "not_reserved" => Err(not_reserved(id, &cert.serial)),
        "mismatch" => Err(Error::Corrupt(format!(
            "the certificate of serial {} differs from its reservation",
            cert.serial.to_hex()
        ))),
        "state" => Err(not_processing(
            id,
            &row.try_get::<String, _>("order_status")?,
        )),
        other => Err(Error::Corrupt(format!(
            "certeasy_complete_reserved answered {other}"
        ))),
    }
}

/// A certificate whose serial the order has no open reservation of. Only the holder of the
/// order's `Finalize` job stores its certificate, and only one it reserved, so this is a broken
/// invariant (a bug or a manual edit), not a state a caller decides on.
fn not_reserved(id: OrderId, serial: &Serial) -> Error {
    Error::Corrupt(format!(
        "serial {} is not reserved for order {id}",
        serial.to_hex()
    ))
}

/// A certificate stored for an order that is neither processing nor valid: as for
/// [`not_reserved`], the job that stores it held the order in processing.
fn not_processing(id: OrderId, status: &str) -> Error {
    Error::Corrupt(format!(
        "order {id} is {status}: no certificate can be stored for it"
    ))
}

pub(crate) async fn fail(
    s: &Storage,
    id: OrderId,
    problem: Problem,
    now: OffsetDateTime,
    settle: Option<&Job>,
) -> Result<StatusChange<Order>> {
    let (error_type, error_detail) = codec::problem_columns(Some(&problem));
    let mut tx = s.begin_write().await?;
    let moved = sql::query(
        "UPDATE orders SET status = 'invalid', error_type = $2, error_detail = $3, updated_at = $4 \
         WHERE id = $1 AND status = 'processing'",
    )
    .bind(id.0)
    .bind(error_type)
    .bind(error_detail)
    .bind(codec::unix(now))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        > 0;
    let order = rows::load_order(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    if moved {
        reservation_rows::abandon_open(&mut tx, id, now).await?;
    }
    // A repeated failure report (a retried job) finds the order already invalid, and settles
    // the job all the same. An order in another state is left as it is, job and all.
    if moved || order.status == OrderStatus::Invalid {
        if let Some(job) = settle {
            state::settle_job(&mut tx, job).await?;
        }
        tx.commit().await?;
    }
    Ok(if moved {
        StatusChange::Changed(order)
    } else {
        StatusChange::Unchanged(order)
    })
}

#[cfg(test)]
mod tests {
    use time::Duration;
    use time::OffsetDateTime;

    use super::duplicate_cutoff;
    use super::leaves_window_at;

    /// Counted exactly while `now < leaves_window_at`, whatever the sub-second parts: the
    /// boundary the `Retry-After` of a duplicate-certificate refusal points to.
    #[test]
    fn the_duplicate_window_counts_until_the_instant_it_names() {
        let issued = 1_800_000_000_i64;
        for window in [
            Duration::seconds(3),
            Duration::milliseconds(2_500),
            Duration::days(7),
        ] {
            let leaves = leaves_window_at(issued, window).unwrap();
            let counted = |now: OffsetDateTime| issued > duplicate_cutoff(now, window);
            for nanos in [1, 1_000, 400_000_000, 999_999_999, 1_000_000_000] {
                assert!(
                    counted(leaves - Duration::nanoseconds(nanos)),
                    "{window} -{nanos}ns"
                );
                assert!(
                    !counted(leaves + Duration::nanoseconds(nanos - 1)),
                    "{window} +{nanos}ns"
                );
            }
        }
    }
}
