use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use acme_core::identifier::Identifier;
use testkit::dns::TestDnsServer;
use testkit::http01::Http01Responder;
use testkit::tls_alpn::TlsAlpnResponder;
use validation::{AttemptAccount, ValidationSettings, Validator};

pub(crate) const KEY_AUTH: &str = "tok3n.thumbprint-of-the-account-key";

/// The URI of the account the attempts are made for (what CAA `accounturi` is compared with).
pub(crate) const ACCOUNT_URI: &str = "https://ca.test/acme/acct/1";

/// The account of [`ACCOUNT_URI`], its key's thumbprint the one in [`KEY_AUTH`], with no earlier
/// keys; the time only dns-persist-01 reads, which these tests do not use.
pub(crate) fn account() -> AttemptAccount<'static> {
    AttemptAccount {
        uri: ACCOUNT_URI,
        thumbprint: "thumbprint-of-the-account-key",
        earlier_thumbprints: &[],
        now_unix: 1_700_000_000,
    }
}

/// The three test servers, with names resolving to 127.0.0.1.
pub(crate) struct Env {
    pub(crate) dns: TestDnsServer,
    pub(crate) http: Http01Responder,
    pub(crate) tls: TlsAlpnResponder,
}

impl Env {
    pub(crate) async fn start() -> Env {
        let env = Env {
            dns: TestDnsServer::start()
                .await
                .expect("start the test DNS server"),
            http: Http01Responder::start()
                .await
                .expect("start the http-01 responder"),
            tls: TlsAlpnResponder::start()
                .await
                .expect("start the tls-alpn-01 responder"),
        };
        for name in ["a.test", "b.test", "example.com", "www.example.com"] {
            env.dns.set_a(name, Ipv4Addr::LOCALHOST);
        }
        env
    }

    pub(crate) fn settings(&self) -> ValidationSettings {
        ValidationSettings {
            dns_servers: vec![self.dns.addr()],
            http_port: self.http.port(),
            tls_alpn_port: self.tls.port(),
            allow_loopback: true,
            timeout: Duration::from_secs(5),
            ..ValidationSettings::default()
        }
    }

    pub(crate) fn validator(&self) -> Validator {
        Validator::new(self.settings()).expect("build the validator")
    }

    pub(crate) fn validator_with(&self, change: impl FnOnce(&mut ValidationSettings)) -> Validator {
        let mut settings = self.settings();
        change(&mut settings);
        Validator::new(settings).expect("build the validator")
    }
}

pub(crate) fn dns(name: &str) -> Identifier {
    Identifier::dns(name).expect("a valid DNS identifier")
}

pub(crate) fn ip(addr: &str) -> Identifier {
    Identifier::ip(addr).expect("a valid IP identifier")
}

/// A loopback port nothing listens on (bound once, then released).
pub(crate) fn closed_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("bound address").port()
}
