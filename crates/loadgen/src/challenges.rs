//! The name resolution and http-01 answers every server under test relies on.

use std::net::Ipv4Addr;
use std::net::SocketAddr;

use anyhow::Context;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;

/// The DNS server and the http-01 responder of one run; both stop when dropped.
pub(crate) struct Challenges {
    _dns: TestDnsServer,
    pub(crate) http01: Http01Responder,
}

impl Challenges {
    /// Binds both on the fixed addresses the server was configured with.
    pub(crate) async fn start(
        dns_listen: SocketAddr,
        http01_listen: SocketAddr,
        suffix: &str,
    ) -> anyhow::Result<Self> {
        let dns = TestDnsServer::start_on(dns_listen)
            .await
            .with_context(|| format!("binding the DNS server on {dns_listen}"))?;
        dns.set_default_a(suffix, Ipv4Addr::LOCALHOST);
        let http01 = Http01Responder::start_on(http01_listen)
            .await
            .with_context(|| format!("binding the http-01 responder on {http01_listen}"))?;
        Ok(Self { _dns: dns, http01 })
    }
}
