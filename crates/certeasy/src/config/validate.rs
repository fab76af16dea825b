//! Checks that run after the file deserialized: values of the right type that still cannot work.
//!
//! Every check runs and every failure is collected, so an operator sees all problems at once.

use std::net::{IpAddr, SocketAddr};

use acme_core::duration::ConfigDuration;
use issuance::IssuerName;
use tracing_subscriber::EnvFilter;
use url::Url;

use super::model::Config;
use super::model::ProfileConfig;

/// The most CRL shards: each is a CRL rebuilt and stored on its own, and a certificate's
/// distribution point names one by number.
const MAX_CRL_SHARDS: u16 = 1024;

/// The longest `validation.caa-recheck-after`: a CAA check vouches for issuance for 8 hours at
/// most (CA/Browser Forum Baseline Requirements §3.2.2.8), so a longer setting would sign on a
/// lookup the rules no longer accept.
const MAX_CAA_RECHECK_AFTER: std::time::Duration = std::time::Duration::from_secs(8 * 3600);

/// A semantic problem, by key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issue {
    /// The key the problem is reported under.
    pub(crate) path: String,
    /// A related key to point at instead when `path` is not written in the file (for example
    /// the value it is compared against).
    pub(crate) related: Option<String>,
    pub(crate) message: String,
}

/// Runs every check on `config`.
pub(crate) fn check(config: &Config) -> Vec<Issue> {
    let mut checker = Checker::default();
    checker.top_level(config);
    checker.server(config);
    checker.database(config);
    checker.ca_and_issuance(config);
    checker.acme(config);
    checker.identifiers(config);
    checker.validation(config);
    checker.logging(config);
    checker.rate_limiting(config);
    checker.redis(config);
    checker.zombie_pausing(config);
    checker.crl(config);
    checker.test_mode(config);
    checker.issues
}

#[derive(Default)]
struct Checker {
    issues: Vec<Issue>,
}

