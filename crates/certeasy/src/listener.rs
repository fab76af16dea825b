//! The one way Certeasy serves a listener: the ACME listener (HTTPS), the CRL listener and the
//! admin listener (plain HTTP) are all built by [`serve`], with the same bounds.
//!
//! Every listener faces a network for years (the CRL listener is public by default), so every way
//! a client can hold resources without doing work has a bound: a connection slot is taken before
//! accepting (`max-connections`), one client address holds at most `max-connections-per-ip` of
//! them, the TLS handshake has a deadline, an HTTP/1.1 request head must arrive within
//! `header-read-timeout` (hyper starts that timer whenever the connection waits for a request, so
//! it also ends idle HTTP/1.1 keep-alive), a connection with no request in flight for
//! `idle-timeout` is closed (HTTP/2, and clients stuck before the protocol is even known), a
//! request runs at most `request-timeout`, and HTTP/2 has stream, header-size and PING limits.
//! Because every unproductive connection frees its slot within those timeouts, clients waiting for
//! a slot are never starved.

use std::collections::HashMap;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;
use hyper_util::rt::TokioTimer;
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// How long requests in flight may run on after shutdown or an idle close asks a connection to
/// finish.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long a connection that has not yet had a request answered may wait for one after shutdown
/// begins. A client whose connection was accepted just before shutdown has usually sent its
/// request already; closing the connection unread would fail it (a 502 behind a proxy, an
/// unanswered POST for an ACME client), while answering it costs one request.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(2);

/// Which listener: names its metrics and log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// The HTTPS ACME listener (`server.listen`).
    Acme,
    /// The plain-HTTP CRL listener (`crl.listen`).
    Crl,
    /// The plain-HTTP admin listener (`server.admin-listen`).
    Admin,
}

impl ListenerKind {
    /// The listener's name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acme => "acme",
            Self::Crl => "crl",
            Self::Admin => "admin",
        }
    }

    /// The gauge of connections holding a slot.
    fn connections_gauge(self) -> &'static str {
        match self {
            Self::Acme => "certeasy_acme_connections",
            Self::Crl => "certeasy_crl_connections",
            Self::Admin => "certeasy_admin_connections",
        }
    }

    /// The counter of connections closed or refused by a limit, by `reason`.
    fn closed_counter(self) -> &'static str {
        match self {
            Self::Acme => "certeasy_acme_connections_closed_total",
            Self::Crl => "certeasy_crl_connections_closed_total",
            Self::Admin => "certeasy_admin_connections_closed_total",
        }
    }

    /// Counts a connection the listener closed or refused because of one of its limits.
    fn closed(self, reason: &'static str) {
        metrics::counter!(self.closed_counter(), "reason" => reason).increment(1);
    }
}

/// What a listener speaks on its connections.
#[derive(Clone)]
pub enum Transport {
    /// TLS first (HTTP/1.1 or HTTP/2 by ALPN).
    Tls(Arc<ServerConfig>),
    /// HTTP/1.1 or HTTP/2 (prior knowledge) in the clear.
    PlainHttp,
}

/// The connection limits of a listener, from `server:` in the configuration: every listener is
/// held to the same ones.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    pub tls_handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Connections one client address (an IPv6 client: its `ipv6_prefix_length` prefix) may
    /// hold at once; further ones are closed as soon as they are accepted.
    pub max_connections_per_ip: usize,
    /// Peers the per-address cap does not apply to: the trusted proxies, behind which every
    /// client shares one address.
    pub per_ip_exempt: Vec<IpNet>,
    pub ipv6_prefix_length: u8,
    /// A request still running after this is answered 503; `None` for the admin listener, whose
    /// authenticated operator actions (a backup, a bulk revocation) may rightly run long.
    pub request_timeout: Option<Duration>,
    pub http2_max_concurrent_streams: u32,
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
    pub http2_max_header_list_size: u32,
}

