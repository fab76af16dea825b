use std::time::Instant;

use acme_core::identifier::Identifier;
use storage::Storage;
use storage::model::PauseOutcome;
use storage::model::PausedPair;
use time::Duration;

use crate::harness;
use crate::harness::dns;
use crate::harness::ev;
use crate::harness::t0;

crate::both_backends!(
    pause_outcomes_and_times,
    paused_among_respects_account_and_limit,
    paused_for_account_oldest_first,
    unpause_account_is_capped_per_call,
    unpause_identifiers_returns_only_paused,
    list_pauses_filters
);

const GRACE: Duration = Duration::days(14);

async fn pause_outcomes_and_times(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let a = dns("a.example.com");
    let b = dns("b.example.com");
    let ip = Identifier::ip("192.0.2.7").unwrap();

    // New pairs are paused, duplicates in the input are reported once, in input order.
    let first = s
        .pause_identifiers(
            acct,
            &[a.clone(), ip.clone(), a.clone()],
            GRACE,
            t0(),
            &ev(),
        )
        .await
        .unwrap();
    assert_eq!(
        first,
        vec![
            (a.clone(), PauseOutcome::Paused),
            (ip.clone(), PauseOutcome::Paused)
        ]
    );
    let state = s.pause_state(acct, &a).await.unwrap().unwrap();
    assert_eq!(
        state,
        PausedPair {
            account_id: acct,
            identifier: a.clone(),
            paused_at: t0(),
            unpaused_at: None,
        }
    );
    assert_eq!(s.pause_state(acct, &b).await.unwrap(), None);

    // Pausing again changes nothing, not even the time.
    let later = t0() + Duration::hours(1);
    let again = s
        .pause_identifiers(acct, &[a.clone(), b.clone()], GRACE, later, &ev())
        .await
        .unwrap();
    assert_eq!(
        again,
        vec![
            (a.clone(), PauseOutcome::AlreadyPaused),
            (b.clone(), PauseOutcome::Paused)
        ]
    );
    assert_eq!(
        s.pause_state(acct, &a).await.unwrap().unwrap().paused_at,
        t0()
    );
    assert_eq!(
        s.pause_state(acct, &b).await.unwrap().unwrap().paused_at,
        later
    );

    // Unpaused at t1: within the grace period a new pause is skipped and the row is unchanged.
    let t1 = t0() + Duration::days(1);
    assert_eq!(
        s.unpause_identifiers(acct, std::slice::from_ref(&a), t1, &ev())
            .await
            .unwrap(),
        vec![a.clone()]
    );
    let unpaused = PausedPair {
        account_id: acct,
        identifier: a.clone(),
        paused_at: t0(),
        unpaused_at: Some(t1),
    };
    assert_eq!(s.pause_state(acct, &a).await.unwrap().unwrap(), unpaused);
    let just_inside = t1 + GRACE - Duration::seconds(1);
    assert_eq!(
        s.pause_identifiers(acct, std::slice::from_ref(&a), GRACE, just_inside, &ev())
            .await
            .unwrap(),
        vec![(a.clone(), PauseOutcome::SkippedGrace)]
    );
    assert_eq!(s.pause_state(acct, &a).await.unwrap().unwrap(), unpaused);

    // Once the grace period has passed, the pair is paused again from now.
    let after = t1 + GRACE;
    assert_eq!(
        s.pause_identifiers(acct, std::slice::from_ref(&a), GRACE, after, &ev())
            .await
            .unwrap(),
        vec![(a.clone(), PauseOutcome::Repaused)]
    );
    assert_eq!(
        s.pause_state(acct, &a).await.unwrap().unwrap(),
        PausedPair {
            account_id: acct,
            identifier: a.clone(),
            paused_at: after,
            unpaused_at: None,
        }
    );
    assert_eq!(
        s.pause_identifiers(acct, &[], GRACE, after, &ev())
            .await
            .unwrap(),
        vec![]
    );
}

