//! Publishing committed writes: their feed positions, and their wake-ups.
//!
//! A write stores its feed rows (`group_msgs`, `receipt_events`, `member_events`) with no
//! position. Publication stamps every committed unpublished row with the feed clock's next
//! value, in a transaction that holds the clock's row lock, so publications take turns: any
//! reader sees a prefix of the clock, every value at or below `feed_clock.published` complete.
//! A write that commits late is simply stamped later, with a larger position, so a reader that
//! has passed a position never finds a change below it afterwards. No transaction id or
//! snapshot is involved: positions are stored data, the same after a dump and restore.
//!
//! When publication runs depends on the engine. On SQLite the writer lane stamps inside the
//! batch that stores the rows, before its commit ([`publish_pending`]): one writer, so
//! positions follow commits trivially. On PostgreSQL a serving instance publishes after the
//! commit, from one task ([`Publisher`]): every write's wake-ups queue there, and one round
//! stamps whatever committed meanwhile and sends the queued wake-ups (`NOTIFY`, identical
//! events folded) in one statement, then wakes this process's waiters. So publication costs
//! one short transaction per round, not per write, and commits do not queue on the lock
//! PostgreSQL takes, for the whole cluster, to commit a transaction that notified. A write
//! answers after its commit without waiting for its round: the round follows within about a
//! round trip and a disk flush, and a long-poll waiting for the change is woken by it.
//!
//! An instance that dies between a commit and its round leaves rows unpublished. Every
//! publisher looks for such rows everywhere at least every [`SWEEP_EVERY`] (on one node every
//! round does), so they appear in the feeds by then; the waiters for them answer at their
//! timeout and the client's next poll returns them. Nothing is skipped. Events dropped because
//! too many are queued (the database is not keeping up) are delayed the same way, as the log
//! says. A round that cannot be sent (the pool busy, the database away) is kept and tried
//! again. The task has a connection of its own, so it never queues behind requests.
//!
//! Tools without a serving instance (seeding, one-off commands) publish right after their
//! commit on the same connection ([`publish_now`]).

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Text};
use tokio::sync::{watch, Notify};

use super::connection::AnyConnection;
use super::distribution::on_citus;
use super::error::DbError;
use super::gated_pool::GatedPool;
use super::raw_sql::RawSql;
use crate::wake_ups::events::{WakeEvent, Wakes, CHANNEL};
use crate::wake_ups::waiters::Waiters;

/// At most this many distinct events wait for the next round; more are dropped (the waiters
/// for them answer at their timeout). Each is a few dozen bytes.
const MAX_QUEUED: usize = 65_536;
/// How soon a round that could not be sent is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// How often a publisher looks for rows left unpublished (an instance died after its commit).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The feed clock's value, as a statement reading or moving it returns it.
#[derive(QueryableByName)]
pub(in crate::db) struct ClockValue {
    #[diesel(sql_type = BigInt)]
    pub(in crate::db) published: i64,
}

/// Which feeds hold rows waiting for a position.
#[derive(QueryableByName)]
struct Pending {
    #[diesel(sql_type = Bool)]
    group_msgs: bool,
    #[diesel(sql_type = Bool)]
    receipt_events: bool,
    #[diesel(sql_type = Bool)]
    member_events: bool,
}

/// Stamps every committed unpublished feed row with the clock's next value, inside the
/// caller's transaction; true when there were any. The clock's row lock, held to the commit,
/// makes publications take turns. Each statement of the transaction sees what the previous
/// publication committed (PostgreSQL's read committed, or SQLite's one writer), so no row is
/// stamped twice.
pub fn publish_pending(conn: &mut AnyConnection) -> QueryResult<bool> {
    // Three probes of small partial indexes: most rounds on an idle system stop here and
    // take no lock, and a busy one updates only the feeds that have rows waiting (a batch of
    // sends, SQLite's commonest, has only messages): every statement saved is saved per commit.
    let pending: Vec<Pending> = RawSql::default()
        .sql(
            "SELECT EXISTS (SELECT 1 FROM group_msgs WHERE pos IS NULL) AS group_msgs, \
                    EXISTS (SELECT 1 FROM receipt_events WHERE pos IS NULL) AS receipt_events, \
                    EXISTS (SELECT 1 FROM member_events WHERE pos IS NULL) AS member_events",
        )
        .keep_prepared()
        .load(conn)?;
    let Some(pending) = pending.first() else {
        return Ok(false);
    };
    let waiting = [
        pending.group_msgs,
        pending.receipt_events,
        pending.member_events,
    ];
    if !waiting.contains(&true) {
        return Ok(false);
    }
    let next = "(SELECT published FROM feed_clock WHERE clock_id = 0)";
    RawSql::default()
        .sql(MOVE_CLOCK)
        .keep_prepared()
        .execute(conn)?;
    for (table, _) in FEEDS.iter().zip(waiting).filter(|(_, waits)| *waits) {
        RawSql::default()
            .sql(&format!(
                "UPDATE {table} SET pos = {next} WHERE pos IS NULL"
            ))
            .keep_prepared()
            .execute(conn)?;
    }
    Ok(true)
}