impl ListenerLimits {
    /// The limits set in `server:`, with `server.request-timeout`.
    pub fn from_config(server: &crate::config::ServerConfig) -> Self {
        Self {
            tls_handshake_timeout: server.tls_handshake_timeout.std(),
            header_read_timeout: server.header_read_timeout.std(),
            idle_timeout: server.idle_timeout.std(),
            max_connections: server.max_connections,
            max_connections_per_ip: server.max_connections_per_ip,
            per_ip_exempt: server.trusted_proxies.clone(),
            ipv6_prefix_length: server.ipv6_prefix_length,
            request_timeout: Some(server.request_timeout.std()),
            http2_max_concurrent_streams: server.http2_max_concurrent_streams,
            http2_keep_alive_interval: server.http2_keep_alive_interval.std(),
            http2_keep_alive_timeout: server.http2_keep_alive_timeout.std(),
            http2_max_header_list_size: server.http2_max_header_list_size,
        }
    }

    /// The same limits without a request timeout.
    #[must_use]
    pub fn without_request_timeout(mut self) -> Self {
        self.request_timeout = None;
        self
    }

    /// The hyper connection builder: HTTP/1.1 and HTTP/2 with these limits. Both protocols get
    /// a timer, without which hyper silently ignores its timeouts.
    fn http_builder(&self) -> Builder<TokioExecutor> {
        let mut builder = Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.http2_max_concurrent_streams)
            .keep_alive_interval(self.http2_keep_alive_interval)
            .keep_alive_timeout(self.http2_keep_alive_timeout)
            .max_header_list_size(self.http2_max_header_list_size);
        builder
    }
}

/// Serves `router` on `listener` until `shutdown` fires, then returns once every connection has
/// answered what it was asked (each within `CLOSE_GRACE`, see `serve_connection`), so that a
/// stopping server does not cut off responses: its process exits when this returns.
///
/// The router gets the request timeout, a panic catcher (a panicking handler answers 500 and
/// the connection lives on) and request tracing, the same on every listener.
pub async fn serve(
    kind: ListenerKind,
    listener: TcpListener,
    transport: Transport,
    mut router: Router,
    limits: ListenerLimits,
    shutdown: CancellationToken,
) {
    if let Some(timeout) = limits.request_timeout {
        router = router.layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ));
    }
    let router = router
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::new());
    let accepting = Arc::new(Accepting {
        kind,
        acceptor: match transport {
            Transport::Tls(config) => Some(TlsAcceptor::from(config)),
            Transport::PlainHttp => None,
        },
        router,
        builder: limits.http_builder(),
        slots: Arc::new(Semaphore::new(
            limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        )),
        per_ip: Arc::new(PerIp::new(&limits)),
        limits,
        shutdown,
        connections: TaskTracker::new(),
    });
    accepting.accept_until_shutdown(&listener).await;
    drop(listener);
    accepting.connections.close();
    accepting.connections.wait().await;
}

/// What the accept loop of one listener shares with its connections.
struct Accepting {
    kind: ListenerKind,
    acceptor: Option<TlsAcceptor>,
    router: Router,
    builder: Builder<TokioExecutor>,
    slots: Arc<Semaphore>,
    per_ip: Arc<PerIp>,
    limits: ListenerLimits,
    shutdown: CancellationToken,
    connections: TaskTracker,
}

