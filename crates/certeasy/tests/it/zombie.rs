//! Zombie clients end to end: lego fails validation until the pair is paused, the next order is
//! refused with an unpause link, a real Chromium opens it and clicks the button, and issuance
//! works again. Tampered and expired links unpause nothing; other accounts are never refused.

use std::net::Ipv4Addr;
use std::time::Duration;

use acme_jose::Algorithm;
use serde_json::json;

use crate::browser::Browser;
use crate::harness::Db;
use crate::harness::TestEnv;
use crate::harness::free_port;
use crate::harness::run;
use crate::raw::Raw;

fn lego(env: &TestEnv, name: &str, port: u16) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("lego");
    cmd.env("LEGO_CA_CERTIFICATES", &env.root_path)
        .arg("--server")
        .arg(env.directory_url())
        .args(["--accept-tos", "--email", "zombie@example.com", "--path"])
        .arg(env.dir.path().join("lego"))
        .args([
            "--domains",
            name,
            "--http",
            "--http.port",
            &format!("127.0.0.1:{port}"),
            "run",
        ]);
    cmd
}

fn unpause_url(text: &str) -> Option<String> {
    let marker = text.find("/unpause?token=")?;
    let start = text[..marker].rfind("https://")?;
    let rest = &text[start..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '"' || c == '\\' || c == ',')
        .unwrap_or(rest.len());
    Some(rest[..end].trim_end_matches('.').to_owned())
}

