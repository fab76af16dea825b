//! What operators look up: accounts and certificates filtered and listed a page at a time, the
//! counts an account holds, and the revocation of a batch of certificates.
//!
//! Pages are keyset pages on the id, newest first (`id < before ORDER BY id DESC LIMIT n`), so
//! page 1,000 costs what page 1 does. The filters that an index serves are the serial (unique),
//! the account (`certificates_account`, migration 0009) and the expiry (`certificates_expiry`);
//! the others (name, issue date, revocation) are checked on the rows read in id order, so alone
//! they cost a scan that stops as soon as a page is full. A name is not an indexed column: the
//! names of a certificate are the `identifiers` of its order (one `type:value` per line), which
//! the listing joins in by primary key.

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

/// Adds the certificate filter's conditions on `certificates c` (and `orders o` for the name).
fn certificate_conditions(cond: &mut Conditions, filter: &CertificateFilter) {
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
    if let Some(name) = &filter.name {
        // One whole line of the list: the newlines around it are bound values, since SQLite
        // and PostgreSQL spell a newline literal differently (char(10), chr(10)).
        cond.push(
            "(? || o.identifiers || ?) LIKE ? ESCAPE '\\'",
            vec![
                Arg::Text("\n".to_owned()),
                Arg::Text("\n".to_owned()),
                Arg::Text(format!("%\n{}\n%", like_literal(&name.to_string()))),
            ],
        );
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
        let mut cond = Conditions::new(self);
        certificate_conditions(&mut cond, filter);
        if let Some(before) = page.before {
            cond.int("c.id < ?", before.0);
        }
        let limit = cond.params.one();
        let sql = format!(
            "SELECT c.id, c.account_id, c.order_id, c.serial, c.not_before, c.not_after, c.issued_at, \
         c.revoked_at, c.revocation_reason, o.identifiers \
         FROM certificates c JOIN orders o ON o.id = c.order_id {} \
         ORDER BY c.id DESC LIMIT {limit}",
            cond.where_clause()
        );
        let rows = cond
            .bind(sql)
            .bind(i64::from(page.limit))
            .fetch_all(&self.db)
            .await?;
        rows.iter().map(summary).collect()
    }

    /// How many certificates match `filter` (a bulk revocation's total, before it starts).
    pub async fn count_certificates(&self, filter: &CertificateFilter) -> Result<u64> {
        let mut cond = Conditions::new(self);
        certificate_conditions(&mut cond, filter);
        // Orders are read only when the name needs them.
        let join = if filter.name.is_some() {
            "JOIN orders o ON o.id = c.order_id"
        } else {
            ""
        };
        let sql = format!(
            "SELECT COUNT(*) AS n FROM certificates c {join} {}",
            cond.where_clause()
        );
        let row = cond.bind(sql).fetch_one(&self.db).await?;
        let n: i64 = row.try_get("n")?;
        u64::try_from(n).map_err(|_| Error::Corrupt(format!("count {n}")))
    }

    /// Revokes those of `ids` that are not revoked yet, in one statement, and returns them
    /// (highest id first); one already revoked keeps its first revocation. `audits[i]` records
    /// the revocation of `ids[i]`, in the same transaction, for each certificate this call
    /// revokes.
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
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut params = Params::new(self.backend);
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
        let mut tx = self.db.begin_write().await?;
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
        let mut revoked = rows
            .iter()
            .map(|r| r.try_get::<i64, _>("id").map(CertificateId))
            .collect::<Result<Vec<_>>>()?;
        revoked.sort_unstable_by(|a, b| b.cmp(a));
        Ok(revoked)
    }
}
