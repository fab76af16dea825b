//! Key change (RFC 8555 §7.3.5) is a compare-and-set on the old key: of concurrent rollovers
//! from one key, exactly one succeeds.

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

const ERR: &str = "urn:ietf:params:acme:error:";

/// Concurrent requests in one round.
const RACERS: usize = 12;

/// Rounds at most, until one of them shows a request refused for losing the race (a request
/// authenticated after the winner committed is refused earlier, for its signature).
const MAX_ROUNDS: usize = 30;

async fn race(db: Db) {
    let mut env = TestEnv::new(db).await;
    env.start().await;
    let mut conflicts = 0;
    for round in 0..MAX_ROUNDS {
        let mut raw = Raw::new(&env, Algorithm::Es256);
        raw.register().await;
        let kid = raw.kid.clone().unwrap();
        let url = raw.url("/acme/key-change");
        // Every request signed and given its nonce first, then all sent at once.
        let mut signed = Vec::new();
        for _ in 0..RACERS {
            let new_key = SigningKey::generate(Algorithm::Es256).unwrap();
            let inner = raw.key_change_inner(&new_key);
            let nonce = raw.nonce().await;
            let body = raw
                .key
                .sign_acme(&url, Some(&nonce), Some(&kid), Some(&inner))
                .unwrap();
            signed.push((new_key, body));
        }
        let replies = futures::future::join_all(
            signed
                .iter()
                .map(|(_, body)| raw.send(&url, body.clone(), "application/jose+json")),
        )
        .await;
        let mut winners = Vec::new();
        for ((new_key, _), reply) in signed.into_iter().zip(replies) {
            match reply.status {
                200 => winners.push(new_key),
                409 => {
                    assert_eq!(reply.problem_type(), format!("{ERR}conflict"), "{reply:?}");
                    conflicts += 1;
                }
                // Authenticated once the winner had changed the key: the old key's signature
                // no longer verifies.
                400 => assert_eq!(reply.problem_type(), format!("{ERR}malformed"), "{reply:?}"),
                _ => panic!("unexpected reply {reply:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one rollover wins");
        // The account answers to the winner's key, and to no other.
        raw.key = winners.remove(0);
        let r = raw.post(&kid, None).await;
        assert_eq!(r.status, 200, "{r:?}");
        if conflicts > 0 {
            return;
        }
    }
    panic!("in {MAX_ROUNDS} rounds no rollover lost the race after authenticating");
}

/// On PostgreSQL requests run side by side, so some rollovers authenticate with the old key and
/// then lose at the compare-and-set. (On SQLite the single writer makes the losers reach
/// authentication after the winner committed; the storage test races the compare-and-set itself
/// on both backends.)
#[tokio::test]
async fn concurrent_key_changes_let_exactly_one_win() {
    race(Db::Postgres).await;
}
