//! Building successful ACME responses.

use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

/// A JSON resource with optional Location, Link and Retry-After headers.
pub(crate) struct Resource {
    status: StatusCode,
    body: serde_json::Value,
    headers: Vec<(header::HeaderName, HeaderValue)>,
    rate_limit: Option<ra::rate_info::RateLimitInfo>,
}

impl Resource {
    pub(crate) fn ok(body: serde_json::Value) -> Self {
        Self {
            status: StatusCode::OK,
            body,
            headers: Vec::new(),
            rate_limit: None,
        }
    }

    pub(crate) fn created(body: serde_json::Value, location: &str) -> Self {
        Self::ok(body)
            .status(StatusCode::CREATED)
            .location(location)
    }

    pub(crate) fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    pub(crate) fn location(self, url: &str) -> Self {
        self.header(header::LOCATION, url)
    }

    pub(crate) fn link(self, url: &str, rel: &str) -> Self {
        self.header(header::LINK, &format!("<{url}>;rel=\"{rel}\""))
    }

    /// The binding limit of the request, rendered as `RateLimit` headers.
    pub(crate) fn rate_limit(mut self, info: Option<ra::rate_info::RateLimitInfo>) -> Self {
        self.rate_limit = info;
        self
    }

    pub(crate) fn retry_after(self, seconds: i64) -> Self {
        self.header(header::RETRY_AFTER, &seconds.max(1).to_string())
    }

    fn header(mut self, name: header::HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }
}

impl IntoResponse for Resource {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        if let Some(info) = self.rate_limit {
            response.extensions_mut().insert(info);
        }
        response
    }
}
