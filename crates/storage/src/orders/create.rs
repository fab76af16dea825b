//! Creating an order: the account's status read under its lock, the database-backed limits
//! counted in the same transaction, reused authorizations, and the write itself, on SQLite
//! ([`insert`]) and on PostgreSQL ([`insert_pg`], one function call) side by side.
//!
//! Each PostgreSQL function (`migrations/postgres/0013_one_round_trip.sql`) is the transaction it
//! stands for, statement for statement and lock for lock, called in one round trip instead of 7 to
//! 10; SQLite, where a statement costs microseconds, runs the same statements from Rust. The
//! storage tests run every case of these transactions on both backends, so a change to one side
//! that the other lacks fails them. The limits arrive with a `refuse` flag from `ra` (enforce or
//! shadow): what they counted is returned either way, so shadow mode costs no second transaction.

use acme_core::ids::AccountId;
use acme_core::ids::AuthzId;
use acme_core::ids::OrderId;
use acme_core::status::AccountStatus;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use time::OffsetDateTime;

use crate::Backend;
use crate::Result;
use crate::Storage;
use crate::codec;
use crate::error::Error;
use crate::model::DuplicateUsage;
use crate::model::GuardExceeded;
use crate::model::GuardUsage;
use crate::model::NewOrder;
use crate::model::Order;
use crate::model::OrderCreation;
use crate::model::OrderGuards;
use crate::model::PendingAuthzGuard;
use crate::model::PendingAuthzUsage;
use crate::sql;
use crate::sql::Conn;

impl Storage {
    /// Creates an order with its authorizations and challenges in one transaction that first
    /// reads the account's status under its lock and counts the database-backed limits
    /// (pending-authorization cap, duplicate certificates), writing nothing when the account is
    /// not valid or a limit to refuse on is exceeded. The order is `ready` at once when every
    /// authorization was reused and valid. Only authorizations still valid at
    /// `new.reuse_valid_until` are reused, and the order's expiry is cut to the earliest expiry
    /// of its authorizations: an order never outlives them. The answer says how full the
    /// limits are (for `RateLimit` headers).
    pub async fn create_order(
        &self,
        new: NewOrder,
        guards: &OrderGuards,
        now: OffsetDateTime,
    ) -> Result<OrderCreation> {
        create(self, new, guards, now).await
    }
}

