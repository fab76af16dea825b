//! `certeasy admin audit list|show|export|verify`: the audit log through `/admin/audit…`
//! (`admin_audit.rs`).
//!
//! `verify` exits 1 when the chain is broken (naming the first broken record) or the head hash
//! given with `--expect-head` is not in it, and prints the head seq and hash either way: kept
//! somewhere the database's writers cannot reach, that hash is what makes a rewrite of the whole
//! chain detectable. `export` writes one JSON document per line (`AuditRecordDoc`, fields in a
//! fixed order), oldest first, in pages, with a progress bar on a terminal.

use std::io::IsTerminal;
use std::io::Write;
use std::path::PathBuf;

use acme_core::duration::ConfigDuration;
use clap::Args;
use clap::Subcommand;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::Out;
use super::accepted;
use super::time;
use crate::admin_audit::AuditQuery;
use crate::admin_audit::AuditRecordDoc;
use crate::admin_audit::VerifyQuery;
use crate::admin_client::AdminClient;
use crate::table::Table;

/// Records an export asks for per request.
const EXPORT_PAGE: u32 = 2_000;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// List records, newest first, as a table (or --json).
    #[command(
        after_long_help = "Examples:\n  certeasy admin audit list --since 24h\n  certeasy admin audit list --account 42 --kind certificate-revoked\n  certeasy admin audit list --name www.example.com --json"
    )]
    List {
        #[command(flatten)]
        filter: AuditFilterArgs,
        /// At most this many records.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Records before this seq (the next page of a listing).
        #[arg(long)]
        before: Option<i64>,
    },
    /// Show one record by its seq, or every record of a certificate with --serial (then also
    /// the validation evidence kept for it).
    Show {
        /// The record's seq.
        #[arg(required_unless_present = "serial", conflicts_with = "serial")]
        seq: Option<i64>,
        /// A certificate's serial (hex, colons allowed).
        #[arg(long)]
        serial: Option<String>,
    },
    /// Write records as JSON lines (one per line, oldest first) for a SIEM: to stdout, or to
    /// --out FILE with a progress bar on a terminal.
    #[command(
        after_long_help = "Examples:\n  certeasy admin audit export --since 2026-01-01 --out audit-2026.jsonl\n  certeasy admin audit export --kind certificate-issued | jq .names\n  certeasy admin audit export --after-seq \"$(tail -n1 shipped.jsonl | jq .seq)\" >> shipped.jsonl"
    )]
    Export {
        #[command(flatten)]
        filter: AuditFilterArgs,
        /// Only records after this seq: the seq of the last line already shipped, for a
        /// continuous feed. Prefer it to --since there: seq is the chain's order, and a record
        /// chained a moment after its decision can carry an earlier time than one shipped before.
        #[arg(long, value_name = "SEQ", default_value_t = 0)]
        after_seq: i64,
        /// The file to write (created, or truncated); default stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Check the hash chain: every record's hash recomputed from its stored fields, every link,
    /// no seq missing, the head matching the newest record. Prints the head seq and hash (keep
    /// them elsewhere); exits 1 when the chain is broken, naming the first broken record.
    Verify {
        /// A head hash kept from an earlier verify: fails unless the chain still holds it.
        #[arg(long, value_name = "HASH")]
        expect_head: Option<String>,
    },
}

/// The filters of `list` and `export`.
#[derive(Debug, Clone, Default, Args)]
pub struct AuditFilterArgs {
    /// Records at or after this time: RFC 3339, a date (UTC midnight), or a duration back from
    /// now (30m, 24h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Records at or before this time (same forms as --since).
    #[arg(long)]
    pub until: Option<String>,
    /// Records of this account id.
    #[arg(long)]
    pub account: Option<i64>,
    /// Records naming this identifier (a whole DNS name or IP address).
    #[arg(long)]
    pub name: Option<String>,
    /// Records of this certificate serial (hex).
    #[arg(long)]
    pub serial: Option<String>,
    /// Records of this kind (certificate_issued, certificate-revoked, account_paused, …).
    #[arg(long)]
    pub kind: Option<String>,
}

