//! `certeasy admin accounts …` and `certeasy admin certificates …`: listings as tables, one
//! record as labelled lines, bulk revocation a batch per request.

use std::io::IsTerminal;

use serde::Serialize;

use super::Out;
use super::accepted;
use super::time;
use crate::admin_client::AdminClient;
use crate::admin_wire::AccountDoc;
use crate::admin_wire::AccountQuery;
use crate::admin_wire::BulkRevokeBody;
use crate::admin_wire::CertificateDoc;
use crate::admin_wire::CertificateQuery;
use crate::admin_wire::CountDoc;
use crate::admin_wire::PageQuery;
use crate::admin_wire::RenewEarlyBody;
use crate::admin_wire::RevokeBody;
use crate::admin_wire::parse_reason;
use crate::cli::admin::AccountsCommand;
use crate::cli::admin::CertificatesCommand;
use crate::cli::admin::PageArgs;
use crate::table::Table;

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

pub(super) async fn accounts(
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

pub(super) async fn certificates(
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
            // A usage error, not an unreachable listener: said as such, exit 1.
            let reason = match parse_reason(&reason) {
                Ok(reason) => reason.as_str(),
                Err(e) => {
                    eprintln!("{e}");
                    return Ok(false);
                }
            };
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

/// What `certificates revoke` without a serial prints with `--json`: one document at the end.
#[derive(Debug, Serialize)]
struct BulkSummary<'a> {
    /// Unrevoked certificates the filters selected when the run began.
    selected: u64,
    /// Revoked by this run (fewer than selected when others revoked some meanwhile).
    revoked: u64,
    reason: &'a str,
    /// Requests made, one per batch.
    batches: u64,
    seconds: f64,
}

/// The bar of a bulk revocation: drawn on stderr when stderr is a terminal (so `--json` on
/// stdout, or stdout piped, still shows it), hidden otherwise.
fn revoke_bar(count: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(count),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} certificates revoked ({rate}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        // indicatif's own {per_sec} prints four decimals ("2,426.4826/s").
        .with_key(
            "rate",
            |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.0}/s", state.per_sec());
            },
        ),
    );
    bar
}

/// Counts the selection, then revokes it a batch per request, the bar advancing per batch.
async fn bulk_revoke(
    client: &AdminClient,
    out: Out,
    filter: CertificateQuery,
    reason: &str,
    batch: u32,
) -> anyhow::Result<bool> {
    let started = std::time::Instant::now();
    let Some(CountDoc { count }) = accepted(client.count_revocable(&filter).await?) else {
        return Ok(false);
    };
    let bar = revoke_bar(count);
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
        let step = match client.revoke_batch(&body).await {
            Ok(reply) => accepted(reply),
            Err(e) => {
                bar.abandon();
                eprintln!("{}", stopped(revoked));
                return Err(e);
            }
        };
        let Some(step) = step else {
            bar.abandon();
            eprintln!("{}", stopped(revoked));
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
        selected: count,
        revoked,
        reason,
        batches,
        seconds: started.elapsed().as_secs_f64(),
    };
    if !out.json(&summary)? {
        println!("{revoked} certificates revoked ({reason})");
    }
    Ok(true)
}

/// What an interrupted bulk revocation tells the operator: what is done, and how to finish.
fn stopped(revoked: u64) -> String {
    format!(
        "stopped after {revoked} certificates revoked; run the same command again to revoke \
         the rest (those revoked are skipped)"
    )
}
