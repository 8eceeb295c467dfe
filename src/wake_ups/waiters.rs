//! Who is waiting, and waking them. This is the only in-memory state of the service: the
//! registry of parked long-polls. A waiter holds no database connection and no thread.
//!
//! Wake-ups arrive from this process (after a commit) and, on PostgreSQL, from other instances
//! through LISTEN/NOTIFY (see [`super::listener`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

use super::events::WakeEvent;

#[derive(Debug, Clone, Copy)]
pub struct WaiterLimits {
    pub per_user: usize,
    pub total: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WaitRefused {
    #[error("this user already has {0} long-polls waiting")]
    TooManyForUser(usize),
    #[error("the server already holds {0} long-polls")]
    TooManyInTotal(usize),
    #[error("the server is shutting down")]
    ShuttingDown,
}

struct Waiter {
    notify: Arc<Notify>,
    /// Set when the user joined or left a group: the keys this waiter registered are out of date.
    joined: Arc<AtomicBool>,
    keys: Vec<WakeEvent>,
    user: String,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    waiters: HashMap<u64, Waiter>,
    by_key: HashMap<WakeEvent, HashSet<u64>>,
    per_user: HashMap<String, usize>,
}

pub struct Waiters {
    instance_id: String,
    limits: WaiterLimits,
    registry: Mutex<Registry>,
    shutdown: watch::Sender<bool>,
}

/// A parked long-poll. Dropping it (response sent, client gone, task cancelled) unregisters.
pub struct Registration {
    id: u64,
    notify: Arc<Notify>,
    joined: Arc<AtomicBool>,
    waiters: Arc<Waiters>,
}

impl Registration {
    /// Resolves once something this waiter registered for happened since the last call
    /// (a wake-up before the first call is kept, so none is lost).
    pub async fn woken(&self) {
        self.notify.notified().await
    }

    /// Whether the user joined a group since registering (and clears the flag): the caller
    /// should register again with the new group list.
    pub fn take_joined(&self) -> bool {
        self.joined.swap(false, Ordering::AcqRel)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.waiters.unregister(self.id);
    }
}

impl Waiters {
    pub fn new(limits: WaiterLimits) -> Arc<Waiters> {
        let instance_id = {
            use rand::Rng;
            format!("{:016x}", rand::rng().random::<u64>())
        };
        Arc::new(Waiters {
            instance_id,
            limits,
            registry: Mutex::new(Registry::default()),
            shutdown: watch::channel(false).0,
        })
    }

    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters more than refusing all long-polls would, so keep serving.
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn register(
        self: &Arc<Self>,
        user: &str,
        keys: Vec<WakeEvent>,
    ) -> Result<Registration, WaitRefused> {
        if *self.shutdown.borrow() {
            return Err(WaitRefused::ShuttingDown);
        }
        let mut registry = self.lock();
        if registry.waiters.len() >= self.limits.total {
            return Err(WaitRefused::TooManyInTotal(self.limits.total));
        }
        let for_user = registry.per_user.get(user).copied().unwrap_or(0);
        if for_user >= self.limits.per_user {
            return Err(WaitRefused::TooManyForUser(self.limits.per_user));
        }
        registry.next_id += 1;
        let id = registry.next_id;
        for key in &keys {
            registry.by_key.entry(key.clone()).or_default().insert(id);
        }
        *registry.per_user.entry(user.to_owned()).or_default() += 1;
        let notify = Arc::new(Notify::new());
        let joined = Arc::new(AtomicBool::new(false));
        registry.waiters.insert(
            id,
            Waiter {
                notify: notify.clone(),
                joined: joined.clone(),
                keys,
                user: user.to_owned(),
            },
        );
        Ok(Registration {
            id,
            notify,
            joined,
            waiters: self.clone(),
        })
    }

    fn unregister(&self, id: u64) {
        let mut registry = self.lock();
        let Some(waiter) = registry.waiters.remove(&id) else {
            return;
        };
        for key in &waiter.keys {
            if let Some(ids) = registry.by_key.get_mut(key) {
                ids.remove(&id);
                if ids.is_empty() {
                    registry.by_key.remove(key);
                }
            }
        }
        if let Some(count) = registry.per_user.get_mut(&waiter.user) {
            *count -= 1;
            if *count == 0 {
                registry.per_user.remove(&waiter.user);
            }
        }
    }

