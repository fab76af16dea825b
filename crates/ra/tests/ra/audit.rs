//! The audit log as the policy layer writes it: each audited action, done through `Ra` as the
//! front end and the admin API do, leaves exactly one record naming who (account and address,
//! or the admin token and operator), what and why; a refused action leaves none and changes
//! nothing.

use acme_core::ids::AccountId;
use acme_core::status::AccountStatus;
use acme_core::status::RevocationReason;
use acme_jose::SpkiHash;
use ra::accounts::AccountUpdate;
use ra::audit::Actor;
use ra::audit::AuditKind;
use ra::audit::Requester;
use ra::renewals::RenewEarlyTarget;
use ra::revocation::Revoker;
use storage::audit::AuditFilter;
use storage::audit::AuditRecord;

use crate::harness::Harness;
use crate::harness::client_ip;
use crate::harness::dns;
use crate::harness::harness;
use crate::harness::key;
use crate::harness::refusal;
use crate::harness::subscriber;
use crate::harness::who;

/// The records of `kind`, oldest first.
async fn records(h: &Harness, kind: AuditKind) -> Vec<AuditRecord> {
    let mut found = h
        .storage
        .audit_records(&AuditFilter {
            kind: Some(kind),
            limit: 1_000,
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    found.reverse();
    found
}

/// The one record of `kind`.
async fn only(h: &Harness, kind: AuditKind) -> AuditRecord {
    let found = records(h, kind).await;
    assert_eq!(found.len(), 1, "{kind}: {found:#?}");
    found.into_iter().next().unwrap()
}

fn the_admin() -> Actor {
    who().actor
}

#[tokio::test]
async fn an_accounts_life_is_recorded_once_per_change_with_its_holder_and_address() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let created = only(&h, AuditKind::AccountCreated).await;
    assert_eq!(created.event.actor, Actor::Account(account.id));
    assert_eq!(created.event.account, Some(account.id));
    assert!(created.event.client_ip.is_some());
    assert_eq!(
        created.event.detail["thumbprint"],
        account.thumbprint.as_str()
    );
    assert!(
        created.event.reason.contains("holder of its key"),
        "{created:?}"
    );

    let holder = subscriber(account.id);
    let contacts = vec!["mailto:ops@example.com".to_owned()];
    let updated =
        h.ra.update_account(
            &account,
            AccountUpdate {
                status: None,
                contacts: Some(contacts.clone()),
            },
            &holder,
        )
        .await
        .unwrap();
    let record = only(&h, AuditKind::AccountContactsUpdated).await;
    assert_eq!(record.event.actor, Actor::Account(account.id));
    assert_eq!(record.event.client_ip, Some(client_ip()));
    assert_eq!(record.event.detail["after"][0], "mailto:ops@example.com");
    // A refused change (an unsupported contact) records nothing.
    let refused = h.ra.update_account(
        &updated,
        AccountUpdate {
            status: None,
            contacts: Some(vec!["tel:+1555".to_owned()]),
        },
        &holder,
    );
    assert!(refused.await.is_err());
    assert_eq!(
        records(&h, AuditKind::AccountContactsUpdated).await.len(),
        1
    );

    let new_key = key();
    let changed =
        h.ra.change_key(&updated, &new_key.public_jwk(), &holder)
            .await
            .unwrap();
    let record = only(&h, AuditKind::AccountKeyChanged).await;
    assert_eq!(
        record.event.detail["old_thumbprint"],
        account.thumbprint.as_str()
    );
    assert_eq!(
        record.event.detail["new_thumbprint"],
        changed.thumbprint.as_str()
    );

    h.ra.deactivate_account(account.id, &holder).await.unwrap();
    // Deactivating again is refused and recorded nowhere.
    refusal(h.ra.deactivate_account(account.id, &holder).await);
    let record = only(&h, AuditKind::AccountDeactivated).await;
    assert_eq!(record.event.actor, Actor::Account(account.id));
    assert_eq!(record.event.client_ip, Some(client_ip()));
    assert!(
        record.event.reason.contains("the account's holder"),
        "{record:?}"
    );
}

#[tokio::test]
async fn an_issuance_is_recorded_with_its_names_serial_and_evidence_digest() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com", "b.example.com"]).await;
    let record = only(&h, AuditKind::CertificateIssued).await;
    assert_eq!(record.event.actor, Actor::Account(account.id));
    // The finalize request's address, stored with the order: the record is built from the
    // order as stored, not from the request.
    assert_eq!(record.event.client_ip, Some(client_ip()));
    assert_eq!(record.event.account, Some(account.id));
    assert_eq!(record.event.serial.as_ref(), Some(&cert.serial));
    let mut names = record.event.names.clone();
    names.sort();
    assert_eq!(names, ["a.example.com", "b.example.com"]);
    let evidence = h.storage.certificate_evidence(&cert.serial).await.unwrap();
    assert_eq!(evidence.len(), 2);
    assert_eq!(
        record.event.detail["evidence_sha256"],
        storage::evidence::digest(&evidence).as_str()
    );
    assert_eq!(record.event.detail["order_id"], cert.order_id.0);
}

