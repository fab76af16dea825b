//! Finalization jobs: every check first (the account and the CSR when read from the queue, CAA
//! at issuance time, the validity window at signing time), then the serial reserved and committed
//! with what will be signed, then the signature, then the certificate stored against the
//! reservation. Whether the account may still be issued to is `ra::jobs`' decision.

use acme_core::ids::OrderId;
use acme_core::problem::Problem;
use acme_core::problem::ProblemType;
use acme_core::status::OrderStatus;
use issuance::Ca;
use issuance::CheckedCsr;
use issuance::Intent;
use issuance::IssuerName;
use ra::error::StateRefusal;
use ra::in_flight::Held;
use ra::jobs::Finalized;
use ra::jobs::IssuanceRefusal;
use storage::model::Finalizing;
use storage::model::Job;
use storage::model::NewCertificate;
use storage::model::NewReservation;
use storage::model::Order;
use storage::model::Reservation;
use storage::model::ReservationState;
use storage::model::Reserved;
use storage::model::ReservedAtOnce;
use storage::model::StatusChange;
use tokio::sync::oneshot;

use crate::caa_recheck::caa_rechecks_due;
use crate::caa_recheck::recheck_caa;
use crate::context::Error;
use crate::context::JobAfter;
use crate::context::WorkerContext;
use crate::lease::finish_job;

/// What the request that created a job already holds and checked, handed to the job so that it
/// does not read and check it again. A job from the queue (after a crash, or without a free
/// place) reads everything from the database instead.
#[derive(Debug)]
pub enum Prepared {
    /// The order as `begin_finalize` left it (`processing`), of an account that was valid when
    /// the request was authenticated, and its CSR, checked against the order. The account is
    /// checked again in the transaction that reserves the serial.
    Finalize { order: Order, csr: CheckedCsr },
}

/// A finalization a request runs at once ([`ra::jobs::JobRunner::finalize_at_once`]).
pub(crate) struct AtOnceFinalization {
    pub(crate) order: Order,
    pub(crate) csr_der: Vec<u8>,
    pub(crate) csr: CheckedCsr,
    pub(crate) wait: std::time::Duration,
    pub(crate) held: Held,
}

/// Finalizes an order in `processing` (see the module's doc). A job resumed after a crash
/// between reservation and storage finds the order's open reservation and signs the same serial
/// and window again.
pub(crate) async fn finalize(
    cx: &WorkerContext,
    job: &Job,
    id: OrderId,
    prepared: Option<Prepared>,
) -> Result<JobAfter, Error> {
    let now = cx.clock.now();
    let (order, checked) = match prepared {
        Some(Prepared::Finalize { order, csr }) if order.id == id => (order, csr),
        _ => match load_finalization(cx, job, id, now).await? {
            Ok(loaded) => loaded,
            Err(after) => return Ok(after),
        },
    };
    // Last check before signing, so that CAA is judged at issuance time.
    if let Some(problem) = recheck_caa(cx, &order, now).await? {
        tracing::info!(order_id = %id, account_id = %order.account_id, "CAA, checked again at issuance, refuses the order");
        tracing::debug!(order_id = %id, detail = %problem.detail, "CAA refusal detail");
        return fail(cx, job, id, problem, now).await;
    }
    // One issuer set for the whole finalization, whatever a reload swaps in meanwhile.
    let ca = cx.ca.current();
    let issuer = resumed_or_active_issuer(cx, &ca, &order).await?;
    let intent = match prepare(cx, issuer, &order, &checked, now) {
        Ok(intent) => intent,
        Err(problem) => return fail(cx, job, id, problem, now).await,
    };
    let reserved = cx
        .storage
        .reserve_serial(id, new_reservation(issuer, &intent), cx.clock.now())
        .await?;
    let reservation = match reserved {
        Reserved::Reserved(reservation) => reservation,
        // Deactivated since the finalization was accepted: nothing was reserved or signed.
        Reserved::AccountNotValid(status) => {
            let refusal = IssuanceRefusal::AccountNotValid(status);
            return refuse(cx, job, id, refusal, cx.clock.now()).await;
        }
        Reserved::AuthorizationNotValid => {
            let refusal = IssuanceRefusal::AuthorizationNotValid;
            return refuse(cx, job, id, refusal, cx.clock.now()).await;
        }
        // Settled meanwhile (a repeat after a crash between commit and job deletion).
        Reserved::Settled(_) => return Ok(JobAfter::Delete),
    };
    if reservation.signings > 1 {
        tracing::warn!(order_id = %id, serial = %reservation.serial, signings = reservation.signings, "signing a reserved serial again: an earlier finalization stopped between reserving and storing it");
    }
    sign_reserved(cx, &ca, job, &order, &checked, &reservation).await
}

