//! What operators look up: accounts and certificates filtered and listed a page at a time, the
//! counts an account holds, and the revocation of a batch of certificates.
//!
//! Pages are keyset pages on the id, newest first (`id < before ORDER BY id DESC LIMIT n`), so
//! page 1,000 costs what page 1 does. Each filter an operator reaches for at two million
//! certificates has an index that hands out its rows in id order or close to it: the serial
//! (unique), the account (`certificates_account`, migration 0009: `(account_id, id)`), a name
//! (`certificate_names`, migration 0026: `(name, certificate_id)`, written with the
//! certificate), and the expiry (`certificates_expiry`, `not_after`; on SQLite it holds the id as
//! its rowid, so it covers the id list). The others (issue date, revocation) are checked on the
//! rows read, so alone they cost a scan in id order that stops as soon as a page is full.
//!
//! A page is chosen first, as ids only (`page_ids`), and its rows and names read after, by
//! primary key: an expiry range of a hundred thousand certificates then sorts ids from the index
//! and reads a hundred rows, instead of reading (and joining the order of) every certificate in
//! the range before sorting. A name filter is driven from `certificate_names`, whose key is
//! already in the page's order. The names shown are the `identifiers` of the certificate's
//! order (one `type:value` per line), which is kept with the certificate.
//!
//! A bulk revocation ([`Storage::revoke_certificates`]) is written in transactions of at most
//! [`REVOKE_CHUNK`] certificates, so that neither SQLite's one writer nor PostgreSQL's row locks
//! are held from issuance for longer than one such chunk takes.

use acme_core::ids::AccountId;
use acme_core::ids::CertificateId;
use acme_core::ids::OrderId;
use acme_core::status::RevocationReason;
use time::OffsetDateTime;

use crate::Result;
use crate::Storage;
use crate::audit;
use crate::audit::AuditEvent;
use crate::codec;
use crate::crls;
use crate::error::Error;
use crate::model::Account;
use crate::model::AccountCounts;
use crate::model::AccountFilter;
use crate::model::CertificateFilter;
use crate::model::CertificateSummary;
use crate::model::Page;
use crate::rows;
use crate::rows::account_cols;
use crate::sql;
use crate::sql::Params;
use crate::sql::Query;
use crate::sql::Row;
use crate::sql::one_off;

/// A value bound to a placeholder, kept until the statement text is complete.
enum Arg {
    Int(i64),
    Text(String),
}

/// Conditions with their placeholders and values, in binding order.
struct Conditions {
    params: Params,
    clauses: Vec<String>,
    args: Vec<Arg>,
}

impl Conditions {
    fn new(s: &Storage) -> Self {
        Self {
            params: Params::new(s.backend),
            clauses: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds `template` with each `?` replaced by the next placeholder, binding `args` in order.
    fn push(&mut self, template: &str, args: Vec<Arg>) {
        let mut clause = String::with_capacity(template.len() + 8);
        for (i, part) in template.split('?').enumerate() {
            if i > 0 {
                clause.push_str(&self.params.one());
            }
            clause.push_str(part);
        }
        self.clauses.push(clause);
        self.args.extend(args);
    }

    fn int(&mut self, template: &str, value: i64) {
        self.push(template, vec![Arg::Int(value)]);
    }

    fn text(&mut self, template: &str, value: String) {
        self.push(template, vec![Arg::Text(value)]);
    }

    fn where_clause(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.clauses.join(" AND "))
        }
    }

    /// The statement with every value bound, in the order the placeholders were handed out.
    fn bind(self, sql: String) -> Query {
        let mut query = one_off(sql);
        for arg in self.args {
            query = match arg {
                Arg::Int(v) => query.bind(v),
                Arg::Text(v) => query.bind(v),
            };
        }
        query
    }
}

/// `LIKE` pattern text matching `text` literally (with `ESCAPE '\'`).
fn like_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// What a certificate filter reads: `certificates c`, alone or driven from the rows of one name
/// in `certificate_names n`; and the column its pages are keyed on (the same id either way, but
/// named where the driving index holds it, so that the keyset bound is part of the index range).
fn certificate_source(filter: &CertificateFilter) -> (&'static str, &'static str) {
    if filter.name.is_some() {
        (
            "certificate_names n JOIN certificates c ON c.id = n.certificate_id",
            "n.certificate_id",
        )
    } else {
        ("certificates c", "c.id")
    }
}

