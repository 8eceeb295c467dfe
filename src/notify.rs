//! Who is waiting, and waking them. This is the only in-memory state of the service: the
//! registry of parked long-polls. A waiter holds no database connection and no thread.
//!
//! Wake-ups arrive from this process (after a commit) and, on PostgreSQL, from other instances
//! through LISTEN/NOTIFY: one dedicated connection per database node ([`run_pg_listeners`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::wake::{WakeEvent, CHANNEL};

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

pub struct Notifier {
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
    notifier: Arc<Notifier>,
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
        self.notifier.unregister(self.id);
    }
}

impl Notifier {
    pub fn new(limits: WaiterLimits) -> Arc<Notifier> {
        let instance_id = {
            use rand::Rng;
            format!("{:016x}", rand::rng().random::<u64>())
        };
        Arc::new(Notifier {
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
            notifier: self.clone(),
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

    fn handle_remote(&self, payload: &str) {
        match WakeEvent::decode(payload) {
            Some((instance, _)) if instance == self.instance_id => {}
            Some((_, event)) => self.wake(&event),
            None => tracing::debug!(payload, "ignoring an unknown notification"),
        }
    }
}

/// Listens for other instances' wake-ups on every node of the database until the process
/// ends. A notification reaches only the listeners of the node it was sent on, and on Citus
/// each instance sends on the node it is attached to (the coordinator or any worker), so an
/// instance listens on each of them: the configured node, and every active primary Citus
/// lists in `pg_dist_node`, reached at the configured URL with that node's host and port.
/// The list is read again every [`NODES_REREAD_EVERY`], so added nodes are heard and removed
/// ones let go. On plain PostgreSQL that is the one configured node.
pub async fn run_pg_listeners(url: String, notifier: Arc<Notifier>) {
    let mut listening: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    loop {
        let mut one_node = false;
        let mut wanted = match cluster_node_urls(&url).await {
            Ok(urls) => {
                // Plain PostgreSQL: one node, nothing to read again.
                one_node = urls.is_empty();
                urls
            }
            Err(e) => {
                tracing::warn!(error = ?e, "cannot read the database's node list; keeping the listeners as they are");
                listening.keys().cloned().collect()
            }
        };
        // In the spelling the node list uses, so the configured node is heard once.
        wanted.insert(node_url_as_listed(&url));
        listening.retain(|node_url, task| {
            let keep = wanted.contains(node_url);
            if !keep {
                task.abort();
            }
            keep
        });
        for node_url in wanted {
            listening
                .entry(node_url.clone())
                .or_insert_with(|| tokio::spawn(run_pg_listener(node_url, notifier.clone())));
        }
        let mut stopping = notifier.shutdown.subscribe();
        if one_node {
            let _ = stopping.wait_for(|stopping| *stopping).await;
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(NODES_REREAD_EVERY) => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// How often the node list of a Citus database is read again.
const NODES_REREAD_EVERY: Duration = Duration::from_secs(30);

/// The URLs of every node Citus lists for the database (the configured one among them, in
/// its own spelling): empty on plain PostgreSQL, and when the configured URL is not in URL
/// form (`host=… port=…`), which cannot be pointed elsewhere: then only its node is heard.
async fn cluster_node_urls(url: &str) -> Result<HashSet<String>, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT nodename, nodeport FROM pg_dist_node \
             WHERE noderole = 'primary' AND isactive \
               AND EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            &[],
        )
        .await;
    drop(client);
    driver.abort();
    let rows = match rows {
        Ok(rows) => rows,
        // No pg_dist_node: not a Citus database.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(HashSet::new())
        }
        Err(e) => return Err(e),
    };
    if !rows.is_empty() && url::Url::parse(url).is_err() {
        tracing::warn!(
            "the database URL is not in URL form: wake-ups sent on the other Citus nodes are not heard"
        );
    }
    Ok(rows
        .iter()
        .filter_map(|row| {
            let host: String = row.try_get(0).ok()?;
            let port: i32 = row.try_get(1).ok()?;
            node_url(url, &host, u16::try_from(port).ok()?)
        })
        .collect())
}

/// `url` as [`node_url`] spells a URL it derives, or as it is when it does not parse.
fn node_url_as_listed(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| url.to_owned(), String::from)
}

/// `url` pointed at another node: the same user, password, database and options.
fn node_url(url: &str, host: &str, port: u16) -> Option<String> {
    let mut parsed = url::Url::parse(url).ok()?;
    parsed.set_host(Some(host)).ok()?;
    parsed.set_port(Some(port)).ok()?;
    Some(parsed.into())
}

/// Listens for other instances' wake-ups until the process ends, reconnecting with backoff.
/// After every (re)connect all local waiters re-check the database, since notifications sent
/// while the connection was down are gone.
async fn run_pg_listener(url: String, notifier: Arc<Notifier>) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match listen(&url, &notifier, &mut backoff).await {
            Ok(()) => tracing::warn!("notification listener connection closed"),
            Err(e) => tracing::warn!(error = ?e, "notification listener failed"),
        }
        if notifier.is_shutting_down() {
            return;
        }
        // No wake-up here: while the database is down a woken poll could only fail. The
        // successful reconnect wakes everyone.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);

async fn listen(
    url: &str,
    notifier: &Arc<Notifier>,
    backoff: &mut Duration,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let (sender, mut payloads) = tokio::sync::mpsc::unbounded_channel::<String>();
    // The connection object yields notifications; it must be polled for the client to work.
    let driver = tokio::spawn(async move {
        loop {
            let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
            match message {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if sender.send(n.payload().to_owned()).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    tracing::info!("listening for other instances' wake-ups");
    *backoff = FIRST_BACKOFF;
    notifier.wake_all();
    while let Some(payload) = payloads.recv().await {
        notifier.handle_remote(&payload);
    }
    drop(client);
    match driver.await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier(per_user: usize, total: usize) -> Arc<Notifier> {
        Notifier::new(WaiterLimits { per_user, total })
    }

    #[tokio::test]
    async fn wake_before_wait_is_not_lost() {
        let n = notifier(4, 10);
        let reg = n
            .register("alice", vec![WakeEvent::MessageSent(1)])
            .unwrap();

        n.wake(&WakeEvent::MessageSent(1));

        tokio::time::timeout(Duration::from_secs(1), reg.woken())
            .await
            .expect("woken");
    }

    #[tokio::test]
    async fn wake_reaches_only_matching_keys() {
        let n = notifier(4, 10);
        let other = n.register("bob", vec![WakeEvent::MessageSent(2)]).unwrap();

        n.wake(&WakeEvent::MessageSent(1));
        n.wake(&WakeEvent::CursorMoved(2));

        let waited = tokio::time::timeout(Duration::from_millis(50), other.woken()).await;
        assert!(waited.is_err(), "no event for group 2's messages happened");
    }

    #[test]
    fn limits_per_user_and_total_and_release_on_drop() {
        let n = notifier(2, 3);
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
    fn a_node_url_keeps_everything_but_host_and_port() {
        assert_eq!(
            node_url(
                "postgres://chorus:secret@db-0:9700/chorus?sslmode=disable",
                "10.0.0.7",
                5432
            )
            .as_deref(),
            Some("postgres://chorus:secret@10.0.0.7:5432/chorus?sslmode=disable")
        );
    }

    #[test]
    fn own_notifications_are_skipped_and_others_wake() {
        let n = notifier(4, 10);
        let reg = n.register("a", vec![WakeEvent::CursorMoved(5)]).unwrap();
        n.handle_remote(&WakeEvent::CursorMoved(5).encode(n.instance_id()));
        assert_eq!(Arc::strong_count(&reg.notify), 2);
        let woken = futures_ready(&reg);
        assert!(!woken, "own event was already delivered in process");
        n.handle_remote(&WakeEvent::CursorMoved(5).encode("other"));
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
