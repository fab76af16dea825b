//! The admin API needs its bearer token and refuses browsers; the data directory, the database
//! and the token are private to the server's user; `database.max-connections` sizes the pool.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command as StdCommand;

use crate::harness::Db;
use crate::harness::TestEnv;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn token_path(env: &TestEnv) -> std::path::PathBuf {
    env.dir.path().join("data/admin.token")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn status(request: reqwest::RequestBuilder) -> u16 {
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn admin_api_needs_the_token_and_refuses_browsers() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let token = env.admin_token();
    assert_eq!(token.len(), 64, "32 random bytes, hex");
    let http = client();
    let admin_addr = env.admin_addr();
    let url = |path: &str| format!("http://{admin_addr}{path}");
    let bearer = format!("Bearer {token}");

    // No token, a wrong token, another scheme: 401 with a challenge.
    let none = http.get(url("/admin/pauses")).send().await.unwrap();
    assert_eq!(none.status().as_u16(), 401);
    assert!(none.headers().contains_key("www-authenticate"));
    let mut wrong = token.clone().into_bytes();
    wrong[10] = if wrong[10] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).unwrap();
    for header in [
        format!("Bearer {wrong}"),
        format!("Bearer {}", &token[..63]),
        format!("Basic {token}"),
        "Bearer".to_owned(),
    ] {
        let r = http
            .get(url("/admin/pauses"))
            .header("authorization", header.as_str());
        assert_eq!(status(r).await, 401, "{header}");
    }
    assert_eq!(status(http.post(url("/admin/reload"))).await, 401);
    assert_eq!(
        status(http.post(url("/admin/ratelimit/global/127.0.0.1/reset"))).await,
        401
    );

    // The token opens it; the scheme is case-insensitive.
    let ok = http
        .get(url("/admin/pauses"))
        .header("authorization", &bearer);
    assert_eq!(status(ok).await, 200);
    let ok = http
        .get(url("/admin/pauses"))
        .header("authorization", format!("bearer {token}"));
    assert_eq!(status(ok).await, 200);

    // Anything a browser sends is refused, token or not.
    for (name, value) in [
        ("origin", format!("http://{admin_addr}")),
        ("origin", "null".to_owned()),
        ("origin", "https://evil.example".to_owned()),
        ("sec-fetch-site", "cross-site".to_owned()),
        ("sec-fetch-site", "same-origin".to_owned()),
        ("sec-fetch-site", "same-site".to_owned()),
    ] {
        let r = http
            .post(url("/admin/reload"))
            .header("authorization", &bearer)
            .header(name, value.as_str());
        assert_eq!(status(r).await, 403, "{name}: {value}");
        let r = http.get(url("/admin/pauses")).header(name, value.as_str());
        assert_eq!(status(r).await, 403, "{name}: {value} without a token");
    }
    // A URL the user typed (Sec-Fetch-Site: none) is not cross-site.
    let typed = http
        .get(url("/admin/pauses"))
        .header("authorization", &bearer)
        .header("sec-fetch-site", "none");
    assert_eq!(status(typed).await, 200);

    // Scrapers and probes need no token.
    for path in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(status(http.get(url(path))).await, 200, "{path}");
    }

    // The token is private and survives a restart unchanged.
    assert_eq!(mode(&token_path(&env)), 0o600);
    env.server.take().unwrap().shutdown().await;
    env.start().await;
    assert_eq!(env.admin_token(), token);
    let ok = http
        .get(url("/admin/pauses"))
        .header("authorization", &bearer);
    assert_eq!(status(ok).await, 200);
}

#[tokio::test]
async fn a_fresh_data_dir_database_and_token_are_private() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    env.start().await;
    let data = env.dir.path().join("data");
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("admin.token")), 0o600);
    let db = data.join("certeasy.db");
    assert_eq!(mode(&db), 0o600);
    // WAL mode with open connections: the -wal file exists and is private too. The server's
    // connections keep the WAL index in memory (SQLite's unix-excl VFS), so a -shm file is left
    // only by the migrations' connection, and private when it is.
    let wal = data.join("certeasy.db-wal");
    assert!(wal.exists(), "{} missing", wal.display());
    assert_eq!(mode(&wal), 0o600, "{}", wal.display());
    let shm = data.join("certeasy.db-shm");
    if shm.exists() {
        assert_eq!(mode(&shm), 0o600, "{}", shm.display());
    }
    // Nothing in the data directory is readable by others.
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(
            mode(&path) & 0o077,
            0,
            "{} is open to others",
            path.display()
        );
    }
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = StdCommand::new(env!("CARGO_BIN_EXE_certeasy"))
        .env_remove("CERTEASY_CONFIG")
        .env_remove("CERTEASY_ADMIN_URL")
        .env_remove("CERTEASY_ADMIN_TOKEN_FILE")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test]
async fn the_cli_sends_the_token_from_the_config_or_a_flag() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // A configured token file, outside the data directory.
    let configured = env.dir.path().join("secrets-admin.token");
    let mut server = env.sections["server"].clone();
    server.push_str(&format!(
        "  admin-token-file: \"{}\"\n",
        configured.display()
    ));
    env.section("server", &server);
    env.spawn_binary().await;
    assert_eq!(mode(&configured), 0o600);
    assert!(
        !token_path(&env).exists(),
        "the configured file is used instead"
    );

    let config = env.config_path.to_str().unwrap().to_owned();
    let (ok, out) = cli(&["admin", "--config", &config, "pauses", "list"]);
    assert!(ok && out.contains("account\tidentifier"), "{out}");

    let admin_url = format!("http://{}", env.admin_addr());
    let (ok, out) = cli(&[
        "admin",
        "--admin-url",
        &admin_url,
        "--token-file",
        configured.to_str().unwrap(),
        "ratelimit",
        "show",
        "global",
        "127.0.0.1",
    ]);
    assert!(ok, "{out}");

    // A wrong token is refused by the server, and the CLI says so.
    let wrong = env.dir.path().join("wrong.token");
    std::fs::write(&wrong, format!("{}\n", "ab".repeat(32))).unwrap();
    {
        // A token file every user can read is refused before it is sent.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (ok, out) = cli(&[
        "admin",
        "--admin-url",
        &admin_url,
        "--token-file",
        wrong.to_str().unwrap(),
        "pauses",
        "list",
    ]);
    assert!(!ok && out.contains("Bearer"), "{out}");

    // No token file at all: the CLI stops before sending anything.
    let missing = env.dir.path().join("missing.token");
    let (ok, out) = cli(&[
        "admin",
        "--admin-url",
        &admin_url,
        "--token-file",
        missing.to_str().unwrap(),
        "reload",
    ]);
    assert!(!ok && out.contains("missing.token"), "{out}");
}

#[tokio::test]
async fn database_max_connections_sizes_the_pool() {
    let mut sqlite = TestEnv::new(Db::Sqlite).await;
    sqlite.section("database", "  max-connections: 3\n");
    sqlite.start().await;
    assert_eq!(sqlite.server.as_ref().unwrap().storage.max_connections(), 3);

    let mut pg = TestEnv::new(Db::Postgres).await;
    let body = format!("{}  max-connections: 5\n", pg.sections["database"]);
    pg.section("database", &body);
    pg.start().await;
    let storage = &pg.server.as_ref().unwrap().storage;
    assert_eq!(storage.max_connections(), 5);
    assert!(storage.ping().await.is_ok());
}
