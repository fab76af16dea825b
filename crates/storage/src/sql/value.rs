//! Values crossing the boundary in both directions: what a statement binds and what a row holds.
//!
//! The schema stores only integers, text and bytes (times are unix seconds, booleans 0/1), so
//! three kinds cover every column. A NULL keeps its kind because PostgreSQL types a parameter by
//! what is bound to it, even when nothing is.

use rusqlite::ToSql;
use rusqlite::types::ToSqlOutput;
use rusqlite::types::ValueRef;
use sqlx::Row as _;
use sqlx::TypeInfo as _;
use sqlx::ValueRef as _;
use sqlx::postgres::PgRow;

use crate::Result;
use crate::error::Error;

/// The type a NULL stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NullKind {
    Int,
    Text,
    Blob,
}

/// One bound parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null(NullKind),
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

impl ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null(_) => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// What `Query::bind` takes.
pub(crate) trait Bind {
    fn into_value(self) -> Value;
}

/// The kind of NULL an absent `Option<T>` binds.
pub(crate) trait NullOf {
    const NULL: NullKind;
}

impl Bind for i64 {
    fn into_value(self) -> Value {
        Value::Int(self)
    }
}

impl Bind for &i64 {
    fn into_value(self) -> Value {
        Value::Int(*self)
    }
}

impl Bind for String {
    fn into_value(self) -> Value {
        Value::Text(self)
    }
}

impl Bind for &String {
    fn into_value(self) -> Value {
        Value::Text(self.clone())
    }
}

impl Bind for &str {
    fn into_value(self) -> Value {
        Value::Text(self.to_owned())
    }
}

impl Bind for Vec<u8> {
    fn into_value(self) -> Value {
        Value::Blob(self)
    }
}

impl Bind for &Vec<u8> {
    fn into_value(self) -> Value {
        Value::Blob(self.clone())
    }
}

impl Bind for &[u8] {
    fn into_value(self) -> Value {
        Value::Blob(self.to_vec())
    }
}

impl NullOf for i64 {
    const NULL: NullKind = NullKind::Int;
}
impl NullOf for &i64 {
    const NULL: NullKind = NullKind::Int;
}
impl NullOf for String {
    const NULL: NullKind = NullKind::Text;
}
impl NullOf for &String {
    const NULL: NullKind = NullKind::Text;
}
impl NullOf for &str {
    const NULL: NullKind = NullKind::Text;
}
impl NullOf for Vec<u8> {
    const NULL: NullKind = NullKind::Blob;
}
impl NullOf for &Vec<u8> {
    const NULL: NullKind = NullKind::Blob;
}
impl NullOf for &[u8] {
    const NULL: NullKind = NullKind::Blob;
}

impl<T: Bind + NullOf> Bind for Option<T> {
    fn into_value(self) -> Value {
        match self {
            Some(v) => v.into_value(),
            None => Value::Null(T::NULL),
        }
    }
}

/// What `Row::try_get` returns: decodable from either backend's row.
pub(crate) trait Decode: Sized {
    fn from_lite(value: &rusqlite::types::Value, column: &str) -> Result<Self>;
    fn from_pg(row: &PgRow, index: usize) -> Result<Self>;
}

fn mismatch(column: &str, want: &str, got: &rusqlite::types::Value) -> Error {
    Error::Corrupt(format!(
        "column {column}: expected {want}, found {:?}",
        got.data_type()
    ))
}

macro_rules! decode_via_sqlx {
    () => {
        fn from_pg(row: &PgRow, index: usize) -> Result<Self> {
            Ok(row.try_get(index)?)
        }
    };
}

impl Decode for i64 {
    fn from_lite(value: &rusqlite::types::Value, column: &str) -> Result<Self> {
        match value {
            rusqlite::types::Value::Integer(i) => Ok(*i),
            other => Err(mismatch(column, "integer", other)),
        }
    }

    /// Columns are `BIGINT`, but an expression (a literal, `CASE … THEN 1`) is `INTEGER` in
    /// PostgreSQL, and the native driver decodes only the exact type.
    fn from_pg(row: &PgRow, index: usize) -> Result<Self> {
        let raw = row.try_get_raw(index)?;
        let kind = raw.type_info();
        Ok(match kind.name() {
            "INT4" => i64::from(row.try_get::<i32, _>(index)?),
            "INT2" => i64::from(row.try_get::<i16, _>(index)?),
            _ => row.try_get(index)?,
        })
    }
}

impl Decode for String {
    fn from_lite(value: &rusqlite::types::Value, column: &str) -> Result<Self> {
        match value {
            rusqlite::types::Value::Text(s) => Ok(s.clone()),
            other => Err(mismatch(column, "text", other)),
        }
    }
    decode_via_sqlx!();
}

impl Decode for Vec<u8> {
    fn from_lite(value: &rusqlite::types::Value, column: &str) -> Result<Self> {
        match value {
            rusqlite::types::Value::Blob(b) => Ok(b.clone()),
            other => Err(mismatch(column, "blob", other)),
        }
    }
    decode_via_sqlx!();
}

impl<T: Decode> Decode for Option<T> {
    fn from_lite(value: &rusqlite::types::Value, column: &str) -> Result<Self> {
        match value {
            rusqlite::types::Value::Null => Ok(None),
            other => T::from_lite(other, column).map(Some),
        }
    }

    fn from_pg(row: &PgRow, index: usize) -> Result<Self> {
        if row.try_get_raw(index)?.is_null() {
            Ok(None)
        } else {
            T::from_pg(row, index).map(Some)
        }
    }
}
