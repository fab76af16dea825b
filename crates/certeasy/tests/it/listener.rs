//! The listeners under hostile and long-lived use: slow-header clients (on the ACME, CRL and
//! admin listeners), silent TCP clients, a full connection table, one address holding too many
//! connections, certificate renewal and reload under live connections, and client addresses on
//! a dual-stack `[::]` listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::ServerName;
use rustls_pki_types::pem::PemObject;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::harness::Db;
use crate::harness::TestEnv;

/// A TLS client configuration trusting the PEM certificates in `roots`, HTTP/1.1 only.
fn tls_config(roots: &str) -> Arc<rustls::ClientConfig> {
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(roots.as_bytes()) {
        store.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to the listener, verified for `localhost`.
async fn connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::clone(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// The leaf certificate the server presented on `stream`.
fn served_certificate(stream: &TlsStream<TcpStream>) -> Vec<u8> {
    stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn serial(der: &[u8]) -> String {
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.tbs_certificate.raw_serial_as_string()
}

/// GET /directory on a kept-alive HTTP/1.1 connection; returns the status.
async fn get_directory(stream: &mut TlsStream<TcpStream>) -> u16 {
    stream
        .write_all(b"GET /directory HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed before a response");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let status: u16 = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed inside a response body");
        buf.extend_from_slice(&chunk[..n]);
    }
    status
}

/// Adds `lines` (indented by two spaces) to the harness's `server:` section.
fn server_keys(env: &mut TestEnv, lines: &str) {
    let body = format!("{}{lines}", env.sections["server"]);
    env.section("server", &body);
}

fn acme_addr(env: &TestEnv) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], env.acme_port))
}

/// A client that completes the TLS handshake, then sends `payload` one byte per second and never
/// finishes. Reports on `connected` once the handshake is done, and returns how long after that
/// the server closed the connection (None if it was still open after `give_up`).
async fn trickle(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    payload: &'static [u8],
    connected: mpsc::UnboundedSender<()>,
    give_up: Duration,
) -> Option<Duration> {
    let stream = connect(addr, &config).await;
    trickle_on(stream, payload, connected, give_up).await
}

/// [`trickle`] over plain TCP (the CRL and admin listeners).
async fn trickle_plain(
    addr: SocketAddr,
    payload: &'static [u8],
    connected: mpsc::UnboundedSender<()>,
    give_up: Duration,
) -> Option<Duration> {
    let stream = TcpStream::connect(addr).await.unwrap();
    trickle_on(stream, payload, connected, give_up).await
}

/// Sends `payload` on `stream` one byte per second; how long until the server closed it.
async fn trickle_on<S>(
    stream: S,
    payload: &'static [u8],
    connected: mpsc::UnboundedSender<()>,
    give_up: Duration,
) -> Option<Duration>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite,
{
    let start = Instant::now();
    let _ = connected.send(());
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut next = 0;
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    let mut buf = [0_u8; 512];
    while start.elapsed() < give_up {
        tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => return Some(start.elapsed()),
                // A response (such as a 408) may precede the close; keep reading until it.
                Ok(_) => {}
            },
            _ = ticker.tick() => {
                if writer.write_all(&payload[next % payload.len()..][..1]).await.is_err()
                    || writer.flush().await.is_err()
                {
                    return Some(start.elapsed());
                }
                next += 1;
            }
        }
    }
    None
}

/// A request head that never ends: one header line that keeps growing.
const SLOW_HEAD: &[u8] =
    b"GET /directory HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// Starts `count` tricklers and waits until every one has finished its TLS handshake.