/// When nothing needs the network: every check, then one transaction that moves the order to
/// processing under a job this request holds and reserves the serial, then the signature and
/// the certificate stored (a crash between the two leaves the job to resume the reservation).
/// Otherwise the durable way, the order `processing` under a job, answered after at most the
/// wait.
pub(crate) async fn finalize_at_once(
    cx: &WorkerContext,
    work: AtOnceFinalization,
    reply: oneshot::Sender<Result<Finalized, ra::Error>>,
) {
    let AtOnceFinalization {
        order,
        csr_der,
        csr,
        wait,
        held,
    } = work;
    let now = cx.clock.now();
    // CAA that must be looked up again goes the durable way: network time is not spent before
    // anything is recorded, and a refusal fails the order as the job records it.
    // Without the active issuer the durable way too: its job waits for an instance that has it.
    let ca = cx.ca.current();
    let issuer = issuer_of(cx, &ca, &order).await;
    let prepared = match &issuer {
        Err(_) => None,
        Ok(issuer) => match caa_rechecks_due(cx, &order, now).await {
            Ok(false) => Some(prepare(cx, issuer, &order, &csr, now)),
            Ok(true) => None,
            Err(e) => {
                tracing::warn!(order_id = %order.id, error = %e, "could not tell whether CAA must be checked again; finalizing through a job");
                None
            }
        },
    };
    if let (Ok(issuer), Some(Ok(intent))) = (&issuer, &prepared) {
        let reserved = cx
            .storage
            .reserve_ready_order(
                order.id,
                &csr_der,
                order.finalize_client_ip,
                new_reservation(issuer, intent),
                cx.clock.now(),
                cx.settings.lease,
            )
            .await;
        let answer = match reserved {
            Ok(ReservedAtOnce::Reserved {
                order: processing,
                job,
                reservation,
            }) => {
                let work = sign_reserved(cx, &ca, &job, &processing, &csr, &reservation);
                finish_job(cx, &job, work).await;
                // Held until the certificate is stored: a concurrent finalization of this
                // instance then finds the order valid, not processing.
                drop(held);
                let id = processing.id;
                cx.storage
                    .order(id, cx.clock.now())
                    .await
                    .map(|order| Finalized::Order(Box::new(order.unwrap_or(*processing))))
                    .map_err(ra::Error::from)
            }
            // Deactivated since the request was authenticated: nothing was reserved or signed,
            // and the order stays as it was.
            Ok(ReservedAtOnce::AccountNotValid(status)) => {
                drop(held);
                Ok(Finalized::AccountNotValid(status))
            }
            // Expired (or an authorization did) since the request read it: that is committed,
            // and nothing was reserved or signed.
            Ok(ReservedAtOnce::NotReady(status)) => {
                drop(held);
                Err(StateRefusal::OrderNotReady(status).into())
            }
            Err(e) => {
                drop(held);
                Err(e.into())
            }
        };
        let _ = reply.send(answer);
        return;
    }
    let (processing, job) = match cx
        .storage
        .begin_finalize_claimed(
            order.id,
            &csr_der,
            order.finalize_client_ip,
            now,
            cx.settings.lease,
        )
        .await
    {
        Ok(Finalizing::Begun {
            order: processing,
            job: Some(job),
        }) => (*processing, job),
        // Already finalized by another instance: its job issues the certificate.
        Ok(Finalizing::Begun {
            order: processing,
            job: None,
        }) => {
            drop(held);
            let _ = reply.send(Ok(Finalized::Order(processing)));
            return;
        }
        Ok(Finalizing::NotReady(status)) => {
            drop(held);
            let _ = reply.send(Err(StateRefusal::OrderNotReady(status).into()));
            return;
        }
        Err(e) => {
            drop(held);
            let _ = reply.send(Err(e.into()));
            return;
        }
    };
    drop(held);
    let id = processing.id;
    let work = async {
        match prepared {
            // Refused before anything was reserved, for a reason of the order's own: the order
            // fails with it.
            Some(Err(problem)) => fail(cx, &job, id, problem, now).await,
            _ => {
                let prepared = Prepared::Finalize {
                    order: processing.clone(),
                    csr,
                };
                finalize(cx, &job, id, Some(prepared)).await
            }
        }
    };
    let run = finish_job(cx, &job, work);
    tokio::pin!(run);
    let finished = tokio::select! {
        () = &mut run => true,
        () = tokio::time::sleep(wait) => false,
    };
    let answer = if finished {
        cx.storage
            .order(id, cx.clock.now())
            .await
            .map(|order| order.unwrap_or_else(|| processing.clone()))
    } else {
        Ok(processing.clone())
    };
    let _ = reply.send(
        answer
            .map(|order| Finalized::Order(Box::new(order)))
            .map_err(ra::Error::from),
    );
    if !finished {
        run.await;
    }
}

