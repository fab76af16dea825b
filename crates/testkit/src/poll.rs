//! Waiting for something a server does in the background, with a deadline instead of a fixed
//! number of tries: a loaded machine gets the same time, and a test that fails says how long it
//! waited and what it saw last.

use std::fmt;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

/// How often [`wait_for_status`] asks again: often enough that a test does not wait long after
/// the change, seldom enough not to load the server it waits on.
pub const STATUS_EVERY: Duration = Duration::from_millis(100);

/// Calls `probe` every `every` until it answers `Some`, for `within` at most; `None` when the
/// time ran out. The probe runs at least once, and once more at the deadline.
pub async fn eventually<T>(
    within: Duration,
    every: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        tokio::time::sleep(every.min(deadline - now)).await;
    }
}

/// The statuses an ACME object may show before the one a wait is for (RFC 8555 §7.1.6).
#[derive(Debug, Clone, Copy)]
pub enum OnTheWay<'a> {
    /// Any status: the test asserts only the end.
    Any,
    /// Only these; any other fails the wait at once (`pending` and `processing`, for a test
    /// that must notice a challenge or order that went somewhere else).
    Only(&'a [&'a str]),
    /// Any status but these, which fail the wait at once (the final ones other than the one
    /// waited for, so a failure shows at once instead of at the deadline).
    Not(&'a [&'a str]),
}

impl OnTheWay<'_> {
    fn allows(self, status: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Only(allowed) => allowed.contains(&status),
            Self::Not(refused) => !refused.contains(&status),
        }
    }
}

/// Why [`wait_for_status`] gave up; its text names the object, the statuses and the last body.
#[derive(Debug)]
pub struct Stuck {
    pub what: String,
    pub want: String,
    /// The last body fetched.
    pub last: Value,
    /// `Some` when the wait ran out of time, `None` when the object took a status the wait
    /// does not allow on the way.
    pub after: Option<Duration>,
}

impl Stuck {
    fn status(&self) -> &str {
        self.last["status"].as_str().unwrap_or_default()
    }
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, want, last, status) = (&self.what, &self.want, &self.last, self.status());
        match self.after {
            Some(after) => write!(
                f,
                "{what} still {status}, not {want}, after {after:?}: {last}"
            ),
            None => write!(f, "{what} became {status} instead of {want}: {last}"),
        }
    }
}

impl std::error::Error for Stuck {}

/// Fetches an ACME object's body (order, authorization, challenge) with `fetch` until its
/// `status` is `want`, for `within` at most: the body with that status.
///
/// `what` names the object in the error (its URL). The object, not the fetch, is the caller's:
/// testkit knows no ACME client, so a test passes the POST-as-GET its client sends.
pub async fn wait_for_status(
    what: &str,
    want: &str,
    on_the_way: OnTheWay<'_>,
    within: Duration,
    mut fetch: impl AsyncFnMut() -> Value,
) -> Result<Value, Stuck> {
    let mut last = Value::Null;
    let found = eventually(within, STATUS_EVERY, async || {
        let body = fetch().await;
        let status = body["status"].as_str().unwrap_or_default();
        if status == want {
            return Some(Ok(body));
        }
        if !on_the_way.allows(status) {
            // The object will not come back: the wait ends at once.
            return Some(Err(body));
        }
        last = body;
        None
    })
    .await;
    let stuck = |last, after| Stuck {
        what: what.to_owned(),
        want: want.to_owned(),
        last,
        after,
    };
    match found {
        Some(Ok(body)) => Ok(body),
        Some(Err(body)) => Err(stuck(body, None)),
        None => Err(stuck(last, Some(within))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;
    use serde_json::json;

    use super::OnTheWay;
    use super::eventually;
    use super::wait_for_status;

    /// A fetch that answers `statuses` in turn, then the last one for ever.
    fn script(statuses: &[&'static str]) -> impl AsyncFnMut() -> Value {
        let mut left: Vec<&'static str> = statuses.iter().rev().copied().collect();
        async move || {
            let status = if left.len() > 1 {
                left.pop().unwrap_or_default()
            } else {
                left.last().copied().unwrap_or_default()
            };
            json!({ "status": status })
        }
    }

    #[tokio::test]
    async fn eventually_returns_the_first_answer_and_gives_up_at_the_deadline() {
        let mut calls = 0;
        let found = eventually(
            Duration::from_secs(5),
            Duration::from_millis(1),
            async || {
                calls += 1;
                (calls == 3).then_some(calls)
            },
        )
        .await;
        assert_eq!(found, Some(3));
        let never: Option<()> = eventually(
            Duration::from_millis(30),
            Duration::from_millis(5),
            async || None,
        )
        .await;
        assert_eq!(never, None);
    }

    #[tokio::test]
    async fn a_status_wait_passes_allowed_statuses_and_stops_at_a_refused_one() {
        let within = Duration::from_secs(5);
        let only = OnTheWay::Only(&["pending", "processing"]);
        let body = wait_for_status("o", "valid", only, within, script(&["pending", "valid"]))
            .await
            .map_err(|e| e.to_string());
        assert_eq!(body, Ok(json!({"status": "valid"})));

        let stuck = wait_for_status("o", "valid", only, within, script(&["ready", "valid"]))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(
            stuck,
            Err(r#"o became ready instead of valid: {"status":"ready"}"#.to_owned())
        );

        let not = OnTheWay::Not(&["invalid"]);
        let body = wait_for_status("o", "valid", not, within, script(&["ready", "valid"]))
            .await
            .map_err(|e| e.to_string());
        assert_eq!(body, Ok(json!({"status": "valid"})));
    }

    #[tokio::test]
    async fn a_status_wait_that_runs_out_says_what_it_saw() {
        let within = Duration::from_millis(250);
        let stuck = wait_for_status("o", "valid", OnTheWay::Any, within, script(&["pending"]))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert_eq!(
            stuck,
            Err(r#"o still pending, not valid, after 250ms: {"status":"pending"}"#.to_owned())
        );
    }
}
