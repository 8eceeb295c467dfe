//! The pools and the only two ways handlers reach the database: [`Db::read`] and
//! [`Db::write`], each on a blocking thread with a pooled connection.

use std::convert::Infallible;
use std::sync::Arc;

use diesel::prelude::*;

use super::connection::{AnyConnection, ConnectionManager, DbSettings, Engine};
use super::error::DbError;
use super::gated_pool::GatedPool;
use super::publish::{publish_now, Publisher};
use super::storage::StorageAlarm;
use super::write_lane::{CommitCounters, WriteLane};
use crate::wake_ups::events::Wakes;
use crate::wake_ups::waiters::Waiters;

pub use super::gated_pool::Pool;

/// The pools. On SQLite all writes go through one connection, owned by the writer lane
/// ([`WriteLane`], group commit): several writer connections starve each other into
/// "database is locked", one is both faster and safe. On PostgreSQL readers and writers share
/// one pool, and each write is a transaction of its own.
#[derive(Clone)]
pub struct Db {
    engine: Engine,
    writer: GatedPool,
    reader: GatedPool,
    /// PostgreSQL only: the publisher's own connection, one of the pool's size.
    publishing: Option<GatedPool>,
    /// SQLite only.
    lane: Option<WriteLane>,
    commits: Arc<CommitCounters>,
    /// Who hears of committed writes in this process; None for tools that serve no polls.
    waiters: Option<Arc<Waiters>>,
    /// How writes publish their feed positions and wake-ups.
    publish: Publish,
    /// Says in the log when writes start and stop being refused for lack of space.
    storage: Arc<StorageAlarm>,
    /// See [`DbSettings::shared_commits`].
    shared_commits: bool,
}

/// How a write is published: its feed rows stamped with positions, its wake-ups sent (see
/// [`super::publish`]).
#[derive(Clone)]
enum Publish {
    /// SQLite: inside the writer lane's batch, before its commit; this process's waiters are
    /// woken after it.
    InBatch,
    /// PostgreSQL tools and seeding, which run no publisher task: right after the commit, on
    /// the writing connection.
    AfterCommit,
    /// PostgreSQL serving: by this instance's publisher task, which the write waits for.
    ByPublisher(Arc<Publisher>),
}

/// The instance name a write without a registry of waiters publishes under (tools, seeding): every
/// serving instance treats it as another instance's.
const TOOL_INSTANCE: &str = "tool";

impl Db {
    pub fn connect(settings: &DbSettings) -> Result<Db, DbError> {
        let engine = Engine::from_url(&settings.url);
        // Every connection is opened at start and the pool keeps them all open (it opens a new
        // one when one breaks or reaches r2d2's lifetime of 30 minutes): a call let in by the
        // pool's gate then finds one ready, instead of waiting in the pool's own wait, which is
        // not in arrival order, while one opens. No idle timeout: with every connection kept,
        // it would only close the idle ones every ten minutes to open them again.
        let build = |size: u32| {
            r2d2::Pool::builder()
                .max_size(size)
                .min_idle(Some(size))
                .idle_timeout(None)
                .connection_timeout(settings.pool_timeout)
                .build(ConnectionManager::new(settings))
                .map(GatedPool::new)
        };
        let commits = Arc::new(CommitCounters::default());
        let db = match engine {
            Engine::Sqlite => {
                let writer = build(1)?;
                let lane = WriteLane::start(
                    writer.pool().clone(),
                    settings.sqlite_write_batch,
                    commits.clone(),
                )
                .map_err(|e| DbError::Unavailable(format!("cannot start the writer: {e}")))?;
                Db {
                    engine,
                    writer,
                    reader: build(settings.pool_size.max(1))?,
                    publishing: None,
                    lane: Some(lane),
                    commits,
                    waiters: None,
                    publish: Publish::InBatch,
                    storage: Arc::default(),
                    shared_commits: settings.shared_commits,
                }
            }
            Engine::Postgres => {
                // One connection of the pool's size is the publisher's: a round never queues
                // behind requests, so feeds and wake-ups follow commits closely.
                let size = settings.pool_size.max(2);
                let pool = build(size - 1)?;
                Db {
                    engine,
                    writer: pool.clone(),
                    reader: pool,
                    publishing: Some(build(1)?),
                    lane: None,
                    commits,
                    waiters: None,
                    publish: Publish::AfterCommit,
                    storage: Arc::default(),
                    shared_commits: settings.shared_commits,
                }
            }
        };
        Ok(db)
    }

