//! A request's buckets decided together: one verdict, all-or-nothing spending.

use crate::bucket_key::BucketKey;
use crate::config::Mode;
use crate::error::Error;
use crate::error::Result;
use crate::gcra::Decision;
use crate::limit::Limit;
use crate::limit::LimitName;

/// How a transaction takes part in its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Decides the verdict and is spent if the batch is allowed.
    CheckAndSpend,
    /// Decides the verdict, never written.
    CheckOnly,
    /// Best effort: never affects the verdict; spent only if it fits and the batch is allowed.
    SpendOnly,
}

/// One bucket of a batch, with the limit that applies to it (default or override).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    name: LimitName,
    key: BucketKey,
    limit: Limit,
    cost: u64,
    kind: Kind,
}

impl Transaction {
    /// A transaction on a textual key `<limit>:<id>` (see [`BucketKey::parse`]).
    pub fn new(name: LimitName, key: String, limit: Limit, cost: u64, kind: Kind) -> Result<Self> {
        Self::with_key(name, BucketKey::parse(&key), limit, cost, kind)
    }

    /// Refuses a cost above the burst: such a request could never pass, so it is a bug in the
    /// caller, not a denial.
    pub fn with_key(
        name: LimitName,
        key: BucketKey,
        limit: Limit,
        cost: u64,
        kind: Kind,
    ) -> Result<Self> {
        Self::check_cost(name, &limit, cost)?;
        Ok(Self::checked(name, key, limit, cost, kind))
    }

    /// Refuses a cost above the burst.
    pub(crate) fn check_cost(name: LimitName, limit: &Limit, cost: u64) -> Result<()> {
        if cost > limit.burst() {
            return Err(Error::CostAboveBurst {
                limit: name.to_string(),
                cost,
                burst: limit.burst(),
            });
        }
        Ok(())
    }

    /// A transaction whose cost the caller has checked ([`Transaction::check_cost`]). On the
    /// request path, where a `Result` around a value this size costs copies.
    pub(crate) fn checked(
        name: LimitName,
        key: BucketKey,
        limit: Limit,
        cost: u64,
        kind: Kind,
    ) -> Self {
        debug_assert!(cost <= limit.burst());
        Self {
            name,
            key,
            limit,
            cost,
            kind,
        }
    }

    /// The limit family.
    pub fn name(&self) -> LimitName {
        self.name
    }

    /// Where the bucket lives (without any store prefix).
    pub fn key(&self) -> &BucketKey {
        &self.key
    }

    /// The limit that applies to this bucket.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// Tokens asked for.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// How it takes part in the batch.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether a denial of this bucket denies the batch. Shadow-mode limits never do.
    pub fn enforced(&self) -> bool {
        self.kind != Kind::SpendOnly && self.limit.mode() == Mode::Enforce
    }

    /// Whether an allowed decision is stored when the batch is allowed.
    pub fn spends(&self) -> bool {
        self.kind != Kind::CheckOnly && self.cost > 0
    }
}

/// One decision per transaction of a batch.
pub type Decisions = Vec<Decision>;

/// What a store answers for a batch: one decision per transaction, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Per transaction, in the batch's order.
    pub decisions: Decisions,
    /// Whether every enforced transaction was allowed, i.e. whether anything was spent.
    pub allowed: bool,
}

/// Refuses the same key twice: both would be decided against the same stored TAT and the second
/// write would silently undo the first.
pub fn check_unique(batch: &[Transaction]) -> Result<()> {
    // Batches hold a handful of buckets: comparing pairs beats hashing them.
    for (i, tx) in batch.iter().enumerate() {
        if batch[..i].iter().any(|other| other.key == tx.key) {
            return Err(Error::DuplicateKey(tx.key.to_string()));
        }
    }
    Ok(())
}

/// Whether a batch with these decisions is allowed: every enforced transaction is.
pub fn batch_allowed(batch: &[Transaction], decisions: &[Decision]) -> bool {
    batch
        .iter()
        .zip(decisions)
        .all(|(tx, d)| !tx.enforced() || d.allowed)
}

/// Whether `tx` is written when the batch verdict is `batch_allowed`.
pub fn writes(tx: &Transaction, decision: &Decision, batch_allowed: bool) -> bool {
    batch_allowed && decision.allowed && tx.spends()
}

/// True when `a` is stricter than `b`: denied beats allowed, then the longer wait, then fewer
/// tokens left. Comparing waits first (Boulder before #8674) let an allowed check-only bucket
/// with a long interval mask a denial with a short one.
pub fn stricter(a: &Decision, b: &Decision) -> bool {
    (!a.allowed, a.retry_in, std::cmp::Reverse(a.remaining))
        > (!b.allowed, b.retry_in, std::cmp::Reverse(b.remaining))
}

