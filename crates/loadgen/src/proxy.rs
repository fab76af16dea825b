//! A TCP round-robin proxy, so several server instances can be measured behind one URL (their
//! `server.external-url` is the proxy's). TLS passes through untouched.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::net::TcpStream;

use crate::cli::ProxyArgs;

/// Accepts until killed; connection `i` goes to backend `i mod n`.
pub(crate) async fn serve(args: ProxyArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let next = AtomicUsize::new(0);
    eprintln!("proxy on {} to {:?}", listener.local_addr()?, args.backends);
    loop {
        let (mut inbound, _) = listener.accept().await?;
        let backend = args.backends[next.fetch_add(1, Ordering::Relaxed) % args.backends.len()];
        tokio::spawn(async move {
            let _ = inbound.set_nodelay(true);
            match TcpStream::connect(backend).await {
                Ok(mut outbound) => {
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(error) => eprintln!("proxy: connecting {backend}: {error}"),
            }
        });
    }
}
