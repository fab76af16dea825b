//! A TCP round-robin proxy, so several server instances can be measured behind one URL (their
//! `server.external-url` is the proxy's). TLS passes through untouched. With a delay it stands
//! for a network instead: a database behind it answers as one on another host would.

use std::io::Read;
use std::io::Write;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

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
    let delay = Duration::from_micros(args.delay_us);
    eprintln!(
        "proxy on {} to {:?}, delay {delay:?}",
        listener.local_addr()?,
        args.backends
    );
    loop {
        let (mut inbound, _) = listener.accept().await?;
        let backend = args.backends[next.fetch_add(1, Ordering::Relaxed) % args.backends.len()];
        tokio::spawn(async move {
            let _ = inbound.set_nodelay(true);
            match TcpStream::connect(backend).await {
                Ok(mut outbound) => {
                    let _ = outbound.set_nodelay(true);
                    if delay.is_zero() {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    } else if let Err(error) = delayed(inbound, outbound, delay) {
                        eprintln!("proxy: {backend}: {error}");
                    }
                }
                Err(error) => eprintln!("proxy: connecting {backend}: {error}"),
            }
        });
    }
}

/// Hands the connection to threads that pass each direction on `delay` late. Threads, because
/// the runtime's timers tick in whole milliseconds and a network between two hosts of one
/// datacenter is a fraction of one; a thread sleeps to within the kernel's timer slack.
fn delayed(inbound: TcpStream, outbound: TcpStream, delay: Duration) -> std::io::Result<()> {
    let inbound = inbound.into_std()?;
    let outbound = outbound.into_std()?;
    inbound.set_nonblocking(false)?;
    outbound.set_nonblocking(false)?;
    one_way(inbound.try_clone()?, outbound.try_clone()?, delay)?;
    one_way(outbound, inbound, delay)
}

/// Reads `from` on one thread and writes what it read to `to` on another, each chunk `delay`
/// after it arrived, in order. The end of either side ends both.
fn one_way(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    delay: Duration,
) -> std::io::Result<()> {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::Builder::new()
        .name("proxy-read".into())
        .spawn(move || {
            let mut buf = vec![0; 64 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0
                    || chunks
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                {
                    break;
                }
            }
            let _ = from.shutdown(std::net::Shutdown::Read);
        })?;
    std::thread::Builder::new()
        .name("proxy-write".into())
        .spawn(move || {
            for (at, chunk) in due {
                let now = Instant::now();
                if at > now {
                    std::thread::sleep(at - now);
                }
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        })?;
    Ok(())
}
