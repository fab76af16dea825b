use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

use time::Duration;
use time::OffsetDateTime;

use super::LedgerFuture;
use super::NonceError;
use super::NonceLedger;
use super::NonceRejection;
use super::NonceService;
use super::Redemption;

/// A ledger in memory that can be switched off (an outage) or wiped (a restart without data).
#[derive(Default)]
struct FakeLedger {
    down: AtomicBool,
    state: Mutex<(Option<String>, HashSet<String>)>,
}

impl FakeLedger {
    fn check(&self) -> Result<(), String> {
        if self.down.load(Ordering::SeqCst) {
            Err("connection refused".to_owned())
        } else {
            Ok(())
        }
    }
}

impl NonceLedger for FakeLedger {
    fn shared_key<'a>(&'a self, proposal: &'a str) -> LedgerFuture<'a, String> {
        Box::pin(async move {
            self.check()?;
            let mut state = self.state.lock().unwrap();
            Ok(state.0.get_or_insert_with(|| proposal.to_owned()).clone())
        })
    }

    fn redeem_once<'a>(
        &'a self,
        key: &'a str,
        id: &'a str,
        _ttl: std::time::Duration,
    ) -> LedgerFuture<'a, Redemption> {
        Box::pin(async move {
            self.check()?;
            let mut state = self.state.lock().unwrap();
            if state.0.as_deref() != Some(key) {
                return Ok(Redemption::KeyChanged);
            }
            Ok(if state.1.insert(id.to_owned()) {
                Redemption::First
            } else {
                Redemption::Again
            })
        })
    }
}

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

/// Issues at `at` until the nonce is shared (another instance accepts it), giving the background
/// probe time to run.
async fn wait_until_shared(at: &NonceService, other: &NonceService, mut now: OffsetDateTime) {
    for _ in 0..200 {
        now += Duration::seconds(2);
        if other.redeem(&at.issue(now), now).await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("nonces never became shared again");
}

#[tokio::test]
async fn nonces_are_single_use_and_bounded_in_time() {
    let svc = NonceService::new(Duration::minutes(10));
    let n = svc.issue(t0());
    assert_eq!(svc.redeem(&n, t0()).await, Ok(()));
    assert_eq!(svc.redeem(&n, t0()).await, Err(NonceError::Reused));
    let old = svc.issue(t0());
    assert_eq!(
        svc.redeem(&old, t0() + Duration::minutes(11)).await,
        Err(NonceError::Expired)
    );
    assert_eq!(svc.redeem("bm9wZQ", t0()).await, Err(NonceError::Unknown));
    let mut forged = svc.issue(t0()).into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        svc.redeem(std::str::from_utf8(&forged).unwrap(), t0())
            .await,
        Err(NonceError::Unknown)
    );
    let other = NonceService::new(Duration::minutes(10));
    assert_eq!(
        other.redeem(&svc.issue(t0()), t0()).await,
        Err(NonceError::OtherInstance)
    );
}

#[tokio::test]
async fn test_mode_refuses_the_share_of_valid_nonces_its_dice_pick() {
    // Rolls below the percent refuse: 10 and 49 do, 60 and 50 do not.
    let rolls = Mutex::new(vec![10_u8, 60, 49, 50].into_iter());
    let svc = NonceService::new(Duration::minutes(10))
        .with_rejection(NonceRejection::with_roll(50, move || {
            rolls.lock().unwrap().next().unwrap_or(99)
        }));
    let verdicts = [
        svc.redeem(&svc.issue(t0()), t0()).await,
        svc.redeem(&svc.issue(t0()), t0()).await,
        svc.redeem(&svc.issue(t0()), t0()).await,
        svc.redeem(&svc.issue(t0()), t0()).await,
    ];
    assert_eq!(
        verdicts,
        [
            Err(NonceError::Injected),
            Ok(()),
            Err(NonceError::Injected),
            Ok(())
        ]
    );
    // A refused nonce was spent, and an invalid nonce keeps its own reason (no roll needed).
    let n = svc.issue(t0());
    assert_eq!(svc.redeem(&n, t0()).await, Ok(()));
    assert_eq!(svc.redeem(&n, t0()).await, Err(NonceError::Reused));
    assert_eq!(svc.redeem("bm9wZQ", t0()).await, Err(NonceError::Unknown));

    let never =
        NonceService::new(Duration::minutes(10)).with_rejection(NonceRejection::with_roll(0, || 0));
    assert_eq!(never.redeem(&never.issue(t0()), t0()).await, Ok(()));
    let always =
        NonceService::new(Duration::minutes(10)).with_rejection(NonceRejection::random(100));
    assert_eq!(
        always.redeem(&always.issue(t0()), t0()).await,
        Err(NonceError::Injected)
    );
}