async fn paused_among_respects_account_and_limit(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let other = harness::account(s, t0()).await.id;
    let names: Vec<Identifier> = (0..20).map(|i| dns(&format!("n{i:02}.example"))).collect();
    s.pause_identifiers(acct, &names, GRACE, t0(), &ev())
        .await
        .unwrap();
    // Another account's pause of the same name is invisible to this one, and vice versa.
    let shared = dns("shared.example");
    s.pause_identifiers(other, std::slice::from_ref(&shared), GRACE, t0(), &ev())
        .await
        .unwrap();

    let mut asked = vec![shared.clone(), dns("free.example")];
    asked.extend(names.iter().cloned());
    let paused = s.paused_among(acct, &asked, 15).await.unwrap();
    assert_eq!(paused, names[..15].to_vec());
    assert_eq!(
        s.paused_among(acct, &names[3..5], 15).await.unwrap(),
        names[3..5].to_vec()
    );
    assert_eq!(
        s.paused_among(acct, std::slice::from_ref(&shared), 15)
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(
        s.paused_among(other, &asked, 15).await.unwrap(),
        vec![shared.clone()]
    );
    assert_eq!(s.paused_among(acct, &[], 15).await.unwrap(), vec![]);
    // Short lists are padded to a power of two by repeating their last name: three names
    // (padded to four) and six (padded to eight) find exactly the paused ones, once each.
    let three = [dns("free.example"), names[7].clone(), dns("free2.example")];
    assert_eq!(
        s.paused_among(acct, &three, 15).await.unwrap(),
        vec![names[7].clone()]
    );
    let mut six = names[10..15].to_vec();
    six.push(dns("free3.example"));
    assert_eq!(
        s.paused_among(acct, &six, 15).await.unwrap(),
        names[10..15].to_vec()
    );
    assert_eq!(
        s.pause_state(acct, &shared).await.unwrap(),
        None,
        "pause_state is per account too"
    );

    // An unpaused pair no longer counts.
    s.unpause_identifiers(acct, &names[..1], t0(), &ev())
        .await
        .unwrap();
    assert_eq!(
        s.paused_among(acct, &names[..2], 15).await.unwrap(),
        names[1..2].to_vec()
    );
}

async fn paused_for_account_oldest_first(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let other = harness::account(s, t0()).await.id;
    let late = dns("late.example");
    let early = dns("early.example");
    let middle = Identifier::ip("2001:db8::1").unwrap();
    s.pause_identifiers(
        acct,
        std::slice::from_ref(&late),
        GRACE,
        t0() + Duration::hours(2),
        &ev(),
    )
    .await
    .unwrap();
    s.pause_identifiers(acct, std::slice::from_ref(&early), GRACE, t0(), &ev())
        .await
        .unwrap();
    s.pause_identifiers(
        acct,
        std::slice::from_ref(&middle),
        GRACE,
        t0() + Duration::hours(1),
        &ev(),
    )
    .await
    .unwrap();
    s.pause_identifiers(other, &[dns("elsewhere.example")], GRACE, t0(), &ev())
        .await
        .unwrap();
    assert_eq!(
        s.paused_for_account(acct, 10).await.unwrap(),
        vec![early.clone(), middle.clone(), late.clone()]
    );
    assert_eq!(
        s.paused_for_account(acct, 2).await.unwrap(),
        vec![early.clone(), middle]
    );
    s.unpause_identifiers(
        acct,
        std::slice::from_ref(&early),
        t0() + Duration::hours(3),
        &ev(),
    )
    .await
    .unwrap();
    assert_eq!(s.paused_for_account(acct, 1).await.unwrap().len(), 1);
    assert!(
        !s.paused_for_account(acct, 10)
            .await
            .unwrap()
            .contains(&early)
    );
}

async fn unpause_account_is_capped_per_call(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let other = harness::account(s, t0()).await.id;
    let names: Vec<Identifier> = (0..50_001)
        .map(|i| dns(&format!("host{i}.zombie.example")))
        .collect();

    let started = Instant::now();
    let outcomes = s
        .pause_identifiers(acct, &names, GRACE, t0(), &ev())
        .await
        .unwrap();
    let pause_took = started.elapsed();
    assert_eq!(outcomes.len(), 50_001);
    assert!(outcomes.iter().all(|(_, o)| *o == PauseOutcome::Paused));
    // The same names on another account must survive an account-wide unpause of the first.
    s.bulk_insert_pauses_for_tests(other, &names[..100], t0())
        .await
        .unwrap();

    let now = t0() + Duration::days(1);
    let started = Instant::now();
    let first = s.unpause_account(acct, 50_000, now, &ev()).await.unwrap();
    let unpause_took = started.elapsed();
    assert_eq!(first.len(), 50_000);
    let mut distinct = first.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 50_000, "no identifier is reported twice");

    let second = s.unpause_account(acct, 50_000, now, &ev()).await.unwrap();
    assert_eq!(second.len(), 1);
    assert!(!first.contains(&second[0]));
    assert_eq!(
        s.unpause_account(acct, 50_000, now, &ev()).await.unwrap(),
        vec![]
    );
    assert_eq!(
        s.pause_state(acct, &second[0])
            .await
            .unwrap()
            .unwrap()
            .unpaused_at,
        Some(now)
    );
    assert_eq!(s.paused_for_account(acct, 10).await.unwrap(), vec![]);
    assert_eq!(s.paused_for_account(other, 1_000).await.unwrap().len(), 100);

    // A small cap is honoured exactly, across the batch boundary too.
    let again_at = now + GRACE;
    s.pause_identifiers(acct, &names[..25_000], GRACE, again_at, &ev())
        .await
        .unwrap();
    assert_eq!(
        s.unpause_account(acct, 10_001, again_at, &ev())
            .await
            .unwrap()
            .len(),
        10_001
    );
    assert_eq!(
        s.unpause_account(acct, 3, again_at, &ev())
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        s.unpause_account(acct, 50_000, again_at, &ev())
            .await
            .unwrap()
            .len(),
        25_000 - 10_004
    );
    assert_eq!(
        s.unpause_account(acct, 0, again_at, &ev()).await.unwrap(),
        vec![]
    );

    assert!(
        pause_took.as_secs() < 10 && unpause_took.as_secs() < 5,
        "pausing 50,001 took {pause_took:?}, unpausing 50,000 took {unpause_took:?}"
    );
}