/// Adds the certificate filter's conditions on `certificates c` (and `certificate_names n` for
/// the name), as [`certificate_source`] reads them.
fn certificate_conditions(cond: &mut Conditions, filter: &CertificateFilter) {
    if let Some(name) = &filter.name {
        // The line of the order's list, as `store_names` wrote it.
        cond.text("n.name = ?", name.to_string());
    }
    if let Some(serial) = &filter.serial {
        cond.text("c.serial = ?", serial.to_hex());
    }
    if let Some(account) = filter.account {
        cond.int("c.account_id = ?", account.0);
    }
    if let Some(t) = filter.issued_from {
        cond.int("c.issued_at >= ?", codec::unix(t));
    }
    if let Some(t) = filter.issued_until {
        cond.int("c.issued_at < ?", codec::unix(t));
    }
    if let Some(t) = filter.expires_from {
        cond.int("c.not_after >= ?", codec::unix(t));
    }
    if let Some(t) = filter.expires_until {
        cond.int("c.not_after < ?", codec::unix(t));
    }
    match filter.revoked {
        Some(true) => cond.push("c.revoked_at IS NOT NULL", Vec::new()),
        Some(false) => cond.push("c.revoked_at IS NULL", Vec::new()),
        None => {}
    }
}

fn summary(row: &Row) -> Result<CertificateSummary> {
    Ok(CertificateSummary {
        id: CertificateId(row.try_get("id")?),
        account_id: AccountId(row.try_get("account_id")?),
        order_id: OrderId(row.try_get("order_id")?),
        serial: rows::serial_column(row)?,
        identifiers: codec::decode_identifiers(&row.try_get::<String, _>("identifiers")?)?,
        not_before: codec::time_from_unix(row.try_get("not_before")?)?,
        not_after: codec::time_from_unix(row.try_get("not_after")?)?,
        issued_at: codec::time_from_unix(row.try_get("issued_at")?)?,
        revoked_at: codec::opt_time_from_unix(row.try_get("revoked_at")?)?,
        revocation_reason: rows::revocation_reason_column(row)?,
    })
}

/// The statement of one page of [`Storage::list_certificates`], with its values. The page's ids
/// are chosen by the inner statement from the filter's index alone (a covering read where the
/// index holds every column the filter names); only those rows are then read, with their order's
/// names. SQLite walks the sorted id list of `IN` in order, so the outer `ORDER BY` sorts nothing.
fn page_statement(
    s: &Storage,
    filter: &CertificateFilter,
    page: Page<CertificateId>,
) -> (String, Conditions) {
    let mut cond = Conditions::new(s);
    certificate_conditions(&mut cond, filter);
    let (from, key) = certificate_source(filter);
    if let Some(before) = page.before {
        cond.int(&format!("{key} < ?"), before.0);
    }
    let limit = cond.params.one();
    let sql = format!(
        "SELECT c.id, c.account_id, c.order_id, c.serial, c.not_before, c.not_after, c.issued_at, \
         c.revoked_at, c.revocation_reason, o.identifiers \
         FROM certificates c JOIN orders o ON o.id = c.order_id \
         WHERE c.id IN (SELECT {key} FROM {from} {} ORDER BY {key} DESC LIMIT {limit}) \
         ORDER BY c.id DESC",
        cond.where_clause()
    );
    cond.args.push(Arg::Int(i64::from(page.limit)));
    (sql, cond)
}

impl Storage {
    /// Accounts matching `filter`, newest first, one keyset page.
    pub async fn list_accounts(
        &self,
        filter: &AccountFilter,
        page: Page<AccountId>,
    ) -> Result<Vec<Account>> {
        let mut cond = Conditions::new(self);
        if let Some(status) = filter.status {
            cond.text("status = ?", status.as_str().to_owned());
        }
        if let Some(contact) = &filter.contact {
            cond.text(
                "contacts LIKE ? ESCAPE '\\'",
                format!("%{}%", like_literal(contact)),
            );
        }
        if let Some(before) = page.before {
            cond.int("id < ?", before.0);
        }
        let limit = cond.params.one();
        let sql = format!(
            concat!(
                "SELECT ",
                account_cols!(),
                " FROM accounts {} ORDER BY id DESC LIMIT {}"
            ),
            cond.where_clause(),
            limit
        );
        let rows = cond
            .bind(sql)
            .bind(i64::from(page.limit))
            .fetch_all(&self.db)
            .await?;
        rows.iter().map(rows::account).collect()
    }

    /// How many orders (still stored), certificates and revoked certificates the account has.
    pub async fn account_counts(&self, account: AccountId) -> Result<AccountCounts> {
        let orders = sql::query_scalar::<i64>("SELECT COUNT(*) FROM orders WHERE account_id = $1")
            .bind(account.0)
            .fetch_one(&self.db)
            .await?;
        let row = sql::query(
        "SELECT COUNT(*) AS n, COUNT(revoked_at) AS revoked FROM certificates WHERE account_id = $1",
    )
    .bind(account.0)
    .fetch_one(&self.db)
    .await?;
        let count = |n: i64| u64::try_from(n).map_err(|_| Error::Corrupt(format!("count {n}")));
        Ok(AccountCounts {
            orders: count(orders)?,
            certificates: count(row.try_get("n")?)?,
            revoked_certificates: count(row.try_get("revoked")?)?,
        })
    }

