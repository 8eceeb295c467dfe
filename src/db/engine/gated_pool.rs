//! A connection pool whose waiters queue as tasks, not as threads.
//!
//! diesel's connections block, so every database call runs on a blocking thread. Started straight
//! away, a call that finds every connection taken parks its thread in the pool's wait: a burst of
//! ten thousand long-polls, each reading once before it waits, started some five hundred threads
//! for eight connections (tokio starts up to 512 per runtime), each with its stack and its share of
//! the allocator's memory. Here a call first takes a permit, on the async side and in arrival
//! order, and only then gets a thread. There are as many permits as connections, so the gate is the
//! only queue: a call with a permit usually finds a connection free. Not always: the pool replaces
//! a connection that broke (the database restarted, say) or reached its lifetime, and until it has,
//! a call waits in the pool's own wait, which does not queue (a thread it wakes for a connection
//! given back can lose it to one that just arrived). So it must not be where calls line up; only
//! the calls that hold permits in those moments wait there, each for the pool's
//! `connection_timeout` at most from when it got its permit: however busy the pool, a call that
//! keeps losing there answers unavailable rather than waiting on for as long as the others keep
//! winning. Everything that uses the pool goes through the gate, the announcer too. Twice as many
//! permits, with the calls past the pool's size waiting in the pool, served one call nineteen
//! places late in a test, and in a PostgreSQL receipt storm a second queue behind the gate cost
//! more at p99 than the thread hop it saved.
//!
//! How long a call waits: a pool that neither hands a connection out nor gets one back for
//! the pool's `connection_timeout` is stuck (the database is down, or every connection is
//! held by a slow statement), and the calls waiting then fail as unavailable, as the pool's
//! own wait would.
//! A pool that is handing connections out is only busy, and its queue keeps waiting: a burst
//! drains in order instead of failing the calls at its tail, and a call whose client gives up
//! at the gate leaves the queue with its request (one already on a thread runs to its end).
//! A pool that can open no new connection while the ones it has keep working is busy by this
//! rule at the gate, but each call that gets past the gate and finds no connection gives up
//! after the timeout (see above): the pool runs short and some calls answer unavailable,
//! none waits for good. Opening a connection is itself bounded (libpq's `connect_timeout`),
//! so a missing connection is tried again rather than waited for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::QueryResult;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connection::{AnyConnection, ConnectionManager};
use super::error::DbError;
use super::wait_count::WaitCount;

pub type Pool = r2d2::Pool<ConnectionManager>;

#[derive(Clone)]
pub struct GatedPool {
    pool: Pool,
    /// As many permits as `pool` has connections; clones share them.
    gate: Arc<Semaphore>,
    /// When the pool last handed a connection out or was given one back: the sign that it
    /// is busy, not stuck.
    progress: Arc<ProgressClock>,
    /// Calls that have no connection yet, at the gate or in the pool's own wait.
    waiting: WaitCount,
}

/// What a call fails with when the pool made no progress for `limit`: the log says which
/// setting that is.
fn stuck(limit: Duration) -> DbError {
    DbError::Unavailable(format!(
        "the pool handed out no connection and got none back for {} ms \
         (CHORUS_POOL_TIMEOUT_MS)",
        limit.as_millis()
    ))
}

/// The last moment of progress, as nanoseconds since the clock was made.
struct ProgressClock {
    origin: Instant,
    last_nanos: AtomicU64,
}

impl ProgressClock {
    fn new() -> ProgressClock {
        ProgressClock {
            origin: Instant::now(),
            last_nanos: AtomicU64::new(0),
        }
    }

    fn tick(&self) {
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_nanos.fetch_max(now, Ordering::Relaxed);
    }

    /// When a call that began waiting at `since` gives up: `limit` after the later of that
    /// and the last progress.
    fn give_up_at(&self, since: Instant, limit: Duration) -> Instant {
        let last = self.origin + Duration::from_nanos(self.last_nanos.load(Ordering::Relaxed));
        since.max(last) + limit
    }
}

impl GatedPool {
    pub fn new(pool: Pool) -> GatedPool {
        let permits = pool.max_size() as usize;
        GatedPool {
            pool,
            gate: Arc::new(Semaphore::new(permits)),
            progress: Arc::new(ProgressClock::new()),
            waiting: WaitCount::default(),
        }
    }

    /// The pool itself, for what holds a connection of its own for long (SQLite's writer
    /// lane) and for its state in metrics.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// How many calls have no connection yet.
    pub fn calls_waiting(&self) -> usize {
        self.waiting.now()
    }

