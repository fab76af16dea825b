//! An http-01 responder on 127.0.0.1: serves key authorizations and, for redirect tests, redirects.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The path prefix of RFC 8555 §8.3.
const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

#[derive(Debug, Default)]
struct Content {
    tokens: Mutex<HashMap<String, String>>,
    redirects: Mutex<HashMap<String, (StatusCode, String)>>,
}

/// An HTTP server answering `GET /.well-known/acme-challenge/{token}` from a map.
///
/// Unknown paths get 404. A redirect configured for a path takes precedence over a token. Stops
/// when dropped.
#[derive(Debug)]
pub struct Http01Responder {
    content: Arc<Content>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Http01Responder {
    /// Starts the responder on 127.0.0.1 and a random port. Must be called inside a tokio runtime.
    pub async fn start() -> io::Result<Self> {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Like [`Http01Responder::start`] on a fixed address, for servers configured with a fixed
    /// http-01 port before the test process runs (Pebble's `httpPort`).
    pub async fn start_on(addr: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let content = Arc::new(Content::default());
        let app = Router::new()
            .fallback(serve)
            .with_state(Arc::clone(&content));
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "http-01 responder stopped");
            }
        });
        Ok(Self {
            content,
            addr,
            task,
        })
    }

    /// The port to configure as the validator's http-01 port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The bound address (always on 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `key_authorization` at `/.well-known/acme-challenge/{token}`.
    pub fn add(&self, token: &str, key_authorization: &str) {
        self.content
            .tokens
            .lock()
            .insert(token.to_owned(), key_authorization.to_owned());
    }

    /// Stops serving `token` (404 afterwards).
    pub fn remove(&self, token: &str) {
        self.content.tokens.lock().remove(token);
    }

    /// Answers requests for `path` (e.g. `/.well-known/acme-challenge/abc`) with a 302 to `location`,
    /// which may be absolute or relative.
    pub fn add_redirect(&self, path: &str, location: &str) {
        self.add_redirect_with_status(path, StatusCode::FOUND, location);
    }

    /// Like [`Http01Responder::add_redirect`] with an explicit 3xx status.
    pub fn add_redirect_with_status(&self, path: &str, status: StatusCode, location: &str) {
        self.content
            .redirects
            .lock()
            .insert(path.to_owned(), (status, location.to_owned()));
    }

    /// Removes the redirect for `path`.
    pub fn remove_redirect(&self, path: &str) {
        self.content.redirects.lock().remove(path);
    }
}

impl Drop for Http01Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(State(content): State<Arc<Content>>, request: Request) -> Response {
    let path = request.uri().path();
    if let Some((status, location)) = content.redirects.lock().get(path).cloned() {
        return (status, [(header::LOCATION, location)]).into_response();
    }
    let served = path
        .strip_prefix(CHALLENGE_PREFIX)
        .and_then(|token| content.tokens.lock().get(token).cloned());
    match served {
        Some(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            body,
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