impl Accepting {
    /// Accepts until shutdown; each accepted connection runs on a task of `connections`.
    async fn accept_until_shutdown(self: &Arc<Self>, listener: &TcpListener) {
        loop {
            // The slot is taken before accepting: while all are taken, new clients wait in the
            // kernel's accept queue (they are not refused) until a connection ends.
            let slot = tokio::select! {
                slot = Arc::clone(&self.slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
                () = self.shutdown.cancelled() => return,
            };
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!(listener = self.kind.as_str(), error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = self.shutdown.cancelled() => return,
            };
            // A `[::]` listener sees IPv4 clients as `::ffff:a.b.c.d`; everything downstream
            // (limits, whitelist, trusted proxies, logs) knows them by their IPv4 address.
            let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
            let Some(per_ip) = self.per_ip.take(peer.ip()) else {
                // One address holds its share of slots already: closed at once, so that one
                // client cannot hold every slot of the listener.
                tracing::debug!(listener = self.kind.as_str(), %peer, "per-address connection cap reached");
                self.kind.closed("per_ip_limit");
                drop(stream);
                continue;
            };
            let slot = Slot::taken(self.kind, slot, per_ip);
            let this = Arc::clone(self);
            self.connections.spawn(async move {
                this.connection(stream, peer, slot).await;
            });
        }
    }

    /// One connection, from the TLS handshake (if any) to its end.
    async fn connection(&self, stream: TcpStream, peer: SocketAddr, _slot: Slot) {
        // A response leaves as several TLS records; with Nagle's algorithm the later ones wait
        // for the ACK of the first, which a client delays by up to 40 ms. Every response is
        // complete when written, so there is nothing to gain from coalescing.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "setting TCP_NODELAY");
        }
        let Some(acceptor) = &self.acceptor else {
            self.serve_connection(TokioIo::new(stream), peer).await;
            return;
        };
        let handshake =
            tokio::time::timeout(self.limits.tls_handshake_timeout, acceptor.accept(stream)).await;
        match handshake {
            Ok(Ok(tls_stream)) => self.serve_connection(TokioIo::new(tls_stream), peer).await,
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                self.kind.closed("handshake_timeout");
            }
        }
    }

    async fn serve_connection<I>(&self, io: I, peer: SocketAddr)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        serve_connection(
            self.kind,
            io,
            peer,
            self.router.clone(),
            &self.builder,
            self.limits.idle_timeout,
            self.shutdown.clone(),
        )
        .await;
    }
}

/// How many connections each client address holds, for `max-connections-per-ip`.
#[derive(Debug)]
struct PerIp {
    cap: usize,
    exempt: Vec<IpNet>,
    ipv6_prefix_length: u8,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIp {
    fn new(limits: &ListenerLimits) -> Self {
        Self {
            cap: limits.max_connections_per_ip.max(1),
            exempt: limits.per_ip_exempt.clone(),
            ipv6_prefix_length: limits.ipv6_prefix_length,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The address `ip` is counted under: an IPv6 client by its prefix, since one host usually
    /// owns a whole /64 and could otherwise open connections from as many addresses.
    fn key(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(_) => {
                IpNet::new(ip, self.ipv6_prefix_length).map_or(ip, |net| net.trunc().addr())
            }
        }
    }

    /// Counts one more connection of `ip`; `None` when it holds `cap` already.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PerIpSlot> {
        if self.exempt.iter().any(|net| net.contains(&ip)) {
            return Some(PerIpSlot(None));
        }
        let key = self.key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(PerIpSlot(Some((Arc::clone(self), key))))
    }

    fn release(&self, key: IpAddr) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // The table holds only addresses with connections open.
                held.remove(&key);
            }
        }
    }
}

/// One connection counted against its address (nothing for an exempt peer).
struct PerIpSlot(Option<(Arc<PerIp>, IpAddr)>);

impl Drop for PerIpSlot {
    fn drop(&mut self) {
        if let Some((per_ip, key)) = self.0.take() {
            per_ip.release(key);
        }
    }
}

/// A taken connection slot; `certeasy_<listener>_connections` counts them, so operators see how
/// close the listener is to `max-connections`.
struct Slot {
    kind: ListenerKind,
    _permit: OwnedSemaphorePermit,
    _per_ip: PerIpSlot,
}

