//! A real DNS server on 127.0.0.1 answering from a mutable in-memory map.
//!
//! Validation must be tested against real DNS traffic (UDP and TCP, NXDOMAIN versus empty answers,
//! CNAME chains), not against a mocked resolver, or the resolver configuration itself goes
//! untested. The server behaves like pebble-challtestsrv: names are case-insensitive, an unknown
//! name is NXDOMAIN, a known name without the asked type is NOERROR with no answers, and an `SOA`
//! query is answered for every name so that clients looking for a zone apex find one.
//!
//! External ACME clients (lego's `exec` provider, certbot hooks) cannot call Rust methods, so the
//! server also exposes pebble-challtestsrv's HTTP control API for TXT records at
//! [`TestDnsServer::control_url`]: `POST /set-txt {"host": "...", "value": "..."}` and
//! `POST /clear-txt {"host": "..."}`.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use hickory_proto::op::{Header, HeaderCounts, Metadata, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CAA, CNAME, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

/// How many CNAME hops the server follows inside its own map before answering with the chain so far.
const MAX_CNAME_HOPS: usize = 8;

/// The records held for one name.
#[derive(Debug, Default, Clone)]
struct Entry {
    a: Vec<Ipv4Addr>,
    aaaa: Vec<Ipv6Addr>,
    txt: Vec<String>,
    cname: Option<String>,
    caa: Vec<CAA>,
    /// Every query for the name is answered SERVFAIL (a broken or overloaded nameserver).
    servfail: bool,
}

/// The shared, mutable zone data.
#[derive(Debug, Default)]
struct Records {
    names: Mutex<HashMap<String, Entry>>,
    /// `(suffix, address)`: names under a suffix that are not in `names` answer A `address`, so
    /// a load generator need not register each of its millions of names first.
    default_a: Mutex<Vec<(String, Ipv4Addr)>>,
}

impl Records {
    /// The entry a name absent from the map gets from a [`TestDnsServer::set_default_a`] suffix.
    fn default_entry(&self, name: &str) -> Option<Entry> {
        self.default_a
            .lock()
            .iter()
            .find(|(suffix, _)| {
                name == suffix
                    || name
                        .strip_suffix(suffix.as_str())
                        .is_some_and(|head| head.ends_with('.'))
            })
            .map(|(_, ip)| Entry {
                a: vec![*ip],
                ..Entry::default()
            })
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut Entry)) {
        let mut names = self.names.lock();
        change(names.entry(normalise(name)).or_default());
    }

    /// Answers one question: the response code and the answer records (CNAME chain first).
    fn answer(&self, query_name: &Name, query_type: RecordType) -> (ResponseCode, Vec<Record>) {
        if query_type == RecordType::SOA {
            return (ResponseCode::NoError, vec![synthetic_soa(query_name)]);
        }
        let names = self.names.lock();
        let mut answers = Vec::new();
        let mut owner = query_name.clone();
        let mut current = normalise(&query_name.to_ascii());
        for _ in 0..=MAX_CNAME_HOPS {
            let default_entry;
            let entry = if let Some(entry) = names.get(&current) {
                entry
            } else if let Some(entry) = self.default_entry(&current) {
                default_entry = entry;
                &default_entry
            } else {
                // A chain pointing outside the map ends here; the client re-queries the target.
                let code = if answers.is_empty() {
                    ResponseCode::NXDomain
                } else {
                    ResponseCode::NoError
                };
                return (code, answers);
            };
            if entry.servfail {
                return (ResponseCode::ServFail, Vec::new());
            }
            if let Some(target) = &entry.cname
                && query_type != RecordType::CNAME
            {
                let Ok(target_name) = fqdn(target) else {
                    return (ResponseCode::ServFail, Vec::new());
                };
                answers.push(Record::from_rdata(
                    owner.clone(),
                    0,
                    RData::CNAME(CNAME(target_name.clone())),
                ));
                owner = target_name;
                current = normalise(target);
                continue;
            }
            answers.extend(records_of_type(entry, &owner, query_type));
            return (ResponseCode::NoError, answers);
        }
        (ResponseCode::NoError, answers)
    }
}

fn records_of_type(entry: &Entry, owner: &Name, query_type: RecordType) -> Vec<Record> {
    let rdata: Vec<RData> = match query_type {
        RecordType::A => entry.a.iter().map(|ip| RData::A(A(*ip))).collect(),
        RecordType::AAAA => entry.aaaa.iter().map(|ip| RData::AAAA(AAAA(*ip))).collect(),
        RecordType::TXT => entry
            .txt
            .iter()
            .map(|v| RData::TXT(TXT::new(vec![v.clone()])))
            .collect(),
        RecordType::CAA => entry.caa.iter().cloned().map(RData::CAA).collect(),
        RecordType::CNAME => entry
            .cname
            .iter()
            .filter_map(|t| fqdn(t).ok())
            .map(|t| RData::CNAME(CNAME(t)))
            .collect(),
        _ => Vec::new(),
    };
    rdata
        .into_iter()
        .map(|data| Record::from_rdata(owner.clone(), 0, data))
        .collect()
}