#[tokio::test]
async fn shared_nonces_are_single_use_across_instances() {
    let ledger = Arc::new(FakeLedger::default());
    let a = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let b = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let n = a.issue(t0());
    assert_eq!(b.redeem(&n, t0()).await, Ok(()));
    assert_eq!(a.redeem(&n, t0()).await, Err(NonceError::Reused));
    assert_eq!(b.redeem(&n, t0()).await, Err(NonceError::Reused));
}

#[tokio::test]
async fn during_an_outage_nonces_are_local_and_shared_ones_refused() {
    let ledger = Arc::new(FakeLedger::default());
    let a = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let b = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let n = a.issue(t0());
    assert_eq!(b.redeem(&n, t0()).await, Ok(()));
    let unused = b.issue(t0());

    ledger.down.store(true, Ordering::SeqCst);
    // Replay at the issuer while the ledger is down: refused, never accepted from memory.
    assert_eq!(a.redeem(&n, t0()).await, Err(NonceError::LedgerUnavailable));
    // Even an unused shared nonce is refused: nobody can know it was not used elsewhere.
    assert_eq!(
        a.redeem(&unused, t0()).await,
        Err(NonceError::LedgerUnavailable)
    );
    // A's contact failed, so what it issues now is local: it works at A, once, and not at B.
    let local = a.issue(t0());
    assert_eq!(b.redeem(&local, t0()).await, Err(NonceError::OtherInstance));
    assert_eq!(a.redeem(&local, t0()).await, Ok(()));
    assert_eq!(a.redeem(&local, t0()).await, Err(NonceError::Reused));

    ledger.down.store(false, Ordering::SeqCst);
    wait_until_shared(&a, &b, t0()).await;
    // The nonce redeemed before the outage is still refused.
    assert_eq!(a.redeem(&n, t0()).await, Err(NonceError::Reused));
}

#[tokio::test]
async fn a_ledger_that_lost_its_data_never_accepts_old_nonces() {
    let ledger = Arc::new(FakeLedger::default());
    let a = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let b = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let n = a.issue(t0());
    assert_eq!(b.redeem(&n, t0()).await, Ok(()));
    // Redis restarts empty: the key and the record of `n` are gone.
    *ledger.state.lock().unwrap() = (None, HashSet::new());
    assert_eq!(a.redeem(&n, t0()).await, Err(NonceError::LedgerUnavailable));
    wait_until_shared(&a, &b, t0()).await;
    // A new key was agreed on: the old nonce no longer verifies anywhere.
    assert_eq!(a.redeem(&n, t0()).await, Err(NonceError::Unknown));
    assert_eq!(b.redeem(&n, t0()).await, Err(NonceError::Unknown));
}

#[tokio::test]
async fn an_instance_started_during_an_outage_shares_once_the_ledger_answers() {
    let ledger = Arc::new(FakeLedger::default());
    let b = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    ledger.down.store(true, Ordering::SeqCst);
    let a = NonceService::with_ledger(Duration::minutes(5), ledger.clone()).await;
    let local = a.issue(t0());
    assert_eq!(a.redeem(&local, t0()).await, Ok(()));
    ledger.down.store(false, Ordering::SeqCst);
    wait_until_shared(&a, &b, t0()).await;
}

/// Used nonces stay bounded without any pruning job: the memory of an instance forgets a used
/// nonce once its lifetime is over (a nonce that old is refused as expired, without a lookup),
/// and the shared ledger's Redis keys carry that lifetime as their TTL (tested in
/// `ratelimits`' `single_use_keys_expire_with_their_ttl`).
#[tokio::test]
async fn used_nonces_are_forgotten_once_they_expire() {
    let svc = NonceService::new(Duration::minutes(10));
    for _ in 0..100 {
        let n = svc.issue(t0());
        assert_eq!(svc.redeem(&n, t0()).await, Ok(()));
    }
    let remembered = || svc.used.lock().unwrap().entries.len();
    assert_eq!(remembered(), 100);
    let later = t0() + Duration::minutes(12);
    let n = svc.issue(later);
    assert_eq!(svc.redeem(&n, later).await, Ok(()));
    assert_eq!(remembered(), 1);
}