/// Publishes right after a commit on the same connection: positions, then every wake-up of
/// `wakes` to other instances. For tools, which run no publisher task.
pub fn publish_now(conn: &mut AnyConnection, instance: &str, wakes: &Wakes) -> QueryResult<()> {
    let payloads: Vec<String> = wakes.events().iter().map(|e| e.encode(instance)).collect();
    // A tool's writes are few: it looks everywhere rather than trust what they recorded.
    publish_round(conn, payloads, Look::Everywhere)
}

/// One round of publication, committed by itself. On PostgreSQL it is one statement (one
/// round trip, and no commit at all when nothing is pending): the clock moves only when a
/// feed row waits for a position, and the rows are stamped and the payloads sent (`NOTIFY`)
/// in the same transaction. The statement's snapshot is taken before it waits for the
/// clock's lock, so it may see rows that the publication it waited for has just stamped:
/// PostgreSQL re-checks `pos IS NULL` on the newest version of a row another transaction
/// updated (read committed), so they are skipped, not stamped twice. Rows that committed
/// after the snapshot are left to the next round, with a larger position.
///
/// On Citus a round is a few short transactions. The first stamps: in the groups the round's
/// writes wrote feed rows in ([`stamp_on_citus`]), or everywhere for a sweep (the one-node
/// statement, with the probes that find a publication left open). The second closes the
/// publication by moving the clock alone (readers trust only positions below the clock they
/// see; a move of the reference table's row is a write on every node), after any round that
/// stamped rows and after every round in groups, whose rows another instance's round may have
/// stamped and not closed yet. Only then, both committed on every node, are the payloads
/// sent: a poller woken by them, on whichever node, finds the change readable.
fn publish_round(conn: &mut AnyConnection, payloads: Vec<String>, look: Look) -> QueryResult<()> {
    if on_citus(conn) {
        let closes = match look {
            Look::InGroups(groups) => {
                stamp_on_citus(conn, &groups)?;
                !groups.is_empty()
            }
            Look::Everywhere => run_round(conn, Vec::new())? > 0,
        };
        if closes {
            diesel::sql_query(MOVE_CLOCK).execute(conn)?;
        }
        if !payloads.is_empty() {
            run_round_notifying_only(conn, payloads)?;
        }
        return Ok(());
    }
    match conn {
        AnyConnection::Postgresql(_) => run_round(conn, payloads).map(drop),
        AnyConnection::Sqlite(_) => conn.transaction(|c| publish_pending(c).map(drop)),
    }
}

/// The feeds whose rows publication stamps.
const FEEDS: [&str; 3] = ["group_msgs", "receipt_events", "member_events"];

/// Moves the feed clock one step: a publication's position, or the move that closes one.
const MOVE_CLOCK: &str = "UPDATE feed_clock SET published = published + 1 WHERE clock_id = 0";

/// Where a round looks for rows to stamp.
enum Look {
    /// In the groups the round's writes wrote feed rows in. On Citus only their shards are
    /// searched; rows elsewhere (another instance's) are left to their own round or a sweep.
    InGroups(Vec<i64>),
    /// Everywhere: a sweep, for rows an instance that stopped left unpublished.
    Everywhere,
}

/// Citus's stamping when writes are waiting: the clock moves first, and each feed's pending
/// rows in `groups` get its value, bound as a constant, in a statement of their own, which
/// Citus runs on those groups' shards alone. Nothing stamped (another instance's round took
/// them) rolls the move back. The one-statement round, with its probes
/// and the clock passed between its clauses, costs Citus several passes over every shard and
/// results shipped between nodes.
fn stamp_on_citus(conn: &mut AnyConnection, groups: &[i64]) -> QueryResult<()> {
    if groups.is_empty() {
        return Ok(());
    }
    let stamped = conn.transaction(|c| {
        let moved: Vec<ClockValue> =
            diesel::sql_query(format!("{MOVE_CLOCK} RETURNING published")).load(c)?;
        let position = moved
            .first()
            .map(|m| m.published)
            .ok_or(diesel::result::Error::NotFound)?;
        let mut stamped = 0;
        // In slices, so that a statement stays well within PostgreSQL's bound on values.
        for (feed, slice) in FEEDS
            .iter()
            .flat_map(|f| groups.chunks(1000).map(move |g| (f, g)))
        {
            stamped += RawSql::default()
                .sql(&format!("UPDATE {feed} SET pos = "))
                .int(position)
                .sql(" WHERE pos IS NULL AND group_id IN ")
                .int_list(slice)
                .execute(c)? as i64;
        }
        match stamped {
            0 => Err(diesel::result::Error::RollbackTransaction),
            _ => Ok(()),
        }
    });
    match stamped {
        Err(diesel::result::Error::RollbackTransaction) => Ok(()),
        other => other,
    }
}

