//! Runs `certeasy admin …` (the commands of `cli/admin.rs`) through [`AdminClient`]: the
//! documents it returns are printed as they come with `--json`, otherwise as tables
//! (`crate::table`) and labelled lines; the operational routes' text is printed as it is.
//! Accounts and certificates are in `records.rs`, EAB and blocked keys in `keys.rs`.
//!
//! Exit codes: 0 done; 1 the server refused (its `detail` on stderr) or could not be reached;
//! 2 the command line or the configuration/token file is wrong.

pub mod audit;
pub mod ca;
mod keys;
pub mod overrides;
mod records;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::admin_client::AdminClient;
use crate::admin_client::Reply;
use crate::admin_wire::PauseBody;
use crate::admin_wire::PauseQuery;
use crate::admin_wire::parse_identifier;
use crate::cli::admin::AdminCommand;
use crate::cli::admin::AdminOptions;
use crate::cli::admin::PausesCommand;
use crate::cli::admin::RatelimitCommand;

/// Runs one admin command: finds the listener and the token (`--config`, `--admin-url`,
/// `--token-file`), then asks the server.
pub fn run(options: AdminOptions, command: AdminCommand) -> ExitCode {
    if let (true, Some(name)) = (options.json, command.text_only()) {
        eprintln!("certeasy admin {name} prints the server's text; it has no --json form");
        return ExitCode::from(2);
    }
    let config = match crate::config::load_or_default(options.config.as_deref()) {
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
    // Who runs the command, for the audit log: the name given, or the login sudo came from,
    // or the user.
    let operator = options
        .operator
        .or_else(|| std::env::var("SUDO_USER").ok())
        .or_else(|| std::env::var("USER").ok());
    let client = match AdminClient::new_as(&base, &token, operator.as_deref()) {
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
        AdminCommand::Accounts { command } => records::accounts(client, out, command).await,
        AdminCommand::Certificates { command } => {
            records::certificates(client, out, *command).await
        }
        AdminCommand::Eab { command } => keys::eab(client, out, command).await,
        AdminCommand::Keys { command } => keys::keys(client, out, command).await,
        AdminCommand::Overrides { command } => overrides::overrides(client, out, command).await,
        AdminCommand::Audit { command } => audit::audit(client, out, command).await,
        AdminCommand::Ca { command } => ca::ca(client, out, command).await,
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

/// RFC 3339, as the documents carry times.
fn time(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}