    /// Certificates matching `filter` with the names they hold, newest first, one keyset page.
    pub async fn list_certificates(
        &self,
        filter: &CertificateFilter,
        page: Page<CertificateId>,
    ) -> Result<Vec<CertificateSummary>> {
        let (sql, cond) = page_statement(self, filter, page);
        let rows = cond.bind(sql).fetch_all(&self.db).await?;
        rows.iter().map(summary).collect()
    }

    /// How many certificates match `filter` (a bulk revocation's total, before it starts).
    pub async fn count_certificates(&self, filter: &CertificateFilter) -> Result<u64> {
        let mut cond = Conditions::new(self);
        certificate_conditions(&mut cond, filter);
        let (from, _) = certificate_source(filter);
        let sql = format!("SELECT COUNT(*) AS n FROM {from} {}", cond.where_clause());
        let row = cond.bind(sql).fetch_one(&self.db).await?;
        let n: i64 = row.try_get("n")?;
        u64::try_from(n).map_err(|_| Error::Corrupt(format!("count {n}")))
    }

    /// Revokes those of `ids` that are not revoked yet and returns them (highest id first); one
    /// already revoked keeps its first revocation. `audits[i]` records the revocation of
    /// `ids[i]`, in the same transaction, for each certificate this call revokes. The ids are
    /// taken [`REVOKE_CHUNK`] at a time, each chunk one statement in its own short transaction,
    /// so issuance waits for one chunk at most, never for the whole batch, and rests between
    /// chunks as long as the last one took. Should a chunk fail,
    /// the chunks before it stay committed and the error is returned: calling again with the
    /// same ids revokes the rest and skips what is done, so a batch is resumable as it stands.
    pub async fn revoke_certificates(
        &self,
        ids: &[CertificateId],
        reason: RevocationReason,
        now: OffsetDateTime,
        audits: &[AuditEvent],
    ) -> Result<Vec<CertificateId>> {
        if audits.len() != ids.len() {
            return Err(Error::Corrupt(format!(
                "{} revocation records for {} certificates",
                audits.len(),
                ids.len()
            )));
        }
        let mut revoked = Vec::with_capacity(ids.len());
        let mut chunks = ids
            .chunks(REVOKE_CHUNK)
            .zip(audits.chunks(REVOKE_CHUNK))
            .peekable();
        while let Some((ids, audits)) = chunks.next() {
            let started = std::time::Instant::now();
            revoked.extend(revoke_chunk(self, ids, reason, now, audits).await?);
            // Rest as long as the chunk took before the next one, as the pruner does: a bulk
            // revocation takes at most half of the writer's time, so issuance running beside it
            // keeps its turn (at 2 million certificates, unpaced chunks back to back raised
            // new-order's p99 from 25 ms to 200 ms).
            if chunks.peek().is_some() {
                tokio::time::sleep(started.elapsed()).await;
            }
        }
        revoked.sort_unstable_by(|a, b| b.cmp(a));
        Ok(revoked)
    }
}

/// Certificates one write transaction of a bulk revocation takes. Each costs the transaction an
/// index update, its CRL shard's counter and one audit record (hash-chained on SQLite); a
/// hundred of them hold SQLite's writer a few milliseconds, the order of one issuance.
pub(crate) const REVOKE_CHUNK: usize = 100;

/// One transaction of [`Storage::revoke_certificates`].
async fn revoke_chunk(
    s: &Storage,
    ids: &[CertificateId],
    reason: RevocationReason,
    now: OffsetDateTime,
    audits: &[AuditEvent],
) -> Result<Vec<CertificateId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut params = Params::new(s.backend);
    let at = params.one();
    let code = params.one();
    let list = params.many(ids.len());
    // Conditional on `revoked_at IS NULL`, as for one certificate: a revocation that got in
    // first keeps its time and reason, and is not counted here.
    let mut query = one_off(format!(
        "UPDATE certificates SET revoked_at = {at}, revocation_reason = {code} \
         WHERE id IN ({list}) AND revoked_at IS NULL RETURNING id"
    ))
    .bind(codec::unix(now))
    .bind(reason.code());
    for id in ids {
        query = query.bind(id.0);
    }
    let mut tx = s.db.begin_write().await?;
    let rows = query.fetch_all(&mut *tx).await?;
    for row in &rows {
        // In the same transaction: a committed revocation always makes its CRL shard stale.
        crls::count_revocation(&mut tx, row.try_get::<i64, _>("id")?).await?;
    }
    // The records last, in the order of `ids`, so the chain's order does not depend on the
    // order the statement returned its rows in.
    let done: std::collections::HashSet<i64> = rows
        .iter()
        .map(|r| r.try_get::<i64, _>("id"))
        .collect::<Result<_>>()?;
    for (id, event) in ids.iter().zip(audits) {
        if done.contains(&id.0) {
            audit::append_in(&mut tx, event, now).await?;
        }
    }
    tx.commit().await?;
    rows.iter()
        .map(|r| r.try_get::<i64, _>("id").map(CertificateId))
        .collect()
}

