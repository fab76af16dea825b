//! `certeasy admin keys block|unblock|list`: the operator's blocked keys (`ra::keys`), both the
//! admin API routes (`/admin/keys…`) and the client commands, sharing [`BlockedKeyDoc`].
//!
//! A key is named by the SHA-256 of its SubjectPublicKeyInfo (hex or base64), or by a PEM file
//! of its public key, a certificate or a CSR that carries it; the server reads either
//! (`ra::keys::named_key`), so the client sends the text as it is. Blocks made here live in the
//! database and bind every instance at once; `acme.blocked-keys-file` is listed beside them but
//! changed only by editing the file.

use std::path::Path;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use clap::Subcommand;
use ra::Ra;
use serde::Deserialize;
use serde::Serialize;
use time::OffsetDateTime;

/// What the key routes need of the admin state: the policy layer.
#[derive(Clone)]
pub struct KeysAdmin {
    pub ra: Ra,
}

/// A blocked key, as `keys list --json` prints it and `keys block --json` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedKeyDoc {
    /// SHA-256 of the key's SubjectPublicKeyInfo DER, lowercase hex.
    pub spki_sha256: String,
    /// `database` (`keys block`) or `file` (`acme.blocked-keys-file`).
    pub source: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// When it was blocked; not known for the file's keys.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub blocked_at: Option<OffsetDateTime>,
}

/// Body of `POST /admin/keys/block` and `/admin/keys/unblock`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBody {
    /// A hash, or PEM text (public key, certificate or CSR).
    pub key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

type Answer<T> = Result<(StatusCode, Json<T>), (StatusCode, String)>;

fn refused(e: ra::Error) -> (StatusCode, String) {
    match e {
        ra::Error::Refused(r) => match *r {
            ra::Refusal::NotFound(what) => (
                StatusCode::NOT_FOUND,
                format!("{what} does not exist in the database\n"),
            ),
            other => (StatusCode::CONFLICT, format!("{other}\n")),
        },
        ra::Error::Storage(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        ra::Error::Internal { context, message } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{context}: {message}\n"),
        ),
    }
}

/// `POST /admin/keys/block`: 201 with the block, 409 when the key is blocked already.
pub async fn block(
    State(ctx): State<KeysAdmin>,
    Json(body): Json<KeyBody>,
) -> Answer<BlockedKeyDoc> {
    let hash =
        ra::keys::named_key(&body.key).map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    let blocked = ctx
        .ra
        .block_key(hash, body.reason.trim())
        .await
        .map_err(refused)?;
    Ok((
        StatusCode::CREATED,
        Json(BlockedKeyDoc {
            spki_sha256: hash.to_hex(),
            source: "database".to_owned(),
            reason: blocked.reason,
            blocked_at: Some(blocked.created_at),
        }),
    ))
}

/// `POST /admin/keys/unblock`: lifts a block of the database; 404 when there is none.
pub async fn unblock(
    State(ctx): State<KeysAdmin>,
    Json(body): Json<KeyBody>,
) -> Answer<BlockedKeyDoc> {
    let hash =
        ra::keys::named_key(&body.key).map_err(|e| (StatusCode::BAD_REQUEST, format!("{e}\n")))?;
    ctx.ra.unblock_key(hash).await.map_err(refused)?;
    Ok((
        StatusCode::OK,
        Json(BlockedKeyDoc {
            spki_sha256: hash.to_hex(),
            source: "database".to_owned(),
            reason: String::new(),
            blocked_at: None,
        }),
    ))
}

/// `GET /admin/keys`: the database's blocks, oldest first, then the file's.
pub async fn list(State(ctx): State<KeysAdmin>) -> Answer<Vec<BlockedKeyDoc>> {
    let stored = ctx.ra.blocked_keys().await.map_err(refused)?;
    let mut docs: Vec<BlockedKeyDoc> = stored
        .into_iter()
        .map(|k| BlockedKeyDoc {
            spki_sha256: hex::encode(k.spki_sha256),
            source: "database".to_owned(),
            reason: k.reason,
            blocked_at: Some(k.created_at),
        })
        .collect();
    docs.extend(ctx.ra.blocked_by_file().into_iter().map(|h| BlockedKeyDoc {
        spki_sha256: h.to_hex(),
        source: "file".to_owned(),
        reason: String::new(),
        blocked_at: None,
    }));
    Ok((StatusCode::OK, Json(docs)))
}

