//! `certeasy admin accounts …`, `certeasy admin certificates …` and `certeasy admin backup`: the
//! commands, and the client side of their admin API (`admin.rs`). The server answers with the
//! documents of `admin_wire.rs`; `--json` prints them, otherwise they become tables and labelled
//! lines.

use std::io::IsTerminal;
use std::io::Write;
use std::time::Duration;

use clap::Args;
use clap::Subcommand;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountList;
use crate::admin_wire::BackupDoc;
use crate::admin_wire::BatchDoc;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateList;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::parse_reason;
use ra::operator::DEFAULT_LIST_LIMIT;
use ra::operator::DEFAULT_REVOKE_BATCH;

/// How long `certeasy admin backup` waits for the server's answer, which comes when the copy is
/// complete: minutes for a large database, so the admin client's usual limit does not apply.
const BACKUP_TIMEOUT: Duration = Duration::from_secs(60 * 60);

const ACCOUNTS_LIST_HELP: &str = "\
Filters (combined with AND):
  --status valid|deactivated|revoked   accounts in this state
  --contact TEXT                       a contact contains TEXT (e.g. a mail domain)

Pages: newest first, --limit rows (default 100, at most 1000); the table ends with the
--before value of the next page, and the JSON document carries it as next_before.

Examples:
  certeasy admin accounts list
  certeasy admin accounts list --status deactivated --json
  certeasy admin accounts list --contact @example.com --limit 20
  certeasy admin accounts list --before 1200";

const CERTIFICATES_LIST_HELP: &str = "\
Filters (combined with AND; dates are RFC 3339 or YYYY-MM-DD, midnight UTC; an 'after' bound
is included, a 'before' bound excluded):
  --name NAME            the certificate holds NAME exactly (dns:NAME, ip:ADDR or bare;
                         *.example.com is the wildcard name, not a pattern)
  --serial HEX           the certificate with this serial (colons allowed)
  --account ID           certificates of this account
  --issued-after DATE    issued at or after DATE
  --issued-before DATE   issued before DATE
  --expires-after DATE   not after (expiry) at or after DATE
  --expires-before DATE  expiry before DATE
  --revoked              only revoked certificates
  --not-revoked          only certificates that are not revoked

Pages: newest first, --limit rows (default 100, at most 1000); the table ends with the
--before value of the next page, and the JSON document carries it as next_before.

Examples:
  certeasy admin certificates list --name www.example.com
  certeasy admin certificates list --account 7 --not-revoked
  certeasy admin certificates list --expires-after 2026-01-01 --expires-before 2026-02-01 --json
  certeasy admin certificates list --issued-after 2025-12-24T00:00:00Z --revoked";

const CERTIFICATES_REVOKE_HELP: &str = "\
Reasons (RFC 5280 name, case-insensitive, or code): unspecified (0), keyCompromise (1),
affiliationChanged (3), superseded (4), cessationOfOperation (5).

With a SERIAL, revokes that certificate. Without one, revokes every certificate that matches
the filters and is not revoked yet (the filters of `certificates list`; at least one is
required), in batches of --batch (default 500) with a progress bar on a terminal. A
certificate revoked already keeps its first revocation.

Examples:
  certeasy admin certificates revoke 7f3a9c01d2 --reason keyCompromise
  certeasy admin certificates revoke 7f:3a:9c:01:d2 --reason 4
  certeasy admin certificates revoke --account 7 --reason keyCompromise
  certeasy admin certificates revoke --name old.example.com --expires-after 2026-01-01 --reason superseded --json";

