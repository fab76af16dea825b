//! The policy settings: what the configuration file says about who may get what. The defaults
//! here are the one source of the configuration file's defaults for these keys.

use acme_core::identifier::IdentifierPolicy;
use issuance::Profiles;
use time::Duration;

/// Default of `issuance.backdate`: how far `notBefore` is set in the past, so that a client whose
/// clock is a little slow does not see its new certificate as not yet valid. The one source of
/// this default: the job runner signs with it and the configuration file states it.
pub const DEFAULT_BACKDATE: Duration = Duration::minutes(1);

/// Default of `acme.valid-authorization-lifetime`: how long a validated authorization lives.
pub const DEFAULT_VALID_AUTHORIZATION_LIFETIME: Duration = Duration::days(30);

/// A valid authorization is reused only while it still has this long to live (Boulder uses the
/// same day), or half its lifetime when that is shorter: an order made of an authorization
/// about to expire would expire with it before the client could finalize.
const REUSE_MARGIN: Duration = Duration::days(1);

/// How long before its expiry a valid authorization of `lifetime` stops being reused.
pub fn reuse_margin(lifetime: Duration) -> Duration {
    REUSE_MARGIN.min(lifetime / 2)
}

/// Settings of the policy decisions.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    /// When set, new accounts must agree to these terms.
    pub terms_of_service: Option<String>,
    /// newAccount must carry an external account binding (RFC 8555 §7.3.4); announced in the
    /// directory. A valid binding is honoured either way.
    pub external_account_required: bool,
    pub order_lifetime: Duration,
    pub authorization_lifetime: Duration,
    /// `acme.valid-authorization-lifetime`: a validated authorization expires this long after
    /// its validation (the job runner records verdicts with it), and is reused only while it
    /// has [`reuse_margin`] left.
    pub valid_authorization_lifetime: Duration,
    pub reuse_valid_authorizations: bool,
    /// `acme.pre-authorization`: whether accounts may ask for an authorization before ordering
    /// (RFC 8555 §7.4.1, `newAuthz` in the directory).
    pub pre_authorization: bool,
    pub max_identifiers_per_order: usize,
    pub max_contacts: usize,
    pub identifier_policy: IdentifierPolicy,
    /// The certificate profiles offered (`meta.profiles`), each with its validity limits.
    pub profiles: Profiles,
    /// How far notBefore may lie in the past.
    pub backdate: Duration,
    /// The renewal windows ARI suggests (RFC 9773).
    pub renewal: RenewalSettings,
    /// The operator's blocked-keys file (`acme.blocked-keys-file`); empty without one.
    pub blocked_keys: crate::keys::BlockedKeysFile,
    /// The draft challenge types offered besides RFC 8555's and RFC 8737's.
    pub optional_challenges: OptionalChallenges,
}

/// Challenge types from Internet-Drafts, each offered for DNS identifiers (wildcards included)
/// only when its key enables it (`validation.dns-account-01`, `validation.dns-persist-01`): an
/// operator opts in to a method whose text may still change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionalChallenges {
    /// dns-account-01 (draft-ietf-acme-dns-account-label-02).
    pub dns_account_01: bool,
    /// dns-persist-01 (draft-ietf-acme-dns-persist-02).
    pub dns_persist_01: bool,
}

/// Where in a certificate's lifetime ARI suggests renewing it. Fractions of the lifetime
/// (notBefore to notAfter); the window of each certificate is moved later by up to `jitter` of
/// the lifetime, by an amount fixed by its serial, so certificates issued together are not
/// renewed together, and every poll for one certificate gets the same window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenewalSettings {
    pub window_start: f64,
    pub window_end: f64,
    pub jitter: f64,
    /// How long clients should wait before asking again (`Retry-After`).
    pub retry_after: Duration,
}

impl Default for RenewalSettings {
    fn default() -> Self {
        Self {
            window_start: 0.6,
            window_end: 0.75,
            jitter: 0.05,
            retry_after: Duration::hours(6),
        }
    }
}

impl Default for PolicySettings {
    fn default() -> Self {
        Self {
            terms_of_service: None,
            external_account_required: false,
            order_lifetime: Duration::days(7),
            authorization_lifetime: Duration::days(7),
            valid_authorization_lifetime: DEFAULT_VALID_AUTHORIZATION_LIFETIME,
            reuse_valid_authorizations: true,
            pre_authorization: true,
            max_identifiers_per_order: 100,
            max_contacts: 10,
            identifier_policy: IdentifierPolicy::default(),
            profiles: Profiles::shipped(),
            backdate: DEFAULT_BACKDATE,
            renewal: RenewalSettings::default(),
            blocked_keys: crate::keys::BlockedKeysFile::default(),
            optional_challenges: OptionalChallenges::default(),
        }
    }
}
