//! The HTML of the unpause pages: plain, self-contained, written with `maud`, whose `html!`
//! escapes every value spliced in by construction, so a name or token cannot become markup.

use maud::DOCTYPE;
use maud::Markup;
use maud::PreEscaped;
use maud::html;

use crate::unpause::token::UnpauseClaims;

/// Trusted, constant CSS: the text of a `<style>` element is not HTML, so it is not escaped.
const STYLE: PreEscaped<&str> = PreEscaped(
    "body{font-family:system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem;line-height:1.5;color:#1b1b1b}\
h1{font-size:1.6rem}code,li{font-family:ui-monospace,monospace}.box{border:1px solid #ccc;border-radius:6px;padding:1rem 1.25rem;background:#fafafa}\
button{font-size:1.05rem;padding:.6rem 1.4rem;border-radius:6px;border:1px solid #0b5;background:#0a4;color:#fff;cursor:pointer}\
.muted{color:#555;font-size:.95rem}",
);

fn layout(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE) "\n"
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                style { (STYLE) }
            }
            body { (body) }
        }
        "\n"
    }
    .into_string()
}

/// The page with the one button.
pub(super) fn unpause_form(
    claims: &UnpauseClaims,
    account_url: &str,
    more: bool,
    token: &str,
) -> String {
    let body = html! {
        h1 { "Certificate issuance paused" }
        p {
            "Certeasy paused certificate issuance for the names below for ACME account "
            strong { (claims.account) }
            " (" code { (account_url) } "), because every attempt to validate them failed, many \
            times in a row. Pausing stops a forgotten or broken client from retrying forever; it \
            is not a penalty."
        }
        div class="box" {
            p { "Paused names:" }
            ul {
                @for name in &claims.identifiers {
                    li { (name) }
                }
            }
            @if more {
                p class="muted" { "…and possibly other names of this account." }
            }
        }
        h2 { "Likely causes" }
        ul class="muted" {
            li { "The name no longer points (DNS) at the server that runs the ACME client." }
            li { "A firewall or load balancer blocks port 80 (http-01) or 443 (tls-alpn-01)." }
            li {
                "The DNS provider credentials or the " code { "_acme-challenge" }
                " record setup of a dns-01 client broke."
            }
            li { "A forgotten client or device is still renewing a name that is no longer used." }
            li {
                "The web server configuration changed and no longer serves "
                code { "/.well-known/acme-challenge/" } "."
            }
        }
        h2 { "Unpause" }
        p {
            "Fix the cause first, then unpause. " strong { "Unpausing is account-wide:" }
            " it lifts every pause of this ACME account (up to " (super::MAX_PER_CLICK)
            " names per click), not only the names listed here."
        }
        (unpause_button(token, "Unpause issuance"))
    };
    layout("Certificate issuance paused", body)
}

/// The one-button form, posting the token back to the page's own origin.
fn unpause_button(token: &str, label: &str) -> Markup {
    html! {
        form method="post" action="/unpause" {
            input type="hidden" name="token" value=(token);
            button type="submit" { (label) }
        }
    }
}

/// The answer to the click: what the server just did. `count` is the number it unpaused; when
/// that is a full click's worth, more may remain and the button is offered again.
pub(super) fn status(count: u32, max: u32, token: &str) -> String {
    let body = if count == 0 {
        html! {
            h1 { "Nothing to unpause" }
            p {
                "This account has no paused names: it was already unpaused. If issuance still \
                fails, the cause is elsewhere: check the client's output for the error it reports."
            }
        }
    } else if count >= max {
        html! {
            h1 { "Unpaused " (count) " names" }
            p {
                (count) " names were unpaused, the most one click can do; more may remain. Click \
                again to continue."
            }
            (unpause_button(token, "Unpause more"))
        }
    } else {
        let noun = if count == 1 { "name" } else { "names" };
        html! {
            h1 { "Issuance unpaused" }
            p { "Unpaused " (count) " " (noun) ". You can request certificates for them again." }
        }
    };
    layout("Unpause status", body)
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
        html! {
            h1 { (title) }
            p { (text) }
        },
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