/// `certeasy admin accounts`.
#[derive(Debug, Subcommand)]
pub enum AccountsCommand {
    /// List accounts, newest first, filtered by status or contact.
    #[command(after_long_help = ACCOUNTS_LIST_HELP)]
    List {
        /// Only accounts in this state: valid, deactivated or revoked.
        #[arg(long)]
        status: Option<String>,
        /// Only accounts with a contact containing this text.
        #[arg(long)]
        contact: Option<String>,
        #[command(flatten)]
        page: PageArgs,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print an account: status, contacts, creation, key thumbprint, counts of orders and
    /// certificates.
    #[command(after_long_help = "Example:\n  certeasy admin accounts show 7 --json")]
    Show {
        /// The account id (the number at the end of its ACME URL).
        id: i64,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Deactivate an account (RFC 8555 §7.3.6): every request it signs is refused from now on,
    /// its pending authorizations are deactivated and its unfinished orders become invalid.
    /// Final; its certificates stay valid (revoke them with `certificates revoke --account`).
    #[command(after_long_help = "Example:\n  certeasy admin accounts deactivate 7")]
    Deactivate {
        /// The account id.
        id: i64,
        /// Print the account afterwards as one JSON document.
        #[arg(long)]
        json: bool,
    },
}

/// `certeasy admin certificates`.
#[derive(Debug, Subcommand)]
pub enum CertificatesCommand {
    /// List certificates, newest first, filtered by name, serial, account, dates or revocation.
    #[command(after_long_help = CERTIFICATES_LIST_HELP)]
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only revoked certificates.
        #[arg(long, conflicts_with = "not_revoked")]
        revoked: bool,
        /// Only certificates that are not revoked.
        #[arg(long)]
        not_revoked: bool,
        #[command(flatten)]
        page: PageArgs,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a certificate: serial, names, account, validity, revocation (and its PEM with
    /// --pem).
    #[command(
        after_long_help = "Examples:\n  certeasy admin certificates show 7f3a9c01d2\n  certeasy admin certificates show 7F:3A:9C:01:D2 --pem > cert.pem"
    )]
    Show {
        /// The serial number in hex (colons allowed).
        serial: String,
        /// Also print the certificate and its chain as PEM.
        #[arg(long)]
        pem: bool,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Revoke one certificate by serial, or every unrevoked certificate matching the filters.
    #[command(after_long_help = CERTIFICATES_REVOKE_HELP)]
    Revoke {
        /// The serial number in hex (colons allowed); without it, the filters select.
        serial: Option<String>,
        /// RFC 5280 reason: name or code (see below).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Certificates revoked per request of a bulk revocation (at most 5000).
        #[arg(long, default_value_t = DEFAULT_REVOKE_BATCH)]
        batch: u32,
        /// Print one JSON document, and no progress bar.
        #[arg(long)]
        json: bool,
    },
    /// Ask ARI clients (RFC 9773) to renew now: the renewal window of every matching
    /// unexpired, unrevoked certificate moves into the past, so clients that poll renewalInfo
    /// renew at their next poll. Name exactly one of SERIAL, --account and --name.
    ///
    /// Examples: `certeasy admin certificates renew-early 5f3a…`,
    /// `certeasy admin certificates renew-early --account 7`,
    /// `certeasy admin certificates renew-early --name www.example.com`.
    RenewEarly {
        /// The serial number in hex (colons allowed).
        serial: Option<String>,
        /// Every certificate of this account.
        #[arg(long)]
        account: Option<i64>,
        /// Every certificate holding this name (dns:NAME, ip:ADDR, or bare).
        #[arg(long)]
        name: Option<String>,
        /// Print one JSON document ({"count": N}).
        #[arg(long)]
        json: bool,
    },
}

/// The keyset page of a listing.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Rows per page (at most 1000).
    #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
    limit: u32,
    /// Start below this id: the next_before of the previous page.
    #[arg(long)]
    before: Option<i64>,
}

/// The certificate filters shared by `list` and `revoke`.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// The certificate holds this name (dns:NAME, ip:ADDR, or bare).
    #[arg(long)]
    name: Option<String>,
    /// The certificate with this serial (hex).
    #[arg(long = "serial", value_name = "HEX")]
    serial_filter: Option<String>,
    /// Certificates of this account.
    #[arg(long)]
    account: Option<i64>,
    /// Issued at or after (RFC 3339 or YYYY-MM-DD).
    #[arg(long)]
    issued_after: Option<String>,
    /// Issued before.
    #[arg(long)]
    issued_before: Option<String>,
    /// Expiring at or after.
    #[arg(long)]
    expires_after: Option<String>,
    /// Expiring before.
    #[arg(long)]
    expires_before: Option<String>,
}

impl FilterArgs {
    fn query(&self, revoked: Option<bool>) -> CertificateQuery {
        CertificateQuery {
            name: self.name.clone(),
            serial: self.serial_filter.clone(),
            account: self.account,
            issued_after: self.issued_after.clone(),
            issued_before: self.issued_before.clone(),
            expires_after: self.expires_after.clone(),
            expires_before: self.expires_before.clone(),
            revoked,
        }
    }
}

/// What the server answered: a document, or its refusal (printed by the caller).
enum Reply<T> {
    Doc(T),
    Refused(String),
}

/// The admin API as this module calls it.
struct Api<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
}

