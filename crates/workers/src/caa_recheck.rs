//! CAA checked again at issuance for the order's authorizations validated too long ago:
//! `ra::caa` decides which, and what a refusal is; this module asks the validator.

use acme_core::problem::Problem;
use storage::model::Order;

use crate::context::Error;
use crate::context::WorkerContext;

/// Whether CAA must be looked up again before `order` is signed: some DNS identifier was
/// validated longer ago than a CAA check vouches for. Nothing is read when the validator does
/// not check CAA.
pub(crate) async fn caa_rechecks_due(
    cx: &WorkerContext,
    order: &Order,
    now: time::OffsetDateTime,
) -> Result<bool, Error> {
    if !cx.validator.checks_caa() {
        return Ok(false);
    }
    let validations = cx.storage.order_validations(order.id).await?;
    Ok(!ra::caa::rechecks(&validations, now, cx.settings.caa_recheck_after).is_empty())
}

/// Checks CAA again for the order's authorizations validated too long ago (`ra::caa` decides
/// which, and what a refusal is), with the method that validated each and the order's account:
/// `Some(problem)` when the order must fail. All lookups run at once, each bounded by the
/// validator's timeout. Nothing is read when the validator does not check CAA.
pub(crate) async fn recheck_caa(
    cx: &WorkerContext,
    order: &Order,
    now: time::OffsetDateTime,
) -> Result<Option<Problem>, Error> {
    if !cx.validator.checks_caa() {
        return Ok(None);
    }
    let validations = cx.storage.order_validations(order.id).await?;
    let after = cx.settings.caa_recheck_after;
    let rechecks = ra::caa::rechecks(&validations, now, after);
    if rechecks.is_empty() {
        return Ok(None);
    }
    let account_uri = cx.settings.account_uris.uri(order.account_id);
    let outcomes = futures::future::join_all(rechecks.iter().map(|r| {
        cx.validator
            .check_caa(&r.identifier, r.method, &account_uri)
    }))
    .await;
    let mut refused = Vec::new();
    for (recheck, outcome) in rechecks.into_iter().zip(outcomes) {
        let label = if outcome.is_ok() {
            "allowed"
        } else {
            "refused"
        };
        metrics::counter!("certeasy_caa_rechecks_total", "outcome" => label).increment(1);
        tracing::debug!(order_id = %order.id, identifier = %recheck.identifier, method = recheck.method.as_str(), outcome = label, "CAA checked again at issuance");
        if let Err(problem) = outcome {
            refused.push((recheck.identifier, problem));
        }
    }
    Ok(ra::caa::refusal(refused, after))
}