/// Signs exactly what `reservation` recorded and stores the certificate against it, settling
/// `job`. A signing failure fails the order, and its reservation is marked abandoned with it.
async fn sign_reserved(
    cx: &WorkerContext,
    ca: &Ca,
    job: &Job,
    order: &Order,
    csr: &CheckedCsr,
    reservation: &Reservation,
) -> Result<JobAfter, Error> {
    let intent = Intent {
        serial: reservation.serial.clone(),
        not_before: reservation.not_before,
        not_after: reservation.not_after,
        crl_shard: reservation.crl_shard,
    };
    let Some(issuer) = loaded_issuer(ca, &reservation.issuer) else {
        // Not reachable from `finalize`, which reserves under a loaded issuer; kept a failure
        // of the order rather than a signature by another key than the one recorded.
        tracing::error!(order_id = %order.id, issuer = %reservation.issuer, "the serial was reserved under an issuer this instance has not loaded");
        let problem = Problem::new(
            ProblemType::ServerInternal,
            "The CA could not sign the certificate",
        );
        return fail(cx, job, order.id, problem, cx.clock.now()).await;
    };
    let cert = match sign(cx, issuer, order, csr, &intent) {
        Ok(cert) => cert,
        Err(problem) => return fail(cx, job, order.id, problem, cx.clock.now()).await,
    };
    let audit = ra::audit::certificate_issued(order, &cert);
    let stored = cx
        .storage
        .complete_order(order.id, cert, cx.clock.now(), Some(job), &audit)
        .await?;
    issued(order, &stored);
    Ok(JobAfter::Settled)
}

/// The order in `processing` and its stored CSR, checked again: what a job from the queue starts
/// from. `Err(after)` when there is nothing to issue (already settled, or the order was failed
/// here).
async fn load_finalization(
    cx: &WorkerContext,
    job: &Job,
    id: OrderId,
    now: time::OffsetDateTime,
) -> Result<Result<(Order, CheckedCsr), JobAfter>, Error> {
    let order = cx
        .storage
        .order(id, now)
        .await?
        .ok_or_else(|| Error::Missing(format!("order {id}")))?;
    if order.status != OrderStatus::Processing {
        // Already settled (a repeat after a crash between commit and job deletion).
        return Ok(Err(JobAfter::Delete));
    }
    // Checked here so nothing is signed, and again in the transaction that reserves the serial.
    let account = cx
        .storage
        .account(order.account_id)
        .await?
        .ok_or_else(|| Error::Missing(format!("account {}", order.account_id)))?;
    if let Err(refusal) = ra::jobs::account_may_be_issued(account.status) {
        return refuse(cx, job, id, refusal, now).await.map(Err);
    }
    let csr = cx
        .storage
        .order_csr(id)
        .await?
        .ok_or_else(|| Error::Missing(format!("CSR of order {id}")))?;
    let checked = match issuance::check_csr(&csr, &order.identifiers) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(order_id = %id, error = %e, "the stored CSR no longer passes; the order fails");
            let problem = Problem::new(ProblemType::BadCsr, e.to_string());
            return fail(cx, job, id, problem, now).await.map(Err);
        }
    };
    Ok(Ok((order, checked)))
}