impl Checker {
    fn fail(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            path: path.into(),
            related: None,
            message: message.into(),
        });
    }

    fn fail_related(&mut self, path: &str, related: &str, message: impl Into<String>) {
        self.issues.push(Issue {
            path: path.to_owned(),
            related: Some(related.to_owned()),
            message: message.into(),
        });
    }

    fn positive_duration(&mut self, path: &str, value: ConfigDuration) {
        if value.std().is_zero() {
            self.fail(path, "must be longer than zero");
        }
    }

    fn at_least_one(&mut self, path: &str, value: u64) {
        if value == 0 {
            self.fail(path, "must be at least 1");
        }
    }

    fn non_empty(&mut self, path: &str, value: &str) {
        if value.trim().is_empty() {
            self.fail(path, "must not be empty");
        }
    }

    /// A URL given to people or clients (`acme.website`, `acme.terms-of-service`).
    fn web_url(&mut self, path: &str, value: &str) {
        if value.trim().is_empty() {
            return;
        }
        match Url::parse(value.trim()) {
            Err(error) => self.fail(path, format!("{value:?} is not a valid URL: {error}")),
            Ok(url) if !matches!(url.scheme(), "http" | "https") => {
                self.fail(
                    path,
                    format!("{value:?} must be an http:// or https:// URL"),
                );
            }
            Ok(url) if url.host().is_none() => {
                self.fail(path, format!("{value:?} has no host"));
            }
            Ok(_) => {}
        }
    }

    fn dns_name(&mut self, path: &str, value: &str) {
        if value.starts_with("*.") {
            self.fail(
                path,
                format!("{value:?}: write the domain without \"*.\"; subdomains are included"),
            );
        } else if let Err(reason) = check_dns_name(value) {
            self.fail(path, format!("{value:?} is not a DNS name: {reason}"));
        }
    }

    fn top_level(&mut self, config: &Config) {
        if config.data_dir.as_os_str().is_empty() {
            self.fail(
                "data-dir",
                "must not be empty: the database and CA keys are stored there",
            );
        }
    }

    fn server(&mut self, config: &Config) {
        let server = &config.server;
        if listeners_overlap(server.listen, server.admin_listen) {
            self.fail_related(
                "server.admin-listen",
                "server.listen",
                format!(
                    "{} overlaps server.listen ({}): the admin API must never be served on the ACME listener",
                    server.admin_listen, server.listen
                ),
            );
        }
        let external = server.external_url.trim();
        if !external.is_empty() {
            match Url::parse(external) {
                Err(error) => {
                    self.fail(
                        "server.external-url",
                        format!("{external:?} is not a valid URL: {error}"),
                    );
                }
                Ok(url) if url.scheme() != "https" => self.fail(
                    "server.external-url",
                    format!("{external:?} must be an https:// URL: ACME is served over TLS only"),
                ),
                Ok(url) if url.host().is_none() => {
                    self.fail("server.external-url", format!("{external:?} has no host"));
                }
                Ok(url) if url.query().is_some() || url.fragment().is_some() => self.fail(
                    "server.external-url",
                    format!("{external:?} must not have a query or a fragment"),
                ),
                Ok(_) => {}
            }
        }
        if server.tls_certificate.is_none() && server.tls_names.is_empty() {
            self.fail(
                "server.tls-names",
                "must name at least one DNS name or IP address when no server.tls-certificate is given",
            );
        }
        for (index, name) in server.tls_names.iter().enumerate() {
            let dns_name = name.strip_prefix("*.").unwrap_or(name);
            if name.parse::<IpAddr>().is_err()
                && let Err(reason) = check_dns_name(dns_name)
            {
                self.fail(
                    format!("server.tls-names[{index}]"),
                    format!("{name:?} is neither an IP address nor a DNS name: {reason}"),
                );
            }
        }
        match (&server.tls_certificate, &server.tls_private_key) {
            (Some(_), None) => self.fail(
                "server.tls-certificate",
                "is set but server.tls-private-key is not: give both or neither",
            ),
            (None, Some(_)) => self.fail(
                "server.tls-private-key",
                "is set but server.tls-certificate is not: give both or neither",
            ),
            _ => {}
        }
        if server.max_body_bytes < 1024 {
            self.fail(
                "server.max-body-bytes",
                format!(
                    "{} is too small for any ACME request: use at least 1024",
                    server.max_body_bytes
                ),
            );
        }
        self.positive_duration("server.request-timeout", server.request_timeout);
        self.listener_limits(server);
        if !(1..=128).contains(&server.ipv6_prefix_length) {
            self.fail(
                "server.ipv6-prefix-length",
                format!(
                    "{} is not a prefix length between 1 and 128",
                    server.ipv6_prefix_length
                ),
            );
        }
    }

    /// The connection limits of every listener (see `listener.rs`).
    fn listener_limits(&mut self, server: &super::model::ServerConfig) {
        for (path, value) in [
            (
                "server.tls-certificate-lifetime",
                server.tls_certificate_lifetime,
            ),
            ("server.tls-handshake-timeout", server.tls_handshake_timeout),
            ("server.header-read-timeout", server.header_read_timeout),
            ("server.idle-timeout", server.idle_timeout),
            (
                "server.http2-keep-alive-interval",
                server.http2_keep_alive_interval,
            ),
            (
                "server.http2-keep-alive-timeout",
                server.http2_keep_alive_timeout,
            ),
        ] {
            self.positive_duration(path, value);
        }
        self.at_least_one("server.max-connections", server.max_connections as u64);
        self.at_least_one(
            "server.max-connections-per-ip",
            server.max_connections_per_ip as u64,
        );
        self.at_least_one(
            "server.http2-max-concurrent-streams",
            u64::from(server.http2_max_concurrent_streams),
        );
        if server.http2_max_header_list_size < 1024 {
            self.fail(
                "server.http2-max-header-list-size",
                format!(
                    "{} is too small: at least 1024 bytes",
                    server.http2_max_header_list_size
                ),
            );
        }
    }

    fn database(&mut self, config: &Config) {
        let database = &config.database;
        let url = database.url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            if let Err(error) = Url::parse(url) {
                self.fail(
                    "database.url",
                    format!("is not a valid PostgreSQL URL: {error}"),
                );
            }
        } else if !url.is_empty() && !url.starts_with("sqlite:") {
            self.fail(
                "database.url",
                format!(
                    "{} must start with sqlite:, postgres:// or postgresql://, or be empty",
                    shown_url(url)
                ),
            );
        }
        self.at_least_one(
            "database.max-connections",
            u64::from(database.max_connections),
        );
        self.positive_duration("database.prune-interval", database.prune_interval);
        if !(1..=storage::MAX_PRUNE_BATCH).contains(&database.prune_batch) {
            self.fail(
                "database.prune-batch",
                format!("must be between 1 and {}", storage::MAX_PRUNE_BATCH),
            );
        }
    }

    fn ca_and_issuance(&mut self, config: &Config) {
        let ca = &config.ca;
        self.non_empty("ca.organization", &ca.organization);
        self.non_empty("ca.root-common-name", &ca.root_common_name);
        self.non_empty("ca.intermediate-common-name", &ca.intermediate_common_name);
        self.positive_duration("ca.root-validity", ca.root_validity);
        self.positive_duration("ca.intermediate-validity", ca.intermediate_validity);
        if ca.intermediate_validity > ca.root_validity {
            self.fail_related(
                "ca.intermediate-validity",
                "ca.root-validity",
                format!(
                    "{} is longer than ca.root-validity ({}): the intermediate cannot outlive the root",
                    ca.intermediate_validity, ca.root_validity
                ),
            );
        }
        let existing = &ca.existing;
        let has_key = existing.private_key.is_some() || existing.pkcs11.is_some();
        match (&existing.certificate, has_key) {
            (Some(_), false) => self.fail(
                "ca.existing.certificate",
                "is set but ca.existing.private-key (or ca.existing.pkcs11) is not: give both or neither",
            ),
            (Some(_), true) => {
                if let Err((path, message)) = super::pkcs11::key_source(
                    "ca.existing",
                    existing.private_key.as_ref(),
                    existing.pkcs11.as_ref(),
                ) {
                    self.fail(path, message);
                }
            }
            (None, true) => self.fail(
                if existing.private_key.is_some() {
                    "ca.existing.private-key"
                } else {
                    "ca.existing.pkcs11"
                },
                "is set but ca.existing.certificate is not: give both or neither",
            ),
            (None, false) => {}
        }
        if let Some(block) = &existing.pkcs11 {
            for (path, message) in block.problems("ca.existing.pkcs11") {
                self.fail(path, message);
            }
        }
        if existing.chain.is_some() && existing.certificate.is_none() {
            self.fail(
                "ca.existing.chain",
                "is set but ca.existing.certificate is not",
            );
        }
        if !existing.alternate_chains.is_empty() && existing.certificate.is_none() {
            self.fail(
                "ca.existing.alternate-chains",
                "is set but ca.existing.certificate is not: a generated CA has no cross-signed copies",
            );
        }
        for (path, message) in super::issuers::problems(&ca.issuers, &ca.active_issuer) {
            self.fail(path, message);
        }

        let issuance = &config.issuance;
        self.positive_duration("issuance.default-validity", issuance.default_validity);
        if issuance.max_validity < issuance.default_validity {
            self.fail_related(
                "issuance.max-validity",
                "issuance.default-validity",
                format!(
                    "{} is shorter than issuance.default-validity ({})",
                    issuance.max_validity, issuance.default_validity
                ),
            );
        }
        if !existing.is_configured() && issuance.max_validity > ca.intermediate_validity {
            self.fail_related(
                "issuance.max-validity",
                "ca.intermediate-validity",
                format!(
                    "{} is longer than ca.intermediate-validity ({}): certificates cannot outlive their issuer",
                    issuance.max_validity, ca.intermediate_validity
                ),
            );
        }
        if !issuance.default_validity.std().is_zero()
            && issuance.backdate >= issuance.default_validity
        {
            self.fail_related(
                "issuance.backdate",
                "issuance.default-validity",
                format!(
                    "{} is not shorter than issuance.default-validity ({})",
                    issuance.backdate, issuance.default_validity
                ),
            );
        }
        self.profiles(config);
    }

    /// `issuance.profiles`: each profile's lifetimes are checked as resolved (a left-out
    /// `validity` is `issuance.default-validity`), and reported at the key that decides them.
    /// What a profile inherits unchanged was checked once under `issuance.*`.
    fn profiles(&mut self, config: &Config) {
        let issuance = &config.issuance;
        let ca = &config.ca;
        if issuance.profiles.is_empty() {
            self.fail("issuance.profiles", "must define at least one profile");
        } else if !issuance.profiles.contains_key(&issuance.default_profile) {
            let names: Vec<&str> = issuance.profiles.keys().map(String::as_str).collect();
            self.fail(
                "issuance.default-profile",
                format!(
                    "{:?} is not one of issuance.profiles ({})",
                    issuance.default_profile,
                    names.join(", ")
                ),
            );
        }
        for (name, profile) in &issuance.profiles {
            let at = |key: &str| format!("issuance.profiles.{name}.{key}");
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
                self.fail(
                    format!("issuance.profiles.{name}"),
                    "a profile name is printable ASCII without spaces",
                );
            }
            self.non_empty(&at("description"), &profile.description);
            let (validity, validity_key) = match profile.validity {
                Some(v) => (v, at("validity")),
                None => (
                    issuance.default_validity,
                    "issuance.default-validity".to_owned(),
                ),
            };
            let (max, max_key) = match profile.max_validity {
                Some(v) => (v, at("max-validity")),
                None => (issuance.max_validity, "issuance.max-validity".to_owned()),
            };
            if let Some(v) = profile.validity {
                self.positive_duration(&at("validity"), v);
            }
            if max < validity && (profile.validity.is_some() || profile.max_validity.is_some()) {
                self.fail_related(
                    &max_key,
                    &validity_key,
                    format!("{max} is shorter than {validity_key} ({validity})"),
                );
            }
            if profile.max_validity.is_some()
                && !ca.existing.is_configured()
                && max > ca.intermediate_validity
            {
                self.fail_related(
                    &max_key,
                    "ca.intermediate-validity",
                    format!(
                        "{max} is longer than ca.intermediate-validity ({}): certificates cannot outlive their issuer",
                        ca.intermediate_validity
                    ),
                );
            }
            if profile.validity.is_some()
                && !validity.std().is_zero()
                && issuance.backdate >= validity
            {
                self.fail_related(
                    "issuance.backdate",
                    &validity_key,
                    format!(
                        "{} is not shorter than {validity_key} ({validity})",
                        issuance.backdate
                    ),
                );
            }
            for (key, empty) in [
                ("key-usages", profile.key_usages.is_empty()),
                (
                    "extended-key-usages",
                    profile.extended_key_usages.is_empty(),
                ),
                ("identifier-types", profile.identifier_types.is_empty()),
                ("key-types", profile.key_types.is_empty()),
            ] {
                if empty {
                    self.fail(at(key), "must list at least one value");
                }
            }
            self.profile_validation(config, name, profile);
        }
    }

    /// A profile's validation policy: lifetimes longer than zero, a name limit within the
    /// CA-wide one (checked first, at new-order), account ids that can be ids, and an issuer
    /// that is loaded (the implicit `default` or an entry of `ca.issuers`).
    fn profile_validation(&mut self, config: &Config, name: &str, profile: &ProfileConfig) {
        let at = |key: &str| format!("issuance.profiles.{name}.{key}");
        for (key, lifetime) in [
            (
                "pending-authorization-lifetime",
                profile.pending_authorization_lifetime,
            ),
            (
                "valid-authorization-lifetime",
                profile.valid_authorization_lifetime,
            ),
            ("order-lifetime", profile.order_lifetime),
        ] {
            if let Some(lifetime) = lifetime {
                self.positive_duration(&at(key), lifetime);
            }
        }
        let global = config.acme.max_identifiers_per_order;
        if profile.max_identifiers_per_order > global {
            self.fail_related(
                &at("max-identifiers-per-order"),
                "acme.max-identifiers-per-order",
                format!(
                    "{} is more than acme.max-identifiers-per-order ({global}), which every order is held to",
                    profile.max_identifiers_per_order
                ),
            );
        }
        for (index, id) in profile.accounts.iter().enumerate() {
            if *id < 1 {
                self.fail(
                    format!("{}[{index}]", at("accounts")),
                    format!("{id} is not an account id (1 or more)"),
                );
            }
        }
        for (index, kid) in profile.eab_key_ids.iter().enumerate() {
            if kid.trim().is_empty() {
                self.fail(format!("{}[{index}]", at("eab-key-ids")), "is empty");
            }
        }
        if !profile.issuer.is_empty() {
            match IssuerName::new(&profile.issuer) {
                Err(e) => self.fail(at("issuer"), e),
                Ok(issuer) => {
                    let loaded = issuer.is_implicit()
                        || config.ca.issuers.iter().any(|i| i.name == profile.issuer);
                    if !loaded {
                        let names: Vec<&str> = std::iter::once(IssuerName::DEFAULT)
                            .chain(config.ca.issuers.iter().map(|i| i.name.as_str()))
                            .collect();
                        self.fail(
                            at("issuer"),
                            format!(
                                "{:?} is not a loaded issuer ({}): add it to ca.issuers first",
                                profile.issuer,
                                names.join(", ")
                            ),
                        );
                    }
                }
            }
        }
    }

    fn acme(&mut self, config: &Config) {
        let acme = &config.acme;
        self.web_url("acme.terms-of-service", &acme.terms_of_service);
        self.web_url("acme.website", &acme.website);
        for (index, issuer) in acme.caa_identities.iter().enumerate() {
            self.dns_name(&format!("acme.caa-identities[{index}]"), issuer);
        }
        self.positive_duration("acme.order-lifetime", acme.order_lifetime);
        self.positive_duration("acme.authorization-lifetime", acme.authorization_lifetime);
        self.positive_duration(
            "acme.valid-authorization-lifetime",
            acme.valid_authorization_lifetime,
        );
        self.positive_duration("acme.nonce-lifetime", acme.nonce_lifetime);
        self.positive_duration("acme.retry-after", acme.retry_after);
        self.positive_duration(
            "acme.renewal-info-retry-after",
            acme.renewal_info_retry_after,
        );
        if acme.renewal_window_start_percent >= acme.renewal_window_end_percent {
            self.fail_related(
                "acme.renewal-window-start-percent",
                "acme.renewal-window-end-percent",
                "the renewal window must start before it ends",
            );
        }
        if u16::from(acme.renewal_window_end_percent) + u16::from(acme.renewal_jitter_percent) > 100
        {
            self.fail_related(
                "acme.renewal-jitter-percent",
                "acme.renewal-window-end-percent",
                "the window's end plus the jitter may be at most 100 (percent of the lifetime)",
            );
        }
        self.at_least_one("acme.orders-per-page", acme.orders_per_page as u64);
        self.at_least_one(
            "acme.max-identifiers-per-order",
            acme.max_identifiers_per_order as u64,
        );
    }

    fn identifiers(&mut self, config: &Config) {
        let identifiers = &config.identifiers;
        for (index, domain) in identifiers.allow_domains.iter().enumerate() {
            self.dns_name(&format!("identifiers.allow-domains[{index}]"), domain);
        }
        for (index, domain) in identifiers.deny_domains.iter().enumerate() {
            self.dns_name(&format!("identifiers.deny-domains[{index}]"), domain);
        }
    }

    fn validation(&mut self, config: &Config) {
        self.dns_persist(config);
        let validation = &config.validation;
        for (index, server) in validation.dns_servers.iter().enumerate() {
            if server.port() == 0 {
                self.fail(
                    format!("validation.dns-servers[{index}]"),
                    "port 0 is not a resolver port",
                );
            }
        }
        if validation.http_port == 0 {
            self.fail("validation.http-port", "port 0 cannot be connected to");
        }
        if validation.tls_alpn_port == 0 {
            self.fail("validation.tls-alpn-port", "port 0 cannot be connected to");
        }
        self.positive_duration("validation.timeout", validation.timeout);
        self.at_least_one("validation.workers", validation.workers as u64);
        self.at_least_one(
            "validation.max-attempts",
            u64::from(validation.max_attempts),
        );
        if validation.job_lease.std() < std::time::Duration::from_secs(1) {
            self.fail("validation.job-lease", "must be at least 1s");
        }
        // Due times are stored in whole seconds.
        if validation.retry_backoff.std() < std::time::Duration::from_secs(1) {
            self.fail("validation.retry-backoff", "must be at least 1s");
        }
        self.positive_duration("validation.retry-window", validation.retry_window);
        // A first retry that may never start would leave `retries` saying something untrue.
        if validation.retries > 0 && validation.retry_backoff.std() > validation.retry_window.std()
        {
            self.fail(
                "validation.retry-backoff",
                "must not exceed validation.retry-window, or no retry can ever start (set retries: 0 to turn retries off)",
            );
        }
        if validation.caa_recheck_after.std() > MAX_CAA_RECHECK_AFTER {
            self.fail(
                "validation.caa-recheck-after",
                format!(
                    "{} is longer than 8h: the Baseline Requirements (§3.2.2.8) let a CAA check vouch for issuance for 8 hours at most",
                    validation.caa_recheck_after
                ),
            );
        }
    }

    /// dns-persist-01's issuer domain names (draft-ietf-acme-dns-persist-02 §3.1, §3.2): when
    /// it is on, one to ten domain names, each among `acme.caa-identities` when those are set.
    fn dns_persist(&mut self, config: &Config) {
        let v = &config.validation;
        let key = "validation.dns-persist-issuer-domain-names";
        for (index, name) in v.dns_persist_issuer_domain_names.iter().enumerate() {
            self.dns_name(&format!("{key}[{index}]"), name);
        }
        if !v.dns_persist_01 {
            return;
        }
        let names = v.dns_persist_issuers(&config.acme.caa_identities);
        if names.is_empty() {
            self.fail_related(
                key,
                "validation.dns-persist-01",
                "dns-persist-01 is on but names no issuer domain name: list them here or set acme.caa-identities",
            );
        } else if names.len() > validation::MAX_ISSUER_DOMAIN_NAMES {
            self.fail(
                key,
                format!(
                    "at most {} issuer domain names (draft-ietf-acme-dns-persist-02 §3.1), not {}",
                    validation::MAX_ISSUER_DOMAIN_NAMES,
                    names.len()
                ),
            );
        }
        let caa: Vec<String> = config
            .acme
            .caa_identities
            .iter()
            .map(|n| n.trim().trim_end_matches('.').to_ascii_lowercase())
            .collect();
        if !caa.is_empty() {
            for name in names.iter().filter(|n| !caa.contains(n)) {
                self.fail_related(
                    key,
                    "acme.caa-identities",
                    format!(
                        "{name:?} is not one of acme.caa-identities: a CA that announces CAA identities names only those (draft-ietf-acme-dns-persist-02 §3.2)"
                    ),
                );
            }
        }
    }

    fn test_mode(&mut self, config: &Config) {
        let t = &config.test_mode;
        if t.http_port == 0 {
            self.fail("test-mode.http-port", "port 0 cannot be connected to");
        }
        if t.tls_alpn_port == 0 {
            self.fail("test-mode.tls-alpn-port", "port 0 cannot be connected to");
        }
        for (index, server) in t.dns_servers.iter().enumerate() {
            if server.port() == 0 {
                self.fail(
                    format!("test-mode.dns-servers[{index}]"),
                    "port 0 is not a resolver port",
                );
            }
        }
        if t.reject_nonces_percent > 100 {
            self.fail(
                "test-mode.reject-nonces-percent",
                format!("{} is not a percentage (0 to 100)", t.reject_nonces_percent),
            );
        }
        if let Some(lifetime) = t.cert_lifetime {
            self.positive_duration("test-mode.cert-lifetime", lifetime);
        }
        if t.enabled && config.ca.existing.is_configured() {
            self.fail_related(
                "test-mode.enabled",
                "ca.existing.certificate",
                "test mode creates its own throw-away CA: remove ca.existing",
            );
        }
        for refusal in config.test_mode_refusals() {
            self.fail_related(refusal.key, "test-mode.enabled", refusal.reason);
        }
    }

    fn zombie_pausing(&mut self, config: &Config) {
        let z = &config.zombie_pausing;
        if !z.enabled {
            return;
        }
        self.at_least_one(
            "zombie-pausing.max-consecutive-failures",
            z.max_consecutive_failures,
        );
        self.positive_duration("zombie-pausing.refill-per", z.refill_per);
        self.positive_duration(
            "zombie-pausing.unpause-link-lifetime",
            z.unpause_link_lifetime,
        );
        let base = z.unpause_base_url.trim();
        if !(base.is_empty() || base.starts_with("https://") || base.starts_with("http://")) {
            self.fail("zombie-pausing.unpause-base-url", "must be an http(s) URL");
        }
    }

    fn crl(&mut self, config: &Config) {
        let c = &config.crl;
        if !c.enabled {
            return;
        }
        if !(1..=MAX_CRL_SHARDS).contains(&c.shards) {
            self.fail(
                "crl.shards",
                format!("must be between 1 and {MAX_CRL_SHARDS}"),
            );
        }
        self.positive_duration("crl.update-interval", c.update_interval);
        if c.lifetime.0 <= c.update_interval.0 {
            self.fail_related(
                "crl.lifetime",
                "crl.update-interval",
                "must be longer than crl.update-interval, or a CRL would expire before the next one is published",
            );
        }
        let base = c.base_url.trim();
        if !base.is_empty() {
            match Url::parse(base) {
                Ok(url) if url.scheme() == "http" || url.scheme() == "https" => {}
                _ => self.fail(
                    "crl.base-url",
                    "must be an http URL (relying parties fetch CRLs over plain HTTP)",
                ),
            }
        }
        if c.listen == config.server.listen || c.listen == config.server.admin_listen {
            self.fail(
                "crl.listen",
                "must differ from server.listen and server.admin-listen",
            );
        }
    }

    fn logging(&mut self, config: &Config) {
        let level = config.logging.level.trim();
        if level.is_empty() {
            self.fail(
                "logging.level",
                "must not be empty; \"info\" is the usual value",
            );
        } else if let Err(error) = EnvFilter::builder().parse(level) {
            self.fail(
                "logging.level",
                format!("{level:?} is not a tracing filter: {error}"),
            );
        }
    }

    fn rate_limiting(&mut self, config: &Config) {
        let limits = &config.rate_limiting;
        let global = &limits.global;
        if global.enabled {
            self.at_least_one(
                "rate-limiting.global.requests-per-minute",
                global.requests_per_minute,
            );
            self.at_least_one("rate-limiting.global.burst", global.burst);
        }
        let accounts = &limits.account_creation;
        if accounts.enabled {
            self.at_least_one(
                "rate-limiting.account-creation.per-ip-per-hour",
                accounts.per_ip_per_hour,
            );
            self.at_least_one("rate-limiting.account-creation.burst", accounts.burst);
        }
        let orders = &limits.order_creation;
        if orders.enabled {
            self.at_least_one(
                "rate-limiting.order-creation.orders-per-account-per-hour",
                orders.orders_per_account_per_hour,
            );
            self.at_least_one(
                "rate-limiting.order-creation.order-burst",
                orders.order_burst,
            );
            self.at_least_one(
                "rate-limiting.order-creation.san-budget-per-account-per-hour",
                orders.san_budget_per_account_per_hour,
            );
        }
        for (name, limit) in [
            ("duplicate-certificate", &limits.duplicate_certificate),
            ("failed-validation", &limits.failed_validation),
        ] {
            self.positive_duration(&format!("rate-limiting.{name}.window"), limit.window);
            if limit.enabled {
                self.at_least_one(
                    &format!("rate-limiting.{name}.max-per-window"),
                    limit.max_per_window,
                );
            }
        }
        let pending = &limits.pending_authorizations;
        if pending.enabled {
            self.at_least_one("rate-limiting.pending-authorizations.max", pending.max);
        }
    }

    fn redis(&mut self, config: &Config) {
        let redis = &config.redis;
        for (index, shard) in redis.shards.iter().enumerate() {
            let path = format!("redis.shards[{index}]");
            let shown = shown_url(shard);
            match Url::parse(shard.trim()) {
                Err(error) => self.fail(path, format!("{shown} is not a valid URL: {error}")),
                Ok(url) if !matches!(url.scheme(), "redis" | "rediss") => {
                    self.fail(path, format!("{shown} must be a redis:// or rediss:// URL"));
                }
                Ok(url) if url.host().is_none() => self.fail(path, format!("{shown} has no host")),
                Ok(_) => {
                    if redis.shards[..index]
                        .iter()
                        .any(|earlier| earlier.trim() == shard.trim())
                    {
                        self.fail(path, format!("{shown} is listed twice"));
                    }
                }
            }
        }
        self.positive_duration("redis.timeout", redis.timeout);
    }
}

/// A URL as a problem report may quote it: its password masked (reports reach terminals and
/// logs, and the value may come from a secret file), and not at all when it does not parse but
/// looks as if it held credentials.
fn shown_url(text: &str) -> String {
    let text = text.trim();
    match Url::parse(text) {
        Ok(mut url) => {
            if url.password().is_some() {
                // Only URLs that cannot have a password refuse one, and this one has one.
                let _ = url.set_password(Some("***"));
            }
            format!("{:?}", url.as_str())
        }
        Err(_) if text.contains('@') => "the URL (not shown: it may hold a password)".to_owned(),
        Err(_) => format!("{text:?}"),
    }
}

/// True when both listeners would try to own the same port on a shared address.
fn listeners_overlap(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// LDH syntax in A-label form. Single labels (`localhost`, an internal TLD) are accepted: these
/// names are the operator's own, not identifiers requested by clients.
fn check_dns_name(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.len() > 253 {
        return Err("it is longer than 253 characters".to_owned());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("every label must have 1 to 63 characters".to_owned());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(format!(
                "label {label:?} may only hold letters, digits and '-' (write IDNs as xn-- A-labels)"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label {label:?} must not start or end with '-'"));
        }
    }
    Ok(())
}
