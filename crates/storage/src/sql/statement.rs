//! A statement and its arguments, as both backends take it: the text (static, or built at run
//! time), the values to bind, and whether it stays prepared. A leaf: the backends' runners
//! (`lite`, and the dispatch in `query`) read it, it reads neither.

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgArguments;
use sqlx::postgres::Postgres;

use crate::sql::row::Row;
use crate::sql::value::Bind;
use crate::sql::value::NullKind;
use crate::sql::value::Value;

/// How much of the result the caller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Rows changed only.
    Done,
    First,
    All,
}

pub(crate) enum Output {
    Done(u64),
    Rows(Vec<Row>),
}

/// What a statement changed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Done {
    rows: u64,
}

impl Done {
    pub(crate) fn new(rows: u64) -> Self {
        Self { rows }
    }

    pub(crate) fn rows_affected(&self) -> u64 {
        self.rows
    }
}

#[derive(Debug)]
enum Text {
    Static(&'static str),
    Owned(String),
}

/// A statement and its arguments.
#[derive(Debug)]
pub(crate) struct Query {
    text: Text,
    args: Vec<Value>,
    persistent: bool,
}

/// A statement kept prepared on each connection that runs it.
pub(crate) fn query(sql: &'static str) -> Query {
    Query {
        text: Text::Static(sql),
        args: Vec::new(),
        persistent: true,
    }
}

/// A statement whose text is built at run time (a variable number of placeholders): prepared
/// for one use only, so that each shape does not take a place in the statement caches.
pub(crate) fn one_off(sql: String) -> Query {
    Query {
        text: Text::Owned(sql),
        args: Vec::new(),
        persistent: false,
    }
}

/// A statement whose text is built at run time but takes one of a few shapes (an `IN` list
/// padded to a power of two, say): kept prepared like a static one, since preparing it anew
/// on every call cost a hot path more than running it.
pub(crate) fn shaped(sql: String) -> Query {
    Query {
        text: Text::Owned(sql),
        args: Vec::new(),
        persistent: true,
    }
}

impl Query {
    pub(crate) fn bind(mut self, value: impl Bind) -> Self {
        self.args.push(value.into_value());
        self
    }

    pub(crate) fn sql(&self) -> &str {
        match &self.text {
            Text::Static(s) => s,
            Text::Owned(s) => s,
        }
    }

    pub(crate) fn args(&self) -> &[Value] {
        &self.args
    }

    pub(crate) fn persistent(&self) -> bool {
        self.persistent
    }

    /// The sqlx form of this statement, borrowing its arguments.
    pub(crate) fn for_sqlx(&self) -> sqlx::query::Query<'_, Postgres, PgArguments> {
        let mut q = match &self.text {
            Text::Static(s) => sqlx::query(*s),
            Text::Owned(s) => sqlx::query(AssertSqlSafe(s.clone())),
        }
        .persistent(self.persistent);
        for value in &self.args {
            q = match value {
                Value::Null(NullKind::Int) => q.bind(None::<i64>),
                Value::Null(NullKind::Text) => q.bind(None::<String>),
                Value::Null(NullKind::Blob) => q.bind(None::<Vec<u8>>),
                Value::Int(i) => q.bind(*i),
                Value::Text(s) => q.bind(s.as_str()),
                Value::Blob(b) => q.bind(b.as_slice()),
            };
        }
        q
    }
}
