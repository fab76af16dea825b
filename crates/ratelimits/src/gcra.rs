//! The Generic Cell Rate Algorithm on integer nanoseconds.
//!
//! A bucket is one number, its TAT: the instant at which it is full again. Every function here is
//! pure so the memory store, the Redis store's reply handling and the tests share one arithmetic.
//! Intermediate values are `i128`, so no sum of two `i64` instants can overflow; results are
//! saturated back into `i64`.

use crate::limit::Limit;

/// The outcome of asking one bucket for `cost` tokens at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the tokens are available.
    pub allowed: bool,
    /// Whole tokens left after this decision.
    pub remaining: u64,
    /// Nanoseconds until a request of the same cost would be allowed (non-zero even when allowed
    /// if the bucket now holds fewer than `cost` tokens).
    pub retry_in: i64,
    /// Nanoseconds until the bucket is full again.
    pub reset_in: i64,
    /// The TAT to store if this decision is written; for a denial, the (clamped) stored TAT.
    pub new_tat: i64,
}

fn sat(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// The stored TAT as the current limit sees it.
///
/// A TAT further ahead than `now + burst offset` holds more debt than the current limit allows,
/// which happens when a limit was raised (an override, a reload). Boulder keeps such debt
/// (letsencrypt/boulder#8785), so a raised limit does nothing for an exhausted bucket until the old
/// TAT passes; clamping makes the raise take effect at once.
pub fn effective_tat(now: i64, stored: Option<i64>, limit: &Limit) -> Option<i64> {
    let ceiling = sat(i128::from(now) + i128::from(limit.burst_offset()));
    stored.map(|tat| tat.min(ceiling))
}

/// Whether the stored TAT is beyond what the current limit allows and the clamped value must be
/// written back even if nothing is spent. Otherwise the ceiling `now + burst offset` would move
/// forward with `now` and an exhausted bucket would stay exhausted until the old TAT passed.
pub fn needs_clamp_write(now: i64, stored: Option<i64>, limit: &Limit) -> bool {
    effective_tat(now, stored, limit) != stored
}

/// Spends (or, with cost 0, peeks at) `cost` tokens. Pure: the caller decides whether to store
/// `new_tat`. `cost` above the burst is refused earlier, when a transaction is built; here it is
/// clamped to the burst so this function stays total.
pub fn decide(now: i64, stored: Option<i64>, limit: &Limit, cost: u64) -> Decision {
    let ei = i128::from(limit.emission_interval());
    let bo = i128::from(limit.burst_offset());
    let now_w = i128::from(now);
    let cost = i128::from(cost.min(limit.burst()));
    let increment = cost * ei;
    let tat = effective_tat(now, stored, limit);
    let base = tat.map_or(now_w, |t| now_w.max(i128::from(t)));
    let new_tat = base + increment;
    let diff = now_w - (new_tat - bo);
    if diff < 0 {
        Decision {
            allowed: false,
            remaining: tokens(now_w - (base - bo), ei),
            retry_in: sat(-diff),
            reset_in: sat(base - now_w),
            new_tat: tat.unwrap_or(now),
        }
    } else {
        Decision {
            allowed: true,
            remaining: tokens(diff, ei),
            retry_in: if diff < increment {
                sat(increment - diff)
            } else {
                0
            },
            reset_in: sat(new_tat - now_w),
            new_tat: sat(new_tat),
        }
    }
}

/// Whole tokens in `span` nanoseconds of capacity; never negative.
fn tokens(span: i128, ei: i128) -> u64 {
    if span <= 0 {
        return 0;
    }
    // The spans of real buckets fit in 64 bits, where division is a single instruction rather
    // than a call; the result is the same.
    if let (Ok(span), Ok(ei)) = (i64::try_from(span), i64::try_from(ei)) {
        return u64::try_from(span / ei).unwrap_or(u64::MAX);
    }
    u64::try_from(span / ei).unwrap_or(u64::MAX)
}

/// The TAT after giving back `cost` tokens, or `None` when there is nothing to write because the
/// bucket is already full. A refund never takes a bucket above its burst: the TAT never goes below
/// `now`.
pub fn refund(now: i64, stored: Option<i64>, limit: &Limit, cost: u64) -> Option<i64> {
    let tat = effective_tat(now, stored, limit)?;
    if tat <= now || cost == 0 {
        return None;
    }
    let decrement = i128::from(cost.min(limit.burst())) * i128::from(limit.emission_interval());
    Some(sat((i128::from(tat) - decrement).max(i128::from(now))))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Decision;
    use super::decide;
    use super::effective_tat;
    use super::needs_clamp_write;
    use super::refund;
    use crate::config::Mode;
    use crate::limit::Limit;

    const MS: i64 = 1_000_000;

    fn twenty_per_second() -> Limit {
        Limit::new("foo", 20, 20, Duration::from_secs(1), Mode::Enforce).unwrap()
    }

    /// Seed 001's newFoo example, step by step. The seed's prose claims 21 requests pass within
    /// 49 ms, which contradicts its own "the 20th more request within 50 ms is rejected": with a
    /// burst of 20 the exact arithmetic admits 20 and denies the 21st until t0+50ms. We assert the
    /// arithmetic, and the seed's steps 7–9 (deny, then accept 2 ms later, then a fresh burst after
    /// a vacation) hold with it.
    #[test]
    fn seed_walk_through_twenty_per_second() {
        let limit = twenty_per_second();
        let t0: i64 = 1_700_000_000_000_000_000;

        // 1–3: first request at t0.
        let d = decide(t0, None, &limit, 1);
        assert_eq!(
            d,
            Decision {
                allowed: true,
                remaining: 19,
                retry_in: 0,
                reset_in: 50 * MS,
                new_tat: t0 + 50 * MS
            }
        );
        let mut tat = d.new_tat;

        // 4–5: another request 5 ms later.
        let d = decide(t0 + 5 * MS, Some(tat), &limit, 1);
        assert_eq!(
            d,
            Decision {
                allowed: true,
                remaining: 18,
                retry_in: 0,
                reset_in: 95 * MS,
                new_tat: t0 + 100 * MS
            }
        );
        tat = d.new_tat;

        // 6: eighteen more, every 2 ms from t0+7ms to t0+41ms.
        for i in 0..18i64 {
            let now = t0 + 7 * MS + i * 2 * MS;
            let d = decide(now, Some(tat), &limit, 1);
            let expected_tat = t0 + (3 + i) * 50 * MS;
            let remaining = u64::try_from(17 - i).unwrap();
            let diff = now - (expected_tat - 1000 * MS);
            assert!(d.allowed, "request {i}");
            assert_eq!(d.new_tat, expected_tat);
            assert_eq!(d.remaining, remaining);
            assert_eq!(d.reset_in, expected_tat - now);
            assert_eq!(d.retry_in, if diff < 50 * MS { 50 * MS - diff } else { 0 });
            tat = d.new_tat;
        }
        assert_eq!(tat, t0 + 1000 * MS);

        // 7: the bucket is empty; at t0+49ms the next token is 1 ms away. The TAT is not modified.
        let d = decide(t0 + 49 * MS, Some(tat), &limit, 1);
        assert_eq!(
            d,
            Decision {
                allowed: false,
                remaining: 0,
                retry_in: MS,
                reset_in: 951 * MS,
                new_tat: tat
            }
        );

        // 8: 2 ms later the token has arrived.
        let d = decide(t0 + 51 * MS, Some(tat), &limit, 1);
        assert_eq!(
            d,
            Decision {
                allowed: true,
                remaining: 0,
                retry_in: 49 * MS,
                reset_in: 999 * MS,
                new_tat: t0 + 1050 * MS
            }
        );
        tat = d.new_tat;

        // 9: two weeks later the TAT is in the past: it restarts from now, with no saved-up burst.
        let later = t0 + 14 * 86_400_000 * MS;
        let d = decide(later, Some(tat), &limit, 1);
        assert_eq!(
            d,
            Decision {
                allowed: true,
                remaining: 19,
                retry_in: 0,
                reset_in: 50 * MS,
                new_tat: later + 50 * MS
            }
        );
    }

    /// Boulder's test: burst 10, 1 per second; spend it all, then wait for single tokens.
    #[test]
    fn boulder_burst_ten_scenario() {
        let limit = Limit::new("b", 10, 1, Duration::from_secs(1), Mode::Enforce).unwrap();
        let s = 1_000 * MS;
        let t0: i64 = 10_000 * s;
        // A peek on a new bucket: full.
        let d = decide(t0, None, &limit, 0);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_in, d.reset_in),
            (true, 10, 0, 0)
        );
        // Spend 10 at once.
        let d = decide(t0, None, &limit, 10);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_in, d.reset_in),
            (true, 0, 10 * s, 10 * s)
        );
        let tat = d.new_tat;
        assert_eq!(tat, t0 + 10 * s);
        // One more is denied and says one second.
        let d = decide(t0, Some(tat), &limit, 1);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_in, d.reset_in),
            (false, 0, s, 10 * s)
        );
        // After one second, one passes.
        let d = decide(t0 + s, Some(tat), &limit, 1);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_in, d.reset_in),
            (true, 0, s, 10 * s)
        );
        let tat = d.new_tat;
        // Half a second later: denied, half a second to wait.
        let d = decide(t0 + s + s / 2, Some(tat), &limit, 1);
        assert_eq!((d.allowed, d.retry_in), (false, s / 2));
        // Asking for 5 after 3 s: only 3 tokens, wait 2 s.
        let d = decide(t0 + 4 * s, Some(tat), &limit, 5);
        assert_eq!((d.allowed, d.remaining, d.retry_in), (false, 3, 2 * s));
        // After 10 s idle, full again: a peek shows 10.
        let d = decide(t0 + 30 * s, Some(tat), &limit, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_in), (true, 10, 0));
    }

    #[test]
    fn refund_never_goes_above_burst() {
        let limit = twenty_per_second();
        let now: i64 = 5_000 * 1_000 * MS;
        // Full bucket: nothing to refund.
        assert_eq!(refund(now, None, &limit, 1), None);
        assert_eq!(refund(now, Some(now - 1), &limit, 1), None);
        // Two tokens spent, five refunded: back to exactly full, not beyond.
        let spent = decide(now, None, &limit, 2).new_tat;
        let back = refund(now, Some(spent), &limit, 5).unwrap();
        assert_eq!(back, now);
        assert_eq!(decide(now, Some(back), &limit, 0).remaining, 20);
        // A partial refund gives back exactly its cost.
        let spent = decide(now, None, &limit, 10).new_tat;
        let back = refund(now, Some(spent), &limit, 4).unwrap();
        assert_eq!(decide(now, Some(back), &limit, 0).remaining, 14);
    }

    /// letsencrypt/boulder#8785: a raised limit must help an exhausted bucket at once.
    #[test]
    fn raised_limit_takes_effect_for_an_exhausted_bucket() {
        let old = Limit::new("o", 5, 5, Duration::from_secs(3600), Mode::Enforce).unwrap();
        let now: i64 = 1_000_000 * 1_000 * MS;
        let mut tat = None;
        for _ in 0..5 {
            let d = decide(now, tat, &old, 1);
            assert!(d.allowed);
            tat = Some(d.new_tat);
        }
        assert!(!decide(now, tat, &old, 1).allowed);
        // Without the clamp, the old debt (an hour) would deny until it had passed.
        assert_eq!(decide(now + 1000 * MS, tat, &old, 1).retry_in, 719_000 * MS);
        // The operator raises the limit to 60 per minute, burst 10: the exhausted bucket is at
        // most "empty" under the new limit, so the next token comes one new interval later.
        let raised = Limit::new("o", 10, 60, Duration::from_secs(60), Mode::Enforce).unwrap();
        assert_eq!(
            effective_tat(now, tat, &raised),
            Some(now + raised.burst_offset())
        );
        let d = decide(now, tat, &raised, 1);
        assert_eq!(
            (d.allowed, d.retry_in, d.reset_in),
            (false, 1000 * MS, 10_000 * MS)
        );
        // Stores write the clamped TAT back even on a denial (see `needs_clamp_write`), otherwise
        // the ceiling would slide forward with `now` and the bucket would stay empty.
        assert!(needs_clamp_write(now, tat, &raised));
        let tat = Some(d.new_tat);
        assert!(!needs_clamp_write(now, tat, &raised));
        let d = decide(now + 1000 * MS, tat, &raised, 1);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.new_tat, now + 11_000 * MS);
        // Fully rested under the new limit after its own burst offset, not after the old hour.
        let d = decide(now + 11_000 * MS, Some(d.new_tat), &raised, 0);
        assert_eq!(d.remaining, 10);
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let limit =
            Limit::new("x", 100_000, 1, Duration::from_secs(86_400), Mode::Enforce).unwrap();
        let d = decide(i64::MAX - 5, Some(i64::MAX), &limit, 100_000);
        assert_eq!((d.allowed, d.retry_in, d.new_tat), (false, 5, i64::MAX));
        let d = decide(i64::MAX - 5, None, &limit, 100_000);
        assert_eq!((d.allowed, d.new_tat), (true, i64::MAX));
        let d = decide(i64::MIN, Some(i64::MIN), &limit, 1);
        assert!(d.allowed);
    }
}
