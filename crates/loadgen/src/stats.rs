//! Latency percentiles and medians over rounds.

use serde::Deserialize;
use serde::Serialize;

/// Latency figures of one phase (or a whole flow), in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latency {
    pub(crate) count: usize,
    pub(crate) mean: f64,
    pub(crate) p50: f64,
    pub(crate) p90: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

impl Latency {
    /// Summarises samples (any order); all zero when there are none.
    pub(crate) fn of(mut samples: Vec<f64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_by(f64::total_cmp);
        let count = samples.len();
        Self {
            count,
            mean: samples.iter().sum::<f64>() / count as f64,
            p50: percentile(&samples, 50.0),
            p90: percentile(&samples, 90.0),
            p99: percentile(&samples, 99.0),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// The nearest-rank percentile of sorted samples: the smallest sample that at least `p` percent
/// of the samples do not exceed. Never interpolates, so every figure is a latency that happened.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median, minimum and maximum of values over rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) n: usize,
}

impl Spread {
    /// `None` without values. An even count takes the mean of the two middle values.
    pub(crate) fn of(values: &[f64]) -> Option<Self> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let (first, last) = (*sorted.first()?, *sorted.last()?);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            f64::midpoint(sorted[n / 2 - 1], sorted[n / 2])
        };
        Some(Self {
            median,
            min: first,
            max: last,
            n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Latency;
    use super::Spread;
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), 50.0);
        assert_eq!(percentile(&samples, 90.0), 90.0);
        assert_eq!(percentile(&samples, 99.0), 99.0);
        assert_eq!(percentile(&samples, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        // Ten samples: p99 is the largest, p50 the fifth.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 99.0), 10.0);
        assert_eq!(percentile(&ten, 50.0), 5.0);
    }

    #[test]
    fn latency_summary_sorts_its_input() {
        let summary = Latency::of(vec![3.0, 1.0, 2.0, 4.0]);
        assert_eq!(summary.count, 4);
        assert_eq!(summary.p50, 2.0);
        assert_eq!(summary.max, 4.0);
        assert_eq!(summary.mean, 2.5);
        assert_eq!(Latency::of(Vec::new()), Latency::default());
    }

    #[test]
    fn spread_over_rounds() {
        let odd = Spread::of(&[3.0, 1.0, 2.0]).expect("values");
        assert_eq!((odd.median, odd.min, odd.max, odd.n), (2.0, 1.0, 3.0, 3));
        let even = Spread::of(&[4.0, 1.0, 2.0, 3.0]).expect("values");
        assert_eq!(even.median, 2.5);
        assert!(Spread::of(&[]).is_none());
    }
}
