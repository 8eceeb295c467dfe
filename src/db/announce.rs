//! Announcing committed writes' wake-ups to other instances (PostgreSQL `NOTIFY`).
//!
//! A serving instance announces after the commit, from one task: every write's events queue
//! here, and the task sends whatever queued while its previous announcement was in flight as
//! one statement, identical events folded. So no request waits for a `NOTIFY`, and commits do
//! not queue on the lock PostgreSQL takes, for the whole cluster, to commit a transaction that
//! notified: one announcement holds it for many writes. The cost is that an instance that dies
//! between a commit and its announcement never announces it: the other instances' waiters for
//! it then answer at their timeout, and since every feed is read from a cursor, the client's
//! next poll returns what they missed. Nothing is skipped; it arrives up to one poll timeout
//! late. The same holds for what is still queued when the instance stops, and for events
//! dropped because too many are queued (the database is not keeping up), which the log says.
//! A round that cannot be sent (the pool busy, the database away) is kept and tried again.
//! The task queues for its connection at the pool's gate like any request, so when requests
//! are queued an announcement waits its turn behind them.
//!
//! Tools without a serving instance (seeding, one-off commands) announce inside their
//! transaction instead ([`announce_in_transaction`]): they are rare, and have no task to
//! hand the events to. SQLite runs in one process, where wake-ups are delivered in memory only.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use diesel::prelude::*;
use diesel::sql_types::{Array, Text};
use tokio::sync::Notify;

use super::gated_pool::GatedPool;
use super::AnyConnection;
use crate::wake::{Wakes, CHANNEL};

/// At most this many distinct events wait for the next announcement; more are dropped (and
/// the waiters for them answer at their timeout). Each is a few dozen bytes, kept twice.
const MAX_QUEUED: usize = 65_536;
/// How soon a round that could not be sent is tried again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// Sends every wake-up once, in the transaction that causes it: delivered exactly when the
/// change commits, never for a rolled-back one.
pub fn announce_in_transaction(
    conn: &mut AnyConnection,
    instance: &str,
    wakes: &Wakes,
) -> QueryResult<()> {
    let payloads: Vec<String> = wakes.events().iter().map(|e| e.encode(instance)).collect();
    notify_all(conn, payloads)
}

/// One statement for every payload: a `NOTIFY` each, in one transaction.
fn notify_all(conn: &mut AnyConnection, payloads: Vec<String>) -> QueryResult<()> {
    if let (AnyConnection::Postgresql(c), false) = (conn, payloads.is_empty()) {
        diesel::sql_query("SELECT pg_notify($1, payload) FROM unnest($2) AS payload")
            .bind::<Text, _>(CHANNEL)
            .bind::<Array<Text>, _>(payloads)
            .execute(c)?;
    }
    Ok(())
}

/// The queue of one serving instance's committed wake-ups, and the task that announces them.
pub struct Announcer {
    instance: String,
    queue: Mutex<Queue>,
    queued: Notify,
}

#[derive(Default)]
struct Queue {
    /// In the order the writes' commits were queued.
    payloads: Vec<String>,
    seen: HashSet<String>,
    /// Dropped since the last announcement, for the log.
    dropped: u64,
}

impl Queue {
    /// Adds a payload unless it is already queued; beyond the bound it is dropped and counted.
    fn push(&mut self, payload: String) {
        if self.seen.contains(&payload) {
            return;
        }
        if self.payloads.len() >= MAX_QUEUED {
            self.dropped += 1;
            return;
        }
        self.seen.insert(payload.clone());
        self.payloads.push(payload);
    }
}

impl Announcer {
    /// The announcer of the instance named `instance`, its task running on `pool`: it queues
    /// for a connection like any other call, so it never takes one ahead of calls waiting.
    pub fn start(pool: GatedPool, instance: String) -> Arc<Announcer> {
        let announcer = Arc::new(Announcer::new(instance));
        tokio::spawn(announcer.clone().run(pool));
        announcer
    }

    fn new(instance: String) -> Announcer {
        Announcer {
            instance,
            queue: Mutex::default(),
            queued: Notify::new(),
        }
    }