    /// The same database, with the waiters of this process woken after each write and, on
    /// PostgreSQL, writes published by one task (see [`Publisher`]). `announce: false` is for
    /// tests only: an instance whose wake-ups never reach other instances, as when it dies
    /// between its commits and their publication (its writes are still published).
    pub fn waking(self, waiters: Arc<Waiters>, announce: bool) -> Db {
        let publish = match &self.publishing {
            Some(connection) => {
                let instance = waiters.instance_id().to_owned();
                let publisher =
                    Publisher::start(connection.clone(), instance, announce, waiters.clone());
                Publish::ByPublisher(publisher)
            }
            None => self.publish,
        };
        Db {
            waiters: Some(waiters),
            publish,
            ..self
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Runs `f` with a reader connection on a blocking thread.
    pub async fn read<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let result = self.reader.run(f).await;
        if let Err(e) = &result {
            self.storage.failed(e);
        }
        result
    }

    /// Runs `f` as one transaction on a pooled connection (PostgreSQL), or inside the writer
    /// lane's next batch (SQLite: one transaction for every write waiting, `f` in a savepoint
    /// of its own; see [`WriteLane`]). Either way the caller hears of it after the commit.
    /// The write is then published (see [`super::publish`]): on SQLite it already is; on
    /// PostgreSQL this instance's publisher gives its feed rows positions and sends the
    /// wake-ups `f` records, a moment later, without the caller waiting. A write that fails
    /// wakes no one. Writes that may be refused use [`Db::write_checked`].
    pub async fn write<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.write_checked(move |conn, wakes| f(conn, wakes).map(Ok::<T, Infallible>))
            .await
            .map(never_refused)
    }

    /// [`Db::write`] for a write that may refuse (say, the caller is not a member): a refusal
    /// rolls back whatever the write did before it, and wakes no one.
    pub async fn write_checked<T, R, F>(&self, f: F) -> Result<Result<T, R>, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<Result<T, R>> + Send + 'static,
        T: Send + 'static,
        R: Send + 'static,
    {
        let instance = self
            .waiters
            .as_ref()
            .map_or(TOOL_INSTANCE.to_owned(), |n| n.instance_id().to_owned());
        let work = move |conn: &mut AnyConnection| {
            let mut wakes = Wakes::default();
            Ok(f(conn, &mut wakes)?.map(|value| (value, wakes)))
        };
        // Runs where the commit happened, not in the caller's future: a client that hangs up
        // drops that future, but what it wrote is committed and its waiters must hear of it.
        let committed = self.on_commit();
        let after_commit = move |(_, wakes): &(T, Wakes)| committed(wakes);
        let outcome = match &self.lane {
            Some(lane) => lane.submit(work, after_commit, 1, |_| 1).await,
            None => {
                let commits = self.commits.clone();
                let publish_now_here = matches!(self.publish, Publish::AfterCommit);
                self.writer
                    .run(move |conn| {
                        let outcome = in_transaction(conn, work)?;
                        if let Ok(done) = &outcome {
                            commits.committed(1);
                            after_commit(done);
                            if publish_now_here {
                                publish_after_commit(conn, &instance, &done.1);
                            }
                        }
                        Ok(outcome)
                    })
                    .await
            }
        };
        let outcome = outcome.inspect_err(|e| self.storage.failed(e))?;
        if outcome.is_ok() {
            self.storage.wrote();
        }
        Ok(outcome.map(|(value, _)| value))
    }

    /// Several clients' writes in one transaction (see [`super::shared_commits`]): `f` stores
    /// at most `carries` of them and answers how many it stored (counted as that many writes
    /// in one commit) and its value; what it did stands when it returns Ok and is rolled back
    /// otherwise. On PostgreSQL it is a transaction of its own; on SQLite a savepoint in the
    /// writer lane's next batch, so the writes of one group that queued together run their
    /// statements once for all of them, and the batch's other writes share their commit.
    /// Published as any write is. Only where [`Db::shares_commits`] is true.
    pub async fn write_shared<T, F>(&self, carries: usize, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<(usize, T)> + Send + 'static,
        T: Send + 'static,
    {
        let committed = self.on_commit();
        let (writes, written) = match &self.lane {
            Some(lane) => {
                let work = move |conn: &mut AnyConnection| {
                    let mut wakes = Wakes::default();
                    let stored = f(conn, &mut wakes)?;
                    Ok(Ok::<_, Infallible>((stored, wakes)))
                };
                let after_commit = move |((writes, _), wakes): &((usize, T), Wakes)| {
                    if *writes > 0 {
                        committed(wakes);
                    }
                };
                let ((writes, written), _) = never_refused(
                    lane.submit(work, after_commit, carries, |((writes, _), _)| *writes)
                        .await
                        .inspect_err(|e| self.storage.failed(e))?,
                );
                (writes, written)
            }
            None => {
                let commits = self.commits.clone();
                self.writer
                    .run(move |conn| {
                        let mut wakes = Wakes::default();
                        let work =
                            |conn: &mut AnyConnection| f(conn, &mut wakes).map(Ok::<_, Infallible>);
                        let (writes, written) = never_refused(in_transaction(conn, work)?);
                        if writes > 0 {
                            commits.committed(writes);
                            committed(&wakes);
                        }
                        Ok((writes, written))
                    })
                    .await
                    .inspect_err(|e| self.storage.failed(e))?
            }
        };
        if writes > 0 {
            self.storage.wrote();
        }
        Ok(written)
    }

    /// Runs `f` as one transaction of upkeep. On PostgreSQL it runs on a pooled connection,
    /// wakes no one and is not counted among the commits and writes the metrics report, which
    /// say how clients' writes shared their commits. On SQLite, whose writes all go through
    /// the writer lane, it is a write like any other.
    pub async fn upkeep<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        if self.engine == Engine::Sqlite {
            return self.write(move |conn, _wakes| f(conn)).await;
        }
        self.writer
            .run(move |conn| in_transaction(conn, |c| f(c).map(Ok::<T, Infallible>)))
            .await
            .map(never_refused)
            .inspect_err(|e| self.storage.failed(e))
    }