impl Api<'_> {
    /// `base + path`, with each field of `query` (a flat serde struct) as a parameter.
    fn url(&self, path: &str, query: &impl Serialize) -> anyhow::Result<url::Url> {
        let mut url = url::Url::parse(&format!("{}{path}", self.base))?;
        if let serde_json::Value::Object(fields) = serde_json::to_value(query)? {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in fields {
                match value {
                    serde_json::Value::Null => {}
                    serde_json::Value::String(s) => {
                        pairs.append_pair(&key, &s);
                    }
                    other => {
                        pairs.append_pair(&key, &other.to_string());
                    }
                }
            }
        }
        Ok(url)
    }

    async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
    ) -> anyhow::Result<Reply<T>> {
        let url = self.url(path, query)?;
        Self::reply(self.client.get(url).send().await?).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> anyhow::Result<Reply<T>> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_string(body)?)
            .send()
            .await?;
        Self::reply(response).await
    }

    async fn reply<T: DeserializeOwned>(response: reqwest::Response) -> anyhow::Result<Reply<T>> {
        let ok = response.status().is_success();
        let text = response.text().await?;
        if ok {
            Ok(Reply::Doc(serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("unexpected answer from the admin API ({e}): {text}")
            })?))
        } else {
            Ok(Reply::Refused(text))
        }
    }
}

/// The document, or the refusal printed to stderr (`None`).
fn doc<T>(reply: Reply<T>) -> Option<T> {
    match reply {
        Reply::Doc(doc) => Some(doc),
        Reply::Refused(text) => {
            eprint!("{text}");
            if !text.ends_with('\n') {
                eprintln!();
            }
            None
        }
    }
}

fn print_json(doc: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(doc)?);
    Ok(())
}

/// Tab-separated rows aligned into columns.
fn print_table(header: &str, rows: impl IntoIterator<Item = String>) -> anyhow::Result<()> {
    let mut tw = tabwriter::TabWriter::new(Vec::new()).padding(2);
    writeln!(tw, "{header}")?;
    for row in rows {
        writeln!(tw, "{row}")?;
    }
    tw.flush()?;
    let out = tw
        .into_inner()
        .map_err(|e| anyhow::anyhow!("table: {}", e.error()))?;
    std::io::stdout().write_all(&out)?;
    Ok(())
}

fn next_page_hint(next: Option<i64>) {
    if let Some(before) = next {
        println!("(more: add --before {before})");
    }
}

/// Names without the `dns:` of every DNS name, for tables.
fn short_names(names: &[String]) -> String {
    names
        .iter()
        .map(|n| n.strip_prefix("dns:").unwrap_or(n))
        .collect::<Vec<_>>()
        .join(",")
}

fn time(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// Runs `certeasy admin accounts …`; `Ok(false)` when the server refused (printed).
pub async fn accounts(
    client: &reqwest::Client,
    base: &str,
    command: AccountsCommand,
) -> anyhow::Result<bool> {
    let api = Api { client, base };
    match command {
        AccountsCommand::List {
            status,
            contact,
            page,
            json,
        } => {
            #[derive(Serialize)]
            struct Query {
                status: Option<String>,
                contact: Option<String>,
                limit: u32,
                before: Option<i64>,
            }
            let query = Query {
                status,
                contact,
                limit: page.limit,
                before: page.before,
            };
            let Some(list) = doc(api.get::<AccountList>("/admin/accounts", &query).await?) else {
                return Ok(false);
            };
            if json {
                print_json(&list)?;
            } else {
                print_table(
                    "ID\tSTATUS\tCREATED\tCONTACTS\tKEY THUMBPRINT",
                    list.accounts.iter().map(|a| {
                        format!(
                            "{}\t{}\t{}\t{}\t{}",
                            a.id,
                            a.status,
                            time(a.created_at),
                            if a.contacts.is_empty() {
                                "-".to_owned()
                            } else {
                                a.contacts.join(",")
                            },
                            a.key_thumbprint
                        )
                    }),
                )?;
                next_page_hint(list.next_before);
            }
            Ok(true)
        }
        AccountsCommand::Show { id, json } => {
            let reply = api
                .get::<AccountDoc>(&format!("/admin/accounts/{id}"), &())
                .await?;
            let Some(account) = doc(reply) else {
                return Ok(false);
            };
            print_account(&account, json)?;
            Ok(true)
        }
        AccountsCommand::Deactivate { id, json } => {
            let reply = api
                .post::<AccountDoc>(&format!("/admin/accounts/{id}/deactivate"), &())
                .await?;
            let Some(account) = doc(reply) else {
                return Ok(false);
            };
            if json {
                print_json(&account)?;
            } else {
                println!("account {} deactivated", account.id);
            }
            Ok(true)
        }
    }
}

fn print_account(a: &AccountDoc, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(a);
    }
    let count = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    println!("account:         {}", a.id);
    println!("status:          {}", a.status);
    println!(
        "contacts:        {}",
        if a.contacts.is_empty() {
            "-".to_owned()
        } else {
            a.contacts.join(", ")
        }
    );
    println!("created:         {}", time(a.created_at));
    println!("key thumbprint:  {}", a.key_thumbprint);
    println!(
        "terms agreed:    {}",
        if a.terms_of_service_agreed {
            "yes"
        } else {
            "no"
        }
    );
    println!("orders:          {}", count(a.orders));
    println!(
        "certificates:    {} ({} revoked)",
        count(a.certificates),
        count(a.revoked_certificates)
    );
    Ok(())
}