/// Fails an order in `processing` that `ra::jobs` refuses to issue, nothing signed.
async fn refuse(
    cx: &WorkerContext,
    job: &Job,
    id: OrderId,
    refusal: IssuanceRefusal,
    now: time::OffsetDateTime,
) -> Result<JobAfter, Error> {
    match refusal {
        IssuanceRefusal::AccountNotValid(_) => {
            tracing::info!(order_id = %id, "the account was deactivated; the order is not issued");
        }
        IssuanceRefusal::AuthorizationNotValid => {
            tracing::info!(order_id = %id, "an authorization of the order is no longer valid; the order is not issued");
        }
    }
    fail(cx, job, id, refusal.problem(), now).await
}

/// Fails an order in `processing` with `problem`, settling `job` with it. An order found in
/// another state (already valid: a repeat after a crash between commit and job deletion) is
/// left as it is, and the job is deleted.
async fn fail(
    cx: &WorkerContext,
    job: &Job,
    id: OrderId,
    problem: Problem,
    now: time::OffsetDateTime,
) -> Result<JobAfter, Error> {
    Ok(
        match cx.storage.fail_order(id, problem, now, Some(job)).await? {
            StatusChange::Changed(_) => {
                // What the operators' "issuance failing" alert weighs against issued ones.
                metrics::counter!("certeasy_finalizations_failed_total").increment(1);
                JobAfter::Settled
            }
            // A repeated failure report: storage settled the job all the same.
            StatusChange::Unchanged(order) if order.status == OrderStatus::Invalid => {
                JobAfter::Settled
            }
            StatusChange::Unchanged(_) => JobAfter::Delete,
        },
    )
}

fn issued(order: &Order, stored: &storage::model::Certificate) {
    tracing::info!(order_id = %order.id, account_id = %order.account_id, serial = %stored.serial, "certificate issued");
    metrics::counter!("certeasy_certificates_issued_total").increment(1);
}

/// What `order`'s certificate is to be for the checked CSR under the order's profile, decided
/// at `now` and checked, nothing signed; or with which problem the order fails: its profile was
/// removed from the configuration since the order was created (signing it under another would
/// give the client a certificate it did not ask for), the order's notAfter has passed
/// (`ra::orders::signing_window`), the profile no longer certifies the CSR's key type, or the CA
/// refuses.
fn prepare(
    cx: &WorkerContext,
    issuer: &Ca,
    order: &Order,
    checked: &CheckedCsr,
    now: time::OffsetDateTime,
) -> Result<Intent, Problem> {
    let id = order.id;
    let profile = profile_of(cx, order)?;
    let (not_before, not_after) = ra::orders::signing_window(
        profile,
        order.not_before,
        order.not_after,
        now,
        cx.settings.backdate,
    )
    .inspect_err(|problem| {
        tracing::info!(order_id = %id, detail = %problem.detail, "the order's validity window cannot be signed");
    })?;
    // A certificate can never outlive the CA that signs it.
    let not_after = not_after.min(issuer.issuing_not_after());
    issuer
        .prepare(checked, &order.identifiers, profile, not_before, not_after)
        .map_err(|e| ca_problem(id, e))
}

/// The order's profile; `invalidProfile` when it is gone from the configuration.
fn profile_of<'a>(cx: &'a WorkerContext, order: &Order) -> Result<&'a issuance::Profile, Problem> {
    cx.settings
        .profiles
        .select(order.profile.as_deref())
        .map_err(|e| {
            tracing::warn!(order_id = %order.id, error = %e, "the order's profile is gone; the order fails");
            Problem::new(ProblemType::InvalidProfile, e.to_string())
        })
}

/// The problem an order fails with when the CA refuses or fails.
fn ca_problem(id: OrderId, e: issuance::Error) -> Problem {
    match e {
        // The profile no longer certifies this key type (its definition changed since the
        // finalize request was accepted).
        issuance::Error::BadCsr(detail) => {
            tracing::warn!(order_id = %id, detail, "the CSR's key is refused by the order's profile");
            Problem::new(ProblemType::BadCsr, detail)
        }
        e => {
            tracing::error!(order_id = %id, error = %e, "signing failed");
            Problem::new(
                ProblemType::ServerInternal,
                "The CA could not sign the certificate",
            )
        }
    }
}