    /// Runs `f` on a blocking thread with a connection of the pool, once one is free. Waits
    /// in arrival order while the pool makes progress; fails as unavailable once it has made
    /// none for the pool's `connection_timeout` in the queue, or once the call has waited
    /// that long in the pool's own wait.
    pub async fn run<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let since = Instant::now();
        let waiting = self.waiting.enter();
        let limit = self.pool.connection_timeout();
        let permit = self.permit(since, limit).await?;
        let (pool, progress) = (self.pool.clone(), self.progress.clone());
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            // The pool's own wait is not in arrival order: others' progress says nothing of
            // this call's turn there (a woken waiter loses the connection given back to a
            // call that just arrived, again and again on a loaded machine), so it is bounded
            // from the moment the call got its permit, whatever the others do.
            let mut conn = pool.get_timeout(limit)?;
            drop(waiting);
            progress.tick();
            let outcome = f(&mut conn);
            conn.record(&outcome);
            drop(conn);
            progress.tick();
            outcome.map_err(DbError::from)
        })
        .await
        .map_err(|_| DbError::Task)?
    }

    /// A place among the calls that hold a connection (or, for a moment, wait for one).
    async fn permit(
        &self,
        since: Instant,
        limit: Duration,
    ) -> Result<OwnedSemaphorePermit, DbError> {
        let acquire = self.gate.clone().acquire_owned();
        tokio::pin!(acquire);
        loop {
            let give_up_at = self.progress.give_up_at(since, limit);
            match tokio::time::timeout_at(give_up_at.into(), &mut acquire).await {
                Ok(Ok(permit)) => return Ok(permit),
                // The gate is never closed.
                Ok(Err(_closed)) => return Err(DbError::Task),
                // Progress moved the deadline while this call waited: keep its place.
                Err(_elapsed) if self.progress.give_up_at(since, limit) > give_up_at => {}
                Err(_elapsed) => return Err(stuck(limit)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::db::engine::connection::DbSettings;

    /// A pool of one connection to a new SQLite file, which waits `timeout` for it. The
    /// connection is opened first, with time to spare on a loaded machine.
    fn pool_of_one(dir: &tempfile::TempDir, timeout: Duration) -> GatedPool {
        let path = dir.path().join("gate.sqlite3");
        let settings = DbSettings::for_url(&path.to_string_lossy());
        let pool = r2d2::Pool::builder()
            .max_size(1)
            .min_idle(Some(0))
            .connection_timeout(timeout)
            .build_unchecked(ConnectionManager::new(&settings));
        drop(
            pool.get_timeout(Duration::from_secs(30))
                .expect("open the connection"),
        );
        GatedPool::new(pool)
    }

    /// A call that holds the pool's only connection until `release` is sent; returns once it
    /// holds it.
    async fn hold_the_connection(
        gated: &GatedPool,
    ) -> (
        mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<(), DbError>>,
    ) {
        let (release, released) = mpsc::channel::<()>();
        let (holding, held) = tokio::sync::oneshot::channel::<()>();
        let gated = gated.clone();
        let holder = tokio::spawn(async move {
            gated
                .run(move |_conn| {
                    let _ = holding.send(());
                    let _ = released.recv();
                    Ok(())
                })
                .await
        });
        held.await.expect("the holder got the connection");
        (release, holder)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_behind_a_connection_nobody_gives_back_are_unavailable_after_the_timeout() {
        let dir = tempfile::tempdir().expect("temp dir");
        let timeout = Duration::from_millis(300);
        let gated = pool_of_one(&dir, timeout);
        let (release, holder) = hold_the_connection(&gated).await;

        // They wait at the gate.
        let asked = Instant::now();
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let gated = gated.clone();
                tokio::spawn(async move { gated.run(|_conn| Ok(())).await })
            })
            .collect();
        for call in futures::future::join_all(waiting).await {
            let refused = call.expect("call task");
            assert!(
                refused.as_ref().is_err_and(DbError::is_unavailable),
                "{refused:?}"
            );
        }
        let waited = asked.elapsed();
        assert!(waited >= timeout, "gave up after {waited:?}");
        assert!(waited < 4 * timeout, "gave up only after {waited:?}");

        release.send(()).expect("the holder waits");
        holder.await.expect("holder task").expect("holder call");
        let answer = gated.run(|_conn| Ok(42)).await.expect("a free connection");
        assert_eq!(answer, 42);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_pool_serves_its_whole_queue_however_long_the_queue_takes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let timeout = Duration::from_millis(400);
        let gated = pool_of_one(&dir, timeout);
        let started = Instant::now();
        let calls: Vec<_> = (0..16)
            .map(|call| {
                let gated = gated.clone();
                tokio::spawn(async move {
                    gated
                        .run(move |_conn| {
                            std::thread::sleep(Duration::from_millis(100));
                            Ok(call)
                        })
                        .await
                })
            })
            .collect();
        for (call, answer) in futures::future::join_all(calls)
            .await
            .into_iter()
            .enumerate()
        {
            assert_eq!(answer.expect("call task").expect("served"), call);
        }
        // Sixteen calls of 100 ms on one connection: the last waited about four timeouts.
        assert!(started.elapsed() >= 3 * timeout);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_calls_are_served_in_the_order_they_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let gated = pool_of_one(&dir, Duration::from_secs(10));
        let (release, holder) = hold_the_connection(&gated).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for call in 0..20 {
            let order = order.clone();
            let mut asking = Box::pin(gated.run(move |_conn| {
                order.lock().expect("order").push(call);
                Ok(())
            }));
            // Polled once, the call has taken its place in the queue.
            assert!(futures::poll!(asking.as_mut()).is_pending());
            waiting.push(asking);
        }

        release.send(()).expect("the holder waits");
        holder.await.expect("holder task").expect("holder call");
        for call in futures::future::join_all(waiting).await {
            call.expect("call");
        }
        // The gate lets calls on in order, one per connection: none is overtaken.
        let order = order.lock().expect("order").clone();
        assert_eq!(order, (0..20).collect::<Vec<_>>(), "served out of turn");
    }
}
