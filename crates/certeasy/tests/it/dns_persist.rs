//! dns-persist-01 (draft-ietf-acme-dns-persist-02) with raw RFC 8555 requests (no packaged
//! client speaks it yet) against a real server and the test DNS server: the directory announces
//! `issuerDomainNames` and `accountHashPrefix`; one standing record validates a name order after
//! order, also after a key change; records for another account, another issuer, an expired
//! `persistUntil`, or a wildcard without `policy=wildcard` do not; a `persistUntil` caps the
//! authorization's expiry; CAA `validationmethods` can name the method.

use std::time::Duration;

use acme_jose::Algorithm;
use acme_jose::sign::SigningKey;
use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use serde_json::json;
use testkit::poll::OnTheWay;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::harness::Db;
use crate::harness::TestEnv;
use crate::raw::Raw;

/// The issuer domain name the server is configured with.
const ISSUER: &str = "ca.certeasy.test";
const ERR: &str = "urn:ietf:params:acme:error:";

/// The hashed account URI of draft §4.1, computed here independently of the server.
fn hashed_uri(prefix: &str, domain: &str, thumbprint: &str, account_url: &str) -> String {
    let mut input = vec![u8::try_from(domain.len()).unwrap()];
    input.extend_from_slice(domain.as_bytes());
    input.extend_from_slice(thumbprint.as_bytes());
    input.extend_from_slice(account_url.as_bytes());
    let hash = digest::digest(&digest::SHA256, &input);
    format!("{prefix}sha-256/{}", URL_SAFE_NO_PAD.encode(hash.as_ref()))
}

/// A server offering dns-persist-01 under [`ISSUER`], without reuse of valid authorizations so
/// that every order validates afresh; `acme` is extra lines of the `acme:` section.
async fn started(db: Db, validation_extra: &str, acme: &str) -> TestEnv {
    let mut env = TestEnv::new(db).await;
    env.section(
        "validation",
        &format!(
            "  dns-servers: [\"{}\"]\n  http-port: {}\n  tls-alpn-port: {}\n  allow-loopback: true\n  timeout: 5s\n  retries: 0\n  dns-persist-01: true\n{validation_extra}",
            env.dns.addr(),
            env.http.port(),
            env.tls.port()
        ),
    );
    env.section(
        "acme",
        &format!("  reuse-valid-authorizations: false\n{acme}"),
    );
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    enabled: false\n",
    );
    env.start().await;
    env
}

struct Account {
    raw: Raw,
    prefix: String,
}

impl Account {
    async fn new(env: &TestEnv) -> Self {
        let mut raw = Raw::new(env, Algorithm::Es256);
        raw.register().await;
        let directory = raw.directory().await;
        let prefix = directory["meta"]["accountHashPrefix"]
            .as_str()
            .unwrap()
            .to_owned();
        Self { raw, prefix }
    }

    fn kid(&self) -> &str {
        self.raw.kid.as_deref().unwrap()
    }

    /// This account's hashed URI for `domain` with its current key.
    fn uri(&self, domain: &str) -> String {
        let thumbprint = self.raw.key.public_jwk().thumbprint();
        hashed_uri(&self.prefix, domain, &thumbprint, self.kid())
    }

