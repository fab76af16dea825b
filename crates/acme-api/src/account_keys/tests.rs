use std::sync::Arc;

use acme_core::ids::AccountId;
use acme_jose::Algorithm;
use acme_jose::Jws;
use acme_jose::sign::SigningKey;

use super::AccountKeys;
use super::CAPACITY;
use super::StoredKeyError;

fn stored(key: &SigningKey) -> String {
    key.public_jwk().to_json().to_string()
}

/// A request signed by `key` for an account.
fn signed_by(key: &SigningKey) -> Jws {
    let body = key
        .sign_acme(
            "https://ca.example/acme/order/1",
            Some("n"),
            Some("kid"),
            None,
        )
        .unwrap();
    Jws::parse(body.as_bytes()).unwrap()
}

#[test]
fn a_key_is_parsed_once_per_account_and_verifies() {
    let keys = AccountKeys::default();
    let signing = SigningKey::generate(Algorithm::Es256).unwrap();
    let json = stored(&signing);
    let first = keys.get(AccountId(1), &json).unwrap();
    let again = keys.get(AccountId(1), &json).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "the parsed key is reused");
    assert_eq!(first.jwk(), &signing.public_jwk());

    signed_by(&signing).verify_with(&again).unwrap();
}

#[test]
fn a_changed_stored_key_replaces_the_parsed_one() {
    let keys = AccountKeys::default();
    let old = SigningKey::generate(Algorithm::Es256).unwrap();
    let new = SigningKey::generate(Algorithm::Es384).unwrap();
    let before = keys.get(AccountId(7), &stored(&old)).unwrap();
    // A key change (here, or by another instance) shows in the stored JWK the next request reads.
    let after = keys.get(AccountId(7), &stored(&new)).unwrap();
    assert!(!Arc::ptr_eq(&before, &after));
    assert_eq!(after.jwk(), &new.public_jwk());

    assert!(
        signed_by(&old).verify_with(&after).is_err(),
        "the old key no longer verifies"
    );
}

#[test]
fn accounts_never_share_an_entry() {
    let keys = AccountKeys::default();
    let a = SigningKey::generate(Algorithm::Es256).unwrap();
    let b = SigningKey::generate(Algorithm::Es256).unwrap();
    let key_a = keys.get(AccountId(1), &stored(&a)).unwrap();
    let key_b = keys.get(AccountId(2), &stored(&b)).unwrap();
    assert_eq!(key_a.jwk(), &a.public_jwk());
    assert_eq!(key_b.jwk(), &b.public_jwk());
    assert_eq!(
        keys.get(AccountId(1), &stored(&a)).unwrap().jwk(),
        &a.public_jwk()
    );
}

#[test]
fn broken_stored_keys_are_errors_not_entries() {
    let keys = AccountKeys::default();
    assert!(matches!(
        keys.get(AccountId(1), "not json"),
        Err(StoredKeyError::Json(_))
    ));
    assert!(matches!(
        keys.get(
            AccountId(1),
            r#"{"kty":"EC","crv":"P-256","x":"AQ","y":"Ag"}"#
        ),
        Err(StoredKeyError::Jwk(_))
    ));
    assert!(keys.lock().is_empty());
}

#[test]
fn the_map_stays_within_its_capacity() {
    let keys = AccountKeys::default();
    let json = stored(&SigningKey::generate(Algorithm::Es256).unwrap());
    for id in 0..CAPACITY as i64 + 10 {
        keys.get(AccountId(id), &json).unwrap();
        assert!(keys.lock().len() <= CAPACITY);
    }
    // Emptied once at the bound, then refilled by the accounts that came after.
    assert_eq!(keys.lock().len(), 10);
}