#[tokio::test]
async fn a_revocation_is_recorded_once_and_a_strangers_is_refused_and_recorded_nowhere() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (stranger, _) = h.account().await;
    let (cert, _) = h.issue(&account, &["a.example.com"]).await;

    refusal(
        h.ra.revoke(
            Revoker::Account(stranger.id),
            &cert.der,
            Some(1),
            client_ip(),
        )
        .await,
    );
    assert!(records(&h, AuditKind::CertificateRevoked).await.is_empty());
    let stored = h.storage.certificate(cert.id).await.unwrap().unwrap();
    assert_eq!(
        stored.revoked_at, None,
        "a refused revocation changes nothing"
    );

    h.ra.revoke(
        Revoker::Account(account.id),
        &cert.der,
        Some(1),
        client_ip(),
    )
    .await
    .unwrap();
    // Revoked already: refused, not recorded again.
    refusal(
        h.ra.revoke(
            Revoker::Account(account.id),
            &cert.der,
            Some(4),
            client_ip(),
        )
        .await,
    );
    let record = only(&h, AuditKind::CertificateRevoked).await;
    assert_eq!(record.event.actor, Actor::Account(account.id));
    assert_eq!(record.event.client_ip, Some(client_ip()));
    assert_eq!(record.event.serial.as_ref(), Some(&cert.serial));
    assert_eq!(
        record.event.reason,
        "revoked by the account holding it (the request was signed by the account's key), \
         reason keyCompromise"
    );
}

#[tokio::test]
async fn operator_actions_are_recorded_with_the_token_identity_and_the_operator() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let (first, _) = h.issue(&account, &["a.example.com"]).await;
    let (second, _) = h.issue(&account, &["b.example.com"]).await;

    h.ra.revoke_by_serial(&first.serial, RevocationReason::Superseded, &who())
        .await
        .unwrap();
    let filter = storage::model::CertificateFilter {
        account: Some(account.id),
        ..storage::model::CertificateFilter::default()
    };
    h.ra.revoke_batch(
        &filter,
        None,
        10,
        RevocationReason::CessationOfOperation,
        &who(),
    )
    .await
    .unwrap();
    let revoked = records(&h, AuditKind::CertificateRevoked).await;
    assert_eq!(revoked.len(), 2, "{revoked:#?}");
    assert_eq!(revoked[0].event.serial.as_ref(), Some(&first.serial));
    assert_eq!(revoked[1].event.serial.as_ref(), Some(&second.serial));
    assert_eq!(revoked[1].event.names, ["b.example.com"]);
    for record in &revoked {
        assert_eq!(record.event.actor, the_admin());
        assert_eq!(
            record.event.actor,
            Actor::Admin {
                token: "sha256:0123456789abcdef".to_owned(),
                operator: Some("alice".to_owned()),
            }
        );
    }

    let (other, _) = h.account().await;
    h.ra.renew_early(&RenewEarlyTarget::Account(other.id), &who())
        .await
        .unwrap();
    assert!(
        records(&h, AuditKind::AdminAction).await.is_empty(),
        "marking nothing records nothing"
    );
    h.ra.operator_deactivates(other.id, &who()).await.unwrap();
    let record = only(&h, AuditKind::AccountDeactivated).await;
    assert_eq!(record.event.account, Some(other.id));
    assert_eq!(record.event.actor, the_admin());
    assert!(record.event.reason.contains("an operator"), "{record:?}");
}