async fn start_tricklers(
    env: &TestEnv,
    count: usize,
    payload: &'static [u8],
) -> tokio::task::JoinSet<Option<Duration>> {
    let config = tls_config(&env.root_pem());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..count {
        set.spawn(trickle(
            acme_addr(env),
            Arc::clone(&config),
            payload,
            tx.clone(),
            Duration::from_secs(60),
        ));
    }
    for _ in 0..count {
        tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .expect("every trickler completes its TLS handshake")
            .unwrap();
    }
    set
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_are_closed_and_normal_clients_are_served_meanwhile() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // All 300 come from 127.0.0.1: the per-address cap is raised so that the header timeout is
    // what closes them.
    server_keys(
        &mut env,
        "  header-read-timeout: 5s\n  max-connections-per-ip: 1000\n",
    );
    env.start().await;
    let mut tricklers = start_tricklers(&env, 300, SLOW_HEAD).await;

    // With 300 slow clients connected, a normal client gets its answer without waiting for any
    // of them to be dropped (that takes the 5 s header timeout).
    let started = Instant::now();
    let response = crate::raw::client(&env)
        .get(env.directory_url())
        .send()
        .await
        .unwrap();
    let served_in = started.elapsed();
    assert_eq!(response.status(), 200);
    assert!(
        served_in < Duration::from_secs(5),
        "a normal client waited {served_in:?} behind slow clients"
    );

    // Every slow client is closed after the header timeout: not before, and not much after.
    let mut closed = 0;
    while let Some(result) = tricklers.join_next().await {
        let after = result
            .unwrap()
            .expect("a slow-header client was still connected after 60 s");
        assert!(
            after >= Duration::from_secs(4) && after < Duration::from_secs(30),
            "a slow-header client was closed after {after:?}, expected about 5 s"
        );
        closed += 1;
    }
    assert_eq!(closed, 300);
    // Operators see it: the recorder is shared by the tests of this process, so at least ours.
    let metrics = reqwest::get(format!("http://{}/metrics", env.admin_addr()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("certeasy_acme_connections_closed_total{reason=\"header_timeout\"} ")
        })
        .unwrap_or_else(|| panic!("no header_timeout counter:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(counted >= 300.0, "{counted} header timeouts counted");
}

/// The value of the metric line starting with `prefix` on the admin listener's `/metrics`; 0 for
/// a counter never counted.
async fn metric(env: &TestEnv, prefix: &str) -> f64 {
    let metrics = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("http://{}/metrics", env.admin_addr()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_of_the_crl_and_admin_listeners_are_closed_while_acme_serves() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(
        &mut env,
        "  header-read-timeout: 5s\n  max-connections-per-ip: 1000\n",
    );
    env.start().await;
    let crl = SocketAddr::from(([127, 0, 0, 1], env.crl_port));
    let admin = env.admin_addr();
    // 300 slow clients on each plain-HTTP listener, all connected before anything else.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tricklers = tokio::task::JoinSet::new();
    for addr in [crl, admin] {
        for _ in 0..300 {
            let tx = tx.clone();
            tricklers.spawn(async move {
                (
                    addr,
                    trickle_plain(addr, SLOW_HEAD, tx, Duration::from_secs(60)).await,
                )
            });
        }
    }
    for _ in 0..600 {
        tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .expect("every slow client connects")
            .unwrap();
    }

    // Meanwhile the ACME listener answers.
    let response = crate::raw::client(&env)
        .get(env.directory_url())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // Every slow client is closed by the header timeout: not before, and not much after.
    let mut closed = std::collections::HashMap::new();
    while let Some(result) = tricklers.join_next().await {
        let (addr, after) = result.unwrap();
        let after = after.unwrap_or_else(|| {
            panic!("a slow-header client of {addr} was still connected after 60 s")
        });
        assert!(
            after >= Duration::from_secs(4) && after < Duration::from_secs(30),
            "a slow-header client of {addr} was closed after {after:?}, expected about 5 s"
        );
        *closed.entry(addr).or_insert(0) += 1;
    }
    assert_eq!(closed[&crl], 300);
    assert_eq!(closed[&admin], 300);
    // Each listener counts its own (the recorder is shared by this process's tests: at least).
    for name in ["crl", "admin"] {
        let counted = metric(
            &env,
            &format!("certeasy_{name}_connections_closed_total{{reason=\"header_timeout\"}} "),
        )
        .await;
        assert!(
            counted >= 300.0,
            "{counted} header timeouts counted on {name}"
        );
    }
    // And both still serve.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let health = plain
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let crl_response = plain
        .get(format!("http://{crl}/crl/0.crl"))
        .send()
        .await
        .unwrap();
    assert_eq!(crl_response.status(), 200);
}

/// A TCP connection to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// A TLS connection to `to` from `from`, or the error of its handshake.
async fn tls_from(
    from: [u8; 4],
    to: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = connect_from(from, to).await;
    TlsConnector::from(Arc::clone(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

#[tokio::test]
async fn one_address_cannot_hold_more_than_its_share_of_acme_connections() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // Held connections stay open for the whole test: only the per-address cap can refuse.
    server_keys(
        &mut env,
        "  max-connections-per-ip: 4\n  header-read-timeout: 60s\n  idle-timeout: 60s\n",
    );
    env.start().await;
    let config = tls_config(&env.root_pem());
    let acme = acme_addr(&env);
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = tls_from([127, 0, 0, 1], acme, &config).await.unwrap();
        assert_eq!(get_directory(&mut stream).await, 200);
        held.push(stream);
    }
    let before = metric(
        &env,
        "certeasy_acme_connections_closed_total{reason=\"per_ip_limit\"} ",
    )
    .await;

    // A fifth connection from the same address is closed at once: its handshake fails.
    let fifth = tokio::time::timeout(
        Duration::from_secs(5),
        tls_from([127, 0, 0, 1], acme, &config),
    )
    .await
    .expect("the fifth connection was neither served nor closed within 5 s");
    assert!(
        fifth.is_err(),
        "a fifth connection from 127.0.0.1 was served"
    );

    // Another address is served meanwhile.
    let mut other = tls_from([127, 0, 0, 2], acme, &config).await.unwrap();
    assert_eq!(get_directory(&mut other).await, 200);

    // Once one of the four ends, 127.0.0.1 may connect again.
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut again) = tls_from([127, 0, 0, 1], acme, &config).await {
            assert_eq!(get_directory(&mut again).await, 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "127.0.0.1 never got its slot back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for stream in &mut held {
        assert_eq!(
            get_directory(stream).await,
            200,
            "the held connections live on"
        );
    }
    let counted = metric(
        &env,
        "certeasy_acme_connections_closed_total{reason=\"per_ip_limit\"} ",
    )
    .await;
    assert!(counted > before, "{counted} per-address refusals counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_listener_makes_new_clients_wait_for_a_slot_not_starve() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(
        &mut env,
        "  header-read-timeout: 4s\n  max-connections: 10\n",
    );
    env.start().await;
    // Ten slow clients take every slot.
    let mut tricklers = start_tricklers(&env, 10, SLOW_HEAD).await;
    let started = Instant::now();
    let client = crate::raw::client(&env);
    let directory = env.directory_url();
    let normal = tokio::spawn(async move {
        let status = client.get(directory).send().await.unwrap().status();
        (status, started.elapsed())
    });
    let first_close = tricklers.join_next().await.unwrap().unwrap();
    let first_close_at = started.elapsed();
    let (status, served_at) = normal.await.unwrap();
    assert_eq!(
        status, 200,
        "the waiting client is served once a slot frees"
    );
    assert!(
        first_close.is_some(),
        "the slow clients are closed by the header timeout"
    );
    // The cap held: the new client was served only after a slow client lost its slot, and it
    // did not starve (the header timeout frees slots every 4 s).
    assert!(
        served_at + Duration::from_millis(500) >= first_close_at,
        "served at {served_at:?}, before the first slot freed at {first_close_at:?}: no cap"
    );
    assert!(served_at < Duration::from_secs(30), "waited {served_at:?}");
    while let Some(result) = tricklers.join_next().await {
        assert!(result.unwrap().is_some());
    }
}

#[tokio::test]
async fn silent_clients_are_dropped_by_the_handshake_and_idle_timeouts() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(
        &mut env,
        "  tls-handshake-timeout: 2s\n  idle-timeout: 2s\n  header-read-timeout: 30s\n",
    );
    env.start().await;

    // A TCP client that never starts TLS is disconnected after the handshake timeout.
    let started = Instant::now();
    let mut tcp = TcpStream::connect(acme_addr(&env)).await.unwrap();
    let mut buf = [0_u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf))
        .await
        .expect("a silent TCP client was still connected after 30 s");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(20),
        "closed after {after:?}, expected about 2 s"
    );

    // A client that trickles an HTTP/2 preface is not under the HTTP/1.1 header timer (30 s
    // here); the idle timeout closes it.
    let mut preface = start_tricklers(&env, 1, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    let after = preface.join_next().await.unwrap().unwrap();
    let after = after.expect("an HTTP/2 preface trickler was still connected after 60 s");
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(20),
        "closed after {after:?}, expected about 2 s"
    );
}

#[tokio::test]
async fn idle_http2_connections_are_closed_after_the_idle_timeout() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(
        &mut env,
        "  idle-timeout: 2s\n  http2-keep-alive-interval: 500ms\n",
    );
    env.start().await;
    let mut config = (*tls_config(&env.root_pem())).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tls = connect(acme_addr(&env), &Arc::new(config)).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    let request = hyper::Request::get(format!("{}/directory", env.base_url()))
        .body(String::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    // The server's PINGs are answered, so only the idle timeout can end the connection.
    let served = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(30), connection)
        .await
        .expect("an idle HTTP/2 connection was still open after 30 s");
    let after = served.elapsed();
    assert!(ended.is_ok(), "{ended:?}");
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(20),
        "closed after {after:?}, expected about 2 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_self_issued_certificate_is_renewed_under_live_connections() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    // Renewed after two thirds: every 6 s, 3 s before it expires.
    server_keys(&mut env, "  tls-certificate-lifetime: 9s\n");
    env.start().await;
    let config = tls_config(&env.root_pem());
    let mut kept = connect(acme_addr(&env), &config).await;
    let first = served_certificate(&kept);
    assert_eq!(get_directory(&mut kept).await, 200);

    // New connections see new certificates, twice, while the first connection stays in use.
    let mut seen = vec![first.clone()];
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the listener certificate was not renewed twice within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            get_directory(&mut kept).await,
            200,
            "the kept-alive connection keeps working across the swap"
        );
        let mut fresh = connect(acme_addr(&env), &config).await;
        let cert = served_certificate(&fresh);
        if !seen.contains(&cert) {
            assert_eq!(get_directory(&mut fresh).await, 200);
            seen.push(cert);
        }
    }
    assert_ne!(serial(&seen[0]), serial(&seen[1]));
    assert_ne!(serial(&seen[1]), serial(&seen[2]));
    assert_eq!(
        served_certificate(&kept),
        first,
        "an open connection keeps its certificate"
    );
    assert_eq!(get_directory(&mut kept).await, 200);
}

