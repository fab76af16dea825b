//! Orders: creation, lookup, finalization (RFC 8555 §7.4).

use acme_core::identifier::Identifier;
use acme_core::identifier::IdentifierError;
use acme_core::identifier::IdentifierKind;
use acme_core::identifier::canonical_set_hash;
use acme_core::ids::AccountId;
use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::ChallengeType;
use acme_core::status::OrderStatus;
use acme_jose::Jwk;
use aws_lc_rs::rand::SecureRandom;
use aws_lc_rs::rand::SystemRandom;
use axum::extract::Path;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ratelimits::batch::Kind;
use ratelimits::bucket::BucketId;
use ratelimits::config::Mode;
use ratelimits::limit::LimitName;
use ratelimits::limiter::Request as LimitRequest;
use storage::error::Error as StorageError;
use storage::model::DuplicateGuard;
use storage::model::NewAuthz;
use storage::model::NewOrder;
use storage::model::Order;
use storage::model::OrderGuards;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::auth::KidRequest;
use crate::eab_decision;
use crate::handlers::run_now;
use crate::limit_headers::PolicyItem;
use crate::limits::RateLimitInfo;
use crate::limits::Spent;
use crate::limits::db_mode;
use crate::limits::db_policies;
use crate::limits::denied;
use crate::limits::denied_until;
use crate::limits::log_shadow;
use crate::limits::refund;
use crate::problem::ApiError;
use crate::response::Resource;
use crate::state::ApiState;
use crate::wire::FinalizeRequest;
use crate::wire::OrderRequest;
use crate::wire::order_json;

type ApiResult = Result<Response, ApiError>;