fn print_certificate(c: &CertificateDoc, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(c);
    }
    println!("serial:          {}", c.serial);
    println!("names:           {}", c.names.join(", "));
    println!("account:         {}", c.account);
    println!("not before:      {}", time(c.not_before));
    println!("not after:       {}", time(c.not_after));
    println!("issued:          {}", time(c.issued_at));
    match c.revoked_at {
        Some(at) => println!(
            "revoked:         {} ({})",
            time(at),
            c.revocation_reason.as_deref().unwrap_or("unspecified")
        ),
        None => println!("revoked:         no"),
    }
    if let Some(pem) = &c.pem {
        print!("{pem}");
    }
    Ok(())
}

/// Runs `certeasy admin certificates …`; `Ok(false)` when the server refused (printed).
pub async fn certificates(
    client: &reqwest::Client,
    base: &str,
    command: CertificatesCommand,
) -> anyhow::Result<bool> {
    let api = Api { client, base };
    match command {
        CertificatesCommand::List {
            filter,
            revoked,
            not_revoked,
            page,
            json,
        } => {
            #[derive(Serialize)]
            struct Query {
                #[serde(flatten)]
                filter: CertificateQuery,
                limit: u32,
                before: Option<i64>,
            }
            let revoked = match (revoked, not_revoked) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let query = Query {
                filter: filter.query(revoked),
                limit: page.limit,
                before: page.before,
            };
            let reply = api
                .get::<CertificateList>("/admin/certificates", &query)
                .await?;
            let Some(list) = doc(reply) else {
                return Ok(false);
            };
            if json {
                print_json(&list)?;
            } else {
                print_table(
                    "ID\tSERIAL\tACCOUNT\tNOT AFTER\tREVOKED\tNAMES",
                    list.certificates.iter().map(|c| {
                        let revoked = match (&c.revoked_at, &c.revocation_reason) {
                            (Some(at), reason) => format!(
                                "{} ({})",
                                time(*at),
                                reason.as_deref().unwrap_or("unspecified")
                            ),
                            (None, _) => "-".to_owned(),
                        };
                        format!(
                            "{}\t{}\t{}\t{}\t{revoked}\t{}",
                            c.id,
                            c.serial,
                            c.account,
                            time(c.not_after),
                            short_names(&c.names)
                        )
                    }),
                )?;
                next_page_hint(list.next_before);
            }
            Ok(true)
        }
        CertificatesCommand::RenewEarly {
            serial,
            account,
            name,
            json,
        } => {
            #[derive(Serialize)]
            struct Body {
                #[serde(skip_serializing_if = "Option::is_none")]
                serial: Option<String>,
                #[serde(skip_serializing_if = "Option::is_none")]
                account: Option<i64>,
                #[serde(skip_serializing_if = "Option::is_none")]
                name: Option<String>,
            }
            if usize::from(serial.is_some())
                + usize::from(account.is_some())
                + usize::from(name.is_some())
                != 1
            {
                anyhow::bail!("name exactly one of SERIAL, --account and --name");
            }
            let reply = api
                .post::<CountDoc>(
                    "/admin/certificates/renew-early",
                    &Body {
                        serial,
                        account,
                        name,
                    },
                )
                .await?;
            let Some(count) = doc(reply) else {
                return Ok(false);
            };
            if json {
                print_json(&count)?;
            } else {
                println!("{} certificate(s) marked for early renewal", count.count);
            }
            Ok(true)
        }
        CertificatesCommand::Show { serial, pem, json } => {
            #[derive(Serialize)]
            struct Query {
                pem: bool,
            }
            let reply = api
                .get::<CertificateDoc>(
                    &format!("/admin/certificates/{}", encode_serial(&serial)),
                    &Query { pem },
                )
                .await?;
            let Some(cert) = doc(reply) else {
                return Ok(false);
            };
            print_certificate(&cert, json)?;
            Ok(true)
        }
        CertificatesCommand::Revoke {
            serial,
            reason,
            filter,
            batch,
            json,
        } => {
            // Checked here too, so a typo fails before anything is counted or sent.
            let reason_name = parse_reason(&reason)
                .map_err(|e| anyhow::anyhow!(e))?
                .as_str();
            let query = filter.query(None);
            match serial {
                Some(serial) => {
                    if query != CertificateQuery::default() {
                        anyhow::bail!("give either a SERIAL or filters, not both");
                    }
                    let reply = api
                        .post::<CertificateDoc>(
                            &format!("/admin/certificates/{}/revoke", encode_serial(&serial)),
                            &RevokeBody {
                                reason: reason_name.to_owned(),
                            },
                        )
                        .await?;
                    let Some(cert) = doc(reply) else {
                        return Ok(false);
                    };
                    if json {
                        print_json(&cert)?;
                    } else {
                        println!("certificate {} revoked ({reason_name})", cert.serial);
                    }
                    Ok(true)
                }
                None => bulk_revoke(&api, query, reason_name, batch, json).await,
            }
        }
    }
}

