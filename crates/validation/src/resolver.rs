//! The validator's DNS client: uncached lookups, answers classified for problem details, and the
//! address policy applied to every A/AAAA answer (including those reqwest asks for on redirects).
//!
//! At most [`MAX_ADDRESSES_PER_NAME`] allowed addresses of a name are ever returned, so a name
//! with many silent addresses costs at most that many connection attempts.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use acme_core::problem::{Problem, ProblemType};
use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::{RData, Record, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

use crate::address_policy::AddressPolicy;
use crate::error::Error;
use crate::failure::Failure;
use crate::settings::ValidationSettings;

/// Longest time one DNS query may take, whatever the attempt timeout.
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many CNAME-only answers are chased by re-querying the target.
const MAX_CNAME_HOPS: usize = 8;

/// How many addresses of one name are tried: the first allowed IPv6 and the first allowed IPv4
/// address (IPv6 first), or the first two of the only family present. One of each family covers
/// the common broken-IPv6 case as Boulder does; more would let one name multiply the work of an
/// attempt, since addresses are tried one after the other.
pub const MAX_ADDRESSES_PER_NAME: usize = 2;

/// The outcome of one query, in the terms problem details need.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// Records of the asked type (CNAMEs already chased).
    Records(Vec<RData>),
    /// The name does not exist.
    NxDomain,
    /// The name exists but has no records of this type.
    NoData,
    /// The query failed (timeout, SERVFAIL, REFUSED, network error).
    Failed(String),
}

/// An uncached DNS resolver with the target-address policy.
#[derive(Clone)]
pub(crate) struct DnsClient {
    resolver: TokioResolver,
    policy: Arc<AddressPolicy>,
    /// The nameservers asked, as the validation evidence names them (hickory does not say
    /// which of them answered).
    servers: Vec<String>,
}

impl fmt::Debug for DnsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsClient")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl DnsClient {
    pub(crate) fn new(
        settings: &ValidationSettings,
        policy: Arc<AddressPolicy>,
    ) -> Result<Self, Error> {
        let mut opts = ResolverOpts::default();
        // Validation must see the zone as it is now: a cached NXDOMAIN from a first, premature
        // attempt would otherwise fail every retry.
        opts.cache_size = 0;
        opts.positive_max_ttl = Some(Duration::ZERO);
        opts.negative_max_ttl = Some(Duration::ZERO);
        opts.use_hosts_file = ResolveHosts::Never;
        // A quarter of the attempt per query (two attempts each), so a dead nameserver is
        // reported as a DNS problem before the attempt's own deadline ends everything.
        opts.timeout = (settings.timeout / 4).min(MAX_QUERY_TIMEOUT);
        opts.attempts = 2;
        opts.try_tcp_on_error = true;
        opts.preserve_intermediates = true;

        let builder = if settings.dns_servers.is_empty() {
            TokioResolver::builder_tokio().map_err(Error::Resolver)?
        } else {
            let servers = settings
                .dns_servers
                .iter()
                .map(|addr| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = addr.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = addr.port();
                    NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
                })
                .collect();
            Resolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                TokioRuntimeProvider::default(),
            )
        };
        let resolver = builder
            .with_options(opts)
            .build()
            .map_err(Error::Resolver)?;
        let servers = if settings.dns_servers.is_empty() {
            vec!["the system resolvers (/etc/resolv.conf)".to_owned()]
        } else {
            settings
                .dns_servers
                .iter()
                .map(|addr| format!("resolver {addr}"))
                .collect()
        };
        Ok(Self {
            resolver,
            policy,
            servers,
        })
    }

    /// The nameservers this client asks, for the validation evidence.
    pub(crate) fn servers(&self) -> Vec<String> {
        self.servers.clone()
    }

    /// Queries `name` (absolute; a trailing dot is optional) for `record_type`.
    ///
    /// A CNAME-only answer is chased by re-querying its target, a bounded number of times, so a
    /// server that does not return the whole chain still works.
    pub(crate) async fn query(&self, name: &str, record_type: RecordType) -> Answer {
        let mut current = absolute(name);
        for _ in 0..=MAX_CNAME_HOPS {
            let records: Vec<Record> =
                match self.resolver.lookup(current.as_str(), record_type).await {
                    Ok(lookup) => lookup.answers().to_vec(),
                    Err(error) => return classify(&error),
                };
            let wanted: Vec<RData> = records
                .iter()
                .filter(|r| r.record_type() == record_type)
                .map(|r| r.data.clone())
                .collect();
            if !wanted.is_empty() || record_type == RecordType::CNAME {
                return Answer::Records(wanted);
            }
            let next = records.iter().rev().find_map(|r| match &r.data {
                RData::CNAME(target) => Some(target.0.to_ascii()),
                _ => None,
            });
            match next {
                Some(target) => current = absolute(&target),
                None => return Answer::NoData,
            }
        }
        Answer::Failed(format!("more than {MAX_CNAME_HOPS} CNAME hops"))
    }

    /// Resolves A and AAAA for `name` and keeps at most [`MAX_ADDRESSES_PER_NAME`] of the
    /// addresses the policy allows, IPv6 first.
    ///
    /// A name that resolves only to refused addresses is a `connection` problem (the CA will not
    /// connect there), not a `dns` one: DNS worked. It is definite, whereas a name that does not
    /// resolve (NXDOMAIN, no address, SERVFAIL, timeout) is transient (records may be published
    /// later, but the verdict stands: the target has no address now).
    pub(crate) async fn lookup_ips(&self, name: &str) -> Result<Vec<IpAddr>, Failure> {
        let (v4, v6) = tokio::join!(
            self.query(name, RecordType::A),
            self.query(name, RecordType::AAAA)
        );
        let mut found = Vec::new();
        for answer in [&v6, &v4] {
            if let Answer::Records(records) = answer {
                found.extend(records.iter().filter_map(|r| match r {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
                    _ => None,
                }));
            }
        }
        if found.is_empty() {
            let detail = match (&v4, &v6) {
                (Answer::NxDomain, Answer::NxDomain) => format!(
                    "DNS problem: NXDOMAIN looking up A for {name} - check that a DNS record exists for this domain"
                ),
                (Answer::Failed(why), _) => format!("DNS problem: {why} looking up A for {name}"),
                (_, Answer::Failed(why)) => {
                    format!("DNS problem: {why} looking up AAAA for {name}")
                }
                _ => format!("DNS problem: no A or AAAA records found for {name}"),
            };
            return Err(Failure::transient(Problem::new(ProblemType::Dns, detail)));
        }
        let mut allowed = Vec::new();
        let mut refused = Vec::new();
        for ip in found {
            match self.policy.refusal(ip) {
                None => allowed.push(ip),
                Some(why) => refused.push(format!("{ip} ({why})")),
            }
        }
        if allowed.is_empty() {
            return Err(Failure::definite(Problem::new(
                ProblemType::Connection,
                format!(
                    "{name} resolves only to addresses this CA does not connect to: {}; publish a public address for it",
                    refused.join(", ")
                ),
            )));
        }
        Ok(select(allowed))
    }
}