impl Slot {
    fn taken(kind: ListenerKind, permit: OwnedSemaphorePermit, per_ip: PerIpSlot) -> Self {
        metrics::gauge!(kind.connections_gauge()).increment(1.0);
        Self {
            kind,
            _permit: permit,
            _per_ip: per_ip,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        metrics::gauge!(self.kind.connections_gauge()).decrement(1.0);
    }
}

/// What the idle timer of one connection watches: requests in flight, and how many have started.
#[derive(Debug, Default)]
struct Activity {
    in_flight: AtomicUsize,
    started: AtomicU64,
}

/// Counts one request as in flight until dropped (when its response is ready).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: &Arc<Activity>) -> Self {
        activity.started.fetch_add(1, Ordering::Relaxed);
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Returns once the connection has had no request in flight, and none started, for `timeout`.
/// Checking a few times per timeout is precise enough and costs nothing per request.
async fn idle_for(activity: &Activity, timeout: Duration) {
    let tick = (timeout / 4).max(Duration::from_millis(50));
    let mut seen = activity.started.load(Ordering::Relaxed);
    let mut idle_since = Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let started = activity.started.load(Ordering::Relaxed);
        if started != seen || activity.in_flight.load(Ordering::Relaxed) > 0 {
            seen = started;
            idle_since = Instant::now();
        } else if idle_since.elapsed() >= timeout {
            return;
        }
    }
}

