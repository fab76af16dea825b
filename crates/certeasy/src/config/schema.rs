//! What the configuration reference says about values whose Rust type does not tell an operator
//! how to write them, and about the `rate-limiting:` block, whose types live in `ratelimits`.
//!
//! The model derives [`JsonSchema`] so that its doc comments and types are the reference
//! (`config/reference.rs` writes `docs/configuration.md` and `config/certeasy.yaml` from them).
//! A field whose type is foreign, or is parsed from a string, names one of the types below with
//! `#[schemars(with = "...")]`: each is a string of a `format` the reference shows as its type.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// A string schema of the given format, inlined where it is used.
macro_rules! string_format {
    ($(#[$doc:meta])* $name:ident => $format:literal) => {
        $(#[$doc])*
        pub(super) struct $name;

        impl JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({ "type": "string", "format": $format })
            }
        }
    };
}

string_format!(
    /// `ConfigDuration`: `500ms`, `30s`, `15m`, `168h`, `14d`, `1h30m`.
    Duration => "duration"
);
string_format!(
    /// A file or directory; `""` means not set where the key allows it.
    Path => "path"
);
string_format!(
    /// `SocketAddr`: `0.0.0.0:14000`, `[::]:14000`.
    SocketAddress => "address:port"
);
string_format!(
    /// A resolver: `192.0.2.53:53`, or a bare address for port 53.
    Resolver => "resolver"
);
string_format!(
    /// `IpNet`: a network, or a bare address as a /32 or /128.
    Cidr => "CIDR"
);
string_format!(
    /// A name read by its type's own parser (`KeyAlgorithm`, `KeyUsage`, ...).
    Name => "name"
);

/// `rate-limiting:` the block of the `ratelimits` crate (`crates/ratelimits/src/config.rs`), the
/// operators' contract for rate limits. Its defaults are `RateLimitingConfig::default()`; these
/// types only say what each key means, and the reference test holds their keys to the ones
/// `RateLimitingConfig` writes.
#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
pub(super) struct RateLimiting {
    /// IPs/CIDRs that bypass the IP-based limits (global, account creation).
    #[schemars(with = "Vec<Cidr>")]
    whitelist: (),
    /// Per-IP bucket on every ACME POST entry point.
    global: GlobalLimit,
    /// Per-IP bucket on new-account.
    account_creation: AccountCreationLimit,
    /// Per-account order count and SAN budget, two independent quotas.
    order_creation: OrderCreationLimit,
    /// Certificates per (account, FQDN set) in a rolling window.
    duplicate_certificate: DuplicateCertificateLimit,
    /// Failed validations per (account, hostname) in a rolling window.
    failed_validation: FailedValidationLimit,
    /// Cap on in-flight pending authorizations per account.
    pending_authorizations: PendingAuthorizationsLimit,
    /// How often each instance looks for changes and expiries of the overrides kept in the
    /// database (`certeasy admin overrides`); a change applies everywhere within this long.
    #[schemars(with = "Duration")]
    overrides_refresh: (),
}

/// The two keys every limit has.
#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct Switch {
    /// Whether the limit applies at all.
    enabled: bool,
    /// Whether the limit's decisions are enforced or only logged and counted.
    mode: Mode,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
enum Mode {
    /// Denials are answered with 429.
    Enforce,
    /// Denials are logged and counted, never enforced.
    Shadow,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct GlobalLimit {
    #[serde(flatten)]
    switch: Switch,
    /// Sustained requests per source IP on every ACME POST entry point.
    requests_per_minute: u64,
    /// Tokens accumulated when idle.
    burst: u64,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct AccountCreationLimit {
    #[serde(flatten)]
    switch: Switch,
    /// New accounts per IP.
    per_ip_per_hour: u64,
    /// Initial burst.
    burst: u64,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct OrderCreationLimit {
    #[serde(flatten)]
    switch: Switch,
    /// Orders per account (one token per order).
    orders_per_account_per_hour: u64,
    /// Burst of the order count.
    order_burst: u64,
    /// Identifiers per account (one token per identifier).
    san_budget_per_account_per_hour: u64,
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct DuplicateCertificateLimit {
    #[serde(flatten)]
    switch: Switch,
    /// Certificates per (account, FQDN set) per window.
    max_per_window: u64,
    /// Rolling window.
    #[schemars(with = "Duration")]
    window: (),
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct FailedValidationLimit {
    #[serde(flatten)]
    switch: Switch,
    /// Failed validations per (account, hostname) per window.
    max_per_window: u64,
    /// Rolling window.
    #[schemars(with = "Duration")]
    window: (),
}

#[derive(JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[expect(dead_code, reason = "read by schemars only, never built")]
struct PendingAuthorizationsLimit {
    #[serde(flatten)]
    switch: Switch,
    /// In-flight pending authorizations per account.
    max: u64,
}