/// The index of the transaction that decides the verdict: the strictest enforced one. Spend-only
/// and shadow transactions are never binding.
pub fn binding(batch: &[Transaction], decisions: &[Decision]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (tx, d)) in batch.iter().zip(decisions).enumerate() {
        if !tx.enforced() {
            continue;
        }
        if best.is_none_or(|b| stricter(d, &decisions[b])) {
            best = Some(i);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Kind;
    use super::Transaction;
    use super::batch_allowed;
    use super::binding;
    use super::check_unique;
    use super::stricter;
    use super::writes;
    use crate::config::Mode;
    use crate::error::Error;
    use crate::gcra::Decision;
    use crate::gcra::decide;
    use crate::limit::Limit;
    use crate::limit::LimitName;

    const S: i64 = 1_000_000_000;
    const HOUR: Duration = Duration::from_secs(3600);

    /// letsencrypt/boulder#8674: an allowed check-only bucket with one token left and a huge
    /// emission interval must not mask a denial with a short wait.
    #[test]
    fn allowed_check_only_never_masks_a_denial() {
        let now = 1_000_000 * S;
        // One certificate per 33.6 h, one token left after this check.
        let per_fqdn_set =
            Limit::new("fqdn", 2, 5, Duration::from_secs(168 * 3600), Mode::Enforce).unwrap();
        let orders = Limit::new("orders", 300, 300, 3 * HOUR, Mode::Enforce).unwrap();
        let batch = vec![
            Transaction::new(
                LimitName::NewOrdersPerAccount,
                "orders".into(),
                orders,
                1,
                Kind::CheckAndSpend,
            )
            .unwrap(),
            Transaction::new(
                LimitName::SanBudgetPerAccount,
                "fqdn".into(),
                per_fqdn_set,
                1,
                Kind::CheckOnly,
            )
            .unwrap(),
        ];
        let exhausted = now + orders.burst_offset();
        let one_used = now + per_fqdn_set.emission_interval();
        let decisions = vec![
            decide(now, Some(exhausted), &orders, 1),
            decide(now, Some(one_used), &per_fqdn_set, 1),
        ];
        assert!(!decisions[0].allowed);
        assert!(decisions[1].allowed);
        assert!(
            decisions[1].retry_in > decisions[0].retry_in,
            "the trap: the allowed one waits longer"
        );
        assert!(!batch_allowed(&batch, &decisions));
        assert_eq!(binding(&batch, &decisions), Some(0));
        assert!(!writes(&batch[1], &decisions[1], false));
    }

    #[test]
    fn fold_order_and_spend_only() {
        let a = Decision {
            allowed: true,
            remaining: 3,
            retry_in: 0,
            reset_in: 0,
            new_tat: 0,
        };
        let b = Decision {
            allowed: true,
            remaining: 1,
            retry_in: 0,
            reset_in: 0,
            new_tat: 0,
        };
        let c = Decision {
            allowed: true,
            remaining: 9,
            retry_in: 5,
            reset_in: 0,
            new_tat: 0,
        };
        let denied = Decision {
            allowed: false,
            remaining: 9,
            retry_in: 1,
            reset_in: 0,
            new_tat: 0,
        };
        assert!(stricter(&b, &a));
        assert!(stricter(&c, &b));
        assert!(stricter(&denied, &c));
        let limit = Limit::new("x", 10, 10, HOUR, Mode::Enforce).unwrap();
        let tx = |key: &str, kind| {
            Transaction::new(LimitName::GlobalPerIp, key.into(), limit, 1, kind).unwrap()
        };
        let batch = vec![tx("a", Kind::CheckAndSpend), tx("d", Kind::SpendOnly)];
        let decisions = vec![a, denied];
        assert!(batch_allowed(&batch, &decisions), "spend-only never denies");
        assert_eq!(binding(&batch, &decisions), Some(0));
        assert!(writes(&batch[0], &a, true));
        assert!(
            !writes(&batch[1], &denied, true),
            "a spend-only that does not fit is dropped"
        );

        let shadow = limit.with_mode(Mode::Shadow);
        let shadow_tx = Transaction::new(
            LimitName::GlobalPerIp,
            "s".into(),
            shadow,
            1,
            Kind::CheckAndSpend,
        )
        .unwrap();
        assert!(batch_allowed(std::slice::from_ref(&shadow_tx), &[denied]));
        assert_eq!(binding(std::slice::from_ref(&shadow_tx), &[denied]), None);

        let too_much = Transaction::new(
            LimitName::GlobalPerIp,
            "x".into(),
            limit,
            11,
            Kind::CheckAndSpend,
        );
        assert!(matches!(
            too_much,
            Err(Error::CostAboveBurst {
                cost: 11,
                burst: 10,
                ..
            })
        ));
        assert!(matches!(
            check_unique(&[tx("k", Kind::CheckOnly), tx("k", Kind::CheckAndSpend)]),
            Err(Error::DuplicateKey(_))
        ));
    }
}