    /// The most clients' writes one shared transaction may carry, of the `wanted`: on SQLite
    /// no more than one commit of the writer lane carries.
    pub fn shared_batch_limit(&self, wanted: usize) -> usize {
        self.lane
            .as_ref()
            .map_or(wanted, |lane| wanted.min(lane.max_batch()))
    }

    /// Whether writes that arrive together share transactions ([`Db::write_shared`]):
    /// serving (tools write alone), with the setting on.
    pub fn shares_commits(&self) -> bool {
        let serving = self.waiters.is_some();
        serving && self.shared_commits
    }

    /// What a committed write's wake-ups do: queued for this instance's publisher, whose round
    /// publishes the write and then wakes; or, where the write is already published (SQLite's
    /// batch), this process's waiters woken at once.
    fn on_commit(&self) -> impl Fn(&Wakes) + Send + 'static {
        let waiters = self.waiters.clone();
        let publisher = match &self.publish {
            Publish::ByPublisher(publisher) => Some(publisher.clone()),
            Publish::InBatch | Publish::AfterCommit => None,
        };
        move |wakes: &Wakes| {
            if let Some(publisher) = &publisher {
                return publisher.queue(wakes);
            }
            if let Some(waiters) = &waiters {
                for event in wakes.events() {
                    waiters.wake(event);
                }
            }
        }
    }

    /// Waits (at most `limit`) until every write this instance committed so far is in the
    /// feeds: at once on SQLite and for tools, whose writes are published by their commit.
    pub async fn writes_published(&self, limit: std::time::Duration) {
        if let Publish::ByPublisher(publisher) = &self.publish {
            publisher.caught_up(limit).await;
        }
    }

    /// Write transactions committed, and the writes they carried (more than one each when
    /// SQLite's writer lane grouped them).
    pub fn commit_counts(&self) -> (u64, u64) {
        self.commits.read()
    }

    /// Database calls waiting for a connection, and on SQLite writes waiting for the writer
    /// lane.
    pub fn calls_waiting(&self) -> usize {
        let lane = self.lane.as_ref().map_or(0, WriteLane::writes_waiting);
        match self.engine {
            // Readers and writers share one pool (the clones count together).
            Engine::Postgres => self.writer.calls_waiting(),
            Engine::Sqlite => self.reader.calls_waiting() + self.writer.calls_waiting() + lane,
        }
    }

    /// Connections checked out and connections idle, summed over the pools.
    pub fn pool_state(&self) -> (u32, u32) {
        let w = self.writer.pool().state();
        if self.engine == Engine::Postgres {
            let p = self.publishing.as_ref().map(|p| p.pool().state());
            let (p_used, p_idle) = p.map_or((0, 0), |p| {
                (p.connections - p.idle_connections, p.idle_connections)
            });
            return (
                w.connections - w.idle_connections + p_used,
                w.idle_connections + p_idle,
            );
        }
        let r = self.reader.pool().state();
        (
            w.connections - w.idle_connections + r.connections - r.idle_connections,
            w.idle_connections + r.idle_connections,
        )
    }
}

/// Publishes a tool's committed write on its connection. The write stands if this fails: its
/// rows are published by the next publication of any instance or tool.
fn publish_after_commit(conn: &mut AnyConnection, instance: &str, wakes: &Wakes) {
    if let Err(cause) = publish_now(conn, instance, wakes) {
        tracing::warn!(%cause, "a committed write is not published yet; the next write's publication will");
    }
}

/// The value of a write that has no refusal to make.
fn never_refused<T>(outcome: Result<T, Infallible>) -> T {
    match outcome {
        Ok(value) => value,
        Err(never) => match never {},
    }
}

/// Runs `f` in one transaction (PostgreSQL's writes), committed when it returns `Ok(Ok(_))`
/// and rolled back otherwise.
fn in_transaction<T, R, F>(conn: &mut AnyConnection, f: F) -> QueryResult<Result<T, R>>
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<Result<T, R>>,
{
    use diesel::connection::TransactionManager;
    type Manager = <AnyConnection as Connection>::TransactionManager;
    Manager::begin_transaction(conn)?;
    match f(conn) {
        Ok(Ok(value)) => {
            Manager::commit_transaction(conn)?;
            Ok(Ok(value))
        }
        Ok(Err(refusal)) => {
            Manager::rollback_transaction(conn)?;
            Ok(Err(refusal))
        }
        Err(e) => {
            let _ = Manager::rollback_transaction(conn);
            Err(e)
        }
    }
}
