//! Time is passed in, never read from the system directly, so tests can drive a fake clock.

use std::sync::Arc;
use std::sync::Mutex;

use time::Duration;
use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time, UTC.
    fn now(&self) -> OffsetDateTime;
}

/// Shared handle to a clock, cheap to clone.
pub type SharedClock = Arc<dyn Clock>;

/// The real wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when a test moves it.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<OffsetDateTime>>,
}

impl FakeClock {
    /// A fake clock starting at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward (or backward, with a negative duration).
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }

    /// Sets the clock to an exact instant.
    pub fn set(&self, to: OffsetDateTime) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now = to;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> OffsetDateTime {
        *self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let start = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let clock = FakeClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::seconds(90));
        assert_eq!(clock.now(), start + Duration::seconds(90));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }
}
