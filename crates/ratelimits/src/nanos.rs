//! Instants as Unix nanoseconds in `i64`, the unit every TAT is stored in.

use std::time::Duration;

use time::OffsetDateTime;

/// Unix nanoseconds, saturated to the `i64` range (years 1678–2262).
pub fn unix_nanos(at: OffsetDateTime) -> i64 {
    let n = at.unix_timestamp_nanos();
    i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX })
}

/// The instant `nanos` after the Unix epoch.
pub fn from_unix_nanos(nanos: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(nanos))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// A non-negative nanosecond span as a `Duration`; negative spans are zero.
pub fn duration(nanos: i64) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}