async fn create(
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

    let methods = reuse_methods(&new.reuse_challenge_types);
    let mut reused = Vec::with_capacity(new.authorizations.len());
    for authz in &new.authorizations {
        reused.push(match new.reuse_valid_until {
            Some(until) => {
                reusable_authz_within(
                    &mut tx,
                    new.account_id,
                    (authz.identifier.kind().as_str(), authz.identifier.value()),
                    codec::unix(until),
                    new.valid_authz_lifetime.map(|l| l.whole_seconds()),
                    &methods,
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
    let pending_authz = match pending.settle(&mut exceeded) {
        Ok(usage) => usage,
        Err(over) => {
            return Ok(OrderCreation::WouldExceed {
                exceeded: over,
                also: exceeded,
            });
        }
    };
    let duplicates = match count_duplicates(&mut tx, &new, guards, now)
        .await?
        .settle(&mut exceeded)
    {
        Ok(usage) => usage,
        Err(over) => {
            return Ok(OrderCreation::WouldExceed {
                exceeded: over,
                also: exceeded,
            });
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
pub(crate) enum Counted<U> {
    /// Within the cap (or not counted: `None`), with how full it is once the order is created.
    Within(Option<U>),
    /// Over the cap, and whether the caller asked to refuse the order then.
    Exceeded(GuardExceeded, bool),
}

impl<U> Counted<U> {
    /// The usage to report with the created order: `Err` with the limit when it is exceeded and
    /// the caller asked to refuse then; an exceeded limit not to refuse on is added to `exceeded`
    /// and reports no usage.
    pub(crate) fn settle(
        self,
        exceeded: &mut Vec<GuardExceeded>,
    ) -> Result<Option<U>, GuardExceeded> {
        match self {
            Counted::Within(usage) => Ok(usage),
            Counted::Exceeded(over, true) => Err(over),
            Counted::Exceeded(over, false) => {
                exceeded.push(over);
                Ok(None)
            }
        }
    }
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
            None => {
                let lifetime = new.valid_authz_lifetime.map(|l| l.whole_seconds());
                insert_authz_with(&mut *conn, new.account_id, authz, lifetime, now_s).await?
            }
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
/// function `certeasy_create_order` (migration 0013, with the authorizations' lifetime of
/// migration 0025), one round trip instead of three per
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
            "SELECT * FROM certeasy_create_order($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
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
    .bind(new.valid_authz_lifetime.map(|l| l.whole_seconds()))
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
        finalize_client_ip: None,
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
pub(crate) async fn reusable_authz(
    conn: &mut Conn,
    account: AccountId,
    kind: &str,
    value: &str,
    until: i64,
) -> Result<Option<(i64, i64)>> {
    reusable_authz_within(conn, account, (kind, value), until, None, "").await
}

/// The challenge types a reused authorization must have been validated with, as one text
/// parameter the reuse queries match with `LIKE` on both backends: each type between spaces,
/// or empty for any. (No type name holds `%` or `_`.)
fn reuse_methods(types: &[ChallengeType]) -> String {
    if types.is_empty() {
        return String::new();
    }
    let mut text = String::from(" ");
    for t in types {
        text.push_str(t.as_str());
        text.push(' ');
    }
    text
}

/// [`reusable_authz`] under a valid-authorization lifetime `within` (seconds) when one is
/// given: the authorization must also have been validated less than `within` before `until`,
/// and the expiry returned is the earlier of its own and its validation plus `within`, so the
/// order that reuses it expires no later (`Plan::of`).
async fn reusable_authz_within(
    conn: &mut Conn,
    account: AccountId,
    (kind, value): (&str, &str),
    until: i64,
    within: Option<i64>,
    methods: &str,
) -> Result<Option<(i64, i64)>> {
    let Some(within) = within else {
        let row = sql::query(
            "SELECT a.id AS id, a.expires_at AS expires_at FROM authorizations a \
             JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' \
             WHERE a.account_id = $1 AND a.identifier_type = $2 \
             AND a.identifier_value = $3 AND a.status = 'valid' AND a.expires_at > $4 \
             AND ($5 = '' OR $5 LIKE ('% ' || c.type || ' %')) \
             ORDER BY a.expires_at DESC, a.id DESC LIMIT 1",
        )
        .bind(account.0)
        .bind(kind)
        .bind(value)
        .bind(until)
        .bind(methods)
        .fetch_optional(&mut *conn)
        .await?;
        return row
            .map(|r| Ok((r.try_get("id")?, r.try_get("expires_at")?)))
            .transpose();
    };
    // The validation instant is the valid challenge's (one per authorization).
    let row = sql::query(
        "SELECT a.id AS id, a.expires_at AS expires_at, c.validated_at AS validated_at \
         FROM authorizations a JOIN challenges c ON c.authz_id = a.id AND c.status = 'valid' \
         WHERE a.account_id = $1 AND a.identifier_type = $2 AND a.identifier_value = $3 \
         AND a.status = 'valid' AND a.expires_at > $4 AND c.validated_at > $4 - $5 \
         AND ($6 = '' OR $6 LIKE ('% ' || c.type || ' %')) \
         ORDER BY c.validated_at DESC, a.expires_at DESC, a.id DESC LIMIT 1",
    )
    .bind(account.0)
    .bind(kind)
    .bind(value)
    .bind(until)
    .bind(within)
    .bind(methods)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|r| {
        let expires: i64 = r.try_get("expires_at")?;
        let validated: i64 = r.try_get("validated_at")?;
        Ok((
            r.try_get("id")?,
            expires.min(validated.saturating_add(within)),
        ))
    })
    .transpose()
}

pub(crate) async fn insert_authz(
    conn: &mut Conn,
    account: AccountId,
    authz: &crate::model::NewAuthz,
    now: i64,
) -> Result<i64> {
    insert_authz_with(conn, account, authz, None, now).await
}

/// Writes a pending authorization and its challenges; `valid_lifetime` (seconds) is the
/// profile's own valid-authorization lifetime it keeps, `None` for the CA-wide one.
async fn insert_authz_with(
    conn: &mut Conn,
    account: AccountId,
    authz: &crate::model::NewAuthz,
    valid_lifetime: Option<i64>,
    now: i64,
) -> Result<i64> {
    let id: i64 = sql::query_scalar(
        "INSERT INTO authorizations (account_id, identifier_type, identifier_value, status, expires_at, created_at, valid_lifetime) \
         VALUES ($1, $2, $3, 'pending', $4, $5, $6) RETURNING id",
    )
    .bind(account.0)
    .bind(authz.identifier.kind().as_str())
    .bind(authz.identifier.value())
    .bind(codec::unix(authz.expires_at))
    .bind(now)
    .bind(valid_lifetime)
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
pub(crate) async fn count_pending_authz(
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
