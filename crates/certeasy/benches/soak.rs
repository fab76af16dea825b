//! Soak run: mixed issuance for a long time at a steady rate while Redis and the server are
//! killed and restarted, then a check that no certificate a client was told about was lost or
//! duplicated, and whether the server's memory stayed flat. Run by `scripts/soak.sh`, never by
//! `cargo test` (a `[[bench]]` target with `test = false`).
//!
//! Everything runs on 127.0.0.1: the real `certeasy serve` binary (embedded SQLite, rate limits
//! in a private `redis-server` started here on its own port), and in this process the clients
//! (instant-acme), the testkit DNS server and the http-01 responder. Settings come from the
//! environment (see `Settings::from_env`); results go to `SOAK_DIR`: `summary.txt`,
//! `certificates.tsv` (every certificate a client was told about), `rss.tsv`, `events.tsv`, and
//! the server and Redis logs. The exit status is non-zero when a certificate is lost or
//! duplicated.
//!
//! Clients retry through outages the way a patient ACME client does: an order already created is
//! polled until it is valid or a deadline passes, so a restart shows up as latency, not as a lost
//! certificate. Orders whose client gave up are counted as client failures, not as losses.

use std::collections::HashMap;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::bail;
use instant_acme::Account;
use instant_acme::AuthorizationStatus;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewAccount;
use instant_acme::NewOrder;
use instant_acme::Order;
use instant_acme::OrderStatus;
use records::Records;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use testkit::ports::free_port;
use tokio::process::Child;
use tokio::process::Command;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How often clients poll an order (the bench's figure; `Retry-After` would hide server delays).
const POLL: Duration = Duration::from_millis(50);
/// How long a client keeps at one order through outages before giving up.
const ORDER_DEADLINE: Duration = Duration::from_secs(120);
/// How long Redis stays down each time it is killed.
const REDIS_DOWN: Duration = Duration::from_secs(5);
/// Growth of the late RSS median over the early one still called flat: allocator noise and
/// caches that fill slowly, not a leak.
const RSS_FLAT_RATIO: f64 = 1.10;
/// Absolute slack on top of the ratio, for small processes.
const RSS_FLAT_SLACK_KIB: f64 = 4096.0;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the run does, from the environment.
struct Settings {
    /// Total load time.
    duration: Duration,
    /// Orders started per second: about 80 % of the in-process peak (docs/performance.md, section 5).
    rate: f64,
    /// Orders in flight at most.
    concurrency: usize,
    /// Accounts the orders are spread over.
    accounts: usize,
    /// Where results and logs go.
    dir: PathBuf,
    /// RSS sampling interval.
    rss_every: Duration,
    /// Certificates downloaded again through ACME at the end (the database check covers all).
    verify_downloads: usize,
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
        let seconds: f64 = env_or("SOAK_SECONDS", 30.0 * 60.0);
        let duration = Duration::from_secs_f64(seconds.max(30.0));
        let dir = PathBuf::from(std::env::var("SOAK_DIR").context("SOAK_DIR is not set")?);
        std::fs::create_dir_all(&dir)?;
        // About a hundred samples per run, at most one every five seconds.
        let rss_every = Duration::from_secs_f64((seconds / 100.0).clamp(1.0, 5.0));
        Ok(Self {
            duration,
            rate: env_or("SOAK_RATE", 74.0_f64).max(0.1),
            concurrency: env_or("SOAK_CONCURRENCY", 40_usize).max(1),
            accounts: env_or("SOAK_ACCOUNTS", 20_usize).max(1),
            dir,
            rss_every: Duration::from_secs_f64(
                env_or("SOAK_RSS_EVERY", rss_every.as_secs_f64()).max(0.2),
            ),
            verify_downloads: env_or("SOAK_VERIFY_DOWNLOADS", 300_usize),
        })
    }
}

/// A chaos event of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chaos {
    /// SIGKILL the server and start it again at once.
    KillServer,
    /// SIGKILL redis-server, leave it down for [`REDIS_DOWN`], start it again (empty).
    KillRedis,
}