// ---- the client side ----

const KEYS_HELP: &str = "\
KEY is the SHA-256 of the key's SubjectPublicKeyInfo DER, as 64 hex digits or base64:
  openssl pkey -pubin -in key.pub.pem -outform DER | sha256sum
or the path of a PEM file holding the public key, a certificate or a CSR with that key.

A blocked key gets badPublicKey at new-account and key change, and badCSR at finalize. An
account that already holds the key keeps working: deactivate it and revoke its certificates
(certeasy admin accounts deactivate, certeasy admin certificates revoke --account).

Examples:
  certeasy admin keys block 3f0c…e9 --reason \"reported compromised, ticket 4711\"
  certeasy admin keys block ./leaked-cert.pem
  certeasy admin keys unblock 3f0c…e9
  certeasy admin keys list --json";

/// `certeasy admin keys`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Block a key: no account may register it or change to it, and no certificate carries it.
    #[command(after_long_help = KEYS_HELP)]
    Block {
        /// The key: its SPKI SHA-256 (hex or base64), or a PEM file (public key, certificate,
        /// CSR).
        key: String,
        /// Why (kept with the block and listed).
        #[arg(long, default_value = "")]
        reason: String,
        /// Print the block as one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Lift a block made with `keys block` (a key the blocked-keys file names stays blocked).
    #[command(after_long_help = KEYS_HELP)]
    Unblock {
        /// The key, as for `keys block`.
        key: String,
    },
    /// List the blocked keys: the database's, oldest first, then the blocked-keys file's.
    List {
        /// Print one JSON document (an array).
        #[arg(long)]
        json: bool,
    },
}

/// The text to send for KEY: a file's content when KEY names a file, else KEY itself.
fn key_text(key: &str) -> anyhow::Result<String> {
    let path = Path::new(key);
    if path.is_file() {
        return std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()));
    }
    Ok(key.to_owned())
}

/// Runs `certeasy admin keys …`; `Ok(false)` when the server refused (printed).
pub async fn keys(
    client: &reqwest::Client,
    base: &str,
    command: KeysCommand,
) -> anyhow::Result<bool> {
    let post = |path: &str, body: KeyBody| -> anyhow::Result<reqwest::RequestBuilder> {
        Ok(client
            .post(format!("{base}{path}"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_string(&body)?))
    };
    let request = match &command {
        KeysCommand::Block { key, reason, .. } => post(
            "/admin/keys/block",
            KeyBody {
                key: key_text(key)?,
                reason: reason.clone(),
            },
        )?,
        KeysCommand::Unblock { key } => post(
            "/admin/keys/unblock",
            KeyBody {
                key: key_text(key)?,
                reason: String::new(),
            },
        )?,
        KeysCommand::List { .. } => client.get(format!("{base}/admin/keys")),
    };
    let response = request.send().await?;
    let ok = response.status().is_success();
    let text = response.text().await?;
    if !ok {
        eprint!("{text}");
        if !text.ends_with('\n') {
            eprintln!();
        }
        return Ok(false);
    }
    let unexpected = |e: serde_json::Error| {
        anyhow::anyhow!("unexpected answer from the admin API ({e}): {text}")
    };
    match command {
        KeysCommand::Block { json: true, .. } => {
            let doc: BlockedKeyDoc = serde_json::from_str(&text).map_err(unexpected)?;
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        KeysCommand::Block { json: false, .. } => {
            let doc: BlockedKeyDoc = serde_json::from_str(&text).map_err(unexpected)?;
            println!("blocked {}", doc.spki_sha256);
        }
        KeysCommand::Unblock { .. } => {
            let doc: BlockedKeyDoc = serde_json::from_str(&text).map_err(unexpected)?;
            println!("unblocked {}", doc.spki_sha256);
        }
        KeysCommand::List { json } => {
            let docs: Vec<BlockedKeyDoc> = serde_json::from_str(&text).map_err(unexpected)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&docs)?);
            } else {
                println!("SPKI SHA-256\tSOURCE\tBLOCKED AT\tREASON");
                for d in &docs {
                    let at = d
                        .blocked_at
                        .and_then(|t| {
                            t.format(&time::format_description::well_known::Rfc3339)
                                .ok()
                        })
                        .unwrap_or_else(|| "-".to_owned());
                    println!("{}\t{}\t{at}\t{}", d.spki_sha256, d.source, d.reason);
                }
            }
        }
    }
    Ok(true)
}