/// Picks the addresses to try from `allowed` (IPv6 first, answer order within a family): one of
/// each family first, then the rest, up to [`MAX_ADDRESSES_PER_NAME`].
fn select(allowed: Vec<IpAddr>) -> Vec<IpAddr> {
    let first_v6 = allowed.iter().position(IpAddr::is_ipv6);
    let first_v4 = allowed.iter().position(IpAddr::is_ipv4);
    let firsts: Vec<usize> = first_v6.into_iter().chain(first_v4).collect();
    let rest = (0..allowed.len()).filter(|i| !firsts.contains(i));
    let mut picked: Vec<IpAddr> = firsts
        .iter()
        .copied()
        .chain(rest)
        .take(MAX_ADDRESSES_PER_NAME)
        .map(|i| allowed[i])
        .collect();
    picked.sort_by_key(IpAddr::is_ipv4);
    picked
}

fn absolute(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

fn classify(error: &NetError) -> Answer {
    if error.is_nx_domain() {
        return Answer::NxDomain;
    }
    if error.is_no_records_found() {
        return Answer::NoData;
    }
    let why = match error {
        NetError::Timeout => "query timed out".to_owned(),
        NetError::Dns(DnsError::ResponseCode(code)) => format!("the server answered {code}"),
        other => other.to_string(),
    };
    Answer::Failed(why)
}

/// The reqwest resolver: the same lookups and policy, so redirect targets are held to them too.
#[derive(Debug, Clone)]
pub(crate) struct PolicyResolver {
    dns: DnsClient,
}

impl PolicyResolver {
    pub(crate) fn new(dns: DnsClient) -> Arc<Self> {
        Arc::new(Self { dns })
    }
}

/// A resolution refused or failed by [`DnsClient::lookup_ips`], carried through reqwest's error
/// chain so the caller can report the original problem.
#[derive(Debug)]
pub(crate) struct ResolveProblem(pub(crate) Failure);

impl fmt::Display for ResolveProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.problem.detail)
    }
}

impl std::error::Error for ResolveProblem {}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let dns = self.dns.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            match dns.lookup_ips(&host).await {
                Ok(ips) => {
                    let addrs: reqwest::dns::Addrs =
                        Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
                    Ok(addrs)
                }
                Err(failure) => {
                    Err(Box::new(ResolveProblem(failure))
                        as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn one_address_of_each_family_is_preferred() {
        assert_eq!(
            select(ips(&[
                "2001:db8::1",
                "2001:db8::2",
                "192.0.2.1",
                "192.0.2.2"
            ])),
            ips(&["2001:db8::1", "192.0.2.1"])
        );
        assert_eq!(
            select(ips(&["2001:db8::1", "192.0.2.1"])),
            ips(&["2001:db8::1", "192.0.2.1"])
        );
    }

    #[test]
    fn a_single_family_gives_its_first_addresses() {
        let many: Vec<String> = (2..12).map(|i| format!("127.0.0.{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(select(ips(&many)), ips(&["127.0.0.2", "127.0.0.3"]));
        assert_eq!(
            select(ips(&["2001:db8::1", "2001:db8::2", "2001:db8::3"])),
            ips(&["2001:db8::1", "2001:db8::2"])
        );
        assert_eq!(select(ips(&["192.0.2.1"])), ips(&["192.0.2.1"]));
        const { assert!(MAX_ADDRESSES_PER_NAME >= 2) };
    }
}