/// A CA and two leaf certificates for `localhost` with their keys, as PEM.
struct OperatorPki {
    ca_pem: String,
    leaves: Vec<(String, String, Vec<u8>)>,
}

fn operator_pki() -> OperatorPki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "operator test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let leaves = (0..2)
        .map(|_| {
            let key = rcgen::KeyPair::generate().unwrap();
            let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
            let cert = params.signed_by(&key, &*ca).unwrap();
            (cert.pem(), key.serialize_pem(), cert.der().to_vec())
        })
        .collect();
    OperatorPki {
        ca_pem: ca.pem(),
        leaves,
    }
}

fn sighup(env: &TestEnv) {
    let pid = env.child.as_ref().unwrap().id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
}

#[tokio::test]
async fn operator_certificate_files_are_reloaded_on_sighup_and_bad_files_are_refused() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let pki = operator_pki();
    let cert_path = env.dir.path().join("listener.pem");
    let key_path = env.dir.path().join("listener.key");
    std::fs::write(&cert_path, &pki.leaves[0].0).unwrap();
    std::fs::write(&key_path, &pki.leaves[0].1).unwrap();
    server_keys(
        &mut env,
        &format!(
            "  tls-certificate: \"{}\"\n  tls-private-key: \"{}\"\n",
            cert_path.display(),
            key_path.display()
        ),
    );
    env.spawn_binary().await;
    let config = tls_config(&pki.ca_pem);
    let mut kept = connect(acme_addr(&env), &config).await;
    assert_eq!(served_certificate(&kept), pki.leaves[0].2);
    assert_eq!(get_directory(&mut kept).await, 200);

    // The operator renews the files and signals: new connections get the new certificate.
    std::fs::write(&cert_path, &pki.leaves[1].0).unwrap();
    std::fs::write(&key_path, &pki.leaves[1].1).unwrap();
    sighup(&env);
    let mut swapped = false;
    for _ in 0..100 {
        let mut fresh = connect(acme_addr(&env), &config).await;
        if served_certificate(&fresh) == pki.leaves[1].2 {
            assert_eq!(get_directory(&mut fresh).await, 200);
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        swapped,
        "SIGHUP did not swap the certificate:\n{}",
        env.server_log()
    );
    assert_eq!(get_directory(&mut kept).await, 200);

    // A key that does not fit the certificate is refused; the last good certificate stays.
    std::fs::write(&cert_path, &pki.leaves[0].0).unwrap();
    sighup(&env);
    let mut refused = false;
    for _ in 0..100 {
        if env
            .server_log()
            .contains("listener certificate reload refused")
        {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "no error was logged:\n{}", env.server_log());
    let mut fresh = connect(acme_addr(&env), &config).await;
    assert_eq!(served_certificate(&fresh), pki.leaves[1].2);
    assert_eq!(get_directory(&mut fresh).await, 200);
}

#[tokio::test]
async fn ipv4_clients_of_a_dual_stack_listener_are_keyed_by_their_ipv4_address() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let port = env.acme_port;
    let admin = env.admin_port;
    env.section(
        "server",
        &format!(
            "  listen: \"[::]:{port}\"\n  admin-listen: \"127.0.0.1:{admin}\"\n  external-url: \"https://localhost:{port}\"\n  tls-names: [\"localhost\", \"127.0.0.1\"]\n  trusted-proxies: [\"127.0.0.1\"]\n"
        ),
    );
    env.section(
        "rate-limiting",
        // The whitelist entry is written in mapped form: it is read as its IPv4 address.
        "  whitelist: [\"::ffff:198.51.100.7\"]\n  global:\n    requests-per-minute: 1\n    burst: 10\n",
    );
    env.start().await;
    let root = reqwest::Certificate::from_pem(env.root_pem().as_bytes()).unwrap();
    let client = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(root)
        .resolve("localhost", acme_addr(&env))
        .build()
        .unwrap();
    let post = |forwarded: Option<&'static str>| {
        let mut request = client
            .post(format!("{}/acme/new-account", env.base_url()))
            .header("content-type", "application/jose+json")
            .body("{}");
        if let Some(hop) = forwarded {
            request = request.header("x-forwarded-for", hop);
        }
        request.send()
    };
    // Two requests over IPv4 to the `[::]` listener, which sees the peer as ::ffff:127.0.0.1.
    for _ in 0..2 {
        assert_eq!(post(None).await.unwrap().status(), 400);
    }
    // The mapped peer is the trusted proxy 127.0.0.1, and a mapped hop is its IPv4 address.
    assert_eq!(
        post(Some("::ffff:203.0.113.9")).await.unwrap().status(),
        400
    );
    // A whitelisted client, forwarded in mapped form, is recognised and charged nothing.
    assert_eq!(
        post(Some("::ffff:198.51.100.7")).await.unwrap().status(),
        400
    );

    let limiter = env.server.as_ref().unwrap().limits.limiter();
    let remaining = |id: &'static str| async move {
        let bucket = ratelimits::BucketId::parse(ratelimits::LimitName::GlobalPerIp, id).unwrap();
        limiter
            .show(
                time::OffsetDateTime::now_utc(),
                ratelimits::LimitName::GlobalPerIp,
                &bucket,
            )
            .await
            .unwrap()
            .unwrap()
            .remaining
    };
    assert_eq!(remaining("127.0.0.1").await, 8, "keyed on 127.0.0.1");
    let whitelisted =
        ratelimits::BucketId::parse(ratelimits::LimitName::GlobalPerIp, "198.51.100.7").unwrap();
    let shown = limiter
        .show(
            time::OffsetDateTime::now_utc(),
            ratelimits::LimitName::GlobalPerIp,
            &whitelisted,
        )
        .await
        .unwrap();
    assert!(
        shown.as_ref().is_none_or(|s| s.remaining == 10),
        "the whitelisted client was charged: {shown:?}"
    );
    assert_eq!(
        remaining("203.0.113.9").await,
        9,
        "the forwarded client is keyed on its IPv4 address"
    );
}

