//! `certeasy admin overrides add|list|show|remove`: rate-limit overrides kept in the database,
//! through `/admin/overrides…` (`admin_overrides.rs`).

use clap::Subcommand;

use super::Out;
use super::accepted;
use super::time;
use crate::admin_client::AdminClient;
use crate::admin_overrides::AddOverrideBody;
use crate::admin_overrides::OverrideDoc;
use crate::admin_overrides::OverrideKey;
use crate::table::Table;

const OVERRIDES_HELP: &str = "\
An override gives one bucket of one limit other numbers than the configured default: a higher
limit for a customer behind a NAT, a lower one for a client that misbehaves. Overrides added
here live in the database: every instance applies them within rate-limiting.overrides-refresh
(2s by default), without a reload, and each add and remove is in the audit log with who made it.

LIMIT   global, account-creation (per address: an address or a CIDR range),
        order-creation, san-budget, failed-validation, zombie-pausing (per account: its id)
ID      10.0.0.1, 2001:db8::/48, 192.0.2.0/24, or an account id such as 12345
Numbers --burst, --count and --period as in docs/rate-limits.md; those left out keep the
        default's. A bucket gets count tokens per period and holds at most burst.

The overrides file (rate-limit-overrides) keeps working: list shows both, with a SOURCE column.
Where both name the same bucket, the database's applies and the file's is listed as shadowed.
remove removes the database's only; edit the file (and reload) to change the file's. An expired
override stops applying and is listed as expired until removed or added again.

Examples:
  certeasy admin overrides add order-creation 12345 --count 300 --period 1h --burst 50 \\
      --comment \"ticket 4711: nightly renewal of 2000 names\" --expires 30d
  certeasy admin overrides add global 203.0.113.0/24 --burst 5 --comment \"abusive scanner\"
  certeasy admin overrides list
  certeasy admin overrides show order-creation 12345 --json
  certeasy admin overrides remove order-creation 12345";

/// `certeasy admin overrides`.
#[derive(Debug, Subcommand)]
pub enum OverridesCommand {
    /// Override one bucket of one limit, in the database (every instance within seconds).
    #[command(after_long_help = OVERRIDES_HELP)]
    Add {
        /// The limit (global, account-creation, order-creation, san-budget, failed-validation,
        /// zombie-pausing).
        limit: String,
        /// The bucket: an address or CIDR range (per-address limits), or an account id.
        id: String,
        /// Tokens the bucket holds at most.
        #[arg(long)]
        burst: Option<u64>,
        /// Tokens added per period.
        #[arg(long)]
        count: Option<u64>,
        /// The period (30s, 1h, 7d).
        #[arg(long)]
        period: Option<String>,
        /// Why: a ticket, a customer (required; listed and recorded in the audit log).
        #[arg(long)]
        comment: String,
        /// When it stops applying: a time (2026-12-01T00:00:00Z) or a duration from now (30d).
        #[arg(long)]
        expires: Option<String>,
    },
    /// List every override: the database's, then the overrides file's.
    #[command(after_long_help = OVERRIDES_HELP)]
    List,
    /// Show the overrides of one bucket (from both sources).
    #[command(after_long_help = OVERRIDES_HELP)]
    Show {
        /// The limit.
        limit: String,
        /// The bucket id.
        id: String,
    },
    /// Remove an override of the database (one of the overrides file is changed in the file).
    #[command(after_long_help = OVERRIDES_HELP)]
    Remove {
        /// The limit.
        limit: String,
        /// The bucket id.
        id: String,
    },
}

const HEADER: [&str; 9] = [
    "SOURCE", "STATUS", "LIMIT", "ID", "BURST", "COUNT", "PERIOD", "EXPIRES", "COMMENT",
];

/// The row of an override: the numbers in force (`-` when they describe no bucket).
fn row(doc: &OverrideDoc) -> [String; 9] {
    let (burst, count, period) = match &doc.effective {
        Some(n) => (n.burst.to_string(), n.count.to_string(), n.period.clone()),
        None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
    };
    let comment = match (&doc.comment, doc.file_line) {
        (Some(comment), _) => comment.clone(),
        (None, Some(line)) => format!("(file, line {line})"),
        (None, None) => String::new(),
    };
    [
        doc.source.clone(),
        doc.status.clone(),
        doc.limit.clone(),
        doc.id.clone(),
        burst,
        count,
        period,
        doc.expires_at.map(time).unwrap_or_else(|| "-".to_owned()),
        comment,
    ]
}

/// One override as labelled lines.
fn print_one(doc: &OverrideDoc) {
    println!("limit:      {}", doc.limit);
    println!("id:         {}", doc.id);
    println!("source:     {}", doc.source);
    println!("status:     {}", doc.status);
    if let Some(n) = &doc.effective {
        println!(
            "in force:   burst {}, {} per {}",
            n.burst, n.count, n.period
        );
    }
    if let Some(n) = &doc.default {
        println!(
            "default:    burst {}, {} per {}",
            n.burst, n.count, n.period
        );
    }
    if let Some(comment) = &doc.comment {
        println!("comment:    {comment}");
    }
    if let Some(at) = doc.expires_at {
        println!("expires:    {}", time(at));
    }
    if let Some(at) = doc.created_at {
        println!("added:      {}", time(at));
    }
    if let Some(by) = &doc.created_by {
        println!("added by:   {by}");
    }
    if let Some(line) = doc.file_line {
        println!("file line:  {line}");
    }
}

pub(super) async fn overrides(
    client: &AdminClient,
    out: Out,
    command: OverridesCommand,
) -> anyhow::Result<bool> {
    match command {
        OverridesCommand::Add {
            limit,
            id,
            burst,
            count,
            period,
            comment,
            expires,
        } => {
            let body = AddOverrideBody {
                limit,
                id,
                burst,
                count,
                period,
                comment,
                expires,
            };
            let Some(doc) = accepted(client.add_override(&body).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                print_one(&doc);
                println!("added: every instance applies it within seconds");
            }
        }
        OverridesCommand::List => {
            let Some(docs) = accepted(client.overrides().await?) else {
                return Ok(false);
            };
            if !out.json(&docs)? {
                let mut table = Table::new(&HEADER);
                for doc in &docs {
                    table.row(row(doc));
                }
                table.print()?;
            }
        }
        OverridesCommand::Show { limit, id } => {
            let key = OverrideKey { limit, id };
            let Some(docs) = accepted(client.override_of(&key).await?) else {
                return Ok(false);
            };
            if !out.json(&docs)? {
                for (i, doc) in docs.iter().enumerate() {
                    if i > 0 {
                        println!();
                    }
                    print_one(doc);
                }
            }
        }
        OverridesCommand::Remove { limit, id } => {
            let key = OverrideKey { limit, id };
            let Some(doc) = accepted(client.remove_override(&key).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                println!(
                    "removed the override of {} for {}: every instance applies the default (or the overrides file's) within seconds",
                    doc.limit, doc.id
                );
            }
        }
    }
    Ok(true)
}
