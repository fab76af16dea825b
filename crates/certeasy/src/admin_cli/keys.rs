//! `certeasy admin eab …` and `certeasy admin keys …`: external account binding keys and
//! blocked keys.

use super::Out;
use super::accepted;
use super::time;
use crate::admin_client::AdminClient;
use crate::admin_wire::EabCreateBody;
use crate::admin_wire::EabKeyDoc;
use crate::admin_wire::EabRevokeQuery;
use crate::admin_wire::KeyBody;
use crate::cli::admin::EabCommand;
use crate::cli::admin::KeysCommand;
use crate::table::Table;

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

pub(super) async fn eab(
    client: &AdminClient,
    out: Out,
    command: EabCommand,
) -> anyhow::Result<bool> {
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

pub(super) async fn keys(
    client: &AdminClient,
    out: Out,
    command: KeysCommand,
) -> anyhow::Result<bool> {
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