/// A TLS connection to the listener that negotiated HTTP/2 by ALPN.
async fn connect_h2(env: &TestEnv) -> TlsStream<TcpStream> {
    let mut config = (*tls_config(&env.root_pem())).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tls = connect(acme_addr(env), &Arc::new(config)).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    tls
}

/// GET /directory as an HTTP/2 request (no body).
fn h2_directory(env: &TestEnv) -> hyper::Request<()> {
    hyper::Request::get(format!("{}/directory", env.base_url()))
        .body(())
        .unwrap()
}

#[tokio::test]
async fn http2_clients_see_and_are_held_to_the_concurrent_stream_limit() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(&mut env, "  http2-max-concurrent-streams: 2\n");
    env.start().await;
    let (client, connection) = h2::client::handshake(connect_h2(&env).await).await.unwrap();
    // The connection task publishes the limit the server announced after every poll, so the
    // test reads what arrived on the wire in the server's SETTINGS frame.
    let (limit_tx, limit_rx) = tokio::sync::watch::channel(None);
    let connection = tokio::spawn(async move {
        let mut connection = connection;
        std::future::poll_fn(|cx| {
            let polled = std::pin::Pin::new(&mut connection).poll(cx);
            limit_tx.send_replace(Some(connection.max_concurrent_send_streams()));
            polled
        })
        .await
    });

    let mut client = client.ready().await.unwrap();
    let (first, _) = client.send_request(h2_directory(&env), true).unwrap();
    assert_eq!(first.await.unwrap().status(), 200);
    assert_eq!(
        *limit_rx.borrow(),
        Some(2),
        "SETTINGS_MAX_CONCURRENT_STREAMS as announced by the server"
    );

    // Six requests at once on one connection: the client holds back the ones over the limit
    // until a stream closes, and every one is answered.
    let mut responses = tokio::task::JoinSet::new();
    for _ in 0..6 {
        client = client.ready().await.unwrap();
        let (response, _) = client.send_request(h2_directory(&env), true).unwrap();
        responses.spawn(response);
    }
    let mut answered = 0;
    while let Some(response) = responses.join_next().await {
        assert_eq!(response.unwrap().unwrap().status(), 200);
        answered += 1;
    }
    assert_eq!(answered, 6);
    assert_eq!(*limit_rx.borrow(), Some(2));
    drop(client);
    let closed = tokio::time::timeout(Duration::from_secs(30), connection)
        .await
        .expect("the client connection ends once every handle is dropped");
    assert!(matches!(closed, Ok(Ok(()))), "{closed:?}");
}

