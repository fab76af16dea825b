//! Runs `certeasy admin …` (the commands of `cli/admin.rs`) through [`AdminClient`]: the
//! documents it returns are printed as they come with `--json`, otherwise as tables
//! ([`Table`]) and labelled lines; the operational routes' text is printed as it is.
//!
//! Exit codes: 0 done; 1 the server refused (its `detail` on stderr) or could not be reached;
//! 2 the command line or the configuration/token file is wrong.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::admin_client::AdminClient;
use crate::admin_client::Reply;
use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountQuery;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::EabCreateBody;
use crate::admin_wire::EabKeyDoc;
use crate::admin_wire::EabRevokeQuery;
use crate::admin_wire::KeyBody;
use crate::admin_wire::PageQuery;
use crate::admin_wire::PauseBody;
use crate::admin_wire::PauseQuery;
use crate::admin_wire::RenewEarlyBody;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::parse_identifier;
use crate::admin_wire::parse_reason;
use crate::cli::admin::AccountsCommand;
use crate::cli::admin::AdminCommand;
use crate::cli::admin::AdminOptions;
use crate::cli::admin::CertificatesCommand;
use crate::cli::admin::EabCommand;
use crate::cli::admin::KeysCommand;
use crate::cli::admin::PageArgs;
use crate::cli::admin::PausesCommand;
use crate::cli::admin::RatelimitCommand;
use crate::table::Table;

/// Runs one admin command: finds the listener and the token (`--config`, `--admin-url`,
/// `--token-file`), then asks the server.
pub fn run(options: AdminOptions, command: AdminCommand) -> ExitCode {
    if let (true, Some(name)) = (options.json, command.text_only()) {
        eprintln!("certeasy admin {name} prints the server's text; it has no --json form");
        return ExitCode::from(2);
    }
    let config = match crate::cli::load_or_default(options.config.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let base = match options.admin_url {
        Some(url) => url,
        None => format!("http://{}", config.server.admin_listen),
    };
    let token_path = options
        .token_file
        .unwrap_or_else(|| config.admin_token_path());
    let token = match crate::admin_token::read(&token_path) {
        Ok(token) => token,
        Err(e) => {
            eprintln!("{e:#} (pass --config or --token-file)");
            return ExitCode::from(2);
        }
    };
    let client = match AdminClient::new(&base, &token) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("cannot reach the admin listener at {base}: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = Out { json: options.json };
    match runtime.block_on(dispatch(&client, out, command)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cannot reach the admin listener at {base}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How to print documents: as they come (`--json`) or for people.
#[derive(Debug, Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    /// With `--json`, prints `doc` and answers true: the caller has nothing left to print.
    fn json(self, doc: &impl Serialize) -> anyhow::Result<bool> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(doc)?);
        }
        Ok(self.json)
    }
}

/// The document, or `None` once the refusal is printed to stderr.
fn accepted<T>(reply: Reply<T>) -> Option<T> {
    match reply {
        Ok(doc) => Some(doc),
        Err(refused) => {
            eprintln!("{}", refused.detail);
            None
        }
    }
}

/// The text of an operational route printed as it is; `false` when refused.
fn print_text(reply: Reply<String>) -> bool {
    accepted(reply).map(|text| print!("{text}")).is_some()
}

/// Runs `command`; `Ok(false)` when the server refused it (its answer is printed).
async fn dispatch(client: &AdminClient, out: Out, command: AdminCommand) -> anyhow::Result<bool> {
    match command {
        AdminCommand::Reload => Ok(print_text(client.reload().await?)),
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Show { limit, id },
        } => Ok(print_text(client.bucket(&limit, &id).await?)),
        AdminCommand::Ratelimit {
            command: RatelimitCommand::Reset { limit, id },
        } => Ok(print_text(client.reset_bucket(&limit, &id).await?)),
        AdminCommand::Pauses {
            command: PausesCommand::List { account, all },
        } => {
            let query = PauseQuery {
                account,
                all,
                limit: None,
            };
            Ok(print_text(client.pauses(&query).await?))
        }
        AdminCommand::Pause {
            account,
            file,
            names,
        } => pause(client, account, collect_names(file, names)?, Verb::Pause).await,
        AdminCommand::Unpause {
            account,
            file,
            names,
        } => {
            let names = collect_names(file, names)?;
            if names.is_empty() {
                unpause_all(client, account).await
            } else {
                pause(client, account, names, Verb::Unpause).await
            }
        }
        AdminCommand::Backup => backup(client, out).await,
        AdminCommand::Accounts { command } => accounts(client, out, command).await,
        AdminCommand::Certificates { command } => certificates(client, out, *command).await,
        AdminCommand::Eab { command } => eab(client, out, command).await,
        AdminCommand::Keys { command } => keys(client, out, command).await,
    }
}