fn synthetic_soa(owner: &Name) -> Record {
    let mname = Name::from_ascii("ns.testkit.test.").unwrap_or_default();
    let rname = Name::from_ascii("hostmaster.testkit.test.").unwrap_or_default();
    Record::from_rdata(
        owner.clone(),
        0,
        RData::SOA(SOA::new(mname, rname, 1, 60, 60, 600, 0)),
    )
}

fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn fqdn(name: &str) -> Result<Name, hickory_proto::ProtoError> {
    Name::from_ascii(format!("{}.", normalise(name)))
}

/// The `RequestHandler` that hickory-server calls for every query.
#[derive(Debug, Clone)]
struct Handler {
    records: Arc<Records>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let builder = MessageResponseBuilder::from_message_request(request);
        let answers = match request.queries.queries() {
            [query] => {
                let (code, answers) = self
                    .records
                    .answer(query.original().name(), query.query_type());
                metadata.response_code = code;
                answers
            }
            _ => {
                metadata.response_code = ResponseCode::FormErr;
                Vec::new()
            }
        };
        let response = builder.build(metadata, answers.iter(), [], [], []);
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(error) => {
                tracing::warn!(%error, "test DNS server failed to send a response");
                let mut metadata = Metadata::response_from_request(&request.metadata);
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        }
    }
}

/// A DNS server for tests, bound to 127.0.0.1 on a random port (UDP and TCP on the same port).
///
/// Stops when dropped.
pub struct TestDnsServer {
    records: Arc<Records>,
    addr: SocketAddr,
    control_addr: SocketAddr,
    server: Server<Handler>,
    control_task: JoinHandle<()>,
}

impl std::fmt::Debug for TestDnsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDnsServer")
            .field("addr", &self.addr)
            .field("control_addr", &self.control_addr)
            .finish_non_exhaustive()
    }
}

impl TestDnsServer {
    /// Starts the DNS server and its HTTP control endpoint. Must be called inside a tokio runtime.
    pub async fn start() -> io::Result<Self> {
        Self::start_with(bind_udp_and_tcp().await?).await
    }

    /// Like [`TestDnsServer::start`] on a fixed address (UDP and TCP), for servers configured
    /// before the test process runs, such as a Pebble started by a script.
    pub async fn start_on(addr: SocketAddr) -> io::Result<Self> {
        let udp = UdpSocket::bind(addr).await?;
        let tcp = TcpListener::bind(addr).await?;
        Self::start_with((udp, tcp)).await
    }

    async fn start_with((udp, tcp): (UdpSocket, TcpListener)) -> io::Result<Self> {
        let records = Arc::new(Records::default());
        let addr = udp.local_addr()?;
        let mut server = Server::new(Handler {
            records: Arc::clone(&records),
        });
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 32);

        let control = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let control_addr = control.local_addr()?;
        let app = Router::new()
            .route("/set-txt", post(set_txt))
            .route("/clear-txt", post(clear_txt))
            .with_state(Arc::clone(&records));
        let control_task = tokio::spawn(async move {
            if let Err(error) = axum::serve(control, app).await {
                tracing::warn!(%error, "test DNS control endpoint stopped");
            }
        });
        Ok(Self {
            records,
            addr,
            control_addr,
            server,
            control_task,
        })
    }

    /// The UDP and TCP address to configure as a nameserver.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL of the HTTP control endpoint, e.g. `http://127.0.0.1:41234` (no trailing slash).
    pub fn control_url(&self) -> String {
        format!("http://{}", self.control_addr)
    }

    /// Replaces the A records of `name` with `ip`.
    pub fn set_a(&self, name: &str, ip: Ipv4Addr) {
        self.records.update(name, |e| e.a = vec![ip]);
    }

    /// Answers A `ip` for `suffix` and every name below it that has no records of its own
    /// (like pebble-challtestsrv's default IPv4). Other types get NOERROR with no answers.
    pub fn set_default_a(&self, suffix: &str, ip: Ipv4Addr) {
        self.records.default_a.lock().push((normalise(suffix), ip));
    }

    /// Replaces the AAAA records of `name` with `ip`.
    pub fn set_aaaa(&self, name: &str, ip: Ipv6Addr) {
        self.records.update(name, |e| e.aaaa = vec![ip]);
    }

    /// Replaces the A records of `name` with all of `ips`, answered in this order.
    pub fn set_a_records(&self, name: &str, ips: &[Ipv4Addr]) {
        self.records.update(name, |e| e.a = ips.to_vec());
    }

    /// Adds a TXT record (one character-string) to `name`.
    pub fn add_txt(&self, name: &str, value: &str) {
        self.records.update(name, |e| e.txt.push(value.to_owned()));
    }

    /// Removes all TXT records of `name`; the name itself keeps existing (NOERROR, no answers).
    pub fn clear_txt(&self, name: &str) {
        self.records.update(name, |e| e.txt.clear());
    }

    /// Makes `name` an alias of `target`; queries for other types are answered with the chain.
    pub fn set_cname(&self, name: &str, target: &str) {
        self.records
            .update(name, |e| e.cname = Some(target.to_owned()));
    }

    /// Adds a CAA record with raw `flags` (128 = issuer critical), `tag` and `value`, e.g.
    /// `add_caa("example.com", 0, "issue", "ca.example; validationmethods=dns-01")`.
    pub fn add_caa(&self, name: &str, flags: u8, tag: &str, value: &str) {
        let mut caa = CAA::new_issue(false, None, Vec::new());
        caa.issuer_critical = flags & 0x80 != 0;
        caa.reserved_flags = flags & 0x7f;
        tag.clone_into(&mut caa.tag);
        caa.value = value.as_bytes().to_vec();
        self.records.update(name, |e| e.caa.push(caa));
    }

    /// Removes all CAA records of `name`.
    pub fn clear_caa(&self, name: &str) {
        self.records.update(name, |e| e.caa.clear());
    }

    /// Answers every query for `name` with SERVFAIL while `on`, whatever records it holds.
    pub fn set_servfail(&self, name: &str, on: bool) {
        self.records.update(name, |e| e.servfail = on);
    }

    /// Forgets `name` entirely: queries for it become NXDOMAIN.
    pub fn remove(&self, name: &str) {
        self.records.names.lock().remove(&normalise(name));
    }
}

