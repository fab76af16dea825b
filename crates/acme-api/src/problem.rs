//! Problem documents and HTTP statuses: the answer type every handler returns, and the errors
//! of the request's own parsing (JWS, CSR). The policy layer's outcomes become problems in
//! `refusal.rs`, the one place that renders them; storage errors never reach this crate except
//! through it, as a generic `serverInternal`.

use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::wire;

/// An error answered to the client as a problem document. Boxed: it travels in every `Result`
/// of the request path, and the common case is success.
#[derive(Debug)]
pub(crate) struct ApiError(Box<ApiErrorParts>);

#[derive(Debug)]
pub(crate) struct ApiErrorParts {
    pub(crate) problem: Problem,
    pub(crate) status: StatusCode,
    /// Extra headers: Retry-After, Link, Location.
    pub(crate) headers: Vec<(header::HeaderName, HeaderValue)>,
    /// The policies that applied, for `RateLimit` headers (on 429s among others).
    pub(crate) rate_limit: Option<ra::rate_info::RateLimitInfo>,
    /// The `alg` values this server verifies, sent with `badSignatureAlgorithm` (RFC 8555 §6.2)
    /// so a client can pick another one without guessing.
    pub(crate) algorithms: Option<Vec<&'static str>>,
}

impl ApiError {
    pub(crate) fn new(kind: ProblemType, detail: impl Into<String>) -> Self {
        let problem = Problem::new(kind, detail);
        Self(Box::new(ApiErrorParts {
            status: default_status(kind),
            problem,
            headers: Vec::new(),
            rate_limit: None,
            algorithms: None,
        }))
    }

    pub(crate) fn from_problem(problem: Problem) -> Self {
        Self(Box::new(ApiErrorParts {
            status: default_status(problem.kind),
            problem,
            headers: Vec::new(),
            rate_limit: None,
            algorithms: None,
        }))
    }

    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.0.status = status;
        self
    }

    pub(crate) fn with_header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }

    pub(crate) fn malformed(detail: impl Into<String>) -> Self {
        Self::new(ProblemType::Malformed, detail)
    }

    pub(crate) fn not_found(what: &str) -> Self {
        Self::new(ProblemType::Malformed, format!("{what} not found"))
            .with_status(StatusCode::NOT_FOUND)
    }

    pub(crate) fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(ProblemType::Unauthorized, detail)
    }

    /// A request signed by a deactivated (or revoked) account: 401 `unauthorized`, as RFC 8555
    /// §7.3.6 prescribes, whatever the endpoint.
    pub(crate) fn account_not_valid(status: acme_core::status::AccountStatus) -> Self {
        Self::unauthorized(format!(
            "the account is {}; it can no longer be used",
            status.as_str()
        ))
        .with_status(StatusCode::UNAUTHORIZED)
    }

    /// A wrong HTTP method on an ACME resource (RFC 8555 §6.3: resources other than the directory
    /// and newNonce are read with POST-as-GET). The router adds the `Allow` header it computed.
    pub(crate) fn method_not_allowed(method: &str) -> Self {
        let detail = if method == "GET" {
            "GET is not allowed here: ACME resources other than the directory and newNonce are read with POST-as-GET (RFC 8555 §6.3); see the Allow header".to_owned()
        } else {
            format!("method {method} is not allowed here; see the Allow header")
        };
        Self::malformed(detail).with_status(StatusCode::METHOD_NOT_ALLOWED)
    }

    /// An internal failure: logged in full, answered without internals.
    pub(crate) fn internal(context: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %error, "{context}");
        Self::new(
            ProblemType::ServerInternal,
            "The server hit an internal error; please retry later",
        )
        .with_header(header::RETRY_AFTER, "60")
    }
}

/// RFC 8555 does not fix statuses per type; these follow Boulder and Pebble, which clients know.
fn default_status(kind: ProblemType) -> StatusCode {
    match kind {
        ProblemType::BadNonce
        | ProblemType::BadCsr
        | ProblemType::BadPublicKey
        | ProblemType::BadRevocationReason
        | ProblemType::BadSignatureAlgorithm
        | ProblemType::AccountDoesNotExist
        | ProblemType::AlreadyRevoked
        | ProblemType::InvalidContact
        | ProblemType::InvalidProfile
        | ProblemType::Malformed
        | ProblemType::RejectedIdentifier
        | ProblemType::UnsupportedContact
        | ProblemType::UnsupportedIdentifier
        | ProblemType::Compound
        | ProblemType::Caa
        | ProblemType::Connection
        | ProblemType::Dns
        | ProblemType::IncorrectResponse
        | ProblemType::Tls => StatusCode::BAD_REQUEST,
        ProblemType::Unauthorized
        | ProblemType::OrderNotReady
        | ProblemType::UserActionRequired
        | ProblemType::ExternalAccountRequired => StatusCode::FORBIDDEN,
        ProblemType::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        // RFC 9773 §5: a predecessor already marked as replaced is a conflict.
        ProblemType::AlreadyReplaced | ProblemType::Conflict => StatusCode::CONFLICT,
        ProblemType::ServerInternal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl std::ops::Deref for ApiError {
    type Target = ApiErrorParts;

    fn deref(&self) -> &ApiErrorParts {
        &self.0
    }
}

impl std::ops::DerefMut for ApiError {
    fn deref_mut(&mut self) -> &mut ApiErrorParts {
        &mut self.0
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let parts = *self.0;
        let mut body = wire::problem_json(&parts.problem, parts.status.as_u16());
        if let Some(algorithms) = &parts.algorithms {
            body["algorithms"] = serde_json::json!(algorithms);
        }
        let mut response = (parts.status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        for (name, value) in parts.headers {
            headers.append(name, value);
        }
        // Rendered by `acme_headers`, after the global limit's middleware has added its policy.
        if let Some(info) = parts.rate_limit {
            response.extensions_mut().insert(info);
        }
        response
    }
}

impl From<acme_jose::Error> for ApiError {
    fn from(e: acme_jose::Error) -> Self {
        use acme_jose::Error as E;
        let kind = match &e {
            E::BadSignatureAlgorithm(_) => ProblemType::BadSignatureAlgorithm,
            E::BadPublicKey(_) => ProblemType::BadPublicKey,
            _ => ProblemType::Malformed,
        };
        let mut error = Self::new(kind, e.to_string());
        if kind == ProblemType::BadSignatureAlgorithm {
            error.algorithms = Some(
                acme_jose::Algorithm::ALL
                    .iter()
                    .map(|a| a.as_str())
                    .collect(),
            );
        }
        error
    }
}

impl From<issuance::Error> for ApiError {
    fn from(e: issuance::Error) -> Self {
        use issuance::Error as E;
        match e {
            E::BadCsr(d) => Self::new(ProblemType::BadCsr, d),
            other => Self::internal("issuance failed", &other),
        }
    }
}
