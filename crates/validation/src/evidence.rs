//! What a successful attempt established, kept by the caller as the record a CA keeps of its
//! validations (the CA/Browser Forum's Baseline Requirements §5.4.1: the method, the time, what
//! was reached and seen, and the CAA records that allowed issuance).

/// What one successful validation attempt established, in words an auditor reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// Where the validator went: `IP:port` of each connection (http-01, tls-alpn-01), or for
    /// dns-01 the resolvers asked.
    pub addresses: Vec<String>,
    /// What it saw there ("key authorization matched at ... (HTTP 200)").
    pub observed: String,
    /// The CAA records that allowed issuance and the name they were found at, that none exist
    /// up to the root, or why no CAA check applies.
    pub caa: Vec<String>,
    /// dns-persist-01: the `persistUntil` (UNIX seconds) of the record that validated, which the
    /// authorization must not outlive (draft-ietf-acme-dns-persist-02 §4.1). `None` otherwise.
    pub persist_until: Option<i64>,
}

/// What a challenge check saw; the validator adds the CAA part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) addresses: Vec<String>,
    pub(crate) observed: String,
}