#[tokio::test]
async fn http2_requests_over_the_header_list_limit_get_431_and_the_connection_survives() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    server_keys(&mut env, "  http2-max-header-list-size: 4096\n");
    env.start().await;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(connect_h2(&env).await),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    let request = |extra: Option<String>| {
        let mut request = hyper::Request::get(format!("{}/directory", env.base_url()));
        if let Some(value) = extra {
            request = request.header("x-padding", value);
        }
        request.body(String::new()).unwrap()
    };

    // 10 KiB of header against a 4 KiB limit: the server refuses the stream with a 431 before
    // any handler sees it.
    let big = sender
        .send_request(request(Some("a".repeat(10 * 1024))))
        .await
        .unwrap();
    assert_eq!(big.status(), 431);
    assert_eq!(big.version(), hyper::Version::HTTP_2);

    // It was a stream error, not a connection error: the same connection still serves, and so
    // does a new one.
    let small = sender
        .send_request(request(Some("a".repeat(1024))))
        .await
        .unwrap();
    assert_eq!(small.status(), 200);
    assert!(!connection.is_finished());
    let (mut fresh, fresh_connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(connect_h2(&env).await),
    )
    .await
    .unwrap();
    tokio::spawn(fresh_connection);
    assert_eq!(
        fresh.send_request(request(None)).await.unwrap().status(),
        200
    );
}