/// `24h` is 24 hours before `now`; anything else goes to the server as it is (RFC 3339 or a
/// date, which it parses and refuses with the reason).
fn resolve_time(text: &str, now: OffsetDateTime) -> anyhow::Result<String> {
    let Ok(back) = text.parse::<ConfigDuration>() else {
        return Ok(text.to_owned());
    };
    let at = now - back.time();
    Ok(at.format(&Rfc3339)?)
}

impl AuditFilterArgs {
    fn query(&self, now: OffsetDateTime) -> anyhow::Result<AuditQuery> {
        Ok(AuditQuery {
            since: self
                .since
                .as_deref()
                .map(|t| resolve_time(t, now))
                .transpose()?,
            until: self
                .until
                .as_deref()
                .map(|t| resolve_time(t, now))
                .transpose()?,
            account: self.account,
            name: self.name.clone(),
            serial: self.serial.clone(),
            kind: self.kind.clone(),
            ..AuditQuery::default()
        })
    }
}

/// Who acted, for a table cell.
fn actor(doc: &AuditRecordDoc) -> String {
    let a = &doc.actor;
    match (a.id.as_deref(), a.operator.as_deref()) {
        (Some(id), Some(op)) => format!("{} {op} ({id})", a.kind),
        (Some(id), None) => format!("{} {id}", a.kind),
        (None, _) => a.kind.clone(),
    }
}

fn or_dash(s: Option<String>) -> String {
    s.filter(|s| !s.is_empty())
        .unwrap_or_else(|| "-".to_owned())
}

fn print_record(doc: &AuditRecordDoc) {
    println!("seq:        {}", doc.seq);
    println!("at:         {}", time(doc.at));
    println!("kind:       {}", doc.kind);
    println!("actor:      {}", actor(doc));
    println!("client ip:  {}", or_dash(doc.client_ip.clone()));
    println!(
        "account:    {}",
        or_dash(doc.account.map(|a| a.to_string()))
    );
    println!("serial:     {}", or_dash(doc.serial.clone()));
    println!("names:      {}", or_dash(Some(doc.names.join(", "))));
    println!("reason:     {}", doc.reason);
    if !doc.detail.is_null() {
        println!("detail:     {}", doc.detail);
    }
    println!("prev hash:  {}", doc.prev_hash);
    println!("hash:       {}", doc.hash);
}

pub(super) async fn audit(
    client: &AdminClient,
    out: Out,
    command: AuditCommand,
) -> anyhow::Result<bool> {
    let now = OffsetDateTime::now_utc();
    match command {
        AuditCommand::List {
            filter,
            limit,
            before,
        } => {
            let query = AuditQuery {
                limit: Some(limit),
                before_seq: before,
                ..filter.query(now)?
            };
            let Some(records) = accepted(client.audit_records(&query).await?) else {
                return Ok(false);
            };
            if out.json(&records)? {
                return Ok(true);
            }
            let mut table = Table::new(&[
                "SEQ", "AT", "KIND", "ACTOR", "IP", "ACCOUNT", "SERIAL", "NAMES", "REASON",
            ]);
            for r in &records {
                table.row([
                    r.seq.to_string(),
                    time(r.at),
                    r.kind.clone(),
                    actor(r),
                    or_dash(r.client_ip.clone()),
                    or_dash(r.account.map(|a| a.to_string())),
                    or_dash(r.serial.clone()),
                    or_dash(Some(r.names.join(","))),
                    r.reason.clone(),
                ]);
            }
            table.print()?;
            if records.len() == limit as usize
                && let Some(last) = records.last()
            {
                println!("(more: add --before {})", last.seq);
            }
            Ok(true)
        }
        AuditCommand::Show { seq: Some(seq), .. } => {
            let Some(doc) = accepted(client.audit_record(seq).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                print_record(&doc);
            }
            Ok(true)
        }
        AuditCommand::Show {
            seq: None,
            serial: Some(serial),
        } => show_serial(client, out, &serial).await,
        AuditCommand::Show {
            seq: None,
            serial: None,
        } => anyhow::bail!("name a record's seq or --serial"),
        AuditCommand::Export {
            filter,
            after_seq,
            out: path,
        } => export(client, filter.query(now)?, after_seq, path).await,
        AuditCommand::Verify { expect_head } => verify(client, out, expect_head).await,
    }
}

