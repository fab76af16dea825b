//! Which keys may become an account's or a certificate's: no weak key, no key the operator
//! blocked (in the blocked-keys file or the database).

use acme_jose::Algorithm;
use acme_jose::Jwk;
use acme_jose::SpkiHash;
use acme_jose::sign::SigningKey;
use ra::Refusal;
use ra::keys::BLOCKED_DETAIL;
use ra::keys::BlockedKeysFile;
use ra::keys::KeyUse;

use rcgen::PublicKeyData;

use crate::harness::account_request;
use crate::harness::b64;
use crate::harness::client_ip;
use crate::harness::csr_with;
use crate::harness::harness;
use crate::harness::key;
use crate::harness::refusal;
use crate::harness::who;

/// An RSA key with public exponent 3: weak (Boulder's goodkey refuses it too).
fn exponent_three_key() -> Jwk {
    let Jwk::Rsa { n, .. } = SigningKey::generate(Algorithm::Rs256).unwrap().public_jwk() else {
        panic!("an RS256 key is RSA");
    };
    Jwk::Rsa { n, e: vec![3] }
}

/// An RSA key whose modulus has the small prime factor 751.
fn small_factor_key() -> Jwk {
    // A good key's modulus has no prime factor below 752, so 751 is the smallest of 751 · n.
    let Jwk::Rsa { n, e } = SigningKey::generate(Algorithm::Rs256).unwrap().public_jwk() else {
        panic!("an RS256 key is RSA");
    };
    let mut out = vec![0_u8; n.len() + 2];
    let mut carry: u32 = 0;
    for (i, byte) in n.iter().rev().enumerate() {
        let v = u32::from(*byte) * 751 + carry;
        let at = out.len() - 1 - i;
        out[at] = (v & 0xff) as u8;
        carry = v >> 8;
    }
    let mut at = out.len() - 1 - n.len();
    while carry > 0 {
        out[at] = (carry & 0xff) as u8;
        carry >>= 8;
        at = at.saturating_sub(1);
    }
    while out.first() == Some(&0) {
        out.remove(0);
    }
    Jwk::Rsa { n: out, e }
}

fn bad_key(refused: Refusal) -> (KeyUse, String) {
    match refused {
        Refusal::BadKey { key, detail } => (key, detail),
        other => panic!("expected BadKey, got {other:?}"),
    }
}

#[tokio::test]
async fn an_account_key_with_a_small_exponent_is_refused_as_a_bad_account_key() {
    let h = harness().build().await;
    let (used, detail) = bad_key(refusal(
        h.ra.new_account(account_request(exponent_three_key()))
            .await,
    ));
    assert_eq!(used, KeyUse::Account);
    assert!(detail.contains("exponent 3 is too small"), "{detail}");
}

#[tokio::test]
async fn an_account_key_with_a_small_prime_factor_is_refused_as_a_bad_account_key() {
    let h = harness().build().await;
    let (used, detail) = bad_key(refusal(
        h.ra.new_account(account_request(small_factor_key())).await,
    ));
    assert_eq!(used, KeyUse::Account);
    assert!(detail.contains("small prime factor (751)"), "{detail}");
}

#[tokio::test]
async fn a_weak_key_is_refused_even_for_an_only_return_existing_lookup() {
    let h = harness().build().await;
    let mut request = account_request(exponent_three_key());
    request.only_return_existing = true;
    assert_eq!(
        bad_key(refusal(h.ra.new_account(request).await)).0,
        KeyUse::Account
    );
}

#[tokio::test]
async fn a_key_blocked_by_the_operator_gets_no_account() {
    let h = harness().build().await;
    let key = key();
    let blocked =
        h.ra.block_key(SpkiHash::of(&key.public_jwk()), "compromised", &who())
            .await
            .unwrap();
    assert_eq!(blocked.created_at, h.now());
    let (used, detail) = bad_key(refusal(
        h.ra.new_account(account_request(key.public_jwk())).await,
    ));
    assert_eq!(used, KeyUse::Account);
    assert_eq!(detail, BLOCKED_DETAIL);
}