#[tokio::test]
async fn external_account_keys_are_recorded_when_created_bound_and_revoked() {
    let h = harness()
        .settings(|s| s.external_account_required = true)
        .build()
        .await;
    let request = ra::eab::KeyRequest {
        policy: acme_core::eab_policy::EabPolicy::new(&[], Vec::new(), Vec::new(), None).unwrap(),
        expires_in: None,
        reusable: false,
    };
    let (key_created, hmac) = h.ra.create_eab_key(request, &who()).await.unwrap();
    let record = only(&h, AuditKind::EabKeyCreated).await;
    assert_eq!(record.event.actor, the_admin());
    assert_eq!(record.event.detail["kid"], key_created.kid.0.as_str());
    assert!(
        !serde_json_text(&record).contains(&hmac),
        "the HMAC key is never recorded"
    );

    let account_key = key();
    let jwk = account_key.public_jwk();
    let url = "https://ca.example/acme/new-account";
    let hmac_bytes = {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&hmac)
            .unwrap()
    };
    let value = acme_jose::sign::eab_binding(
        &key_created.kid.0,
        &hmac_bytes,
        acme_jose::eab::MacAlgorithm::Hs256,
        url,
        &jwk,
    );
    let binding = acme_jose::eab::EabBinding::parse(&value, url, &jwk).unwrap();
    let account = h
        .register(ra::accounts::AccountRequest {
            external_account_binding: Some(binding),
            ..crate::harness::account_request(jwk)
        })
        .await;
    let created = only(&h, AuditKind::AccountCreated).await;
    let bound = only(&h, AuditKind::EabKeyBound).await;
    assert_eq!(created.event.account, Some(account.id));
    assert_eq!(bound.event.account, Some(account.id));
    assert_eq!(bound.event.actor, Actor::Account(account.id));
    assert_eq!(bound.event.detail["kid"], key_created.kid.0.as_str());
    assert_eq!(
        bound.seq,
        created.seq + 1,
        "one transaction, one after the other"
    );

    h.ra.revoke_eab_key(&key_created.kid, true, &who())
        .await
        .unwrap();
    let revoked = only(&h, AuditKind::EabKeyRevoked).await;
    assert_eq!(revoked.event.detail["kid"], key_created.kid.0.as_str());
    let deactivated = only(&h, AuditKind::AccountDeactivated).await;
    assert_eq!(deactivated.event.account, Some(account.id));
    assert!(deactivated.event.reason.contains(&key_created.kid.0));
    assert_eq!(
        h.storage.account(account.id).await.unwrap().unwrap().status,
        AccountStatus::Deactivated
    );
}

fn serde_json_text(record: &AuditRecord) -> String {
    format!("{} {}", record.event.reason, record.event.detail)
}

#[tokio::test]
async fn pauses_and_unpauses_name_the_pairs_and_who_lifted_them() {
    let h = harness().build().await;
    let (account, _) = h.account().await;
    let ids = [dns("a.example.com"), dns("b.example.com")];
    h.ra.pause(account.id, &ids, &who()).await.unwrap();
    // Paused already: nothing new, nothing recorded.
    h.ra.pause(account.id, &ids, &who()).await.unwrap();
    let paused = only(&h, AuditKind::AccountPaused).await;
    assert_eq!(paused.event.account, Some(account.id));
    assert_eq!(paused.event.names, ["a.example.com", "b.example.com"]);
    assert_eq!(paused.event.actor, the_admin());

    h.ra.unpause(account.id, &[], &subscriber(account.id))
        .await
        .unwrap();
    // Nothing left paused: nothing recorded.
    h.ra.unpause(account.id, &[], &subscriber(account.id))
        .await
        .unwrap();
    let unpaused = only(&h, AuditKind::AccountUnpaused).await;
    assert_eq!(unpaused.event.actor, Actor::Account(account.id));
    assert_eq!(unpaused.event.client_ip, Some(client_ip()));
    assert_eq!(unpaused.event.names.len(), 2);
    assert_eq!(
        unpaused.event.reason,
        "unpaused by the account's holder through the unpause page (its signed link)"
    );
    // An unknown account is refused before anything is written.
    refusal(h.ra.pause(AccountId(4242), &ids, &who()).await);
    assert_eq!(records(&h, AuditKind::AccountPaused).await.len(), 1);
}

#[tokio::test]
async fn key_blocks_are_recorded_and_a_refused_block_is_not() {
    let h = harness().build().await;
    let hash = SpkiHash::of(&key().public_jwk());
    h.ra.block_key(hash, "leaked in a ticket", &who())
        .await
        .unwrap();
    refusal(h.ra.block_key(hash, "again", &who()).await);
    let blocked = only(&h, AuditKind::KeyBlocked).await;
    assert_eq!(blocked.event.detail["spki_sha256"], hash.to_hex().as_str());
    assert!(blocked.event.reason.contains("leaked in a ticket"));
    h.ra.unblock_key(hash, &who()).await.unwrap();
    refusal(h.ra.unblock_key(hash, &who()).await);
    let unblocked = only(&h, AuditKind::KeyUnblocked).await;
    assert_eq!(unblocked.event.actor, the_admin());
    // The chain holds all of it.
    let check = h.storage.verify_audit_chain(&|_| {}).await.unwrap();
    assert_eq!(check.first_broken, None);
    assert!(check.records >= 2);
}

#[tokio::test]
async fn the_server_records_the_pauses_it_decides() {
    let requester = Requester::system();
    assert_eq!(requester.who(), "the server");
    assert_eq!(requester.client_ip, None);
    let event = requester.event(AuditKind::AccountPaused, "x");
    assert_eq!(event.actor, Actor::System);
    assert_eq!(event.account, None);
}