/// The reservation that records `intent` before `issuer` signs it.
fn new_reservation(issuer: &Ca, intent: &Intent) -> NewReservation {
    NewReservation {
        serial: intent.serial.clone(),
        not_before: intent.not_before,
        not_after: intent.not_after,
        issuer_chain_pem: issuer.chain_pem().to_owned(),
        crl_shard: intent.crl_shard,
        issuer: issuer.name().to_string(),
    }
}

/// The issuer new certificates are signed by (`ra::issuers`, read from the database and kept a
/// moment), in `ca`, the set this finalization took. One that is not in it (activated through
/// an instance whose configuration has it, before this one's was reloaded) signs nothing here:
/// [`Error::IssuerNotLoaded`], and the job is retried, on an instance that has it or here after
/// a reload adds it. Signing under another issuer than the one the operator activated is never
/// the way out.
async fn active_issuer<'a>(cx: &WorkerContext, ca: &'a Ca) -> Result<&'a Ca, Error> {
    let Some(active) = &cx.settings.active_issuer else {
        return Ok(ca);
    };
    let name = active.current().await;
    ca.issuer(&name).ok_or_else(|| {
        tracing::error!(issuer = %name, "the active issuer is not configured (or retired) on this instance; nothing is signed here until a reload adds it to ca.issuers");
        Error::IssuerNotLoaded(name)
    })
}

/// The issuer that signs `order`: the one its profile names (issue 30: a profile may be signed
/// by an issuer of its own rather than the active one), else the active issuer. A profile's
/// issuer that this instance has not loaded is [`Error::IssuerNotLoaded`], as for the active
/// one: the job waits for an instance that has it; configuration validation and reloads keep
/// it loaded.
async fn issuer_of<'a>(cx: &WorkerContext, ca: &'a Ca, order: &Order) -> Result<&'a Ca, Error> {
    // An order whose profile is gone fails in `prepare`, whichever issuer is picked here.
    let named = cx
        .settings
        .profiles
        .select(order.profile.as_deref())
        .ok()
        .and_then(|p| p.issuer());
    let Some(name) = named else {
        return active_issuer(cx, ca).await;
    };
    ca.issuer(name).ok_or_else(|| {
        tracing::error!(order_id = %order.id, issuer = %name, "the issuer of the order's profile is not loaded on this instance; nothing is signed here until a reload adds it to ca.issuers");
        Error::IssuerNotLoaded(name.clone())
    })
}

/// The issuer of the order's open reservation when a job resumes one (a crash between
/// reserving and storing) and this instance has it loaded, so that the serial is signed again
/// by the key it was recorded for even if another issuer was activated meanwhile; otherwise the
/// order's ([`issuer_of`]; storage abandons a reservation of another issuer).
async fn resumed_or_active_issuer<'a>(
    cx: &WorkerContext,
    ca: &'a Ca,
    order: &Order,
) -> Result<&'a Ca, Error> {
    let open = cx
        .storage
        .serial_reservations(order.id)
        .await?
        .into_iter()
        .find(|r| r.state == ReservationState::Reserved);
    if let Some(issuer) = open.and_then(|r| loaded_issuer(ca, &r.issuer)) {
        return Ok(issuer);
    }
    issuer_of(cx, ca, order).await
}

/// The issuer of `ca` a reservation names.
fn loaded_issuer<'a>(ca: &'a Ca, name: &str) -> Option<&'a Ca> {
    IssuerName::new(name).ok().and_then(|name| ca.issuer(&name))
}

/// Signs exactly the reserved `intent` for `order`'s checked CSR under the order's profile.
fn sign(
    cx: &WorkerContext,
    issuer: &Ca,
    order: &Order,
    checked: &CheckedCsr,
    intent: &Intent,
) -> Result<NewCertificate, Problem> {
    let profile = profile_of(cx, order)?;
    let issued = issuer
        .issue(checked, &order.identifiers, profile, intent)
        .map_err(|e| ca_problem(order.id, e))?;
    // The one place the server signs a subscriber certificate: more signatures than
    // `certeasy_certificates_issued_total` means reserved serials signed again after a
    // finalization stopped between signing and storing.
    metrics::counter!("certeasy_certificates_signed_total").increment(1);
    Ok(NewCertificate {
        serial: issued.serial,
        der: issued.der,
        issuer_chain_pem: issued.issuer_chain_pem.to_string(),
        not_before: issued.not_before,
        not_after: issued.not_after,
        crl_shard: issued.crl_shard,
    })
}