/// Every record of the certificate, oldest first, then its validation evidence.
async fn show_serial(client: &AdminClient, out: Out, serial: &str) -> anyhow::Result<bool> {
    let query = AuditQuery {
        serial: Some(serial.to_owned()),
        after_seq: Some(0),
        limit: Some(storage::audit::MAX_LIMIT),
        ..AuditQuery::default()
    };
    let Some(records) = accepted(client.audit_records(&query).await?) else {
        return Ok(false);
    };
    let Some(evidence) = accepted(client.certificate_evidence(serial).await?) else {
        return Ok(false);
    };
    if out.json(&serde_json::json!({ "records": records, "evidence": evidence }))? {
        return Ok(true);
    }
    if records.is_empty() {
        println!("no audit record names serial {serial}");
    }
    for (i, doc) in records.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print_record(doc);
    }
    println!();
    match evidence.as_array() {
        Some(items) if !items.is_empty() => {
            println!("validation evidence:");
            for item in items {
                println!("  {item}");
            }
        }
        _ => println!("validation evidence: none kept for this serial"),
    }
    Ok(true)
}

/// Pages oldest first through the records the filters select, one JSON line each.
async fn export(
    client: &AdminClient,
    query: AuditQuery,
    after_seq: i64,
    path: Option<PathBuf>,
) -> anyhow::Result<bool> {
    let mut sink: Box<dyn Write> = match &path {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| anyhow::anyhow!("creating {}: {e}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    // The bar follows the seq up to the head: the filters may skip records, the seqs do not.
    let bar = if path.is_some() && std::io::stderr().is_terminal() {
        let Some(head) = accepted(client.audit_head().await?) else {
            return Ok(false);
        };
        let bar = indicatif::ProgressBar::new(u64::try_from(head.seq).unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} seq {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut after = after_seq;
    let mut written = 0_u64;
    loop {
        let page = AuditQuery {
            after_seq: Some(after),
            limit: Some(EXPORT_PAGE),
            ..query.clone()
        };
        let Some(records) = accepted(client.audit_records(&page).await?) else {
            bar.abandon();
            return Ok(false);
        };
        for record in &records {
            serde_json::to_writer(&mut sink, record)?;
            sink.write_all(b"\n")?;
        }
        written += records.len() as u64;
        match records.last() {
            Some(last) if records.len() == EXPORT_PAGE as usize => {
                after = last.seq;
                bar.set_position(u64::try_from(after).unwrap_or(0));
                bar.set_message(format!("{written} records"));
            }
            _ => break,
        }
    }
    sink.flush()?;
    bar.finish_and_clear();
    if let Some(path) = path {
        eprintln!("{written} records written to {}", path.display());
    }
    Ok(true)
}

async fn verify(
    client: &AdminClient,
    out: Out,
    expect_head: Option<String>,
) -> anyhow::Result<bool> {
    let spinner = if std::io::stderr().is_terminal() {
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.set_message("verifying the audit chain");
        spinner.enable_steady_tick(std::time::Duration::from_millis(100));
        spinner
    } else {
        indicatif::ProgressBar::hidden()
    };
    let reply = client.verify_audit(&VerifyQuery { expect_head }).await;
    spinner.finish_and_clear();
    let Some(doc) = accepted(reply?) else {
        return Ok(false);
    };
    if out.json(&doc)? {
        return Ok(doc.ok);
    }
    match &doc.first_broken {
        None => println!(
            "{}: {} records verified in {:.1} s",
            crate::audit_offline::intact_headline(doc.pending_stale),
            doc.records,
            doc.seconds
        ),
        Some(broken) => {
            println!(
                "audit chain BROKEN at record {}: {}",
                broken.seq, broken.why
            );
            println!("({} records read)", doc.records);
        }
    }
    println!("head seq:  {}", doc.head_seq);
    println!("head hash: {}", doc.head_hash);
    if doc.pending > 0 {
        println!(
            "{}",
            crate::audit_offline::pending_line(doc.pending, doc.pending_oldest, doc.pending_stale)
        );
    }
    if let Some(expected) = &doc.expected_head {
        match expected.seq {
            Some(seq) => println!("expected head {} found: record {seq}", expected.hash),
            None => println!(
                "expected head {} NOT FOUND: the chain does not contain it (rewritten or truncated)",
                expected.hash
            ),
        }
    }
    Ok(doc.ok)
}
