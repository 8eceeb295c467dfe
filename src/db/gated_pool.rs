//! A connection pool whose waiters queue as tasks, not as threads.
//!
//! diesel's connections block, so every database call runs on a blocking thread. Started
//! straight away, a call that finds every connection taken parks its thread in the pool's
//! wait: a burst of ten thousand long-polls, each reading once before it waits, started some
//! five hundred threads for eight connections (tokio starts up to 512 per runtime), each with
//! its stack and its share of the allocator's memory. Here a call first takes one of as many
//! permits as the pool has connections, on the async side and in arrival order, and only then
//! gets a thread. The wait keeps its meaning: a call that has no connection within the pool's
//! `connection_timeout` fails as unavailable, as the pool's own wait would.

use std::sync::Arc;
use std::time::Instant;

use diesel::QueryResult;
use tokio::sync::Semaphore;

use super::connection::{AnyConnection, ConnectionManager};
use super::error::DbError;

pub type Pool = r2d2::Pool<ConnectionManager>;

#[derive(Clone)]
pub struct GatedPool {
    pool: Pool,
    /// One permit per connection of `pool`; clones share it.
    gate: Arc<Semaphore>,
}

/// What a call that found no permit in time fails with (r2d2's words for its own wait).
const NO_CONNECTION: &str = "timed out waiting for connection";

impl GatedPool {
    pub fn new(pool: Pool) -> GatedPool {
        let permits = pool.max_size() as usize;
        GatedPool {
            pool,
            gate: Arc::new(Semaphore::new(permits)),
        }
    }

    /// The pool itself, for what holds a connection of its own for long (the announcer) and
    /// for its state in metrics.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Runs `f` on a blocking thread with a connection of the pool, once one is free.
    pub async fn run<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let waited_from = Instant::now();
        let limit = self.pool.connection_timeout();
        let permit = match tokio::time::timeout(limit, self.gate.clone().acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            // The gate is never closed.
            Ok(Err(_closed)) => return Err(DbError::Task),
            Err(_elapsed) => return Err(DbError::Unavailable(NO_CONNECTION.into())),
        };
        let pool = self.pool.clone();
        // A connection can still be out of reach with a permit in hand (one held outside the
        // gate, or one being reopened); the pool's wait takes what is left of the limit.
        let left = limit.saturating_sub(waited_from.elapsed());
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut conn = pool.get_timeout(left)?;
            f(&mut conn).map_err(DbError::from)
        })
        .await
        .map_err(|_| DbError::Task)?
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::db::connection::DbSettings;

    /// A pool of `size` connections to a new SQLite file that waits `timeout` for one.
    fn pool(dir: &tempfile::TempDir, size: u32, timeout: Duration) -> GatedPool {
        let path = dir.path().join("gate.sqlite3");
        let settings = DbSettings::for_url(&path.to_string_lossy());
        let pool = r2d2::Pool::builder()
            .max_size(size)
            .connection_timeout(timeout)
            .build(ConnectionManager::new(&settings))
            .expect("open the pool");
        GatedPool::new(pool)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_with_no_connection_in_time_is_unavailable_and_the_next_one_gets_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let gated = pool(&dir, 1, Duration::from_millis(300));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = {
            let gated = gated.clone();
            tokio::spawn(async move {
                gated
                    .run(move |_conn| {
                        let _ = held.recv();
                        Ok(())
                    })
                    .await
            })
        };
        while gated.gate.available_permits() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        let asked = Instant::now();
        let refused = gated.run(|_conn| Ok(())).await;
        let waited = asked.elapsed();
        assert!(
            matches!(&refused, Err(DbError::Unavailable(m)) if m == NO_CONNECTION),
            "{refused:?}"
        );
        assert!(refused.as_ref().is_err_and(DbError::is_unavailable));
        assert!(
            waited >= Duration::from_millis(300),
            "gave up after {waited:?}"
        );

        release.send(()).expect("the holder waits");
        holder.await.expect("holder task").expect("holder call");
        let answer = gated.run(|_conn| Ok(42)).await.expect("a free connection");
        assert_eq!(answer, 42);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_calls_get_connections_in_the_order_they_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let gated = pool(&dir, 1, Duration::from_secs(10));
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let holder = {
            let gated = gated.clone();
            tokio::spawn(async move {
                gated
                    .run(move |_conn| {
                        let _ = held.recv();
                        Ok(())
                    })
                    .await
            })
        };
        while gated.gate.available_permits() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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
        let order = order.lock().expect("order").clone();
        assert_eq!(order, (0..20).collect::<Vec<_>>());
    }
}
