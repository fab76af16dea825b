//! Work a request runs at once, before anything about it is in the database.
//!
//! A challenge POST or a finalize that finds a free worker place validates or signs first and
//! records the outcome in one transaction (`JobRunner::validate_at_once`,
//! `JobRunner::finalize_at_once`). Until that first write, the database still says `pending` or
//! `ready`, so nothing there stops a second request for the same authorization or order from
//! starting the same work: a second connection to the subscriber's server, a second certificate
//! signed and thrown away. This registry is what stops it within one instance: the first request
//! holds its key until the work's first write, and a second one waits for that write and then
//! finds the recorded state, as it would have after a durable start.
//!
//! Entries exist only while a worker place is held, so there are at most `validation.workers`
//! of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::Duration;

use acme_core::ids::AuthzId;
use acme_core::ids::OrderId;
use tokio::sync::watch;

/// What is in flight: the validation of an authorization, or the finalization of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    Authz(AuthzId),
    Order(OrderId),
}

/// The keys in flight in this instance.
#[derive(Debug, Default)]
pub struct InFlight {
    held: Arc<Mutex<HashMap<Key, watch::Receiver<()>>>>,
}

impl InFlight {
    /// Holds `key` for the caller, or says who holds it.
    pub fn enter(&self, key: Key) -> Result<Held, Busy> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(holder) = held.get(&key) {
            return Err(Busy(holder.clone()));
        }
        let (done, watching) = watch::channel(());
        held.insert(key, watching);
        Ok(Held {
            key,
            held: Arc::clone(&self.held),
            _done: done,
        })
    }

    /// How many keys are held now.
    pub fn len(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A key held until this is dropped: after the held work's first write.
#[derive(Debug)]
pub struct Held {
    key: Key,
    held: Arc<Mutex<HashMap<Key, watch::Receiver<()>>>>,
    /// Dropped with this; every waiter's `changed()` then returns.
    _done: watch::Sender<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// The key is held by another request.
#[derive(Debug)]
pub struct Busy(watch::Receiver<()>);

impl Busy {
    /// Waits until the holder lets go, at most `limit`. Past the limit the caller goes on as if
    /// it had: the durable path it takes then decides from what the database says.
    pub async fn wait(mut self, limit: Duration) {
        // `changed` returns an error once the sender is gone, which is the only event here: the
        // holder never sends.
        let _ = tokio::time::timeout(limit, self.0.changed()).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use acme_core::ids::AuthzId;
    use acme_core::ids::OrderId;

    use super::InFlight;
    use super::Key;

    #[tokio::test]
    async fn a_second_entry_waits_for_the_first_to_let_go() {
        let in_flight = InFlight::default();
        let held = in_flight.enter(Key::Authz(AuthzId(1))).unwrap();
        let busy = in_flight.enter(Key::Authz(AuthzId(1))).unwrap_err();
        // Other keys, of either kind, are independent.
        let other = in_flight.enter(Key::Order(OrderId(1))).unwrap();
        assert_eq!(in_flight.len(), 2);
        let waiter = tokio::spawn(busy.wait(Duration::from_secs(30)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "the key is still held");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is released when the holder lets go")
            .unwrap();
        assert_eq!(in_flight.len(), 1);
        drop(other);
        assert!(in_flight.is_empty());
        in_flight.enter(Key::Authz(AuthzId(1))).expect("free again");
    }

    #[tokio::test]
    async fn a_waiter_gives_up_after_its_limit() {
        let in_flight = InFlight::default();
        let _held = in_flight.enter(Key::Order(OrderId(7))).unwrap();
        let busy = in_flight.enter(Key::Order(OrderId(7))).unwrap_err();
        tokio::time::timeout(Duration::from_secs(5), busy.wait(Duration::from_millis(10)))
            .await
            .expect("the wait is bounded by its limit");
    }

    #[tokio::test]
    async fn a_waiter_that_comes_after_the_release_does_not_wait() {
        let in_flight = InFlight::default();
        let held = in_flight.enter(Key::Order(OrderId(3))).unwrap();
        let busy = in_flight.enter(Key::Order(OrderId(3))).unwrap_err();
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), busy.wait(Duration::from_secs(30)))
            .await
            .expect("released before the wait began");
    }
}
