//! The shared vocabulary of Certeasy: typed ids, identifiers, statuses, problem kinds and the clock.
//!
//! Nothing here does I/O or knows a wire format. Crates talk to each other in these types so that an
//! `AccountId` can never be passed where an `OrderId` is expected, and an identifier that exists at
//! all has already been normalised and validated. The one URL here is the account URI
//! (`account_uri`), because RFC 8657 makes it the account's name in CAA records as well.

pub mod account_uri;
pub mod clock;
pub mod duration;
pub mod eab_policy;
pub mod identifier;
pub mod ids;
pub mod problem;
pub mod status;
