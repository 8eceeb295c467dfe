//! Writes that arrive together share one statement (PostgreSQL): one commit, one flush and
//! one round trip for all of them, where each alone would pay its own.
//!
//! Each key (a group for sends, a lane for acks) with writes in flight has a queue and one
//! task that drains it: the task takes the writes waiting (as many as [`SharedWork::choose`]
//! lets into one statement), stores them with one statement, answers each, and goes again
//! while writes keep arriving. A lone write goes at once, without waiting for company; a
//! batch forms only from the writes that queued while the previous one was being written.
//! Each write answers only after its batch committed, so a 2xx still means it is durable.
//! Each keeps its own outcome: a write the statement leaves out (a refusal, a repeat)
//! answers None, and its caller takes the general path. When the statement fails, none of
//! the batch is stored (or, if the connection died during the commit, all may be: a retry
//! finds out, as every write here is idempotent or moves a cursor only forward). A lone
//! write then hears its error; each write of a failed batch of several goes alone through
//! the general path, except when the database was unreachable or timed out, which every
//! write of the batch hears.
//!
//! A queued write waits for the batch being written when it arrives and for the batches
//! queued ahead of it, then for its own: each bounded by the pool's and the statement's
//! timeouts (and, after a failed batch of several, its own transaction on the general path).
//!
//! Keys are independent: each has its own task, on its own connection.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use diesel::{PgConnection, QueryResult};
use tokio::sync::oneshot;

use super::error::DbError;
use super::pool::Db;
use crate::wake::Wakes;

/// One kind of write that shares statements: what it queues, how a batch is chosen and how
/// it is stored.
pub trait SharedWork: Send + Sync + 'static {
    /// What the writes queue by: each key has its own queue and task.
    type Key: Eq + Hash + Copy + Debug + Send + Sync + 'static;
    type Item: Send + 'static;
    /// What a write the statement stored answers.
    type Answer: Send + 'static;
    /// Names the writes in logs.
    const WHAT: &'static str;

    /// Which of the waiting items (oldest first, never none) go into the next statement:
    /// their positions, ascending, always the first. `limit` bounds the batch in the work's
    /// own measure (by default, items). The others wait for a later one, in their order.
    fn choose(waiting: &[&Self::Item], limit: usize) -> Vec<usize> {
        (0..waiting.len().min(limit)).collect()
    }

    /// Stores `items` in one statement: how many writes it stored, and one answer per item,
    /// in order (None: left to the general path).
    fn store(
        conn: &mut PgConnection,
        key: Self::Key,
        items: &[Self::Item],
        wakes: &mut Wakes,
    ) -> QueryResult<(usize, Vec<Option<Self::Answer>>)>;
}

/// What a queued write hears.
pub type Outcome<W> = Result<Option<<W as SharedWork>::Answer>, DbError>;

/// The queues of one instance for one kind of write, shared by all its workers.
pub struct SharedStatements<W: SharedWork> {
    inner: Arc<Inner<W>>,
}