pub(crate) async fn new_order(
    State(state): State<ApiState>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?.clone();
    let payload: OrderRequest = req.payload()?;
    let settings = &state.inner.settings;
    let now = state.inner.clock.now();

    let identifiers = parse_identifiers(&state, &payload)?;
    let (not_before, not_after) = validity_window(&state, &payload, now)?;
    let not_after = eab_decision::check_new_order(
        &state.inner.storage,
        settings,
        &account,
        &identifiers,
        (not_before, not_after),
        now,
    )
    .await?
    .map_err(ApiError::from_problem)?;
    refuse_paused(&state, account.id, &identifiers, now).await?;
    let mut spent = charge_order(&state, account.id, &identifiers).await?;

    let mut authorizations = Vec::with_capacity(identifiers.len());
    for id in &identifiers {
        let challenges = offered_challenges(id)
            .into_iter()
            .map(|kind| Ok((kind, random_token()?)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        authorizations.push(NewAuthz {
            identifier: id.clone(),
            expires_at: now + settings.authorization_lifetime,
            challenges,
        });
    }
    let new = NewOrder {
        account_id: account.id,
        set_hash: canonical_set_hash(&identifiers),
        identifiers,
        not_before,
        not_after,
        expires_at: now + settings.order_lifetime,
        authorizations,
        reuse_valid_authz: settings.reuse_valid_authorizations,
    };
    let order = match create_with_guards(&state, new, now).await {
        Ok((order, db_policies)) => {
            if let Some(info) = &mut spent.info {
                for item in db_policies {
                    info.push(item);
                }
            }
            order
        }
        Err(e) => {
            refund(&state, &spent).await;
            return Err(e);
        }
    };
    tracing::info!(account_id = %account.id, order_id = %order.id, identifiers = order.identifiers.len(), "order created");
    metrics::counter!("certeasy_orders_created_total").increment(1);
    let url = state.urls().order(order.id);
    Ok(Resource::created(order_json(state.urls(), &order), &url)
        .rate_limit(spent.info)
        .into_response())
}

/// Layers 2 and 4 as one batch: one order token and one SAN-budget token per identifier are
/// spent, and the failed-validation bucket of every (account, identifier) pair is checked.
async fn charge_order(
    state: &ApiState,
    account: AccountId,
    identifiers: &[Identifier],
) -> Result<Spent, ApiError> {
    let limiter = state.inner.limits.limiter();
    let names = u64::try_from(identifiers.len()).unwrap_or(u64::MAX);
    let budget_id = BucketId::Account(account.0);
    if let Some(budget) = limiter.limit_for(LimitName::SanBudgetPerAccount, &budget_id)
        && names > budget.burst()
    {
        return Err(ApiError::new(
            ProblemType::RejectedIdentifier,
            format!(
                "this order has {names} identifiers but the account's SAN budget allows at most {} per order; split it",
                budget.burst()
            ),
        ));
    }
    let mut requests = vec![
        LimitRequest::new(
            LimitName::NewOrdersPerAccount,
            BucketId::Account(account.0),
            1,
        ),
        LimitRequest::new(LimitName::SanBudgetPerAccount, budget_id, names),
    ];
    for id in identifiers {
        let pair = BucketId::AccountIdentifier {
            account: account.0,
            identifier: id.value().to_owned(),
        };
        requests.push(
            LimitRequest::new(LimitName::FailedValidationPerAccountIdentifier, pair, 1)
                .with_kind(Kind::CheckOnly),
        );
    }
    let verdict = limiter
        .check(state.inner.clock.now(), &requests)
        .await
        .map_err(|e| ApiError::internal("order limits", &e))?;
    log_shadow(&verdict);
    if !verdict.allowed
        && let Some(b) = &verdict.binding
    {
        let subject = match b.name {
            LimitName::FailedValidationPerAccountIdentifier => {
                let ident = b.key.identifier().unwrap_or("this identifier");
                format!("for {ident} by this account")
            }
            _ => "for this account".to_owned(),
        };
        let mut err = denied(state, b, &subject);
        err.rate_limit = Some(RateLimitInfo::from_applied(&verdict.applied));
        return Err(err);
    }
    requests.retain(|r| r.kind != Kind::CheckOnly);
    Ok(Spent {
        requests,
        info: Some(RateLimitInfo::from_applied(&verdict.applied)),
    })
}

/// Layers 3 and 5, inside the order-creation transaction. A limit in shadow mode that would have
/// refused is logged and counted, and the order is created without it. Returns the order and
/// the enforced database-backed policies' state, for the `RateLimit` headers.
async fn create_with_guards(
    state: &ApiState,
    new: NewOrder,
    now: OffsetDateTime,
) -> Result<(Order, Vec<PolicyItem>), ApiError> {
    let config = state.inner.limits.config();
    let pending = &config.pending_authorizations;
    let duplicate = &config.duplicate_certificate;
    let mut guards = OrderGuards {
        max_pending_authz: db_mode(pending.enabled, pending.mode)
            .map(|_| u32::try_from(pending.max).unwrap_or(u32::MAX)),
        duplicate_certificates: db_mode(duplicate.enabled, duplicate.mode).map(|_| {
            DuplicateGuard {
                max: u32::try_from(duplicate.max_per_window).unwrap_or(u32::MAX),
                window: duplicate.window.time(),
            }
        }),
    };
    loop {
        match state
            .inner
            .storage
            .create_order_with_usage(new.clone(), &guards, now)
            .await
        {
            Ok((order, usage)) => {
                for (limit, on) in [
                    ("pending-authorizations", guards.max_pending_authz.is_some()),
                    (
                        "duplicate-certificate",
                        guards.duplicate_certificates.is_some(),
                    ),
                ] {
                    if on {
                        count_db(limit, "allowed");
                    }
                }
                let policies = db_policies(state, &config, usage, now);
                return Ok((order, policies));
            }
            Err(StorageError::PendingAuthzLimit {
                pending: count,
                max,
                retry_at,
            }) => {
                if pending.mode == Mode::Shadow {
                    shadow_db("pending-authorizations");
                    guards.max_pending_authz = None;
                    continue;
                }
                count_db("pending-authorizations", "denied");
                let detail = format!(
                    "Rate limit \"pending-authorizations\" reached: this account has {count} pending authorizations and may hold at most {max}; finish or deactivate some, or wait for the soonest to expire"
                );
                let window =
                    u64::try_from(state.inner.settings.authorization_lifetime.whole_seconds())
                        .unwrap_or(0);
                return Err(denied_until(
                    state,
                    "pending-authorizations",
                    detail,
                    retry_at,
                    u64::from(max),
                    window,
                ));
            }
            Err(StorageError::DuplicateCertificate { count, retry_at }) => {
                if duplicate.mode == Mode::Shadow {
                    shadow_db("duplicate-certificate");
                    guards.duplicate_certificates = None;
                    continue;
                }
                count_db("duplicate-certificate", "denied");
                let detail = format!(
                    "Rate limit \"duplicate-certificate\" reached: {count} certificates were already issued to this account for exactly these identifiers in the last {} (at most {})",
                    duplicate.window, duplicate.max_per_window
                );
                return Err(denied_until(
                    state,
                    "duplicate-certificate",
                    detail,
                    retry_at,
                    duplicate.max_per_window,
                    duplicate.window.std().as_secs(),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

fn shadow_db(limit: &'static str) {
    tracing::info!(limit, "shadow rate limit would have denied");
    count_db(limit, "shadow_denied");
}

/// The database-backed limits count their decisions in the limiter's metric, so one series
/// covers all layers.
fn count_db(limit: &'static str, outcome: &'static str) {
    metrics::counter!(ratelimits::limiter::DECISIONS, "limit" => limit, "outcome" => outcome)
        .increment(1);
}

pub(crate) async fn order(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    req.require_post_as_get()?;
    let order = own_order(&state, req.account()?.id, &id).await?;
    Ok(order_resource(&state, &order).into_response())
}

pub(crate) async fn finalize(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    KidRequest(req): KidRequest,
) -> ApiResult {
    let account = req.account()?.clone();
    let order = own_order(&state, account.id, &id).await?;
    let payload: FinalizeRequest = req.payload()?;
    if order.status != OrderStatus::Ready {
        return Err(storage::error::Error::OrderNotReady(order.status).into());
    }
    let csr = URL_SAFE_NO_PAD
        .decode(payload.csr.trim_end_matches('='))
        .map_err(|_| ApiError::new(ProblemType::BadCsr, "\"csr\" is not base64url-encoded DER"))?;
    let checked = issuance::check_csr(&csr, &order.identifiers)?;
    refuse_account_key(&state, &account, checked.spki_der()).await?;
    let storage = &state.inner.storage;
    let workers = &state.inner.workers;
    let now = state.inner.clock.now();
    let updated = match workers.try_slot() {
        Some(slot) => {
            let (updated, job) = storage
                .begin_finalize_claimed(order.id, &csr, now, workers.lease())
                .await?;
            tracing::info!(account_id = %account.id, order_id = %order.id, "finalization accepted");
            match job {
                Some(job) => issue_now(&state, slot, job, updated, checked).await?,
                None => updated,
            }
        }
        None => {
            let updated = storage.begin_finalize(order.id, &csr, now).await?;
            workers.wake();
            tracing::info!(account_id = %account.id, order_id = %order.id, "finalization accepted (queued)");
            updated
        }
    };
    Ok(order_resource(&state, &updated).into_response())
}

/// Runs the claimed finalization job and, if it ends within [`run_now::ISSUE_WAIT`], returns the
/// order as it ended (`valid`, or `invalid` with its error); `processing` otherwise.
async fn issue_now(
    state: &ApiState,
    slot: workers::runner::Slot,
    job: storage::model::Job,
    processing: Order,
    csr: issuance::CheckedCsr,
) -> Result<Order, ApiError> {
    let prepared = workers::runner::Prepared::Finalize {
        order: processing.clone(),
        csr,
    };
    if !run_now::run_and_wait(state, slot, job, Some(prepared), run_now::ISSUE_WAIT).await {
        return Ok(processing);
    }
    let now = state.inner.clock.now();
    Ok(state
        .inner
        .storage
        .order(processing.id, now)
        .await?
        .unwrap_or(processing))
}

/// A certificate must not carry the key of any ACME account, the requester's or another's: the
/// key would then both control an account and be presented by a TLS server (RFC 8555 §11.1 keeps
/// the two apart). Accounts are found by the RFC 7638 thumbprint of the CSR key, the same unique
/// key under which they are stored, so one indexed lookup covers deactivated accounts too.
async fn refuse_account_key(
    state: &ApiState,
    account: &storage::model::Account,
    spki_der: &[u8],
) -> Result<(), ApiError> {
    let csr_key = Jwk::from_spki_der(spki_der).map_err(|e| {
        ApiError::new(
            ProblemType::BadCsr,
            format!("the CSR's public key is not supported: {e}"),
        )
    })?;
    let thumbprint = csr_key.thumbprint();
    let holder = if thumbprint == account.thumbprint {
        Some(account.id)
    } else {
        state
            .inner
            .storage
            .account_by_thumbprint(&thumbprint)
            .await?
            .map(|a| a.id)
    };
    match holder {
        None => Ok(()),
        Some(id) if id == account.id => Err(ApiError::new(
            ProblemType::BadCsr,
            "the CSR's public key is this account's key; use a separate key for the certificate",
        )),
        Some(_) => Err(ApiError::new(
            ProblemType::BadCsr,
            "the CSR's public key is the key of an ACME account; use a separate key for the certificate",
        )),
    }
}

fn order_resource(state: &ApiState, order: &Order) -> Resource {
    let url = state.urls().order(order.id);
    let resource = Resource::ok(order_json(state.urls(), order)).location(&url);
    match order.status {
        OrderStatus::Processing | OrderStatus::Pending => {
            resource.retry_after(state.inner.settings.retry_after.whole_seconds())
        }
        _ => resource,
    }
}

/// An order of this account; other accounts' orders are indistinguishable from missing ones.
async fn own_order(state: &ApiState, account: AccountId, id: &str) -> Result<Order, ApiError> {
    let id: OrderId = id.parse().map_err(|_| ApiError::not_found("order"))?;
    match state
        .inner
        .storage
        .order(id, state.inner.clock.now())
        .await?
    {
        Some(order) if order.account_id == account => Ok(order),
        _ => Err(ApiError::not_found("order")),
    }
}

fn parse_identifiers(
    state: &ApiState,
    payload: &OrderRequest,
) -> Result<Vec<Identifier>, ApiError> {
    let settings = &state.inner.settings;
    if payload.identifiers.is_empty() {
        return Err(ApiError::malformed("the order has no identifiers"));
    }
    if payload.identifiers.len() > settings.max_identifiers_per_order {
        return Err(ApiError::new(
            ProblemType::RejectedIdentifier,
            format!(
                "an order may hold at most {} identifiers",
                settings.max_identifiers_per_order
            ),
        ));
    }
    let mut identifiers = Vec::new();
    let mut problems = Vec::new();
    for raw in &payload.identifiers {
        let parsed = Identifier::parse(&raw.kind, &raw.value).and_then(|id| {
            settings.identifier_policy.check(&id)?;
            Ok(id)
        });
        match parsed {
            Ok(id) => identifiers.push(id),
            Err(e) => {
                let kind = match e {
                    IdentifierError::UnsupportedType(_) => ProblemType::UnsupportedIdentifier,
                    IdentifierError::Forbidden(_) => ProblemType::RejectedIdentifier,
                    IdentifierError::InvalidDns { .. } | IdentifierError::InvalidIp(_) => {
                        ProblemType::RejectedIdentifier
                    }
                };
                let mut p = Problem::new(kind, e.to_string());
                if let Ok(kind) = raw.kind.parse::<IdentifierKind>() {
                    // Show the identifier as sent when it could not be normalised.
                    p.detail = format!("{}: {}", kind.as_str(), p.detail);
                }
                problems.push(p);
            }
        }
    }
    if let Some(problem) = Problem::combine(
        problems,
        "Several identifiers of this order were refused; see subproblems",
    ) {
        return Err(ApiError::from_problem(problem));
    }
    identifiers.sort();
    identifiers.dedup();
    Ok(identifiers)
}

fn validity_window(
    state: &ApiState,
    payload: &OrderRequest,
    now: OffsetDateTime,
) -> Result<(Option<OffsetDateTime>, Option<OffsetDateTime>), ApiError> {
    let settings = &state.inner.settings;
    let parse = |name: &str, v: &Option<String>| -> Result<Option<OffsetDateTime>, ApiError> {
        v.as_deref()
            .map(|s| {
                OffsetDateTime::parse(s, &Rfc3339).map_err(|_| {
                    ApiError::malformed(format!("{name} {s:?} is not an RFC 3339 timestamp"))
                })
            })
            .transpose()
    };
    let not_before = parse("notBefore", &payload.not_before)?;
    let not_after = parse("notAfter", &payload.not_after)?;
    let start = not_before.unwrap_or(now - settings.backdate);
    if let Some(nb) = not_before {
        if nb < now - settings.backdate {
            return Err(ApiError::malformed(format!(
                "notBefore {} lies in the past; it may be at most {} before now",
                crate::wire::rfc3339(nb),
                settings.backdate
            )));
        }
        if nb > now + settings.max_validity {
            return Err(ApiError::malformed("notBefore lies too far in the future"));
        }
    }
    let end = not_after.unwrap_or(start + settings.default_validity);
    if end <= start {
        return Err(ApiError::malformed("notAfter must be later than notBefore"));
    }
    if end - start > settings.max_validity {
        return Err(ApiError::malformed(format!(
            "the requested validity of {} days exceeds this CA's maximum of {} days",
            (end - start).whole_days(),
            settings.max_validity.whole_days()
        )));
    }
    Ok((not_before, not_after))
}

fn offered_challenges(id: &Identifier) -> Vec<ChallengeType> {
    match id.kind() {
        IdentifierKind::Dns if id.is_wildcard() => vec![ChallengeType::Dns01],
        IdentifierKind::Dns => vec![
            ChallengeType::Http01,
            ChallengeType::Dns01,
            ChallengeType::TlsAlpn01,
        ],
        IdentifierKind::Ip => vec![ChallengeType::Http01, ChallengeType::TlsAlpn01],
    }
}

fn random_token() -> Result<String, ApiError> {
    let mut bytes = [0_u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ApiError::internal("random token", &"the system RNG failed"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Zombie pausing: an order naming an identifier paused for this account is refused before
/// anything is created or charged. A pause is its own kind: logged and counted as a pause (never
/// with the token), answered as `rateLimited` with the unpause link.
async fn refuse_paused(
    state: &ApiState,
    account: AccountId,
    identifiers: &[Identifier],
    now: OffsetDateTime,
) -> Result<(), ApiError> {
    const SHOWN: u32 = 15;
    let paused = state
        .inner
        .storage
        .paused_among(account, identifiers, SHOWN + 1)
        .await?;
    if paused.is_empty() {
        return Ok(());
    }
    metrics::counter!("certeasy_pause_rejections_total").increment(1);
    tracing::info!(account_id = %account, paused = paused.len(), "new order refused: account/identifier pair is paused");
    let shown: Vec<String> = paused
        .iter()
        .take(SHOWN as usize)
        .map(|i| i.value().to_owned())
        .collect();
    let mut names = shown.join(", ");
    if paused.len() > SHOWN as usize {
        names.push_str(" and possibly others");
    }
    let mut detail = format!(
        "Issuance for {names} is paused for this account because validation failed too many times in a row."
    );
    let mut unpause_link = None;
    if let Some(settings) = &state.inner.settings.unpause {
        let claims = crate::unpause::token::UnpauseClaims {
            account,
            identifiers: shown.clone(),
            issued_at: now.unix_timestamp(),
            expires_at: (now + settings.link_lifetime).unix_timestamp(),
            version: settings.version,
        };
        let url = crate::unpause::unpause_url(settings, &claims);
        detail.push_str(&format!(" Once the problem is fixed, unpause at: {url}"));
        unpause_link = Some(url);
    }
    let name = LimitName::ConsecutiveFailuresPerAccountIdentifier;
    let mut err = ApiError::new(ProblemType::RateLimited, detail)
        .with_header(
            axum::http::header::RETRY_AFTER,
            &PAUSE_RETRY_AFTER_SECS.to_string(),
        )
        .with_header(
            axum::http::header::LINK,
            &format!(
                "<{}>;rel=\"help\"",
                state.urls().rate_limit_doc(name.as_str())
            ),
        );
    if let Some(url) = unpause_link {
        let rel = state.urls().url(crate::unpause::UNPAUSE_REL_PATH);
        err = err.with_header(axum::http::header::LINK, &format!("<{url}>;rel=\"{rel}\""));
    }
    // The paused pairs' policy, one item per name shown: nothing left until unpaused.
    let mut info = RateLimitInfo::default();
    for identifier in shown {
        let pair = BucketId::AccountIdentifier {
            account: account.0,
            identifier: identifier.clone(),
        };
        if let Some(limit) = state.inner.limits.limiter().limit_for(name, &pair) {
            info.push(PolicyItem::exhausted(
                name,
                &limit,
                Some(identifier),
                PAUSE_RETRY_AFTER_SECS,
            ));
        }
    }
    err.rate_limit = Some(info);
    Err(err)
}

/// How long a client refused for a pause is asked to wait: a pause lasts until the subscriber
/// unpauses, so clients that honour `Retry-After` back off for a day rather than hammer.
const PAUSE_RETRY_AFTER_SECS: u64 = 86_400;