// ---- pauses ----

#[derive(Debug, Clone, Copy)]
enum Verb {
    Pause,
    Unpause,
}

impl Verb {
    fn done(self) -> &'static str {
        match self {
            Self::Pause => "paused",
            Self::Unpause => "unpaused",
        }
    }
}

/// The identifiers of the command line and of `--file` (one per line, `#` comments), each
/// checked before anything is sent.
fn collect_names(file: Option<PathBuf>, mut names: Vec<String>) -> anyhow::Result<Vec<String>> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        names.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
    }
    for n in &names {
        parse_identifier(n).map_err(|e| anyhow::anyhow!("{n}: {e}"))?;
    }
    Ok(names)
}

/// Sends names in chunks of 1,000 with a progress bar.
async fn pause(
    client: &AdminClient,
    account: i64,
    names: Vec<String>,
    verb: Verb,
) -> anyhow::Result<bool> {
    if names.is_empty() {
        anyhow::bail!("no identifiers given (pass names or --file)");
    }
    let bar = indicatif::ProgressBar::new(names.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} identifiers {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut done = 0_u64;
    for chunk in names.chunks(1_000) {
        let body = PauseBody {
            account,
            identifiers: chunk.to_vec(),
        };
        let reply = match verb {
            Verb::Pause => client.pause(&body).await?,
            Verb::Unpause => client.unpause(&body).await?,
        };
        let Some(n) = accepted(reply) else {
            bar.abandon();
            return Ok(false);
        };
        done += n;
        bar.inc(chunk.len() as u64);
    }
    let verb = verb.done();
    bar.finish_with_message(format!("({done} {verb})"));
    println!(
        "{done} of {} identifiers of account {account} {verb}",
        names.len()
    );
    Ok(true)
}

/// Every pause of the account: the server unpauses up to `MAX_PER_CLICK` per call, so this
/// repeats until a call unpauses fewer.
async fn unpause_all(client: &AdminClient, account: i64) -> anyhow::Result<bool> {
    let mut total = 0_u64;
    loop {
        let body = PauseBody {
            account,
            identifiers: Vec::new(),
        };
        let Some(n) = accepted(client.unpause(&body).await?) else {
            return Ok(false);
        };
        total += n;
        if n < u64::from(acme_api::unpause::MAX_PER_CLICK) {
            break;
        }
    }
    println!("{total} pairs of account {account} unpaused");
    Ok(true)
}

// ---- backup ----

/// One request, answered when the server has written the copy, with a spinner on a terminal
/// meanwhile.
async fn backup(client: &AdminClient, out: Out) -> anyhow::Result<bool> {
    let spinner = if std::io::stderr().is_terminal() {
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.set_message("backing up the database (the server goes on serving)");
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    } else {
        indicatif::ProgressBar::hidden()
    };
    let reply = client.backup().await;
    spinner.finish_and_clear();
    let Some(done) = accepted(reply?) else {
        return Ok(false);
    };
    if !out.json(&done)? {
        println!(
            "database backed up to {} ({} bytes in {:.1} s)",
            done.path, done.bytes, done.seconds
        );
    }
    Ok(true)
}

// ---- accounts and certificates ----

fn page(args: &PageArgs) -> PageQuery {
    PageQuery {
        before: args.before,
        limit: Some(args.limit),
    }
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

async fn accounts(
    client: &AdminClient,
    out: Out,
    command: AccountsCommand,
) -> anyhow::Result<bool> {
    match command {
        AccountsCommand::List {
            status,
            contact,
            page: page_args,
        } => {
            let filter = AccountQuery { status, contact };
            let Some(list) = accepted(client.accounts(&filter, &page(&page_args)).await?) else {
                return Ok(false);
            };
            if !out.json(&list)? {
                let mut table =
                    Table::new(&["ID", "STATUS", "CREATED", "CONTACTS", "KEY THUMBPRINT"]);
                for a in &list.accounts {
                    table.row([
                        a.id.to_string(),
                        a.status.clone(),
                        time(a.created_at),
                        a.contacts.join(","),
                        a.key_thumbprint.clone(),
                    ]);
                }
                table.print()?;
                next_page_hint(list.next_before);
            }
            Ok(true)
        }
        AccountsCommand::Show { id } => {
            let Some(account) = accepted(client.account(id).await?) else {
                return Ok(false);
            };
            if !out.json(&account)? {
                print_account(&account);
            }
            Ok(true)
        }
        AccountsCommand::Deactivate { id } => {
            let Some(account) = accepted(client.deactivate_account(id).await?) else {
                return Ok(false);
            };
            if !out.json(&account)? {
                println!("account {} deactivated", account.id);
            }
            Ok(true)
        }
    }
}

fn print_account(a: &AccountDoc) {
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
}

fn print_certificate(c: &CertificateDoc) {
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
}

async fn certificates(
    client: &AdminClient,
    out: Out,
    command: CertificatesCommand,
) -> anyhow::Result<bool> {
    match command {
        CertificatesCommand::List {
            filter,
            revoked,
            not_revoked,
            page: page_args,
        } => {
            let revoked = match (revoked, not_revoked) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            };
            let reply = client
                .certificates(&filter.query(revoked), &page(&page_args))
                .await?;
            let Some(list) = accepted(reply) else {
                return Ok(false);
            };
            if !out.json(&list)? {
                let mut table =
                    Table::new(&["ID", "SERIAL", "ACCOUNT", "NOT AFTER", "REVOKED", "NAMES"]);
                for c in &list.certificates {
                    let revoked = c.revoked_at.map(|at| {
                        format!(
                            "{} ({})",
                            time(at),
                            c.revocation_reason.as_deref().unwrap_or("unspecified")
                        )
                    });
                    table.row([
                        c.id.to_string(),
                        c.serial.clone(),
                        c.account.to_string(),
                        time(c.not_after),
                        revoked.unwrap_or_default(),
                        short_names(&c.names),
                    ]);
                }
                table.print()?;
                next_page_hint(list.next_before);
            }
            Ok(true)
        }
        CertificatesCommand::RenewEarly {
            serial,
            account,
            name,
        } => {
            if usize::from(serial.is_some())
                + usize::from(account.is_some())
                + usize::from(name.is_some())
                != 1
            {
                anyhow::bail!("name exactly one of SERIAL, --account and --name");
            }
            let body = RenewEarlyBody {
                serial,
                account,
                name,
            };
            let Some(count) = accepted(client.renew_early(&body).await?) else {
                return Ok(false);
            };
            if !out.json(&count)? {
                println!("{} certificate(s) marked for early renewal", count.count);
            }
            Ok(true)
        }
        CertificatesCommand::Show { serial, pem } => {
            let Some(cert) = accepted(client.certificate(&serial, pem).await?) else {
                return Ok(false);
            };
            if !out.json(&cert)? {
                print_certificate(&cert);
            }
            Ok(true)
        }
        CertificatesCommand::Revoke {
            serial,
            reason,
            filter,
            batch,
        } => {
            // Checked here too, so a typo fails before anything is counted or sent.
            let reason = parse_reason(&reason)
                .map_err(|e| anyhow::anyhow!(e))?
                .as_str();
            let query = filter.query(None);
            let Some(serial) = serial else {
                return bulk_revoke(client, out, query, reason, batch).await;
            };
            if query != CertificateQuery::default() {
                anyhow::bail!("give either a SERIAL or filters, not both");
            }
            let body = RevokeBody {
                reason: reason.to_owned(),
            };
            let Some(cert) = accepted(client.revoke(&serial, &body).await?) else {
                return Ok(false);
            };
            if !out.json(&cert)? {
                println!("certificate {} revoked ({reason})", cert.serial);
            }
            Ok(true)
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
    client: &AdminClient,
    out: Out,
    filter: CertificateQuery,
    reason: &str,
    batch: u32,
) -> anyhow::Result<bool> {
    let Some(CountDoc { count }) = accepted(client.count_revocable(&filter).await?) else {
        return Ok(false);
    };
    let bar = if out.json || !std::io::stdout().is_terminal() {
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
        let Some(step) = accepted(client.revoke_batch(&body).await?) else {
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
    let summary = BulkSummary {
        revoked,
        reason,
        batches,
    };
    if !out.json(&summary)? {
        println!("{revoked} certificates revoked ({reason})");
    }
    Ok(true)
}

// ---- external account binding keys ----

/// The columns of a key, in the order of [`EAB_HEADER`]; `-` for an empty field.
fn eab_cells(key: &EabKeyDoc) -> [String; 9] {
    let list = |items: &[String]| items.join(",");
    let or_dash = |s: &Option<String>| s.clone().unwrap_or_default();
    [
        key.kid.clone(),
        list(&key.domains),
        list(&key.cidrs),
        list(&key.profiles),
        or_dash(&key.max_validity),
        or_dash(&key.expires_at),
        key.reusable.to_string(),
        or_dash(&key.revoked_at),
        key.bound_accounts.to_string(),
    ]
    .map(|cell| {
        if cell.is_empty() {
            "-".to_owned()
        } else {
            cell
        }
    })
}

const EAB_HEADER: [&str; 9] = [
    "kid",
    "domains",
    "cidrs",
    "profiles",
    "max-validity",
    "expires-at",
    "reusable",
    "revoked-at",
    "bound-accounts",
];

async fn eab(client: &AdminClient, out: Out, command: EabCommand) -> anyhow::Result<bool> {
    match command {
        EabCommand::Create {
            domains,
            cidrs,
            profiles,
            max_validity,
            expires_in,
            reusable,
        } => {
            let body = EabCreateBody {
                domains,
                cidrs,
                profiles,
                max_validity,
                expires_in,
                reusable,
            };
            let Some(key) = accepted(client.create_eab_key(&body).await?) else {
                return Ok(false);
            };
            if out.json(&key)? {
                return Ok(true);
            }
            let hmac = key.hmac_key.as_deref().unwrap_or_default();
            println!("Key ID:   {}", key.kid);
            println!("HMAC key: {hmac}");
            // The `=` form: a base64url key may start with '-', which argument parsers would
            // otherwise take for an option.
            println!("The HMAC key is shown only now. Give both to the ACME client, e.g.");
            println!("  certbot --eab-kid={} --eab-hmac-key={hmac}", key.kid);
            println!("  lego --eab --kid={} --hmac={hmac}", key.kid);
            println!("Policy: {}", eab_cells(&key).join("\t"));
            Ok(true)
        }
        EabCommand::List => {
            let Some(keys) = accepted(client.eab_keys().await?) else {
                return Ok(false);
            };
            if !out.json(&keys)? {
                let mut table = Table::new(&EAB_HEADER);
                for key in &keys {
                    table.row(eab_cells(key));
                }
                table.print()?;
            }
            Ok(true)
        }
        EabCommand::Revoke {
            kid,
            deactivate_accounts,
        } => {
            let query = EabRevokeQuery {
                deactivate_accounts,
            };
            let Some(key) = accepted(client.revoke_eab_key(&kid, &query).await?) else {
                return Ok(false);
            };
            if !out.json(&key)? {
                println!("revoked: {}", eab_cells(&key).join("\t"));
                if let Some(count) = key.deactivated_accounts {
                    println!("deactivated accounts: {count}");
                }
            }
            Ok(true)
        }
    }
}

// ---- blocked keys ----

/// The text to send for KEY: a file's content when KEY names a file, else KEY itself.
fn key_text(key: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(key);
    if path.is_file() {
        return std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()));
    }
    Ok(key.to_owned())
}

async fn keys(client: &AdminClient, out: Out, command: KeysCommand) -> anyhow::Result<bool> {
    match command {
        KeysCommand::Block { key, reason } => {
            let body = KeyBody {
                key: key_text(&key)?,
                reason,
            };
            let Some(doc) = accepted(client.block_key(&body).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                println!("blocked {}", doc.spki_sha256);
            }
        }
        KeysCommand::Unblock { key } => {
            let body = KeyBody {
                key: key_text(&key)?,
                reason: String::new(),
            };
            let Some(doc) = accepted(client.unblock_key(&body).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                println!("unblocked {}", doc.spki_sha256);
            }
        }
        KeysCommand::List => {
            let Some(docs) = accepted(client.blocked_keys().await?) else {
                return Ok(false);
            };
            if !out.json(&docs)? {
                let mut table = Table::new(&["SPKI SHA-256", "SOURCE", "BLOCKED AT", "REASON"]);
                for d in &docs {
                    table.row([
                        d.spki_sha256.clone(),
                        d.source.clone(),
                        d.blocked_at.map(time).unwrap_or_default(),
                        d.reason.clone(),
                    ]);
                }
                table.print()?;
            }
        }
    }
    Ok(true)
}
