//! Raw TCP targets on several loopback addresses (127.0.0.x) sharing one port, for tests that
//! need a name with many addresses: each target counts the connections it accepted.
//!
//! Tasks live on the test's runtime and stop with it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// `127.0.0.{last}`.
pub(crate) fn loopback(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

/// Binds (without listening) one socket per address, all on the same free port.
pub(crate) fn bind_same_port(ips: &[Ipv4Addr]) -> (u16, Vec<TcpSocket>) {
    'retry: for _ in 0..50 {
        let first = TcpSocket::new_v4().expect("create a socket");
        first
            .bind(SocketAddr::from((ips[0], 0)))
            .expect("bind a loopback address");
        let port = first.local_addr().expect("bound address").port();
        let mut sockets = vec![first];
        for ip in &ips[1..] {
            let socket = TcpSocket::new_v4().expect("create a socket");
            if socket.bind(SocketAddr::from((*ip, port))).is_err() {
                continue 'retry;
            }
            sockets.push(socket);
        }
        return (port, sockets);
    }
    panic!("no port was free on all of {ips:?}");
}

/// How many connections a target accepted.
#[derive(Clone, Default)]
pub(crate) struct Accepted(Arc<AtomicUsize>);

impl Accepted {
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Accepts connections and never answers (holds them open until the runtime stops).
pub(crate) fn silent(socket: TcpSocket) -> Accepted {
    let listener = socket.listen(64).expect("listen");
    let accepted = Accepted::default();
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counter.add();
            held.push(stream);
        }
    });
    accepted
}

/// Answers every connection with the raw HTTP `response` after reading the request head.
pub(crate) fn serve(socket: TcpSocket, response: String) -> Accepted {
    serve_by_path(socket, move |_| response.clone())
}

/// Answers every connection with the raw HTTP response `route` gives for the request path.
pub(crate) fn serve_by_path(
    socket: TcpSocket,
    route: impl Fn(&str) -> String + Send + Sync + 'static,
) -> Accepted {
    let listener = socket.listen(64).expect("listen");
    let accepted = Accepted::default();
    let counter = accepted.clone();
    let route = Arc::new(route);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.add();
            let route = Arc::clone(&route);
            tokio::spawn(async move { answer(stream, &*route).await });
        }
    });
    accepted
}

async fn answer(mut stream: TcpStream, route: &(dyn Fn(&str) -> String + Send + Sync)) {
    let mut head = Vec::new();
    let mut buf = [0_u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split(' ').nth(1).unwrap_or("/");
    let response = route(path);
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A 200 response carrying `body`.
pub(crate) fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A 302 response pointing to `location`.
pub(crate) fn found(location: &str) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

/// A listener whose accept queue is full, so new connection attempts get no answer at all (the
/// kernel drops their SYNs), like a host that silently drops packets. The returned stream fills
/// the queue and must be kept alive.
pub(crate) async fn unresponsive(socket: TcpSocket) -> (TcpListener, TcpStream) {
    let addr = socket.local_addr().expect("bound address");
    let listener = socket.listen(0).expect("listen");
    let filler = TcpStream::connect(addr)
        .await
        .expect("fill the accept queue");
    (listener, filler)
}
