//! Orders: creation under the database-backed limits ([`create`]), reads ([`read`]), and
//! finalization with its outcome ([`finalize`]). Each module holds the `Storage` methods of its
//! concern, the PostgreSQL statements beside their SQLite twins.

mod create;
mod finalize;
mod read;

pub(crate) use create::count_pending_authz;
pub(crate) use create::insert_authz;
pub(crate) use create::reusable_authz;
#[cfg(feature = "bulk-fill")]
pub(crate) use finalize::Stored;
pub(crate) use finalize::account_of_order;
pub(crate) use finalize::not_ready;
#[cfg(feature = "bulk-fill")]
pub(crate) use finalize::store_certificate;
pub(crate) use finalize::take_ready;