/// Events at fractions of the run. All server kills fall in the first 55 %, so the last server
/// process lives long enough for its RSS to say something.
const SCHEDULE: [(f64, Chaos); 5] = [
    (0.15, Chaos::KillRedis),
    (0.30, Chaos::KillServer),
    (0.45, Chaos::KillRedis),
    (0.55, Chaos::KillServer),
    (0.75, Chaos::KillRedis),
];

/// The processes under test.
struct Processes {
    dir: PathBuf,
    config: PathBuf,
    admin_port: u16,
    redis_port: u16,
    server: Child,
    server_starts: usize,
    redis: Option<Child>,
    redis_starts: usize,
}

impl Processes {
    fn log(&self, name: &str) -> anyhow::Result<std::fs::File> {
        Ok(std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(name))?)
    }

    async fn start_redis(dir: &Path, port: u16, log: std::fs::File) -> anyhow::Result<Child> {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server (is it installed?)")?;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(child);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("redis-server did not listen on 127.0.0.1:{port}")
    }

    async fn start_server(&mut self) -> anyhow::Result<()> {
        self.server_starts += 1;
        let log = self.log("server.log")?;
        self.server = spawn_server(&self.config, log)?;
        healthy(self.admin_port, &mut self.server).await
    }

    async fn kill_server(&mut self) -> anyhow::Result<()> {
        self.server.start_kill()?;
        self.server.wait().await?;
        Ok(())
    }

    async fn kill_redis(&mut self) -> anyhow::Result<()> {
        if let Some(mut redis) = self.redis.take() {
            redis.start_kill()?;
            redis.wait().await?;
        }
        Ok(())
    }

    async fn restart_redis(&mut self) -> anyhow::Result<()> {
        self.redis_starts += 1;
        let log = self.log("redis.log")?;
        self.redis = Some(Self::start_redis(&self.dir, self.redis_port, log).await?);
        Ok(())
    }

    fn server_pid(&self) -> Option<u32> {
        self.server.id()
    }
}