#[derive(QueryableByName)]
struct Stamped {
    #[diesel(sql_type = BigInt)]
    stamped: i64,
}

/// Runs a round's statement on PostgreSQL; the number of rows it stamped.
fn run_round(conn: &mut AnyConnection, payloads: Vec<String>) -> QueryResult<i64> {
    let text = match on_citus(conn) {
        true => PUBLISH_AND_CLOSE_ROUND.as_str(),
        false => PUBLISH_ROUND.as_str(),
    };
    let AnyConnection::Postgresql(c) = conn else {
        return Ok(0);
    };
    let rows: Vec<Stamped> = diesel::sql_query(text)
        .bind::<Text, _>(CHANNEL)
        .bind::<Array<Text>, _>(payloads)
        .load(c)?;
    Ok(rows.first().map_or(0, |r| r.stamped))
}

/// Sends the payloads by themselves, committed at once: after the publication they announce.
fn run_round_notifying_only(conn: &mut AnyConnection, payloads: Vec<String>) -> QueryResult<()> {
    let AnyConnection::Postgresql(c) = conn else {
        return Ok(());
    };
    diesel::sql_query("SELECT count(pg_notify($1, payload)) FROM unnest($2::text[]) AS payload")
        .bind::<Text, _>(CHANNEL)
        .bind::<Array<Text>, _>(payloads)
        .execute(c)
        .map(drop)
}

/// PostgreSQL's round (see [`publish_round`]) on one node: the clock moves when a feed row
/// waits for a position. Readers on one node trust every position up to the clock.
static PUBLISH_ROUND: LazyLock<String> = LazyLock::new(|| round_text(false));

/// The round on Citus, where a reader trusts only the positions below the clock it sees (see
/// [`crate::db::read_models::changes::current_watermark`]): the clock also moves when the last
/// publication stamped rows, though nothing is pending now, which closes it. [`publish_round`]
/// closes a publication at once; this catches one left open by an instance that stopped in between.
static PUBLISH_AND_CLOSE_ROUND: LazyLock<String> = LazyLock::new(|| round_text(true));

/// The text of a round. `sent` is selected only so that the `notified` clause runs
/// (PostgreSQL skips a read-only clause nothing refers to). The clock's earlier value is read
/// in a CTE of its own: Citus refuses a subquery over a distributed table that refers to the
/// reference table's row being updated.
fn round_text(closes_last: bool) -> String {
    let mut moves_clock: Vec<String> = FEEDS
        .iter()
        .map(|feed| format!("EXISTS (SELECT 1 FROM {feed} WHERE pos IS NULL)"))
        .collect();
    if closes_last {
        moves_clock.extend(FEEDS.iter().map(|feed| {
            format!("EXISTS (SELECT 1 FROM {feed} WHERE pos = (SELECT published FROM prev))")
        }));
    }
    let stamps: Vec<String> = FEEDS
        .iter()
        .enumerate()
        .map(|(k, feed)| {
            format!(
                "stamped_{k} AS (UPDATE {feed} SET pos = (SELECT published FROM clock) \
                 WHERE pos IS NULL AND EXISTS (SELECT 1 FROM clock) RETURNING 1)"
            )
        })
        .collect();
    let counts: Vec<String> = (0..FEEDS.len())
        .map(|k| format!("(SELECT count(*) FROM stamped_{k})"))
        .collect();
    format!(
        "WITH prev AS (SELECT published FROM feed_clock WHERE clock_id = 0), \
         clock AS (UPDATE feed_clock SET published = published + 1 \
           WHERE clock_id = 0 AND ({moves_clock}) RETURNING published), \
         {stamps}, \
         notified AS (SELECT count(pg_notify($1, payload)) AS sent \
           FROM unnest($2::text[]) AS payload) \
         SELECT {counts} AS stamped, (SELECT sent FROM notified) AS sent",
        moves_clock = moves_clock.join(" OR "),
        stamps = stamps.join(", "),
        counts = counts.join(" + "),
    )
}

