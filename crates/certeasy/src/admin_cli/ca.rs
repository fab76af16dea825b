//! `certeasy admin ca list|activate`: the issuers and which one signs, through
//! `/admin/ca/issuers…` (`admin_issuers.rs`).

use clap::Subcommand;

use super::Out;
use super::accepted;
use super::time;
use crate::admin_client::AdminClient;
use crate::admin_issuers::IssuerDoc;
use crate::table::Table;

const CA_HELP: &str = "\
Every issuer of the configuration is listed: \"default\" (the generated intermediate or
ca.existing) and those of ca.issuers. Each publishes its own CRLs until its certificate
expires. Activating one makes every instance sign new certificates with it within seconds,
without a restart; configure the issuer on every instance first (docs/operations.md,
\"Rotating the issuing intermediate\").

Examples:
  certeasy admin ca list
  certeasy admin ca list --json
  certeasy admin ca activate int-2027";

/// `certeasy admin ca`.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// List the issuers: active, retired, notAfter, certificates signed.
    #[command(after_long_help = CA_HELP)]
    List,
    /// Make an issuer sign new certificates, on every instance. Refused for an issuer that is
    /// not configured, retired, or expires before a certificate of the longest profile would.
    #[command(after_long_help = CA_HELP)]
    Activate {
        /// The issuer's name (`default`, or a name of ca.issuers).
        name: String,
    },
}

fn row(doc: &IssuerDoc) -> [String; 6] {
    [
        doc.name.clone(),
        if doc.active { "yes" } else { "" }.to_owned(),
        if doc.retired { "retired" } else { "" }.to_owned(),
        time(doc.not_after),
        doc.certificates.to_string(),
        doc.last_certificate_not_after.map(time).unwrap_or_default(),
    ]
}

const HEADER: [&str; 6] = [
    "ISSUER",
    "ACTIVE",
    "STATE",
    "NOT AFTER",
    "CERTIFICATES",
    "LAST CERTIFICATE EXPIRES",
];

pub(super) async fn ca(client: &AdminClient, out: Out, command: CaCommand) -> anyhow::Result<bool> {
    match command {
        CaCommand::List => {
            let Some(docs) = accepted(client.issuers().await?) else {
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
        CaCommand::Activate { name } => {
            let Some(doc) = accepted(client.activate_issuer(&name).await?) else {
                return Ok(false);
            };
            if !out.json(&doc)? {
                println!(
                    "issuer {} is active: every instance signs new certificates with it within seconds",
                    doc.name
                );
            }
        }
    }
    Ok(true)
}