fn spawn_server(config: &Path, log: std::fs::File) -> anyhow::Result<Child> {
    Ok(Command::new(env!("CARGO_BIN_EXE_certeasy"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?)
}

async fn healthy(admin_port: u16, child: &mut Child) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()?;
    let url = format!("http://127.0.0.1:{admin_port}/healthz");
    for _ in 0..600 {
        if let Some(status) = child.try_wait()? {
            bail!("certeasy exited early with {status}");
        }
        if matches!(client.get(&url).send().await, Ok(r) if r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("certeasy did not become healthy")
}

fn write_config(
    dir: &Path,
    acme_port: u16,
    admin_port: u16,
    dns: &TestDnsServer,
    http_port: u16,
    redis_port: u16,
) -> anyhow::Result<PathBuf> {
    // Limits are raised so that the load, not a limit, decides what happens; loopback clients
    // are whitelisted for the per-IP limits. Rate limits still run through Redis.
    let yaml = format!(
        "data-dir: \"{data}\"\n\
         server:\n  listen: \"127.0.0.1:{acme_port}\"\n  admin-listen: \"127.0.0.1:{admin_port}\"\n  \
         external-url: \"https://localhost:{acme_port}\"\n  tls-names: [\"localhost\", \"127.0.0.1\"]\n\
         validation:\n  dns-servers: [\"{dns}\"]\n  http-port: {http_port}\n  allow-loopback: true\n  timeout: 5s\n  job-lease: 10s\n\
         logging:\n  level: \"warn\"\n\
         crl:\n  listen: \"127.0.0.1:0\"\n\
         rate-limiting:\n  whitelist: [\"127.0.0.1\", \"::1\"]\n  order-creation:\n    order-burst: 100000\n    \
         orders-per-account-per-hour: 10000000\n    san-budget-per-account-per-hour: 10000000\n  \
         pending-authorizations:\n    max: 100000\n\
         redis:\n  shards: [\"redis://127.0.0.1:{redis_port}\"]\n",
        data = dir.join("data").display(),
        dns = dns.addr(),
    );
    let path = dir.join("certeasy.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

/// What a client was told: the order, its certificate URL and the leaf's serial.
#[derive(Debug, Clone)]
struct Issued {
    account: usize,
    order_url: String,
    cert_url: String,
    serial: String,
    names: usize,
}

/// What the clients learnt, shared between their tasks.
mod records {
    use std::sync::Mutex;

    use super::Issued;

    #[derive(Default)]
    pub(super) struct Records {
        issued: Mutex<Vec<Issued>>,
        failures: Mutex<Vec<String>>,
    }

    impl Records {
        pub(super) fn issued(&self, issued: Issued) {
            if let Ok(mut list) = self.issued.lock() {
                list.push(issued);
            }
        }

        pub(super) fn failed(&self, why: String) {
            if let Ok(mut list) = self.failures.lock() {
                list.push(why);
            }
        }

        pub(super) fn take(&self) -> (Vec<Issued>, Vec<String>) {
            let issued = self
                .issued
                .lock()
                .map(|mut l| std::mem::take(&mut *l))
                .unwrap_or_default();
            let failures = self
                .failures
                .lock()
                .map(|mut l| std::mem::take(&mut *l))
                .unwrap_or_default();
            (issued, failures)
        }
    }
}

/// The identifiers of order number `n`: mostly one name, some two or three, some with an IP.
fn identifiers(n: u64) -> Vec<Identifier> {
    let base = format!("o{n}.soak.certeasy.test");
    let mut ids = vec![Identifier::Dns(base.clone())];
    match n % 20 {
        0..=4 => ids.push(Identifier::Dns(format!("www.{base}"))),
        5 | 6 => {
            ids.push(Identifier::Dns(format!("www.{base}")));
            ids.push(Identifier::Dns(format!("api.{base}")));
        }
        7 => ids.push(Identifier::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST))),
        _ => {}
    }
    ids
}

/// Retries an ACME call through outages until it succeeds or `deadline` passes. A macro, because
/// the calls borrow the order mutably.
macro_rules! patiently {
    ($deadline:expr, $what:literal, $call:expr) => {
        loop {
            match $call.await {
                Ok(value) => break value,
                Err(error) if Instant::now() < $deadline => {
                    count_transient(&error);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(error) => bail!("{}: {error}", $what),
            }
        }
    };
}

/// Transient errors are expected during the kills; they are counted, not printed.
static TRANSIENT_ERRORS: AtomicU64 = AtomicU64::new(0);

fn count_transient(_error: &instant_acme::Error) {
    TRANSIENT_ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// One issuance, patient through restarts.
async fn issue(
    account_index: usize,
    account: &Account,
    http: &Http01Responder,
    dns: &TestDnsServer,
    n: u64,
) -> anyhow::Result<Issued> {
    let deadline = Instant::now() + ORDER_DEADLINE;
    let ids = identifiers(n);
    for id in &ids {
        if let Identifier::Dns(name) = id {
            dns.set_a(name, Ipv4Addr::LOCALHOST);
        }
    }
    // A retried new-order may leave an orphan order behind; it never gets a certificate.
    let new_order = NewOrder::new(&ids);
    let mut order: Order = patiently!(deadline, "new-order", account.new_order(&new_order));
    let names = ids.len();
    // The authorizations are walked again after an error: valid ones are skipped, and a
    // challenge answered twice is harmless.
    loop {
        match answer_challenges(&mut order, http).await {
            Ok(()) => break,
            Err(error) if Instant::now() < deadline => {
                count_transient(&error);
                tokio::time::sleep(Duration::from_millis(250)).await;
                patiently!(deadline, "order refresh", order.refresh());
            }
            Err(error) => bail!("answering challenges: {error}"),
        }
    }
    loop {
        let status = patiently!(deadline, "poll", order.refresh()).status;
        match status {
            OrderStatus::Pending => {}
            OrderStatus::Ready => {
                // A lost response leaves the order processing or valid; the loop sees that.
                if order.finalize().await.is_err() {
                    TRANSIENT_ERRORS.fetch_add(1, Ordering::Relaxed);
                }
            }
            OrderStatus::Processing | OrderStatus::Valid => break,
            OrderStatus::Invalid => {
                let error = order.state().error.clone();
                bail!("order {} became invalid: {error:?}", order.url())
            }
        }
        if Instant::now() > deadline {
            bail!("order {} not ready in time", order.url());
        }
        tokio::time::sleep(POLL).await;
    }
    let chain = loop {
        match order.certificate().await {
            Ok(Some(chain)) => break chain,
            Ok(None) => {}
            Err(error) => count_transient(&error),
        }
        if Instant::now() > deadline {
            bail!("order {} gave no certificate in time", order.url());
        }
        tokio::time::sleep(POLL).await;
        // `certificate` only polls while the order is processing; refresh it after an error.
        let _ = order.refresh().await;
    };
    let cert_url = order
        .state()
        .certificate
        .clone()
        .context("a valid order without a certificate URL")?;
    Ok(Issued {
        account: account_index,
        order_url: order.url().to_owned(),
        cert_url,
        serial: leaf_serial(&chain)?,
        names,
    })
}

/// Publishes the key authorization of every pending authorization and tells the server.
async fn answer_challenges(
    order: &mut Order,
    http: &Http01Responder,
) -> Result<(), instant_acme::Error> {
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz?;
        if authz.status != AuthorizationStatus::Pending {
            continue;
        }
        let Some(mut challenge) = authz.challenge(ChallengeType::Http01) else {
            return Err(instant_acme::Error::Str("no http-01 challenge offered"));
        };
        http.add(&challenge.token, challenge.key_authorization().as_str());
        challenge.set_ready().await?;
    }
    Ok(())
}

/// The serial of the first certificate of a PEM chain, lower-case hex as the server stores it.
fn leaf_serial(chain: &str) -> anyhow::Result<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(chain.as_bytes())
        .map_err(|e| anyhow::anyhow!("the chain is not PEM: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| anyhow::anyhow!("the leaf does not parse: {e}"))?;
    Ok(hex::encode(cert.raw_serial()))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// One row of `certificates` in the server's database.
struct DbCertificate {
    order_id: String,
    serial: String,
}

/// Reads `id|order_id|serial` of every certificate with the sqlite3 CLI (read-only).
async fn database_certificates(db: &Path) -> anyhow::Result<HashMap<String, Vec<DbCertificate>>> {
    let out = Command::new("sqlite3")
        .arg("-readonly")
        .arg(db)
        .arg("SELECT id, order_id, lower(serial) FROM certificates")
        .output()
        .await
        .context("running sqlite3 (is it installed?)")?;
    if !out.status.success() {
        bail!("sqlite3: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let mut rows: HashMap<String, Vec<DbCertificate>> = HashMap::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let mut parts = line.split('|');
        let (Some(id), Some(order_id), Some(serial)) = (parts.next(), parts.next(), parts.next())
        else {
            bail!("unexpected sqlite3 row {line:?}");
        };
        rows.entry(id.to_owned()).or_default().push(DbCertificate {
            order_id: order_id.to_owned(),
            serial: serial.to_owned(),
        });
    }
    Ok(rows)
}

fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let settings = Settings::from_env()?;
    let dir = settings.dir.clone();
    let mut events = String::from("t_s\tevent\n");
    let started = Instant::now();
    let mut event = |what: &str| {
        let line = format!("{:.1}\t{what}", started.elapsed().as_secs_f64());
        println!("soak: {line}");
        events.push_str(&line);
        events.push('\n');
    };

    let dns = Arc::new(TestDnsServer::start().await?);
    let http = Arc::new(Http01Responder::start().await?);
    let (acme_port, admin_port, redis_port) = (free_port(), free_port(), free_port());
    let config = write_config(&dir, acme_port, admin_port, &dns, http.port(), redis_port)?;
    let redis_log = std::fs::File::create(dir.join("redis.log"))?;
    let redis = Processes::start_redis(&dir, redis_port, redis_log).await?;
    let server = spawn_server(&config, std::fs::File::create(dir.join("server.log"))?)?;
    let mut procs = Processes {
        dir: dir.clone(),
        config,
        admin_port,
        redis_port,
        server,
        server_starts: 1,
        redis: Some(redis),
        redis_starts: 1,
    };
    healthy(admin_port, &mut procs.server).await?;
    event(&format!(
        "started certeasy (pid {:?}) on 127.0.0.1:{acme_port}, redis on 127.0.0.1:{redis_port}",
        procs.server_pid()
    ));

    let root = dir.join("data/ca/root.pem");
    let directory = format!("https://localhost:{acme_port}/directory");
    let mut accounts = Vec::new();
    for _ in 0..settings.accounts {
        let (account, _) = Account::builder_with_http(testkit::acme_http::nodelay_client(&root)?)
            .create(
                &NewAccount {
                    contact: &[],
                    terms_of_service_agreed: true,
                    only_return_existing: false,
                },
                directory.clone(),
                None,
            )
            .await?;
        accounts.push(account);
    }
    event(&format!("{} accounts created", accounts.len()));

    let records = Arc::new(Records::default());
    let permits = Arc::new(Semaphore::new(settings.concurrency));
    let mut tasks = JoinSet::new();
    let mut rss = String::from("t_s\tpid\trss_kib\n");
    let mut samples: Vec<(f64, u32, f64)> = Vec::new();
    let mut schedule = SCHEDULE.iter().peekable();
    let mut last_server_start = 0.0_f64;
    let interval = Duration::from_secs_f64(1.0 / settings.rate);
    let mut next_order = Instant::now();
    let mut next_sample = Instant::now();
    let mut saturated = 0_u64;
    let load_started = Instant::now();
    let mut n = 0_u64;
    while load_started.elapsed() < settings.duration {
        let now = Instant::now();
        let t = started.elapsed().as_secs_f64();
        if now >= next_sample {
            next_sample += settings.rss_every;
            if let Some(pid) = procs.server_pid()
                && let Some(kib) = rss_kib(pid)
            {
                let _ = writeln!(rss, "{t:.1}\t{pid}\t{kib}");
                samples.push((t, pid, kib as f64));
            }
        }
        let progress = load_started.elapsed().as_secs_f64() / settings.duration.as_secs_f64();
        if let Some((_, chaos)) = schedule.next_if(|(at, _)| progress >= *at) {
            match chaos {
                Chaos::KillServer => {
                    event(&format!("SIGKILL certeasy (pid {:?})", procs.server_pid()));
                    procs.kill_server().await?;
                    procs.start_server().await?;
                    last_server_start = started.elapsed().as_secs_f64();
                    event(&format!(
                        "certeasy restarted (pid {:?})",
                        procs.server_pid()
                    ));
                }
                Chaos::KillRedis => {
                    event("SIGKILL redis-server");
                    procs.kill_redis().await?;
                    // The load goes on while Redis is down: the limiter must fail open.
                    let back = Instant::now() + REDIS_DOWN;
                    while Instant::now() < back {
                        if Instant::now() >= next_order {
                            next_order += interval;
                            spawn_order(
                                &mut tasks,
                                &permits,
                                &mut saturated,
                                &accounts,
                                &records,
                                &http,
                                &dns,
                                n,
                            );
                            n += 1;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    procs.restart_redis().await?;
                    event("redis-server restarted (empty)");
                }
            }
        }
        if now >= next_order {
            next_order += interval;
            // After a pause (a restart), start over instead of sending the backlog at once.
            if next_order + Duration::from_secs(1) < now {
                next_order = now + interval;
            }
            spawn_order(
                &mut tasks,
                &permits,
                &mut saturated,
                &accounts,
                &records,
                &http,
                &dns,
                n,
            );
            n += 1;
        }
        while tasks.try_join_next().is_some() {}
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let load_s = load_started.elapsed().as_secs_f64();
    event(&format!(
        "load stopped after {} orders started; draining",
        n - saturated
    ));
    while tasks.join_next().await.is_some() {}
    event("drained");

    let (issued, failures) = records.take();
    let mut tsv = String::from("order_url\tcert_url\tserial\tnames\n");
    for i in &issued {
        let _ = writeln!(
            tsv,
            "{}\t{}\t{}\t{}",
            i.order_url, i.cert_url, i.serial, i.names
        );
    }
    std::fs::write(dir.join("certificates.tsv"), tsv)?;
    std::fs::write(dir.join("failures.txt"), failures.join("\n"))?;
    std::fs::write(dir.join("rss.tsv"), &rss)?;

    // Duplicates among what clients were told.
    let mut problems = Vec::new();
    let mut serials = HashSet::new();
    let mut urls = HashSet::new();
    for i in &issued {
        if !serials.insert(i.serial.clone()) {
            problems.push(format!("serial {} reported to two clients", i.serial));
        }
        if !urls.insert(i.cert_url.clone()) {
            problems.push(format!("certificate URL {} reported twice", i.cert_url));
        }
    }
    // Some certificates downloaded again through ACME from the restarted server.
    let mut downloaded = 0;
    let step = (issued.len() / settings.verify_downloads.max(1)).max(1);
    for i in issued.iter().step_by(step) {
        let account = &accounts[i.account];
        let chain = match account.order(i.order_url.clone()).await {
            Ok(mut order) => order.certificate().await,
            Err(error) => Err(error),
        };
        match chain {
            Ok(Some(chain)) => {
                let serial = leaf_serial(&chain)?;
                if serial != i.serial {
                    problems.push(format!(
                        "{} now serves serial {serial}, the client got {}",
                        i.order_url, i.serial
                    ));
                }
            }
            other => problems.push(format!(
                "{} cannot be downloaded again through ACME: {other:?}",
                i.cert_url
            )),
        }
        downloaded += 1;
    }
    let server_pid = procs.server_pid();
    procs.kill_server().await?;
    procs.kill_redis().await?;
    // Every certificate a client was told about is in the database exactly once, for its order.
    let db = database_certificates(&dir.join("data/certeasy.db")).await?;
    let mut by_serial: HashMap<&str, usize> = HashMap::new();
    for rows in db.values() {
        for row in rows {
            *by_serial.entry(row.serial.as_str()).or_default() += 1;
        }
    }
    for i in &issued {
        let id = last_segment(&i.cert_url);
        match db.get(id).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!("LOST: {} (serial {})", i.cert_url, i.serial)),
            Some([row]) => {
                if row.serial != i.serial {
                    problems.push(format!(
                        "{} has serial {} in the database, the client got {}",
                        i.cert_url, row.serial, i.serial
                    ));
                }
                if row.order_id != last_segment(&i.order_url) {
                    problems.push(format!(
                        "{} belongs to order {} in the database, the client got it for {}",
                        i.cert_url, row.order_id, i.order_url
                    ));
                }
            }
            Some(rows) => {
                problems.push(format!("DUPLICATE: {} has {} rows", i.cert_url, rows.len()))
            }
        }
        match by_serial.get(i.serial.as_str()) {
            Some(1) => {}
            count => problems.push(format!(
                "serial {} is in the database {} times",
                i.serial,
                count.copied().unwrap_or(0)
            )),
        }
    }
    let unreported = db.len().saturating_sub(issued.len());

    // RSS of the last server process, after a warm-up, first third against last third.
    let warm_up = (settings.duration.as_secs_f64() * 0.1).max(20.0);
    let mut last: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(t, pid, _)| Some(*pid) == server_pid && *t >= last_server_start + warm_up)
        .map(|(t, _, kib)| (*t, *kib))
        .collect();
    last.sort_by(|a, b| a.0.total_cmp(&b.0));
    let third = last.len() / 3;
    let rss_line = if third >= 3 {
        let mut early: Vec<f64> = last[..third].iter().map(|s| s.1).collect();
        let mut late: Vec<f64> = last[last.len() - third..].iter().map(|s| s.1).collect();
        let (early, late) = (median(&mut early), median(&mut late));
        let flat = late <= early * RSS_FLAT_RATIO + RSS_FLAT_SLACK_KIB;
        format!(
            "server RSS (last process, {} samples after {warm_up:.0} s warm-up): first-third median {:.1} MiB, \
             last-third median {:.1} MiB, growth {:+.1} % => {}",
            last.len(),
            early / 1024.0,
            late / 1024.0,
            (late / early - 1.0) * 100.0,
            if flat { "FLAT" } else { "GROWING" }
        )
    } else {
        format!(
            "server RSS: only {} samples after warm-up, too few to judge (run longer)",
            last.len()
        )
    };
    let peak = samples.iter().map(|s| s.2).fold(0.0, f64::max);

    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "soak run: {:.0} s of load, target {:.1} orders/s, {} in flight at most, {} accounts",
        load_s, settings.rate, settings.concurrency, settings.accounts
    );
    let _ = writeln!(
        summary,
        "orders started: {} ({:.1}/s); not started because {} were in flight: {saturated}",
        n - saturated,
        (n - saturated) as f64 / load_s,
        settings.concurrency
    );
    let _ = writeln!(
        summary,
        "certificates issued and reported to clients: {} ({:.1}/s)",
        issued.len(),
        issued.len() as f64 / load_s
    );
    let _ = writeln!(
        summary,
        "client failures (gave up after {} s): {}",
        ORDER_DEADLINE.as_secs(),
        failures.len()
    );
    let _ = writeln!(
        summary,
        "transient client errors retried: {}",
        TRANSIENT_ERRORS.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        summary,
        "server starts: {}, redis starts: {}",
        procs.server_starts, procs.redis_starts
    );
    let _ = writeln!(
        summary,
        "database certificates: {} ({unreported} never reported to a client)",
        db.len()
    );
    let _ = writeln!(summary, "downloaded again through ACME: {downloaded}");
    let _ = writeln!(summary, "peak server RSS: {:.1} MiB", peak / 1024.0);
    let _ = writeln!(summary, "{rss_line}");
    if problems.is_empty() {
        let _ = writeln!(summary, "RESULT: OK, no certificate lost or duplicated");
    } else {
        let _ = writeln!(summary, "RESULT: FAILED, {} problems:", problems.len());
        for p in problems.iter().take(50) {
            let _ = writeln!(summary, "  {p}");
        }
    }
    event("done");
    std::fs::write(dir.join("events.tsv"), &events)?;
    std::fs::write(dir.join("summary.txt"), &summary)?;
    print!("{summary}");
    if !problems.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn spawn_order(
    tasks: &mut JoinSet<()>,
    permits: &Arc<Semaphore>,
    saturated: &mut u64,
    accounts: &[Account],
    records: &Arc<Records>,
    http: &Arc<Http01Responder>,
    dns: &Arc<TestDnsServer>,
    n: u64,
) {
    let Ok(permit) = Arc::clone(permits).try_acquire_owned() else {
        *saturated += 1;
        return;
    };
    let index = (n as usize) % accounts.len();
    let account = accounts[index].clone();
    let (records, http, dns) = (Arc::clone(records), Arc::clone(http), Arc::clone(dns));
    tasks.spawn(async move {
        let _permit = permit;
        match issue(index, &account, &http, &dns, n).await {
            Ok(issued) => records.issued(issued),
            Err(error) => records.failed(format!("order {n}: {error:#}")),
        }
    });
}