#[cfg(test)]
mod tests {
    use acme_core::identifier::Identifier;
    use acme_core::ids::AccountId;
    use acme_core::ids::CertificateId;
    use acme_core::ids::Serial;
    use time::OffsetDateTime;

    use super::page_statement;
    use crate::Backend;
    use crate::Storage;
    use crate::model::CertificateFilter;
    use crate::model::Page;

    /// The filters that must be served by an index at two million certificates, with the index
    /// each must read (SQLite's `EXPLAIN QUERY PLAN` wording, then PostgreSQL's index name).
    fn indexed_filters() -> Vec<(CertificateFilter, &'static str, &'static str)> {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        vec![
            (
                CertificateFilter {
                    name: Identifier::dns("www.example.com").ok(),
                    ..Default::default()
                },
                "SEARCH n USING PRIMARY KEY (name=? AND certificate_id<?)",
                "certificate_names_pkey",
            ),
            (
                CertificateFilter {
                    expires_from: Some(now),
                    expires_until: Some(now + time::Duration::days(7)),
                    ..Default::default()
                },
                "SEARCH c USING COVERING INDEX certificates_expiry (not_after>? AND not_after<?)",
                "certificates_expiry",
            ),
            (
                CertificateFilter {
                    account: Some(AccountId(7)),
                    ..Default::default()
                },
                "INDEX certificates_account (account_id=? AND id<?)",
                "certificates_account",
            ),
            (
                CertificateFilter {
                    serial: Serial::from_hex("7f0102"),
                    ..Default::default()
                },
                "(serial=?)",
                "certificates_serial_key",
            ),
            (
                CertificateFilter {
                    name: Identifier::dns("www.example.com").ok(),
                    revoked: Some(false),
                    ..Default::default()
                },
                "SEARCH n USING PRIMARY KEY (name=? AND certificate_id<?)",
                "certificate_names_pkey",
            ),
        ]
    }

    /// The plan of one page of `filter` below a keyset bound, one line per step.
    async fn plan(s: &Storage, filter: &CertificateFilter) -> String {
        let page = Page {
            before: Some(CertificateId(1_000_000)),
            limit: 100,
        };
        let (sql, cond) = page_statement(s, filter, page);
        let (explain, column) = match s.backend {
            Backend::Sqlite => ("EXPLAIN QUERY PLAN", "detail"),
            Backend::Postgres => ("EXPLAIN", "QUERY PLAN"),
        };
        let mut tx = s.db.begin_write().await.unwrap();
        if s.backend == Backend::Postgres {
            // The test's tables are empty, where a sequential scan always wins: this asks
            // whether the statement can be served by the index at all.
            crate::sql::query("SET LOCAL enable_seqscan = off")
                .execute(&mut *tx)
                .await
                .unwrap();
        }
        let rows = cond
            .bind(format!("{explain} {sql}"))
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        rows.iter()
            .map(|r| r.try_get::<String, _>(column).unwrap())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SQLite has no statistics (the server never runs ANALYZE), so the plan chosen on an
    /// empty database is the plan at two million certificates.
    #[tokio::test]
    async fn sqlite_filters_read_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::connect(&format!("sqlite://{}", dir.path().join("c.db").display()))
            .await
            .unwrap();
        for (filter, step, _) in indexed_filters() {
            let plan = plan(&s, &filter).await;
            assert!(plan.contains(step), "{filter:?}:\n{plan}");
            // Only the page's rows are read by key: nothing scans a table.
            assert!(!plan.contains("SCAN c"), "{filter:?}:\n{plan}");
            assert!(!plan.contains("SCAN o"), "{filter:?}:\n{plan}");
        }
        s.close().await;
    }

    #[tokio::test]
    async fn postgres_filters_can_read_their_index() {
        let db = testkit::postgres::PgDatabase::create("admin_plans").unwrap();
        let s = Storage::connect(db.url()).await.unwrap();
        for (filter, _, index) in indexed_filters() {
            let plan = plan(&s, &filter).await;
            assert!(plan.contains(index), "{filter:?}:\n{plan}");
        }
        s.close().await;
    }
}