/// One serving instance's publication: the queue of its committed writes' wake-ups, and the
/// task that publishes them in rounds.
pub struct Publisher {
    instance: String,
    /// Whether rounds tell other instances. Off only in tests, for an instance whose
    /// announcements are all lost, as when it dies after each commit.
    announce: bool,
    queue: Mutex<Queue>,
    queued: Notify,
    /// The last round published.
    published: watch::Sender<u64>,
}

#[derive(Default)]
struct Queue {
    /// In the order the writes' commits were queued.
    events: Vec<WakeEvent>,
    seen: HashSet<WakeEvent>,
    /// Dropped since the last round, for the log.
    dropped: u64,
    /// The groups the queued writes wrote feed rows in (see [`Wakes::feed_groups`]).
    feed_groups: BTreeSet<i64>,
    /// The number of the round that takes what is queued now (the first round is 1).
    next_round: u64,
    /// The round that publishes the latest write queued: 0 before any.
    needed: u64,
}

impl Queue {
    /// Adds an event unless it is already queued; beyond the bound it is dropped and counted.
    fn push(&mut self, event: WakeEvent) {
        if self.seen.contains(&event) {
            return;
        }
        if self.events.len() >= MAX_QUEUED {
            self.dropped += 1;
            return;
        }
        self.seen.insert(event.clone());
        self.events.push(event);
    }
}

/// What one round takes from the queue.
struct Round {
    number: u64,
    events: Vec<WakeEvent>,
    dropped: u64,
    feed_groups: BTreeSet<i64>,
}

impl Publisher {
    /// The publisher of the instance named `instance`, its task running on `pool`: it queues
    /// for a connection like any other call. The waiters it wakes are `waiters`.
    pub fn start(
        pool: GatedPool,
        instance: String,
        announce: bool,
        waiters: Arc<Waiters>,
    ) -> Arc<Publisher> {
        let publisher = Arc::new(Publisher::new(instance, announce));
        tokio::spawn(publisher.clone().run(pool, waiters));
        publisher
    }

    fn new(instance: String, announce: bool) -> Publisher {
        Publisher {
            instance,
            announce,
            queue: Mutex::new(Queue {
                next_round: 1,
                ..Queue::default()
            }),
            queued: Notify::new(),
            published: watch::Sender::new(0),
        }
    }

    /// Queues a committed write's wake-ups for the next round; returns at once (any thread,
    /// no runtime needed).
    pub fn queue(&self, wakes: &Wakes) {
        {
            let mut queue = self.lock();
            for event in wakes.events() {
                queue.push(event.clone());
            }
            queue.feed_groups.extend(wakes.feed_groups());
            queue.needed = queue.next_round;
        }
        self.queued.notify_one();
    }