    /// Queues a committed write's wake-ups; returns at once (any thread, no runtime needed).
    pub fn queue(&self, wakes: &Wakes) {
        if wakes.events().is_empty() {
            return;
        }
        {
            let mut queue = self.lock();
            for event in wakes.events() {
                queue.push(event.encode(&self.instance));
            }
        }
        self.queued.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds only strings; a panic elsewhere cannot leave it inconsistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> (Vec<String>, u64) {
        let mut queue = self.lock();
        let dropped = std::mem::take(&mut queue.dropped);
        queue.seen.clear();
        (std::mem::take(&mut queue.payloads), dropped)
    }

    /// Puts a round that could not be sent back at the head of the queue, ahead of what
    /// queued meanwhile, within the bound.
    fn requeue(&self, round: Vec<String>) {
        let mut queue = self.lock();
        let later = std::mem::take(&mut queue.payloads);
        queue.seen.clear();
        for payload in round.into_iter().chain(later) {
            queue.push(payload);
        }
    }

    async fn run(self: Arc<Self>, pool: GatedPool) {
        // Set while announcements fail (the pool busy, the database away): the round is kept
        // and tried again after RETRY_AFTER, and the log says so once per episode.
        let mut failing = false;
        loop {
            if failing {
                tokio::time::sleep(RETRY_AFTER).await;
            } else {
                self.queued.notified().await;
            }
            let (payloads, dropped) = self.take();
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    "wake-ups not announced to other instances: too many queued; their \
                     long-polls there answer at their timeout instead"
                );
            }
            if payloads.is_empty() {
                continue;
            }
            let round = payloads.clone();
            let sent = pool.run(move |conn| notify_all(conn, payloads)).await;
            match sent {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("wake-ups are announced to other instances again");
                }
                Ok(()) => {}
                Err(cause) => {
                    if !failing {
                        tracing::warn!(
                            %cause,
                            "cannot announce wake-ups to other instances; trying again \
                             every {} ms (their long-polls answer at their timeout meanwhile)",
                            RETRY_AFTER.as_millis()
                        );
                    }
                    failing = true;
                    self.requeue(round);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake::WakeEvent;

    fn wakes(events: &[WakeEvent]) -> Wakes {
        let mut wakes = Wakes::default();
        for event in events {
            wakes.record(event.clone());
        }
        wakes
    }

    #[test]
    fn what_queues_between_announcements_goes_once_in_commit_order() {
        let announcer = Announcer::new("i1".into());
        let (sent, read) = (WakeEvent::MessageSent(7), WakeEvent::CursorMoved(7));
        announcer.queue(&wakes(&[sent.clone(), read.clone()]));
        announcer.queue(&wakes(&[sent.clone(), WakeEvent::ReadMoved("bob".into())]));
        let (payloads, dropped) = announcer.take();
        assert_eq!(payloads, ["i1 m 7", "i1 r 7", "i1 v bob"]);
        assert_eq!(dropped, 0);

        announcer.queue(&wakes(&[sent]));
        assert_eq!(
            announcer.take().0,
            ["i1 m 7"],
            "a new round announces it again"
        );
        assert_eq!(announcer.take().0, Vec::<String>::new());
    }

    #[test]
    fn beyond_the_bound_events_are_dropped_and_counted() {
        let announcer = Announcer::new("i1".into());
        let events: Vec<WakeEvent> = (0..MAX_QUEUED as i64 + 10)
            .map(WakeEvent::MessageSent)
            .collect();
        announcer.queue(&wakes(&events));
        let (payloads, dropped) = announcer.take();
        assert_eq!(payloads.len(), MAX_QUEUED);
        assert_eq!(dropped, 10);
    }

    #[test]
    fn a_round_that_failed_goes_first_next_time_without_repeats() {
        let announcer = Announcer::new("i1".into());
        let mut first = Wakes::default();
        first.record(WakeEvent::MessageSent(1));
        first.record(WakeEvent::MessageSent(2));
        announcer.queue(&first);
        let (round, _) = announcer.take();
        let mut meanwhile = Wakes::default();
        meanwhile.record(WakeEvent::MessageSent(2));
        meanwhile.record(WakeEvent::MessageSent(3));
        announcer.queue(&meanwhile);

        announcer.requeue(round);
        assert_eq!(announcer.take().0, ["i1 m 1", "i1 m 2", "i1 m 3"]);
    }
}
