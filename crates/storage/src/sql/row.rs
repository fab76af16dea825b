//! A result row of either backend, read by column name or position.

use std::sync::Arc;

use sqlx::postgres::PgRow;

use crate::Result;
use crate::error::Error;
use crate::sql::value::Decode;

/// One row. SQLite rows are copied out of the statement at once, so that no borrow of the
/// connection outlives the call that ran it.
pub(crate) enum Row {
    Pg(PgRow),
    Lite(LiteRow),
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Row::Pg(row) => f
                .debug_struct("PgRow")
                .field("columns", &sqlx::Row::len(row))
                .finish(),
            Row::Lite(row) => row.fmt(f),
        }
    }
}

#[derive(Debug)]
pub(crate) struct LiteRow {
    /// Shared by every row of one result.
    pub(crate) names: Arc<[String]>,
    pub(crate) values: Vec<rusqlite::types::Value>,
}

/// A column given by name or by position.
pub(crate) trait ColumnIndex {
    fn position_in(&self, names: &[String]) -> Option<usize>;
    fn pg_position(&self, row: &PgRow) -> Option<usize>;
    fn describe(&self) -> String;
}

impl ColumnIndex for &str {
    fn position_in(&self, names: &[String]) -> Option<usize> {
        names.iter().position(|n| n == self)
    }
    fn pg_position(&self, row: &PgRow) -> Option<usize> {
        sqlx::Row::columns(row)
            .iter()
            .position(|c| sqlx::Column::name(c) == *self)
    }
    fn describe(&self) -> String {
        (*self).to_owned()
    }
}

impl ColumnIndex for usize {
    fn position_in(&self, names: &[String]) -> Option<usize> {
        (*self < names.len()).then_some(*self)
    }
    fn pg_position(&self, row: &PgRow) -> Option<usize> {
        (*self < sqlx::Row::len(row)).then_some(*self)
    }
    fn describe(&self) -> String {
        format!("#{self}")
    }
}

impl Row {
    /// The column's value; the second type parameter mirrors sqlx so call sites read alike.
    pub(crate) fn try_get<T: Decode, I: ColumnIndex>(&self, column: I) -> Result<T> {
        let missing = || Error::Corrupt(format!("no column {}", column.describe()));
        match self {
            Row::Pg(row) => T::from_pg(row, column.pg_position(row).ok_or_else(missing)?),
            Row::Lite(row) => {
                let at = column.position_in(&row.names).ok_or_else(missing)?;
                let value = row.values.get(at).ok_or_else(missing)?;
                T::from_lite(value, &row.names[at])
            }
        }
    }
}