impl<W: SharedWork> Clone for SharedStatements<W> {
    fn clone(&self) -> Self {
        SharedStatements {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<W: SharedWork> {
    db: Db,
    /// How much one statement carries (see [`SharedWork::choose`]).
    limit: usize,
    /// Keys with writes in flight, each with those not yet taken by its task.
    queues: Mutex<HashMap<W::Key, Vec<Queued<W>>>>,
}

/// A write waiting for its key's task.
struct Queued<W: SharedWork> {
    item: W::Item,
    answer: oneshot::Sender<Outcome<W>>,
}

impl<W: SharedWork> SharedStatements<W> {
    /// `limit`: how much one statement carries (1: each write alone).
    pub fn new(db: Db, limit: usize) -> SharedStatements<W> {
        SharedStatements {
            inner: Arc::new(Inner {
                db,
                limit: limit.max(1),
                queues: Mutex::default(),
            }),
        }
    }

    /// The write's answer, once committed; None when the general path must take it: the
    /// engine has no such statement, or the statement left it out.
    pub async fn submit(&self, key: W::Key, item: W::Item) -> Outcome<W> {
        if !self.inner.db.writes_in_one_statement() {
            return Ok(None);
        }
        let (answer, answered) = oneshot::channel();
        let queued = Queued { item, answer };
        // A key's entry exists exactly while its task runs.
        let starts_task = match self.inner.lock().entry(key) {
            Entry::Occupied(mut waiting) => {
                waiting.get_mut().push(queued);
                false
            }
            Entry::Vacant(none) => {
                none.insert(vec![queued]);
                true
            }
        };
        if starts_task {
            // A task of its own, so the queue is drained even if this request goes away.
            tokio::spawn(drain(self.inner.clone(), key));
        }
        answered.await.map_err(|_| DbError::Task)?
    }
}

impl<W: SharedWork> Inner<W> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<W::Key, Vec<Queued<W>>>> {
        // Every change to the map is a single insert, push, take or remove, so a panic
        // cannot leave it half-changed and a poisoned lock is usable.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key's next batch, oldest first; None, and the key's entry gone, when none is
    /// waiting (the caller's task then ends).
    fn next_batch(&self, key: W::Key) -> Option<Vec<Queued<W>>> {
        let mut queues = self.lock();
        let waiting = queues.get_mut(&key)?;
        if waiting.is_empty() {
            queues.remove(&key);
            return None;
        }
        let items: Vec<&W::Item> = waiting.iter().map(|q| &q.item).collect();
        let mut chosen = vec![false; waiting.len()];
        for position in W::choose(&items, self.limit) {
            if let Some(c) = chosen.get_mut(position) {
                *c = true;
            }
        }
        // The oldest always goes, so every write is taken in the end.
        chosen[0] = true;
        let (batch, left): (Vec<_>, Vec<_>) = std::mem::take(waiting)
            .into_iter()
            .zip(chosen)
            .partition(|(_, chosen)| *chosen);
        *waiting = left.into_iter().map(|(q, _)| q).collect();
        Some(batch.into_iter().map(|(q, _)| q).collect())
    }
}

/// A key's task: writes its queue, batch after batch, until none is waiting.
async fn drain<W: SharedWork>(inner: Arc<Inner<W>>, key: W::Key) {
    let mut ends = EndsTask {
        inner: inner.clone(),
        key,
        early: true,
    };
    // Each `answer.send` may find its client gone (hung up): the write is stored all the same.
    while let Some(batch) = inner.next_batch(key) {
        let (items, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|q| (q.item, q.answer)).unzip();
        let stored = inner
            .db
            .write_one_statement(move |conn, wakes| W::store(conn, key, &items, wakes))
            .await;
        let outcomes = outcomes::<W>(stored, answers.len(), key);
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            let _ = answer.send(outcome);
        }
    }
    ends.early = false;
}

/// What each write of a batch of `writes` hears, in the batch's order, from what storing it
/// gave: its answer, or None (the general path takes it), or an error.
fn outcomes<W: SharedWork>(
    stored: Result<Option<Vec<Option<W::Answer>>>, DbError>,
    writes: usize,
    key: W::Key,
) -> Vec<Outcome<W>> {
    match stored {
        Ok(Some(answers)) if answers.len() == writes => answers.into_iter().map(Ok).collect(),
        // No statement ran (the engine has none), or it answered for another number of
        // writes than it was given, which `store` never does: the general path decides.
        Ok(_) => (0..writes).map(|_| Ok(None)).collect(),
        // A lone write hears its own error.
        Err(e) if writes == 1 => vec![Err(e)],
        // The database could not be reached or was too busy for the statement: the writes
        // alone would fare no better, and each client retries.
        Err(e) if e.is_unreachable_or_timed_out() => (0..writes)
            .map(|_| Err(e.same_for_another_caller()))
            .collect(),
        // Anything else may be one write's doing, or the mix's (a deadlock): each goes alone
        // through the general path, which gives it its own outcome. Nothing of the batch was
        // stored, or (a connection lost during the commit) all of it, which the general path
        // then finds (a repeated `client_msg_id`, a cursor already there).
        Err(e) => {
            tracing::warn!(key = ?key, writes, error = %e,
                "a shared {} statement failed; its writes go one by one", W::WHAT);
            (0..writes).map(|_| Ok(None)).collect()
        }
    }
}

/// Removes the key's entry if its task ends any other way than by finding its queue empty
/// (a panic, the runtime shutting down): the writes still queued then hear an error instead
/// of waiting for a task that is gone, and the next write starts a new task. (After a normal
/// end the entry is already gone, and may belong to a new task.)
struct EndsTask<W: SharedWork> {
    inner: Arc<Inner<W>>,
    key: W::Key,
    early: bool,
}

impl<W: SharedWork> Drop for EndsTask<W> {
    fn drop(&mut self) {
        if self.early {
            self.inner.lock().remove(&self.key);
        }
    }
}