    /// Wakes the waiters registered for this event in this process.
    pub fn wake(&self, event: &WakeEvent) {
        let registry = self.lock();
        let joined = matches!(event, WakeEvent::MembershipChanged(_));
        if let Some(ids) = registry.by_key.get(event) {
            for id in ids {
                if let Some(waiter) = registry.waiters.get(id) {
                    if joined {
                        waiter.joined.store(true, Ordering::Release);
                    }
                    waiter.notify.notify_one();
                }
            }
        }
    }

    /// Wakes every waiter: after missed notifications (listener reconnect) each re-checks.
    pub fn wake_all(&self) {
        for waiter in self.lock().waiters.values() {
            waiter.notify.notify_one();
        }
    }

    pub fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }

    /// From now on long-polls answer at once; the ones waiting are woken to answer.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
        self.wake_all();
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Changes to the shutting-down flag, for tasks that end with the process's service.
    pub fn shutting_down(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Wakes this process's waiters for another instance's event (`payload` as sent by
    /// NOTIFY); this instance's own events, heard back, are skipped (they woke it already).
    pub fn handle_remote(&self, payload: &str) {
        match WakeEvent::decode(payload) {
            Some((instance, _)) if instance == self.instance_id => {}
            Some((_, event)) => self.wake(&event),
            None => tracing::debug!(payload, "ignoring an unknown notification"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::GroupId;

    fn waiters(per_user: usize, total: usize) -> Arc<Waiters> {
        Waiters::new(WaiterLimits { per_user, total })
    }

    #[tokio::test]
    async fn wake_before_wait_is_not_lost() {
        let n = waiters(4, 10);
        let reg = n
            .register("alice", vec![WakeEvent::MessageSent(GroupId(1))])
            .unwrap();

        n.wake(&WakeEvent::MessageSent(GroupId(1)));

        tokio::time::timeout(Duration::from_secs(1), reg.woken())
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn wake_reaches_only_matching_keys() {
        let n = waiters(4, 10);
        let other = n
            .register("bob", vec![WakeEvent::MessageSent(GroupId(2))])
            .unwrap();

        n.wake(&WakeEvent::MessageSent(GroupId(1)));
        n.wake(&WakeEvent::CursorMoved(GroupId(2)));

        let waited = tokio::time::timeout(Duration::from_millis(50), other.woken()).await;
        assert!(waited.is_err(), "no event for group 2's messages happened");
    }

    #[test]
    fn limits_per_user_and_total_and_release_on_drop() {
        let n = waiters(2, 3);
        let a1 = n.register("a", vec![]).unwrap();
        let _a2 = n.register("a", vec![]).unwrap();
        assert_eq!(
            n.register("a", vec![]).err(),
            Some(WaitRefused::TooManyForUser(2))
        );
        let _b1 = n.register("b", vec![]).unwrap();
        assert_eq!(
            n.register("c", vec![]).err(),
            Some(WaitRefused::TooManyInTotal(3))
        );
        drop(a1);
        assert!(n.register("a", vec![]).is_ok());
    }

    #[test]
    fn own_notifications_are_skipped_and_others_wake() {
        let n = waiters(4, 10);
        let reg = n
            .register("a", vec![WakeEvent::CursorMoved(GroupId(5))])
            .unwrap();
        n.handle_remote(&WakeEvent::CursorMoved(GroupId(5)).encode(n.instance_id()));
        assert_eq!(Arc::strong_count(&reg.notify), 2);
        let woken = futures_ready(&reg);
        assert!(!woken, "own event was already delivered in process");
        n.handle_remote(&WakeEvent::CursorMoved(GroupId(5)).encode("other"));
        assert!(futures_ready(&reg));
    }

    /// Whether `woken()` resolves immediately.
    fn futures_ready(reg: &Registration) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(20), reg.woken())
                .await
                .is_ok()
        })
    }
}