    /// Orders `name` and returns its dns-persist-01 challenge and the authorization URL.
    async fn challenge(&self, name: &str) -> (Value, String) {
        let order = self
            .raw
            .post(
                &self.raw.url("/acme/new-order"),
                Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
            )
            .await;
        assert_eq!(order.status, 201, "{order:?}");
        let authz_url = order.body["authorizations"][0].as_str().unwrap().to_owned();
        let authz = self.raw.post(&authz_url, None).await.body;
        let challenge = authz["challenges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "dns-persist-01")
            .unwrap_or_else(|| panic!("no dns-persist-01 challenge in {authz}"))
            .clone();
        (challenge, authz_url)
    }

    /// Orders `name`, answers its dns-persist-01 challenge and waits for `want`.
    async fn validate(&self, env: &TestEnv, name: &str, want: &str) -> (Value, String) {
        let (challenge, authz_url) = self.challenge(name).await;
        let url = challenge["url"].as_str().unwrap();
        let r = self.raw.post(url, Some(&json!({}))).await;
        assert_eq!(r.status, 200, "{r:?}");
        let done = self
            .raw
            .wait_for_status(
                url,
                want,
                OnTheWay::Only(&["pending", "processing"]),
                Duration::from_secs(20),
            )
            .await
            .unwrap_or_else(|stuck| panic!("{stuck}\n{}", env.server_log()));
        (done, authz_url)
    }
}

fn record_name(name: &str) -> String {
    format!("_validation-persist.{name}")
}

async fn standing_record_validates_again_and_again_and_after_a_key_change(db: Db) {
    let env = started(
        db,
        &format!("  dns-persist-issuer-domain-names: [\"{ISSUER}\"]\n"),
        "",
    )
    .await;
    let mut account = Account::new(&env).await;
    // The directory says what a record needs, before any order (draft §3.2, §4.5).
    let directory = account.raw.directory().await;
    assert_eq!(directory["meta"]["issuerDomainNames"], json!([ISSUER]));
    assert_eq!(
        directory["meta"]["accountHashPrefix"],
        format!("{}/acme/account-hash/", env.base_url())
    );
    let name = env.name("persist");
    // Published once, before the first order, with the account's first key.
    env.dns.add_txt(
        &record_name(&name),
        &format!("{ISSUER}; accounturi={}", account.uri(&name)),
    );
    let (challenge, _) = account.challenge(&name).await;
    assert_eq!(challenge["issuerDomainNames"], json!([ISSUER]));
    for _ in 0..2 {
        let (done, _) = account.validate(&env, &name, "valid").await;
        assert_eq!(done["type"], "dns-persist-01");
    }
    // Key change (RFC 8555 §7.3.5): the record made with the old key still validates.
    let new_key = SigningKey::generate(Algorithm::Es256).unwrap();
    let inner = account.raw.key_change_inner(&new_key);
    let url = account.raw.url("/acme/key-change");
    let r = account.raw.post(&url, Some(&inner)).await;
    assert_eq!(r.status, 200, "{r:?}");
    account.raw.key = new_key;
    account.validate(&env, &name, "valid").await;
    // A record made with the new key, in the domain-omitted form, validates as well.
    let second = env.name("persist-new-key");
    env.dns.add_txt(
        &record_name(&second),
        &format!("{ISSUER}; accounturi={}", account.uri("*")),
    );
    account.validate(&env, &second, "valid").await;
}

#[tokio::test]
async fn standing_record_validates_again_and_again_and_after_a_key_change_sqlite() {
    standing_record_validates_again_and_again_and_after_a_key_change(Db::Sqlite).await;
}

#[tokio::test]
async fn standing_record_validates_again_and_again_and_after_a_key_change_postgres() {
    standing_record_validates_again_and_again_and_after_a_key_change(Db::Postgres).await;
}

#[tokio::test]
async fn records_that_do_not_validate_say_why_and_persist_until_caps_the_authorization() {
    let env = started(
        Db::Sqlite,
        &format!("  dns-persist-issuer-domain-names: [\"{ISSUER}\"]\n"),
        "",
    )
    .await;
    let account = Account::new(&env).await;
    let other = Account::new(&env).await;
    let now = OffsetDateTime::now_utc().unix_timestamp();

    // Another account's record.
    let name = env.name("wrong-account");
    env.dns.add_txt(
        &record_name(&name),
        &format!("{ISSUER}; accounturi={}", other.uri(&name)),
    );
    let (done, _) = account.validate(&env, &name, "invalid").await;
    assert_eq!(
        done["error"]["type"],
        format!("{ERR}unauthorized"),
        "{done}"
    );
    assert!(
        done["error"]["detail"]
            .as_str()
            .unwrap()
            .contains(account.kid()),
        "{done}"
    );

    // A record for another issuer domain name: not this CA's, so ignored.
    let name = env.name("wrong-issuer");
    env.dns.add_txt(
        &record_name(&name),
        &format!("other-ca.example; accounturi={}", account.uri(&name)),
    );
    let (done, _) = account.validate(&env, &name, "invalid").await;
    assert_eq!(
        done["error"]["type"],
        format!("{ERR}unauthorized"),
        "{done}"
    );
    assert!(
        done["error"]["detail"].as_str().unwrap().contains(ISSUER),
        "{done}"
    );

    // An expired persistUntil.
    let name = env.name("expired");
    env.dns.add_txt(
        &record_name(&name),
        &format!(
            "{ISSUER}; accounturi={}; persistUntil={}",
            account.uri(&name),
            now - 60
        ),
    );
    let (done, _) = account.validate(&env, &name, "invalid").await;
    assert_eq!(
        done["error"]["type"],
        format!("{ERR}unauthorized"),
        "{done}"
    );
    assert!(
        done["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("persistUntil"),
        "{done}"
    );

    // A malformed record of ours (persistUntil not a number): malformed.
    let name = env.name("malformed");
    env.dns.add_txt(
        &record_name(&name),
        &format!(
            "{ISSUER}; accounturi={}; persistUntil=soon",
            account.uri(&name)
        ),
    );
    let (done, _) = account.validate(&env, &name, "invalid").await;
    assert_eq!(done["error"]["type"], format!("{ERR}malformed"), "{done}");

    // A wildcard needs policy=wildcard: refused without it, allowed with it.
    let name = env.name("wild");
    env.dns.add_txt(
        &record_name(&name),
        &format!("{ISSUER}; accounturi={}", account.uri(&name)),
    );
    let wildcard = format!("*.{name}");
    let (done, _) = account.validate(&env, &wildcard, "invalid").await;
    assert!(
        done["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("policy=wildcard"),
        "{done}"
    );
    let name = env.name("wild-ok");
    env.dns.add_txt(
        &record_name(&name),
        &format!(
            "{ISSUER}; accounturi={}; policy=wildcard",
            account.uri(&name)
        ),
    );
    account.validate(&env, &format!("*.{name}"), "valid").await;

    // Several records side by side (another CA's, another account's, ours): ours validates,
    // and a future persistUntil caps the authorization's expiry.
    let name = env.name("until");
    let until = now + 3600;
    for record in [
        format!("other-ca.example; accounturi={}", account.uri(&name)),
        format!("{ISSUER}; accounturi={}", other.uri(&name)),
        format!(
            "{ISSUER}; accounturi={}; persistUntil={until}",
            account.uri(&name)
        ),
    ] {
        env.dns.add_txt(&record_name(&name), &record);
    }
    let (_, authz_url) = account.validate(&env, &name, "valid").await;
    let authz = account.raw.post(&authz_url, None).await.body;
    assert_eq!(authz["status"], "valid", "{authz}");
    let expires = OffsetDateTime::parse(authz["expires"].as_str().unwrap(), &Rfc3339).unwrap();
    assert!(
        expires.unix_timestamp() <= until,
        "expires {expires} after persistUntil {until}"
    );
}

#[tokio::test]
async fn caa_validationmethods_can_name_dns_persist_01() {
    // No issuer names of its own: dns-persist-01 takes acme.caa-identities.
    let env = started(
        Db::Sqlite,
        "",
        &format!("  caa-identities: [\"{ISSUER}\"]\n"),
    )
    .await;
    let account = Account::new(&env).await;
    let directory = account.raw.directory().await;
    assert_eq!(directory["meta"]["issuerDomainNames"], json!([ISSUER]));

    let allowed = env.name("caa-allows");
    env.dns.add_caa(
        &allowed,
        0,
        "issue",
        &format!("{ISSUER}; validationmethods=dns-persist-01"),
    );
    env.dns.add_txt(
        &record_name(&allowed),
        &format!("{ISSUER}; accounturi={}", account.uri(&allowed)),
    );
    account.validate(&env, &allowed, "valid").await;

    let refused = env.name("caa-refuses");
    env.dns.add_caa(
        &refused,
        0,
        "issue",
        &format!("{ISSUER}; validationmethods=dns-01"),
    );
    env.dns.add_txt(
        &record_name(&refused),
        &format!("{ISSUER}; accounturi={}", account.uri(&refused)),
    );
    let (done, _) = account.validate(&env, &refused, "invalid").await;
    assert_eq!(done["error"]["type"], format!("{ERR}caa"), "{done}");
}