#[tokio::test]
async fn operator_certificate_files_are_reloaded_by_the_admin_endpoint_and_bad_files_are_refused() {
    let mut env = TestEnv::new(Db::Sqlite).await;
    let pki = operator_pki();
    let cert_path = env.dir.path().join("listener.pem");
    let key_path = env.dir.path().join("listener.key");
    std::fs::write(&cert_path, &pki.leaves[0].0).unwrap();
    std::fs::write(&key_path, &pki.leaves[0].1).unwrap();
    server_keys(
        &mut env,
        &format!(
            "  tls-certificate: \"{}\"\n  tls-private-key: \"{}\"\n",
            cert_path.display(),
            key_path.display()
        ),
    );
    env.start().await;
    let config = tls_config(&pki.ca_pem);
    let mut kept = connect(acme_addr(&env), &config).await;
    assert_eq!(served_certificate(&kept), pki.leaves[0].2);
    assert_eq!(get_directory(&mut kept).await, 200);
    let admin = reqwest::Client::builder().no_proxy().build().unwrap();
    let reload_url = format!("http://{}/admin/reload", env.admin_addr());
    let bearer = format!("Bearer {}", env.admin_token());

    // The operator renews the files and asks for a reload: once it answers 200, every new
    // connection gets the new certificate.
    std::fs::write(&cert_path, &pki.leaves[1].0).unwrap();
    std::fs::write(&key_path, &pki.leaves[1].1).unwrap();
    let reloaded = admin
        .post(&reload_url)
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(reloaded.status(), 200, "{}", reloaded.text().await.unwrap());
    let mut fresh = connect(acme_addr(&env), &config).await;
    // The client holds a session ticket from `kept`; resuming it would skip the certificate, so
    // the server must have forgotten the session and made this a full handshake.
    assert_eq!(
        fresh.get_ref().1.handshake_kind(),
        Some(rustls::HandshakeKind::Full),
        "a session from before the reload was resumed"
    );
    assert_eq!(served_certificate(&fresh), pki.leaves[1].2);
    assert_eq!(get_directory(&mut fresh).await, 200);
    assert_eq!(served_certificate(&kept), pki.leaves[0].2);
    assert_eq!(get_directory(&mut kept).await, 200);

    // A key that does not fit the certificate is refused with a reason; the last good
    // certificate stays.
    std::fs::write(&cert_path, &pki.leaves[0].0).unwrap();
    let refused = admin
        .post(&reload_url)
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let reason = refused.text().await.unwrap();
    assert!(reason.contains("listener certificate"), "{reason}");
    let mut fresh = connect(acme_addr(&env), &config).await;
    assert_eq!(served_certificate(&fresh), pki.leaves[1].2);
    assert_eq!(get_directory(&mut fresh).await, 200);

    // A certificate file that is not PEM at all is refused too.
    std::fs::write(&cert_path, "not a certificate\n").unwrap();
    std::fs::write(&key_path, &pki.leaves[1].1).unwrap();
    let refused = admin
        .post(&reload_url)
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let mut fresh = connect(acme_addr(&env), &config).await;
    assert_eq!(served_certificate(&fresh), pki.leaves[1].2);
    assert_eq!(get_directory(&mut fresh).await, 200);
}
