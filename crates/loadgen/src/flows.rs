//! One ACME flow, timed phase by phase.

use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use anyhow::bail;
use instant_acme::Account;
use instant_acme::AuthorizationStatus;
use instant_acme::ChallengeType;
use instant_acme::Identifier;
use instant_acme::NewAccount;
use instant_acme::NewOrder;
use instant_acme::Order;
use instant_acme::OrderStatus;
use serde::Serialize;
use testkit::http01::Http01Responder;

use testkit::acme_http::LaneClient;

/// The steps of a full issuance, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Phase {
    /// Directory, nonce, newAccount.
    Account,
    /// Nonce, newOrder.
    Order,
    /// Authorization fetch, challenge response published, challenge POSTed.
    AuthzChallenge,
    /// Order polls until `ready`.
    ReadyWait,
    /// CSR (new key) and finalize POST.
    Finalize,
    /// Order polls until `valid`.
    CertWait,
    /// Certificate download.
    Download,
}

impl Phase {
    pub(crate) const ALL: [Self; 7] = [
        Self::Account,
        Self::Order,
        Self::AuthzChallenge,
        Self::ReadyWait,
        Self::Finalize,
        Self::CertWait,
        Self::Download,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Account => "account",
            Self::Order => "order",
            Self::AuthzChallenge => "authz+challenge",
            Self::ReadyWait => "ready-wait",
            Self::Finalize => "finalize",
            Self::CertWait => "cert-wait",
            Self::Download => "download",
        }
    }
}

/// Phase durations of one flow, in milliseconds, and the polls it took.
#[derive(Debug, Default)]
pub(crate) struct Timings {
    pub(crate) phases: Vec<(Phase, f64)>,
    pub(crate) polls: u64,
}

/// Times phases one after another.
struct Stopwatch {
    last: Instant,
    timings: Timings,
}

impl Stopwatch {
    fn new() -> Self {
        Self {
            last: Instant::now(),
            timings: Timings::default(),
        }
    }

    fn lap(&mut self, phase: Phase) {
        let now = Instant::now();
        let ms = now.duration_since(self.last).as_secs_f64() * 1e3;
        self.timings.phases.push((phase, ms));
        self.last = now;
    }
}

/// A new account on `directory`, through the lane's connection pool.
pub(crate) async fn new_account(client: &LaneClient, directory: &str) -> anyhow::Result<Account> {
    let (account, _) = Account::builder_with_http(Box::new(client.clone()))
        .create(
            &NewAccount {
                contact: &[],
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            directory.to_owned(),
            None,
        )
        .await
        .context("newAccount")?;
    Ok(account)
}

/// A new order for one DNS name.
pub(crate) async fn new_order(account: &Account, name: &str) -> anyhow::Result<Order> {
    account
        .new_order(&NewOrder::new(&[Identifier::Dns(name.to_owned())]))
        .await
        .context("newOrder")
}

/// Account only.
pub(crate) async fn account_flow(client: &LaneClient, directory: &str) -> anyhow::Result<Timings> {
    let mut watch = Stopwatch::new();
    new_account(client, directory).await?;
    watch.lap(Phase::Account);
    Ok(watch.timings)
}

/// Order only, on an existing account.
pub(crate) async fn order_flow(account: &Account, name: &str) -> anyhow::Result<Timings> {
    let mut watch = Stopwatch::new();
    new_order(account, name).await?;
    watch.lap(Phase::Order);
    Ok(watch.timings)
}

/// The whole issuance for one name, answered by `http01`, polling every `poll`.
pub(crate) async fn full_flow(
    client: &LaneClient,
    directory: &str,
    http01: &Http01Responder,
    name: &str,
    poll: Duration,
) -> anyhow::Result<Timings> {
    let mut watch = Stopwatch::new();
    let account = new_account(client, directory).await?;
    watch.lap(Phase::Account);

    let mut order = new_order(&account, name).await?;
    watch.lap(Phase::Order);

    let mut tokens = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.context("authorization")?;
        if authz.status == AuthorizationStatus::Valid {
            continue;
        }
        let mut challenge = authz
            .challenge(ChallengeType::Http01)
            .context("no http-01 challenge offered")?;
        http01.add(&challenge.token, challenge.key_authorization().as_str());
        tokens.push(challenge.token.clone());
        challenge.set_ready().await.context("challenge ready")?;
    }
    watch.lap(Phase::AuthzChallenge);

    let result = finish(&mut order, &mut watch, poll).await;
    for token in &tokens {
        http01.remove(token);
    }
    result?;
    Ok(watch.timings)
}

/// From a challenge answered to the downloaded certificate.
async fn finish(order: &mut Order, watch: &mut Stopwatch, poll: Duration) -> anyhow::Result<()> {
    poll_while(order, watch, poll, OrderStatus::Pending).await?;
    match order.state().status {
        OrderStatus::Ready => {}
        other => bail!(
            "order {other:?} instead of ready: {:?}",
            order.state().error
        ),
    }
    watch.lap(Phase::ReadyWait);

    order.finalize().await.context("finalize")?;
    watch.lap(Phase::Finalize);

    poll_while(order, watch, poll, OrderStatus::Processing).await?;
    match order.state().status {
        OrderStatus::Valid => {}
        other => bail!(
            "order {other:?} instead of valid: {:?}",
            order.state().error
        ),
    }
    watch.lap(Phase::CertWait);

    let chain = order
        .certificate()
        .await
        .context("certificate download")?
        .context("no certificate")?;
    if !chain.contains("BEGIN CERTIFICATE") {
        bail!("the certificate download holds no certificate");
    }
    watch.lap(Phase::Download);
    Ok(())
}

/// Refreshes the order while it is in `status`: the first time at once (a server that is already
/// done pays no poll delay), then every `poll`. The server's `Retry-After` is ignored on purpose.
async fn poll_while(
    order: &mut Order,
    watch: &mut Stopwatch,
    poll: Duration,
    status: OrderStatus,
) -> anyhow::Result<()> {
    let mut polled = false;
    while order.state().status == status {
        if polled {
            tokio::time::sleep(poll).await;
        }
        order.refresh().await.context("order poll")?;
        watch.timings.polls += 1;
        polled = true;
    }
    Ok(())
}
