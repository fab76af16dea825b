//! Running statements against the pool or a connection of either backend.

use std::marker::PhantomData;

use crate::Result;
use crate::error::Error;
use crate::sql::Conn;
use crate::sql::ConnKind;
use crate::sql::Db;
use crate::sql::lite;
use crate::sql::row::Row;
use crate::sql::statement::Done;
use crate::sql::statement::Output;
use crate::sql::statement::Query;
use crate::sql::statement::Want;
use crate::sql::statement::one_off;
use crate::sql::statement::query;
use crate::sql::value::Bind;
use crate::sql::value::Decode;
use sqlx::postgres::PgConnection;

/// A statement whose first column is the result.
pub(crate) fn query_scalar<T: Decode>(sql: &'static str) -> QueryScalar<T> {
    QueryScalar {
        inner: query(sql),
        _decoded: PhantomData,
    }
}

/// [`one_off`] whose first column is the result.
pub(crate) fn one_off_scalar<T: Decode>(sql: String) -> QueryScalar<T> {
    QueryScalar {
        inner: one_off(sql),
        _decoded: PhantomData,
    }
}

/// Where a statement runs: the pool (any connection; SQLite picks a reader or the writer by
/// what the statement does) or one connection the caller holds.
pub(crate) enum Target<'a> {
    Db(&'a Db),
    Conn(&'a mut Conn),
}

impl<'a> From<&'a Db> for Target<'a> {
    fn from(db: &'a Db) -> Self {
        Target::Db(db)
    }
}

impl<'a> From<&'a std::sync::Arc<Db>> for Target<'a> {
    fn from(db: &'a std::sync::Arc<Db>) -> Self {
        Target::Db(db)
    }
}

impl<'a> From<&'a mut Conn> for Target<'a> {
    fn from(conn: &'a mut Conn) -> Self {
        Target::Conn(conn)
    }
}

impl Query {
    pub(crate) async fn execute<'a>(self, target: impl Into<Target<'a>>) -> Result<Done> {
        match run(&self, target.into(), Want::Done).await? {
            Output::Done(rows) => Ok(Done::new(rows)),
            Output::Rows(_) => Err(Error::Corrupt("rows from an execute".into())),
        }
    }

    pub(crate) async fn fetch_optional<'a>(
        self,
        target: impl Into<Target<'a>>,
    ) -> Result<Option<Row>> {
        Ok(rows(run(&self, target.into(), Want::First).await?)?
            .into_iter()
            .next())
    }

    pub(crate) async fn fetch_one<'a>(self, target: impl Into<Target<'a>>) -> Result<Row> {
        self.fetch_optional(target).await?.ok_or(Error::NotFound)
    }

    pub(crate) async fn fetch_all<'a>(self, target: impl Into<Target<'a>>) -> Result<Vec<Row>> {
        rows(run(&self, target.into(), Want::All).await?)
    }
}

fn rows(output: Output) -> Result<Vec<Row>> {
    match output {
        Output::Rows(rows) => Ok(rows),
        Output::Done(_) => Err(Error::Corrupt("no rows from a query".into())),
    }
}

/// A [`Query`] whose first column is decoded as `T`.
pub(crate) struct QueryScalar<T> {
    inner: Query,
    _decoded: PhantomData<fn() -> T>,
}

impl<T: Decode> QueryScalar<T> {
    pub(crate) fn bind(mut self, value: impl Bind) -> Self {
        self.inner = self.inner.bind(value);
        self
    }

    pub(crate) async fn fetch_optional<'a>(
        self,
        target: impl Into<Target<'a>>,
    ) -> Result<Option<T>> {
        self.inner
            .fetch_optional(target)
            .await?
            .map(|row| row.try_get(0_usize))
            .transpose()
    }

    pub(crate) async fn fetch_one<'a>(self, target: impl Into<Target<'a>>) -> Result<T> {
        self.inner.fetch_one(target).await?.try_get(0_usize)
    }

    pub(crate) async fn fetch_all<'a>(self, target: impl Into<Target<'a>>) -> Result<Vec<T>> {
        self.inner
            .fetch_all(target)
            .await?
            .iter()
            .map(|row| row.try_get(0_usize))
            .collect()
    }
}

async fn run(query: &Query, target: Target<'_>, want: Want) -> Result<Output> {
    match target {
        Target::Db(Db::Postgres(pg)) => {
            let mut lease = pg.lease().await?;
            lease
                .with(async |conn| run_pg(conn, query, want).await)
                .await
        }
        Target::Db(Db::Sqlite(lite)) => run_lite_anywhere(lite, query, want).await,
        Target::Conn(conn) => match &mut conn.0 {
            ConnKind::Pg(lease) => {
                lease
                    .with(async |conn| run_pg(conn, query, want).await)
                    .await
            }
            ConnKind::LiteAny(lite) => run_lite_anywhere(lite, query, want).await,
            ConnKind::Lite(lease) => lite::run(lease.conn()?, query, want),
        },
    }
}

/// Outside a transaction: the writer when it is idle, since its page cache is current (every
/// commit makes the readers' caches stale, and a stale cache is read again from the file);
/// otherwise a reader for a statement that only reads, else the writer once it is free. The
/// reader is given back before the writer is awaited, so no task ever holds one while waiting
/// for the other, and a task holding the writer in a transaction never waits for it again.
async fn run_lite_anywhere(lite: &lite::LiteDb, query: &Query, want: Want) -> Result<Output> {
    if let Some(writer) = lite.writer.try_lease() {
        return lite::run(writer.conn()?, query, want);
    }
    {
        let reader = lite.readers.lease().await?;
        let conn = reader.conn()?;
        if lite::is_read_only(conn, query)? {
            return lite::run(conn, query, want);
        }
    }
    let writer = lite.writer.lease().await?;
    lite::run(writer.conn()?, query, want)
}

async fn run_pg(
    conn: &mut PgConnection,
    query: &Query,
    want: Want,
) -> std::result::Result<Output, sqlx::Error> {
    let q = query.for_sqlx();
    Ok(match want {
        Want::Done => Output::Done(q.execute(conn).await?.rows_affected()),
        Want::First => Output::Rows(
            q.fetch_optional(conn)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
        ),
        Want::All => Output::Rows(q.fetch_all(conn).await?.into_iter().map(Row::Pg).collect()),
    })
}