impl Drop for TestDnsServer {
    fn drop(&mut self) {
        // Dropping `server` aborts its listener tasks; cancelling first also stops in-flight
        // connection handlers that watch the token.
        self.server.shutdown_token().cancel();
        self.control_task.abort();
    }
}

/// Binds UDP and TCP on the same random port, retrying when the TCP side of a port is taken.
async fn bind_udp_and_tcp() -> io::Result<(UdpSocket, TcpListener)> {
    let mut last_error = None;
    for _ in 0..20 {
        let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = udp.local_addr()?.port();
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("no free port for UDP and TCP")))
}

/// Body of pebble-challtestsrv's `/set-txt` and `/clear-txt`.
#[derive(Debug, Deserialize)]
struct TxtRequest {
    host: String,
    #[serde(default)]
    value: Option<String>,
}

/// Parses the JSON body whatever its content type: shell hooks often omit the header.
fn parse_txt_request(body: &[u8]) -> Option<TxtRequest> {
    serde_json::from_slice(body).ok()
}

async fn set_txt(State(records): State<Arc<Records>>, body: Bytes) -> StatusCode {
    let Some(TxtRequest {
        host,
        value: Some(value),
    }) = parse_txt_request(&body)
    else {
        return StatusCode::BAD_REQUEST;
    };
    records.update(&host, |e| e.txt.push(value));
    StatusCode::OK
}

async fn clear_txt(State(records): State<Arc<Records>>, body: Bytes) -> StatusCode {
    let Some(request) = parse_txt_request(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    records.update(&request.host, |e| e.txt.clear());
    StatusCode::OK
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::Name;
    use hickory_proto::rr::RData;
    use hickory_proto::rr::RecordType;

    use super::Records;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("valid name")
    }

    #[test]
    fn default_a_answers_under_its_suffix_only() {
        let records = Records::default();
        records
            .default_a
            .lock()
            .push(("bench.test".to_owned(), Ipv4Addr::LOCALHOST));
        records.update("own.bench.test", |e| {
            e.a = vec![Ipv4Addr::new(192, 0, 2, 1)]
        });

        let (code, answers) = records.answer(&name("x1.Bench.TEST."), RecordType::A);
        assert_eq!(code, ResponseCode::NoError);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].data, RData::A(Ipv4Addr::LOCALHOST.into()));
        // Other types: the name exists, with no records of that type.
        let (code, answers) = records.answer(&name("x1.bench.test."), RecordType::AAAA);
        assert_eq!((code, answers.len()), (ResponseCode::NoError, 0));
        // A name of its own keeps its records.
        let (_, answers) = records.answer(&name("own.bench.test."), RecordType::A);
        assert_eq!(
            answers[0].data,
            RData::A(Ipv4Addr::new(192, 0, 2, 1).into())
        );
        // Not under the suffix, or only sharing its last characters.
        for other in ["xbench.test.", "example.com."] {
            let (code, _) = records.answer(&name(other), RecordType::A);
            assert_eq!(code, ResponseCode::NXDomain, "{other}");
        }
    }
}
