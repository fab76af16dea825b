//! The HTTPS accept loop of the ACME listener (tokio-rustls + hyper-util), with the peer address
//! passed to handlers so rate limits can key on it.
//!
//! The listener faces the network for years, so every way a client can hold resources without
//! doing work has a bound: a connection slot is taken before accepting (`max-connections`), the
//! TLS handshake has a deadline, an HTTP/1.1 request head must arrive within
//! `header-read-timeout` (hyper starts that timer whenever the connection waits for a request, so
//! it also ends idle HTTP/1.1 keep-alive), a connection with no request in flight for
//! `idle-timeout` is closed (HTTP/2, and clients stuck before the protocol is even known), and
//! HTTP/2 has stream, header-size and PING limits. Because every unproductive connection frees
//! its slot within those timeouts, clients waiting for a slot are never starved.

use std::net::SocketAddr;
use std::sync::Arc;
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
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::ResolvesServerCert;
use rustls::server::StoresServerSessions;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long requests in flight may run on after shutdown or an idle close asks a connection to
/// finish.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The connection limits of the ACME listener, from `server:` in the configuration.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    pub tls_handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub http2_max_concurrent_streams: u32,
    pub http2_keep_alive_interval: Duration,
    pub http2_keep_alive_timeout: Duration,
    pub http2_max_header_list_size: u32,
}

impl ListenerLimits {
    /// The limits set in `server:`.
    pub fn from_config(server: &crate::config::ServerConfig) -> Self {
        Self {
            tls_handshake_timeout: server.tls_handshake_timeout.std(),
            header_read_timeout: server.header_read_timeout.std(),
            idle_timeout: server.idle_timeout.std(),
            max_connections: server.max_connections,
            http2_max_concurrent_streams: server.http2_max_concurrent_streams,
            http2_keep_alive_interval: server.http2_keep_alive_interval.std(),
            http2_keep_alive_timeout: server.http2_keep_alive_timeout.std(),
            http2_max_header_list_size: server.http2_max_header_list_size,
        }
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

/// A rustls server config on `provider`, HTTP/1.1 and HTTP/2, asking `certificates` for the
/// certificate at every handshake so it can be swapped while the server runs, and keeping resumable
/// sessions in `sessions`, which forgets them when the certificate is swapped.
pub fn server_config(
    provider: Arc<CryptoProvider>,
    certificates: Arc<dyn ResolvesServerCert>,
    sessions: Arc<dyn StoresServerSessions>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.session_storage = sessions;
    Ok(Arc::new(config))
}

/// Serves `router` over TLS until `shutdown` fires.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    limits: ListenerLimits,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let builder = Arc::new(limits.http_builder());
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let limits = Arc::new(limits);
    loop {
        // The slot is taken before accepting: while all are taken, new clients wait in the
        // kernel's accept queue (they are not refused) until a connection ends.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        // A `[::]` listener sees IPv4 clients as `::ffff:a.b.c.d`; everything downstream (limits,
        // whitelist, trusted proxies, logs) knows them by their IPv4 address.
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        // A response leaves as several TLS records; with Nagle's algorithm the later ones wait
        // for the ACK of the first, which a client delays by up to 40 ms. Every response is
        // complete when written, so there is nothing to gain from coalescing.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "setting TCP_NODELAY");
        }
        let slot = Slot::taken(slot);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let shutdown = shutdown.clone();
        let builder = Arc::clone(&builder);
        let limits = Arc::clone(&limits);
        tokio::spawn(async move {
            let _slot = slot;
            let handshake =
                tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream)).await;
            let tls_stream = match handshake {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    closed("handshake_timeout");
                    return;
                }
            };
            serve_connection(
                TokioIo::new(tls_stream),
                peer,
                router,
                &builder,
                limits.idle_timeout,
                shutdown,
            )
            .await;
        });
    }
}

/// A taken connection slot; `certeasy_acme_connections` counts them, so operators see how close
/// the listener is to `max-connections`.
struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Slot {
    fn taken(permit: tokio::sync::OwnedSemaphorePermit) -> Self {
        metrics::gauge!("certeasy_acme_connections").increment(1.0);
        Self { _permit: permit }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        metrics::gauge!("certeasy_acme_connections").decrement(1.0);
    }
}

/// Counts a connection the listener closed because of one of its limits.
fn closed(reason: &'static str) {
    metrics::counter!("certeasy_acme_connections_closed_total", "reason" => reason).increment(1);
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

async fn serve_connection<I>(
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
                    closed("header_timeout");
                }
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        () = shutdown.cancelled() => "shutdown",
        () = idle_for(&activity, idle_timeout) => {
            closed("idle_timeout");
            "idle timeout"
        }
    };
    tracing::debug!(%peer, why, "closing connection");
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}
