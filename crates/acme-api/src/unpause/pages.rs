//! The HTML of the unpause pages: plain, self-contained, every dynamic value escaped.

use crate::unpause::token::UnpauseClaims;

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem;line-height:1.5;color:#1b1b1b}\
h1{font-size:1.6rem}code,li{font-family:ui-monospace,monospace}.box{border:1px solid #ccc;border-radius:6px;padding:1rem 1.25rem;background:#fafafa}\
button{font-size:1.05rem;padding:.6rem 1.4rem;border-radius:6px;border:1px solid #0b5;background:#0a4;color:#fff;cursor:pointer}\
.muted{color:#555;font-size:.95rem}";

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn layout(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{t}</title><style>{STYLE}</style></head><body>{body}</body></html>\n",
        t = escape(title)
    )
}

/// The page with the one button.
pub(super) fn unpause_form(
    claims: &UnpauseClaims,
    account_url: &str,
    more: bool,
    token: &str,
) -> String {
    let names: String = claims
        .identifiers
        .iter()
        .map(|n| format!("<li>{}</li>", escape(n)))
        .collect();
    let others = if more {
        "<p class=\"muted\">…and possibly other names of this account.</p>"
    } else {
        ""
    };
    let body = format!(
        "<h1>Certificate issuance paused</h1>\
<p>Certeasy paused certificate issuance for the names below for ACME account <strong>{id}</strong> \
(<code>{url}</code>), because every attempt to validate them failed, many times in a row. \
Pausing stops a forgotten or broken client from retrying forever; it is not a penalty.</p>\
<div class=\"box\"><p>Paused names:</p><ul>{names}</ul>{others}</div>\
<h2>Likely causes</h2><ul class=\"muted\">\
<li>The name no longer points (DNS) at the server that runs the ACME client.</li>\
<li>A firewall or load balancer blocks port 80 (http-01) or 443 (tls-alpn-01).</li>\
<li>The DNS provider credentials or the <code>_acme-challenge</code> record setup of a dns-01 client broke.</li>\
<li>A forgotten client or device is still renewing a name that is no longer used.</li>\
<li>The web server configuration changed and no longer serves <code>/.well-known/acme-challenge/</code>.</li></ul>\
<h2>Unpause</h2><p>Fix the cause first, then unpause. <strong>Unpausing is account-wide:</strong> it lifts every pause of \
this ACME account (up to {max} names per click), not only the names listed here.</p>\
{button}",
        id = escape(&claims.account.to_string()),
        url = escape(account_url),
        max = super::MAX_PER_CLICK,
        button = unpause_button(token, "Unpause issuance"),
    );
    layout("Certificate issuance paused", &body)
}

/// The one-button form, posting the token back to the page's own origin.
fn unpause_button(token: &str, label: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/unpause\"><input type=\"hidden\" name=\"token\" value=\"{token}\">\
<button type=\"submit\">{label}</button></form>",
        token = escape(token),
        label = escape(label),
    )
}

/// The answer to the click: what the server just did. `count` is the number it unpaused; when
/// that is a full click's worth, more may remain and the button is offered again.
pub(super) fn status(count: u32, max: u32, token: &str) -> String {
    let body = if count == 0 {
        "<h1>Nothing to unpause</h1><p>This account has no paused names: it was already unpaused. \
If issuance still fails, the cause is elsewhere: check the client's output for the error it reports.</p>"
            .to_owned()
    } else if count >= max {
        format!(
            "<h1>Unpaused {count} names</h1><p>{count} names were unpaused, the most one click can do; \
more may remain. Click again to continue.</p>{}",
            unpause_button(token, "Unpause more")
        )
    } else {
        let noun = if count == 1 { "name" } else { "names" };
        format!(
            "<h1>Issuance unpaused</h1><p>Unpaused {count} {noun}. You can request certificates for them again.</p>"
        )
    };
    layout("Unpause status", &body)
}

/// Why a page could not do anything.
#[derive(Debug, Clone, Copy)]
pub(super) enum ErrorKind {
    Invalid,
    Expired,
    Revoked,
    CrossSite,
    Unavailable,
    Disabled,
}

pub(super) fn error(kind: ErrorKind) -> String {
    let (title, text) = match kind {
        ErrorKind::Invalid => (
            "Invalid unpause link",
            "This unpause link is invalid: it was cut short or altered. Nothing was unpaused. Copy the whole link from your ACME client's error message.",
        ),
        ErrorKind::Expired => (
            "Unpause link expired",
            "This unpause link has expired. Nothing was unpaused. Request a certificate again: the refusal will carry a fresh link.",
        ),
        ErrorKind::Revoked => (
            "Unpause link no longer valid",
            "This unpause link is no longer valid because the CA replaced its links. Nothing was unpaused. Request a certificate again to get a fresh link.",
        ),
        ErrorKind::CrossSite => (
            "Request refused",
            "This request came from another site and was refused. Open the unpause link directly and use its button.",
        ),
        ErrorKind::Unavailable => (
            "Try again later",
            "The CA could not unpause right now. Nothing was changed; please try again in a minute.",
        ),
        ErrorKind::Disabled => (
            "Not available",
            "Self-service unpausing is not enabled on this CA.",
        ),
    };
    layout(
        title,
        &format!("<h1>{}</h1><p>{}</p>", escape(title), escape(text)),
    )
}

#[cfg(test)]
mod tests {
    use acme_core::ids::AccountId;

    use super::*;

    #[test]
    fn pages_escape_and_load_nothing() {
        let claims = UnpauseClaims {
            account: AccountId(42),
            identifiers: vec![
                "<script>alert(1)</script>.example.com".into(),
                "www.example.com".into(),
            ],
            issued_at: 0,
            expires_at: 1,
            version: 1,
        };
        let html = unpause_form(&claims, "https://ca.example/acme/acct/42", true, "tok\"en");
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        assert!(
            html.contains("www.example.com")
                && html.contains("42")
                && html.contains("account-wide")
        );
        assert!(html.contains("possibly other"));
        assert!(html.contains("<form method=\"post\" action=\"/unpause\">"));
        assert!(html.contains("value=\"tok&quot;en\""));
        assert_eq!(html.matches("<button").count(), 1, "one button");
        assert!(
            !html.contains("src=") && !html.contains("<link"),
            "nothing loaded from elsewhere"
        );
        assert!(status(1, 50_000, "t").contains("Unpaused 1 name."));
        assert!(status(7, 50_000, "t").contains("Unpaused 7 names."));
        assert!(!status(7, 50_000, "t").contains("<form"));
        let full = status(50_000, 50_000, "t<k");
        assert!(full.contains("Click again"), "{full}");
        assert!(
            full.contains("value=\"t&lt;k\"") && full.contains("<form method=\"post\""),
            "a full click offers the button again: {full}"
        );
        assert!(status(0, 50_000, "t").contains("already"));
        assert!(error(ErrorKind::Expired).contains("expired"));
        assert!(error(ErrorKind::Invalid).contains("invalid"));
    }
}