/// What `certificates revoke` without a serial prints with `--json`.
#[derive(Debug, Serialize)]
struct BulkSummary<'a> {
    revoked: u64,
    reason: &'a str,
    batches: u64,
}

/// Counts the selection, then revokes it a batch per request, the bar advancing per batch.
async fn bulk_revoke(
    api: &Api<'_>,
    filter: CertificateQuery,
    reason: &str,
    batch: u32,
    json: bool,
) -> anyhow::Result<bool> {
    let Some(CountDoc { count }) = doc(api
        .get::<CountDoc>("/admin/certificates/count", &filter)
        .await?)
    else {
        return Ok(false);
    };
    let bar = if json || !std::io::stdout().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(count);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} certificates revoked")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    };
    let mut before = None;
    let mut revoked = 0_u64;
    let mut batches = 0_u64;
    loop {
        let body = BulkRevokeBody {
            filter: filter.clone(),
            reason: reason.to_owned(),
            before,
            batch: Some(batch),
        };
        let reply = api
            .post::<BatchDoc>("/admin/certificates/revoke", &body)
            .await?;
        let Some(step) = doc(reply) else {
            bar.abandon();
            eprintln!("stopped after {revoked} certificates revoked");
            return Ok(false);
        };
        batches += 1;
        revoked += step.revoked.len() as u64;
        bar.inc(step.revoked.len() as u64);
        match step.next_before {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    bar.finish_and_clear();
    if json {
        print_json(&BulkSummary {
            revoked,
            reason,
            batches,
        })?;
    } else {
        println!("{revoked} certificates revoked ({reason})");
    }
    Ok(true)
}

/// A serial as a path segment: hex and colons need no escaping; anything else is the server's
/// to refuse, so it is percent-encoded rather than allowed to change the path.
fn encode_serial(serial: &str) -> String {
    serial
        .trim()
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b':' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Runs `certeasy admin backup`: one request, answered when the server has written the copy, with
/// a spinner on a terminal meanwhile. `Ok(false)` when the server refused (printed).
pub async fn backup(client: &reqwest::Client, base: &str, json: bool) -> anyhow::Result<bool> {
    let spinner = if std::io::stderr().is_terminal() {
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.set_message("backing up the database (the server goes on serving)");
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    } else {
        indicatif::ProgressBar::hidden()
    };
    let sent = client
        .post(format!("{base}/admin/backup"))
        .timeout(BACKUP_TIMEOUT)
        .send()
        .await;
    spinner.finish_and_clear();
    let Some(done) = doc(Api::reply::<BackupDoc>(sent?).await?) else {
        return Ok(false);
    };
    if json {
        print_json(&done)?;
    } else {
        println!(
            "database backed up to {} ({} bytes in {:.1} s)",
            done.path, done.bytes, done.seconds
        );
    }
    Ok(true)
}