    /// Waits until every write this instance committed so far is published, or at most
    /// `limit`: a feed read that follows the caller's own write then sees it. Returns at once
    /// when no round is outstanding.
    pub async fn caught_up(&self, limit: Duration) {
        let needed = self.lock().needed;
        let mut rounds = self.published.subscribe();
        let done = rounds.wait_for(|round| *round >= needed);
        let _ = tokio::time::timeout(limit, done).await;
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds only events; a panic elsewhere cannot leave it inconsistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Round {
        let mut queue = self.lock();
        let number = queue.next_round;
        queue.next_round += 1;
        queue.seen.clear();
        Round {
            number,
            events: std::mem::take(&mut queue.events),
            dropped: std::mem::take(&mut queue.dropped),
            feed_groups: std::mem::take(&mut queue.feed_groups),
        }
    }

    /// Puts the events of a round that could not be published back at the head of the queue,
    /// ahead of what queued meanwhile, within the bound. The next round takes them.
    fn requeue(&self, events: Vec<WakeEvent>, feed_groups: BTreeSet<i64>) {
        let mut queue = self.lock();
        queue.feed_groups.extend(feed_groups);
        let later = std::mem::take(&mut queue.events);
        queue.seen.clear();
        for event in events.into_iter().chain(later) {
            queue.push(event);
        }
    }

    async fn run(self: Arc<Self>, pool: GatedPool, waiters: Arc<Waiters>) {
        // Set while rounds fail (the pool busy, the database away): the round is kept and
        // tried again after RETRY_AFTER, and the log says so once per episode.
        let mut failing = false;
        let mut last_sweep = Instant::now();
        loop {
            let wait = if failing { RETRY_AFTER } else { SWEEP_EVERY };
            let _ = tokio::time::timeout(wait, self.queued.notified()).await;
            let round = self.take();
            if round.dropped > 0 {
                tracing::warn!(
                    dropped = round.dropped,
                    "wake-ups not sent: too many queued; their long-polls answer at their \
                     timeout instead"
                );
            }
            let payloads = self.payloads(&round);
            // Every SWEEP_EVERY a round looks everywhere, also while writes keep coming: a
            // busy instance's rounds would otherwise look only in its own writes' groups.
            let look = match last_sweep.elapsed() >= SWEEP_EVERY {
                true => {
                    last_sweep = Instant::now();
                    Look::Everywhere
                }
                false => Look::InGroups(round.feed_groups.iter().copied().collect()),
            };
            let sent = pool
                .run(move |conn| publish_round(conn, payloads, look))
                .await;
            failing = self.after_round(round, sent, failing, &waiters);
        }
    }

    /// What a round tells other instances: its events, unless this instance announces none.
    fn payloads(&self, round: &Round) -> Vec<String> {
        match self.announce {
            true => round
                .events
                .iter()
                .map(|e| e.encode(&self.instance))
                .collect(),
            false => Vec::new(),
        }
    }

    /// After a round was sent (or not): wakes this process's waiters, or queues the round
    /// again. Whether rounds are failing now.
    fn after_round(
        &self,
        round: Round,
        sent: Result<(), DbError>,
        was_failing: bool,
        waiters: &Waiters,
    ) -> bool {
        match sent {
            Ok(()) => {
                self.published.send_replace(round.number);
                if was_failing {
                    tracing::info!("writes are published again");
                }
                for event in &round.events {
                    waiters.wake(event);
                }
                false
            }
            Err(cause) => {
                if !was_failing {
                    tracing::warn!(
                        %cause,
                        "cannot publish committed writes; trying again every {} ms (the \
                         feeds show them and long-polls hear of them once published)",
                        RETRY_AFTER.as_millis()
                    );
                }
                self.requeue(round.events, round.feed_groups);
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GroupId;

    fn wakes(events: &[WakeEvent]) -> Wakes {
        let mut wakes = Wakes::default();
        for event in events {
            wakes.record(event.clone());
        }
        wakes
    }

    #[test]
    fn what_queues_between_rounds_goes_once_in_commit_order() {
        let publisher = Publisher::new("i1".into(), true);
        let (sent, read) = (
            WakeEvent::MessageSent(GroupId(7)),
            WakeEvent::CursorMoved(GroupId(7)),
        );
        publisher.queue(&wakes(&[sent.clone(), read.clone()]));
        publisher.queue(&wakes(&[sent.clone(), WakeEvent::ReadMoved("bob".into())]));
        let round = publisher.take();
        assert_eq!(
            round.events,
            [sent.clone(), read, WakeEvent::ReadMoved("bob".into())]
        );
        assert_eq!(round.dropped, 0);

        publisher.queue(&wakes(std::slice::from_ref(&sent)));
        assert_eq!(
            publisher.take().events,
            [sent],
            "a new round sends it again"
        );
        assert!(publisher.take().events.is_empty());
    }

    #[test]
    fn beyond_the_bound_events_are_dropped_and_counted() {
        let publisher = Publisher::new("i1".into(), true);
        let events: Vec<WakeEvent> = (0..MAX_QUEUED as i64 + 10)
            .map(|g| WakeEvent::MessageSent(GroupId(g)))
            .collect();
        publisher.queue(&wakes(&events));
        let round = publisher.take();
        assert_eq!(round.events.len(), MAX_QUEUED);
        assert_eq!(round.dropped, 10);
    }

    #[test]
    fn a_round_that_failed_goes_first_next_time_without_repeats() {
        let publisher = Publisher::new("i1".into(), true);
        publisher.queue(&wakes(&[
            WakeEvent::MessageSent(GroupId(1)),
            WakeEvent::MessageSent(GroupId(2)),
        ]));
        let failed = publisher.take();
        publisher.queue(&wakes(&[
            WakeEvent::MessageSent(GroupId(2)),
            WakeEvent::MessageSent(GroupId(3)),
        ]));

        publisher.requeue(failed.events, failed.feed_groups);
        let retried = publisher.take();
        assert_eq!(
            retried.events,
            (1..=3)
                .map(|g| WakeEvent::MessageSent(GroupId(g)))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            retried.feed_groups.into_iter().collect::<Vec<_>>(),
            [1, 2, 3],
            "the failed round's groups are looked in again"
        );
        assert!(publisher.take().feed_groups.is_empty());
    }
}
