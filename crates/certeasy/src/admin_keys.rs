//! `/admin/keys…`: the operator's blocked keys (`ra::keys`) for `certeasy admin keys
//! block|unblock|list`, answering [`BlockedKeyDoc`]s.
//!
//! A key is named by the SHA-256 of its SubjectPublicKeyInfo (hex or base64), or by a PEM file
//! of its public key, a certificate or a CSR that carries it; the server reads either
//! (`ra::keys::named_key`), so the client sends the text as it is. Blocks made here live in the
//! database and bind every instance at once; `acme.blocked-keys-file` is listed beside them but
//! changed only by editing the file.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use ra::Ra;

use crate::admin_caller::AdminCaller;
use crate::admin_error::AdminError;
use crate::admin_wire::BlockedKeyDoc;
use crate::admin_wire::KeyBody;

/// What the key routes need of the admin state: the policy layer.
#[derive(Clone)]
pub struct KeysAdmin {
    pub ra: Ra,
}

type Answer<T> = Result<(StatusCode, Json<T>), AdminError>;

/// `POST /admin/keys/block`: 201 with the block, 409 when the key is blocked already.
pub async fn block(
    State(ctx): State<KeysAdmin>,
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<KeyBody>, JsonRejection>,
) -> Answer<BlockedKeyDoc> {
    let Json(body) = body?;
    let hash = ra::keys::named_key(&body.key).map_err(AdminError::BadRequest)?;
    let blocked = ctx.ra.block_key(hash, body.reason.trim(), &who).await?;
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
    Extension(AdminCaller(who)): Extension<AdminCaller>,
    body: Result<Json<KeyBody>, JsonRejection>,
) -> Answer<BlockedKeyDoc> {
    let Json(body) = body?;
    let hash = ra::keys::named_key(&body.key).map_err(AdminError::BadRequest)?;
    // The file's blocks stay whatever this says, so the refusal names where it looked.
    ctx.ra
        .unblock_key(hash, &who)
        .await
        .map_err(|e| match AdminError::from(e) {
            AdminError::NotFound(what) => AdminError::NotFound(format!("{what} in the database")),
            other => other,
        })?;
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
    let stored = ctx.ra.blocked_keys().await?;
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
