//! How the admin API refuses: every error of `/admin/*` is an [`AdminError`], and
//! [`AdminError::answer`] is the one place that turns it into a status and the JSON body
//! [`ErrorDoc`], `{"type": "not-found", "detail": "certificate does not exist"}`.
//!
//! `type` is one of the kebab-case names of [`ErrorType`] and fixes the status; `detail` is a
//! sentence for the operator, which `certeasy admin` prints as it is. Successful answers are
//! JSON documents (`admin_wire.rs`) or, for the operational routes (reload, rate-limit buckets,
//! pauses), lines of text; errors never are text. Requests the routes cannot read (a body that is
//! not the document, a bad query or path) are refused in the same shape, through the `From`
//! impls of axum's rejections.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::rejection::QueryRejection;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::admin_wire::ErrorDoc;
use crate::admin_wire::ErrorType;

/// Why the admin API refuses a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminError {
    /// Something the request names does not parse.
    BadRequest(String),
    /// No valid bearer token.
    Unauthorized,
    /// A browser sent it.
    FromBrowser,
    /// The record does not exist; the text names it. Also a path no route serves.
    NotFound(String),
    /// The route exists, for another method.
    MethodNotAllowed,
    /// The record's state forbids it.
    Conflict(String),
    /// A configuration file did not reload.
    ReloadRefused(String),
    /// The database or Redis failed.
    Unavailable(String),
    /// A fault of the server.
    Internal(String),
}

impl AdminError {
    /// The one mapping from a refusal to its status and body.
    pub fn answer(self) -> (StatusCode, Json<ErrorDoc>) {
        let (status, kind, detail) = match self {
            Self::BadRequest(d) => (StatusCode::BAD_REQUEST, ErrorType::BadRequest, d),
            Self::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                ErrorType::Unauthorized,
                "the admin API needs Authorization: Bearer <token> (server.admin-token-file, default <data-dir>/admin.token)".to_owned(),
            ),
            Self::FromBrowser => (
                StatusCode::FORBIDDEN,
                ErrorType::Forbidden,
                "the admin API refuses requests sent by browsers (Origin or Sec-Fetch-Site)"
                    .to_owned(),
            ),
            Self::NotFound(d) => (StatusCode::NOT_FOUND, ErrorType::NotFound, d),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorType::MethodNotAllowed,
                "this route does not take that method".to_owned(),
            ),
            Self::Conflict(d) => (StatusCode::CONFLICT, ErrorType::Conflict, d),
            Self::ReloadRefused(d) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorType::ReloadRefused,
                d,
            ),
            Self::Unavailable(d) => (StatusCode::SERVICE_UNAVAILABLE, ErrorType::Unavailable, d),
            Self::Internal(d) => (StatusCode::INTERNAL_SERVER_ERROR, ErrorType::Internal, d),
        };
        (status, Json(ErrorDoc { kind, detail }))
    }
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let unauthorized = self == Self::Unauthorized;
        let mut response = self.answer().into_response();
        if unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"certeasy-admin\""),
            );
        }
        response
    }
}

/// The policy layer's verdicts: a missing record is 404, a refusal 409.
impl From<ra::Error> for AdminError {
    fn from(e: ra::Error) -> Self {
        match e {
            ra::Error::Refused(r) => match *r {
                ra::Refusal::NotFound(what) => Self::NotFound(format!("{what} does not exist")),
                other => Self::Conflict(other.to_string()),
            },
            ra::Error::Storage(e) => Self::Unavailable(e.to_string()),
            ra::Error::Internal { context, message } => {
                Self::Internal(format!("{context}: {message}"))
            }
        }
    }
}

impl From<JsonRejection> for AdminError {
    fn from(e: JsonRejection) -> Self {
        Self::BadRequest(e.body_text())
    }
}

impl From<QueryRejection> for AdminError {
    fn from(e: QueryRejection) -> Self {
        Self::BadRequest(e.body_text())
    }
}

impl From<PathRejection> for AdminError {
    fn from(e: PathRejection) -> Self {
        Self::BadRequest(e.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::AdminError;
    use crate::admin_wire::ErrorDoc;
    use crate::admin_wire::ErrorType;

    #[test]
    fn every_error_is_a_type_and_a_detail() {
        let (status, body) = AdminError::NotFound("certificate does not exist".to_owned()).answer();
        assert_eq!(status.as_u16(), 404);
        assert_eq!(
            serde_json::to_value(&body.0).unwrap(),
            serde_json::json!({"type": "not-found", "detail": "certificate does not exist"})
        );
        let (status, body) = AdminError::ReloadRefused("reload refused".to_owned()).answer();
        assert_eq!(status.as_u16(), 422);
        assert_eq!(body.0.kind, ErrorType::ReloadRefused);
        let doc: ErrorDoc = serde_json::from_str(r#"{"type":"bad-request","detail":"x"}"#).unwrap();
        assert_eq!(doc.kind, ErrorType::BadRequest);
    }

    #[test]
    fn a_missing_token_carries_the_challenge() {
        use axum::response::IntoResponse;
        let response = AdminError::Unauthorized.into_response();
        assert_eq!(response.status().as_u16(), 401);
        assert!(response.headers().contains_key("www-authenticate"));
    }
}