#[tokio::test]
async fn a_failing_client_is_paused_and_unpauses_itself_in_a_browser() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = free_port();
    env.challenge_ports(port, env.tls.port());
    env.section(
        "rate-limiting",
        "  whitelist: [\"127.0.0.1\"]\n  failed-validation:\n    enabled: false\n",
    );
    env.section(
        "zombie-pausing",
        "  max-consecutive-failures: 3\n  refill-per: 24h\n",
    );
    env.spawn_binary().await;
    let name = env.name("zombie");
    // The name points at an address where nothing listens: every validation fails.
    env.dns.set_a(&name, Ipv4Addr::new(127, 0, 0, 2));

    for attempt in 1..=3 {
        let (ok, out) = run(lego(&env, &name, port), Duration::from_secs(120)).await;
        assert!(!ok, "attempt {attempt} must fail validation:\n{out}");
        assert!(
            !out.contains("unpause"),
            "not paused before the 3rd failure completes:\n{out}"
        );
    }
    // The 4th order is refused at once, with the unpause link.
    let mut refused = None;
    for _ in 0..20 {
        let (ok, out) = run(lego(&env, &name, port), Duration::from_secs(120)).await;
        assert!(!ok);
        if out.contains("rateLimited") && out.contains("/unpause?token=") {
            refused = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refused =
        refused.unwrap_or_else(|| panic!("the pair was never paused:\n{}", env.server_log()));
    assert!(refused.contains(&name), "{refused}");
    let url = unpause_url(&refused).unwrap_or_else(|| panic!("no unpause URL in:\n{refused}"));
    assert!(
        !env.server_log().contains("token="),
        "the token is never logged"
    );

    // Another account is never refused for the same name.
    let mut other = Raw::new(&env, Algorithm::Es256);
    other.register().await;
    let r = other
        .post(
            &other.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");

    let browser = Browser::start().await;

    // A tampered link shows an error page and unpauses nothing.
    let tampered = format!("{}x", url);
    browser.goto(&tampered).await;
    let text = browser.text().await.to_lowercase();
    assert!(
        text.contains("invalid") || text.contains("not valid"),
        "{text}"
    );

    // An expired link (signed with the server's own key, but past its expiry) unpauses nothing.
    let key =
        acme_api::unpause::token::load_or_create_key(&env.dir.path().join("data/unpause.key"))
            .unwrap();
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let expired = acme_api::unpause::token::UnpauseKey::new(&key).sign(
        &acme_api::unpause::token::UnpauseClaims {
            account: acme_core::ids::AccountId(1),
            identifiers: vec![name.clone()],
            issued_at: now - 30 * 86_400,
            expires_at: now - 16 * 86_400,
            version: 1,
        },
    );
    browser
        .goto(&format!("{}/unpause?token={expired}", env.base_url()))
        .await;
    let text = browser.text().await.to_lowercase();
    assert!(text.contains("expired"), "{text}");
    let r = other
        .post(
            &other.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": name}]})),
        )
        .await;
    assert_eq!(r.status, 201, "other accounts stay unaffected");

    // The real link: the page explains, names the account and the name, and has one button.
    browser.goto(&url).await;
    let text = browser.text().await;
    let source = browser.source().await;
    assert!(text.contains(&name), "{text}");
    assert!(text.to_lowercase().contains("paused"), "{text}");
    assert!(text.to_lowercase().contains("account"), "{text}");
    assert!(!source.contains("<script"), "no JavaScript");
    browser.click("form button, form input[type=submit]").await;
    // The page source, not an element: while the POST's answer loads, elements go stale.
    for _ in 0..100 {
        if browser.source().await.contains("Unpause status") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let status = browser.text().await;
    assert!(
        status.contains("Unpaused 1 name."),
        "the answer to the click says what the server did: {status}"
    );
    assert!(
        !browser.url().await.contains("count="),
        "nothing to forge in the URL: {}",
        browser.url().await
    );

    // Unpausing twice is harmless.
    browser.goto(&url).await;
    browser.click("form button, form input[type=submit]").await;
    for _ in 0..100 {
        if browser.source().await.contains("Unpause status") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = browser.text().await.to_lowercase();
    assert!(
        again.contains("already") || again.contains("nothing") || again.contains("0"),
        "{again}"
    );

    // The client fixed its DNS: the next order succeeds.
    env.dns.set_a(&name, Ipv4Addr::LOCALHOST);
    let (ok, out) = run(lego(&env, &name, port), Duration::from_secs(120)).await;
    assert!(
        ok,
        "after unpausing, issuance works:\n{out}\n{}",
        env.server_log()
    );

    // Admin CLI sees the lifted pause.
    let listed = env.admin_cli().run(&["pauses", "list", "--all"]).stdout;
    assert!(listed.contains(&name), "{listed}");
}

#[tokio::test]
async fn admin_pause_and_unpause_with_a_file_and_the_pause_problem() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.spawn_binary().await;
    let mut raw = Raw::new(&env, Algorithm::Es256);
    raw.register().await;
    let account = raw
        .kid
        .clone()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let names: Vec<String> = (0..20).map(|i| env.name(&format!("bulk{i}"))).collect();
    let file = env.dir.path().join("names.txt");
    std::fs::write(&file, names.join("\n")).unwrap();
    let admin = |args: &[&str]| crate::harness::admin(&env, args);
    let (ok, out) = admin(&[
        "pause",
        "--account",
        &account,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("20 of 20"), "{out}");

    // Every paused name is listed (up to 15) and the order is refused before anything is created.
    let ids: Vec<serde_json::Value> = names
        .iter()
        .map(|n| json!({"type": "dns", "value": n}))
        .collect();
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": ids })),
        )
        .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.problem_type(), "urn:ietf:params:acme:error:rateLimited");
    let detail = r.body["detail"].as_str().unwrap();
    assert!(detail.contains("and possibly others"), "{detail}");
    assert!(detail.contains("/unpause?token="), "{detail}");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 86_400, "clients back off at least a day");
    let links: Vec<String> = r
        .headers
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert!(
        links.iter().any(|l| l
            == &format!(
                "<{}/docs/rate-limits#zombie-pausing>;rel=\"help\"",
                env.base_url()
            )),
        "the help link is the documentation: {links:?}"
    );
    assert!(
        links.iter().any(|l| l.contains("/unpause?token=")
            && l.ends_with(&format!(
                ";rel=\"{}/docs/rate-limits#unpause\"",
                env.base_url()
            ))),
        "the unpause URL has its own relation: {links:?}"
    );
    // The paused pairs' policy: nothing left, for as long as Retry-After says.
    let policy = r.header("ratelimit-policy").expect("RateLimit-Policy");
    let current = r.header("ratelimit").expect("RateLimit");
    assert!(
        policy.contains("\"zombie-pausing\";q=") && policy.contains(";pk=:"),
        "{policy}"
    );
    assert!(
        current.contains(&format!("\"zombie-pausing\";r=0;t={retry}")),
        "{current}"
    );
    let orders = raw
        .post(&format!("{}/orders", raw.kid.clone().unwrap()), None)
        .await;
    assert!(
        orders.body["orders"].as_array().unwrap().is_empty(),
        "no order was created"
    );

    // A cross-site POST of the unpause form is refused and unpauses nothing; a GET changes nothing.
    let url = unpause_url(detail).unwrap();
    let token = url.split("token=").nth(1).unwrap().to_owned();
    assert_eq!(
        raw.http.get(&url).send().await.unwrap().status().as_u16(),
        200
    );
    let forged = raw
        .http
        .post(format!("{}/unpause", env.base_url()))
        .header("origin", "https://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 403);
    // A foreign Referer is refused the same way, without an Origin or despite a matching one.
    for origin in [None, Some(env.base_url())] {
        let mut post = raw
            .http
            .post(format!("{}/unpause", env.base_url()))
            .header("referer", "https://evil.example/page")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"));
        if let Some(origin) = &origin {
            post = post.header("origin", origin);
        }
        let refused = post.send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "origin {origin:?}");
        assert!(refused.text().await.unwrap().contains("another site"));
    }
    // The outcome page is the POST's answer: there is no page that shows a count from its URL.
    let status_page = raw
        .http
        .get(format!("{}/unpause/status?count=123456", env.base_url()))
        .send()
        .await
        .unwrap();
    assert_ne!(status_page.status().as_u16(), 200);
    assert!(!status_page.text().await.unwrap().contains("123456"));
    let still = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": ids })),
        )
        .await;
    assert_eq!(
        still.status, 429,
        "nothing was unpaused by the forged request or the GET"
    );

    // An unpaused name of the same account is fine.
    let free = env.name("free");
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({"identifiers": [{"type": "dns", "value": free}]})),
        )
        .await;
    assert_eq!(r.status, 201);

    let (ok, out) = admin(&["unpause", "--account", &account, &names[0]]);
    assert!(ok && out.contains("1 of 1"), "{out}");
    let (ok, out) = admin(&["unpause", "--account", &account]);
    assert!(ok && out.contains("19 pairs"), "{out}");
    let r = raw
        .post(
            &raw.url("/acme/new-order"),
            Some(&json!({ "identifiers": ids })),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");

    // A same-origin click answers with what the server did: the count it unpaused.
    let three = names[..3].join("\n");
    std::fs::write(&file, three).unwrap();
    let (ok, out) = admin(&[
        "pause",
        "--account",
        &account,
        "--file",
        file.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("3 of 3"), "{out}");
    let click = || {
        raw.http
            .post(format!("{}/unpause", env.base_url()))
            .header("origin", env.base_url())
            .header("referer", &url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    let done = click().await.unwrap();
    assert_eq!(done.status().as_u16(), 200);
    let page = done.text().await.unwrap();
    assert!(page.contains("Unpaused 3 names"), "{page}");
    let again = click().await.unwrap().text().await.unwrap();
    assert!(again.contains("already"), "{again}");
}