/// Returns once a request has started on the connection and none is in flight any more.
async fn first_answered(activity: &Activity) {
    loop {
        if activity.started.load(Ordering::Relaxed) > 0
            && activity.in_flight.load(Ordering::Relaxed) == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn serve_connection<I>(
    kind: ListenerKind,
    io: I,
    peer: SocketAddr,
    router: Router,
    builder: &Builder<TokioExecutor>,
    idle_timeout: Duration,
    shutdown: CancellationToken,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let counted = Arc::clone(&activity);
    let service = tower::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let in_flight = InFlight::enter(&counted);
        let router = router.clone();
        async move {
            let response = router.oneshot(req).await;
            drop(in_flight);
            response
        }
    });
    let hyper_service = TowerToHyperService::new(service);
    let conn = builder.serve_connection(io, hyper_service);
    tokio::pin!(conn);
    let why = tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                if e.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_timeout) {
                    kind.closed("header_timeout");
                }
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        () = shutdown.cancelled() => "shutdown",
        () = idle_for(&activity, idle_timeout) => {
            kind.closed("idle_timeout");
            "idle timeout"
        }
    };
    if why == "shutdown" && activity.started.load(Ordering::Relaxed) == 0 {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = first_answered(&activity) => {}
            () = tokio::time::sleep(FIRST_REQUEST_GRACE) => {}
        }
    }
    tracing::debug!(%peer, why, "closing connection");
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use axum::routing::get;
    use rustls::pki_types::ServerName;
    use tokio::io::AsyncReadExt;
    use tokio::io::AsyncWriteExt;
    use tokio_rustls::TlsConnector;

    use super::*;

    fn limits() -> ListenerLimits {
        ListenerLimits {
            tls_handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(30),
            max_connections: 16,
            max_connections_per_ip: 16,
            per_ip_exempt: Vec::new(),
            ipv6_prefix_length: 64,
            request_timeout: Some(Duration::from_secs(30)),
            http2_max_concurrent_streams: 16,
            http2_keep_alive_interval: Duration::from_secs(30),
            http2_keep_alive_timeout: Duration::from_secs(10),
            http2_max_header_list_size: 16 * 1024,
        }
    }

    fn peer() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 40000))
    }

    /// Reads an HTTP/1.1 exchange to its end (the request asks the server to close).
    async fn exchange<S>(mut stream: S, path: &str) -> String
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.expect("read");
        String::from_utf8_lossy(&response).into_owned()
    }

    #[test]
    fn one_address_holds_at_most_its_cap_and_gets_slots_back() {
        let mut limits = limits();
        limits.max_connections_per_ip = 2;
        limits.per_ip_exempt = vec!["10.0.0.1/32".parse().unwrap()];
        let per_ip = Arc::new(PerIp::new(&limits));
        let client: IpAddr = "192.0.2.7".parse().unwrap();
        let first = per_ip.take(client).expect("first");
        let _second = per_ip.take(client).expect("second");
        assert!(per_ip.take(client).is_none(), "a third is refused");
        assert!(per_ip.take("192.0.2.8".parse().unwrap()).is_some());
        drop(first);
        assert!(per_ip.take(client).is_some(), "a slot comes back");

        // IPv6 clients share their /64 (ipv6-prefix-length); another /64 is another client.
        let a = per_ip.take("2001:db8::1".parse().unwrap()).expect("a");
        let b = per_ip.take("2001:db8::ffff:2".parse().unwrap()).expect("b");
        assert!(per_ip.take("2001:db8::3".parse().unwrap()).is_none());
        assert!(per_ip.take("2001:db8:0:1::1".parse().unwrap()).is_some());

        // A trusted proxy is not capped: every client behind it shares its address.
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..10)
            .map(|_| per_ip.take(proxy).expect("proxy"))
            .collect();
        drop((a, b, held));
        // Only addresses with connections open are kept: here `_second`'s.
        let table = per_ip.held.lock().unwrap();
        assert_eq!(*table, HashMap::from([(client, 1)]));
    }

    #[tokio::test]
    async fn a_connection_accepted_as_shutdown_begins_has_its_request_answered() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let router = Router::new().route("/", get(|| async { "answered" }));
        let served = tokio::spawn(async move {
            let builder = limits().http_builder();
            serve_connection(
                ListenerKind::Acme,
                TokioIo::new(server),
                peer(),
                router,
                &builder,
                Duration::from_secs(30),
                shutdown,
            )
            .await;
        });
        // The client's request arrives a moment after the connection, as it does over a network.
        let delayed = async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            exchange(client, "/").await
        };
        let response = tokio::time::timeout(Duration::from_secs(10), delayed)
            .await
            .expect("the server answers before closing");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("answered"), "{response}");
        tokio::time::timeout(Duration::from_secs(10), served)
            .await
            .expect("the connection ends after its answer")
            .expect("no panic");
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_after_shutdown_is_closed_after_the_grace() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let started = Instant::now();
        let builder = limits().http_builder();
        serve_connection(
            ListenerKind::Acme,
            TokioIo::new(server),
            peer(),
            Router::new(),
            &builder,
            Duration::from_secs(30),
            shutdown,
        )
        .await;
        assert!(started.elapsed() < FIRST_REQUEST_GRACE + CLOSE_GRACE);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.expect("read");
        assert!(rest.is_empty(), "nothing was asked, nothing is answered");
    }

    /// The process exits when `serve` returns, so a request in flight at shutdown must be
    /// answered before it does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_waits_for_the_requests_in_flight() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let key = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let cert = key.cert.der().clone();
        let server_config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.signing_key.serialize_der().into()),
            )
            .expect("server config");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).expect("root");
        let client_config = Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );

        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
        let entered_tx = Arc::new(Mutex::new(Some(entered_tx)));
        let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handler_answered = Arc::clone(&answered);
        let router = Router::new().route(
            "/slow",
            get(move || {
                let entered_tx = Arc::clone(&entered_tx);
                let answered = Arc::clone(&handler_answered);
                async move {
                    if let Some(tx) = entered_tx.lock().expect("lock").take() {
                        let _ = tx.send(());
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    answered.store(true, Ordering::SeqCst);
                    "slow answer"
                }
            }),
        );
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            ListenerKind::Acme,
            listener,
            Transport::Tls(Arc::new(server_config)),
            router,
            limits(),
            shutdown.clone(),
        ));

        let tcp = TcpStream::connect(addr).await.expect("connect");
        let tls = TlsConnector::from(client_config)
            .connect(ServerName::try_from("localhost").expect("name"), tcp)
            .await
            .expect("handshake");
        let client = tokio::spawn(exchange(tls, "/slow"));
        entered_rx.await.expect("the request reached its handler");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returns")
            .expect("no panic");
        assert!(
            answered.load(Ordering::SeqCst),
            "serve returned before the request in flight was answered"
        );
        let response = client.await.expect("client");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("slow answer"), "{response}");
    }
}