async fn unpause_identifiers_returns_only_paused(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let other = harness::account(s, t0()).await.id;
    let a = dns("a.example");
    let b = dns("b.example");
    let never = dns("never.example");
    s.pause_identifiers(acct, &[a.clone(), b.clone()], GRACE, t0(), &ev())
        .await
        .unwrap();
    s.pause_identifiers(other, std::slice::from_ref(&a), GRACE, t0(), &ev())
        .await
        .unwrap();
    let now = t0() + Duration::minutes(5);
    let mut unpaused = s
        .unpause_identifiers(acct, &[never.clone(), a.clone(), b.clone()], now, &ev())
        .await
        .unwrap();
    unpaused.sort();
    assert_eq!(unpaused, vec![a.clone(), b.clone()]);
    // Already unpaused: nothing to report, and the first unpause time stays.
    assert_eq!(
        s.unpause_identifiers(
            acct,
            std::slice::from_ref(&a),
            now + Duration::hours(1),
            &ev()
        )
        .await
        .unwrap(),
        vec![]
    );
    assert_eq!(
        s.pause_state(acct, &a).await.unwrap().unwrap().unpaused_at,
        Some(now)
    );
    assert_eq!(s.pause_state(acct, &never).await.unwrap(), None);
    // The other account's pause of the same name is untouched.
    assert_eq!(
        s.pause_state(other, &a).await.unwrap().unwrap().unpaused_at,
        None
    );
}

async fn list_pauses_filters(s: &Storage) {
    let acct = harness::account(s, t0()).await.id;
    let other = harness::account(s, t0()).await.id;
    let a = dns("a.example");
    let b = dns("b.example");
    let c = dns("c.example");
    s.pause_identifiers(acct, std::slice::from_ref(&a), GRACE, t0(), &ev())
        .await
        .unwrap();
    s.pause_identifiers(
        acct,
        std::slice::from_ref(&b),
        GRACE,
        t0() + Duration::hours(1),
        &ev(),
    )
    .await
    .unwrap();
    s.pause_identifiers(
        other,
        std::slice::from_ref(&c),
        GRACE,
        t0() + Duration::hours(2),
        &ev(),
    )
    .await
    .unwrap();
    let unpaused_at = t0() + Duration::hours(3);
    s.unpause_identifiers(acct, std::slice::from_ref(&a), unpaused_at, &ev())
        .await
        .unwrap();

    let names = |pairs: Vec<PausedPair>| -> Vec<(i64, String)> {
        pairs
            .into_iter()
            .map(|p| (p.account_id.0, p.identifier.value().to_owned()))
            .collect()
    };
    let all = s.list_pauses(None, true, 100).await.unwrap();
    assert_eq!(
        names(all.clone()),
        vec![
            (other.0, "c.example".to_owned()),
            (acct.0, "b.example".to_owned()),
            (acct.0, "a.example".to_owned()),
        ]
    );
    assert_eq!(all[2].unpaused_at, Some(unpaused_at));
    assert_eq!(all[2].paused_at, t0());
    assert_eq!(
        names(s.list_pauses(None, false, 100).await.unwrap()),
        vec![
            (other.0, "c.example".to_owned()),
            (acct.0, "b.example".to_owned()),
        ]
    );
    assert_eq!(
        names(s.list_pauses(Some(acct), true, 100).await.unwrap()),
        vec![
            (acct.0, "b.example".to_owned()),
            (acct.0, "a.example".to_owned())
        ]
    );
    assert_eq!(
        names(s.list_pauses(Some(acct), false, 100).await.unwrap()),
        vec![(acct.0, "b.example".to_owned())]
    );
    assert_eq!(
        names(s.list_pauses(None, true, 1).await.unwrap()),
        vec![(other.0, "c.example".to_owned())]
    );
}