#[tokio::test]
async fn a_key_named_in_the_blocked_keys_file_gets_no_account() {
    let key = key();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocked-keys");
    std::fs::write(
        &path,
        format!("# leaked\n{}\n", SpkiHash::of(&key.public_jwk())),
    )
    .unwrap();
    let file = BlockedKeysFile::load(&path).unwrap();
    let h = harness().settings(|s| s.blocked_keys = file).build().await;
    assert_eq!(
        h.ra.blocked_by_file(),
        vec![SpkiHash::of(&key.public_jwk())]
    );
    let (used, detail) = bad_key(refusal(
        h.ra.new_account(account_request(key.public_jwk())).await,
    ));
    assert_eq!(used, KeyUse::Account);
    assert_eq!(detail, BLOCKED_DETAIL);
}

#[tokio::test]
async fn a_key_change_to_a_blocked_key_is_refused_and_the_old_key_stays() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let new_key = key();
    h.ra.block_key(SpkiHash::of(&new_key.public_jwk()), "compromised", &who())
        .await
        .unwrap();
    let (used, _) = bad_key(refusal(
        h.ra.change_key(&account, &new_key.public_jwk(), &who())
            .await,
    ));
    assert_eq!(used, KeyUse::Account);
    let stored = h.storage.account(account.id).await.unwrap().unwrap();
    assert_eq!(stored.thumbprint, account.thumbprint);
}

#[tokio::test]
async fn a_key_change_to_a_weak_key_is_refused() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    assert_eq!(
        bad_key(refusal(
            h.ra.change_key(&account, &exponent_three_key(), &who())
                .await
        ))
        .0,
        KeyUse::Account
    );
}

#[tokio::test]
async fn an_account_whose_key_is_blocked_later_keeps_its_account() {
    let h = harness().build().await;
    let (account, key) = h.account().await;
    h.ra.block_key(SpkiHash::of(&key.public_jwk()), "compromised", &who())
        .await
        .unwrap();
    // Only keys being registered are judged; the existing account can still order.
    h.order(&account, &["a.example.com"]).await.unwrap();
}

#[tokio::test]
async fn a_csr_with_a_blocked_key_is_refused_as_a_bad_certificate_key_and_the_order_stays_ready() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let order = h.ready_order(&account, &["a.example.com"]).await;
    let csr_key = rcgen::KeyPair::generate().unwrap();
    let hash = SpkiHash::of_spki_der(&csr_key.subject_public_key_info()).unwrap();
    h.ra.block_key(hash, "compromised", &who()).await.unwrap();
    let csr = csr_with(&csr_key, &["a.example.com"]);
    let (used, detail) = bad_key(refusal(
        h.ra.finalize(&account, order.clone(), &b64(&csr), client_ip())
            .await,
    ));
    assert_eq!(used, KeyUse::Certificate);
    assert!(detail.starts_with("the CSR's public key"), "{detail}");
    assert_eq!(
        h.stored_order(&order).await.status,
        acme_core::status::OrderStatus::Ready
    );
}

#[tokio::test]
async fn blocking_a_key_twice_is_a_conflict() {
    let h = harness().build().await;
    let hash = SpkiHash::of(&key().public_jwk());
    h.ra.block_key(hash, "first", &who()).await.unwrap();
    assert!(matches!(
        refusal(h.ra.block_key(hash, "second", &who()).await),
        Refusal::Conflict(_)
    ));
}

#[tokio::test]
async fn an_unblocked_key_may_become_an_account_key_again() {
    let h = harness().build().await;
    let key = key();
    let hash = SpkiHash::of(&key.public_jwk());
    h.ra.block_key(hash, "by mistake", &who()).await.unwrap();
    assert_eq!(h.ra.blocked_keys().await.unwrap().len(), 1);
    h.ra.unblock_key(hash, &who()).await.unwrap();
    assert!(h.ra.blocked_keys().await.unwrap().is_empty());
    h.register(account_request(key.public_jwk())).await;
}

#[tokio::test]
async fn unblocking_a_key_that_is_not_blocked_is_not_found() {
    let h = harness().build().await;
    assert!(matches!(
        refusal(
            h.ra.unblock_key(SpkiHash::of(&key().public_jwk()), &who())
                .await
        ),
        Refusal::NotFound("blocked key")
    ));
}
