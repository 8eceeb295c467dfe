//! Writes that arrive together share one transaction: one commit, one flush and the same few
//! statements for all of them, where each alone would pay its own. On SQLite the shared
//! transaction is a savepoint in the writer lane's batch (which already shares its commit
//! among every write waiting): what sharing adds there is the statements, run once for a
//! group's sends instead of once per send.
//!
//! Each key (a group for sends, a lane for acks) with writes in flight has a queue and one
//! task that drains it: the task takes the writes waiting (as many as [`SharedWork::choose`]
//! lets into one transaction), stores them with [`SharedWork::store`], the one operation
//! that also stores a write alone, answers each, and goes again while writes keep arriving.
//! A lone write goes at once, without waiting for company; a batch forms only from the
//! writes that queued while the previous one was being written. Each write answers only
//! after its batch committed, so a 2xx still means it is durable. Each keeps its own
//! outcome: `store` decides every refusal before it writes, so a refused write leaves the
//! others standing. When the transaction fails, none of the batch is stored (or, if the
//! connection died during the commit, all may be: a retry finds out, as every write here is
//! idempotent or moves a cursor only forward). A lone write then hears its error; each write
//! of a failed batch of several is stored again alone, except when the database was
//! unreachable or timed out, which every write of the batch hears.
//!
//! A work may leave an item out of a batch of several when the rows it needs are held by
//! another transaction (see [`SharedWork::store_several`]): it is stored alone, beside the
//! batches that follow, and only it waits for them.
//!
//! Where writes do not share transactions this way (tools, which serve no clients; settings
//! that turn it off) a write is stored alone by the same `store`, through
//! [`Db::write_checked`].
//!
//! Keys are independent: each has its own task, on its own connection.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use diesel::QueryResult;
use tokio::sync::oneshot;

use super::connection::AnyConnection;
use super::error::DbError;
use super::pool::Db;
use crate::wake_ups::events::Wakes;

/// One kind of write that shares transactions: what it queues, how a batch is chosen and how
/// it is stored.
pub trait SharedWork: Send + Sync + 'static {
    /// What the writes queue by: each key has its own queue and task.
    type Key: Eq + Hash + Copy + Debug + Send + Sync + 'static;
    type Item: Send + Sync + 'static;
    /// What a stored write answers.
    type Answer: Send + 'static;
    /// What a write refused by the rules answers instead (nothing of it is stored).
    type Refused: Send + 'static;
    /// Names the writes in logs.
    const WHAT: &'static str;

    /// Which of the waiting items (oldest first, never none) go into the next transaction:
    /// their positions, ascending, always the first. `limit` bounds the batch in the work's
    /// own measure (by default, items). The others wait for a later one, in their order.
    fn choose(waiting: &[&Self::Item], limit: usize) -> Vec<usize> {
        (0..waiting.len().min(limit)).collect()
    }

    /// Stores `items` (one or many) inside the caller's transaction: one answer per item, in
    /// order. A refused item must have written nothing.
    fn store(
        conn: &mut AnyConnection,
        key: Self::Key,
        items: &[Self::Item],
        wakes: &mut Wakes,
    ) -> QueryResult<Vec<Answered<Self>>>;

    /// [`SharedWork::store`] for a batch of several, which may leave out (None) an item whose
    /// rows another transaction holds rather than make the whole batch wait for them: it is
    /// then stored alone, after the batch, and waits for them there. By default none is left.
    fn store_several(
        conn: &mut AnyConnection,
        key: Self::Key,
        items: &[Self::Item],
        wakes: &mut Wakes,
    ) -> QueryResult<Vec<Option<Answered<Self>>>> {
        Ok(Self::store(conn, key, items, wakes)?
            .into_iter()
            .map(Some)
            .collect())
    }
}

/// What one stored write answers: its answer, or why it was refused.
pub type Answered<W> = Result<<W as SharedWork>::Answer, <W as SharedWork>::Refused>;

/// What a queued write hears.
pub type Outcome<W> = Result<Answered<W>, DbError>;

/// The queues of one instance for one kind of write, shared by all its workers.
pub struct SharedCommits<W: SharedWork> {
    inner: Arc<Inner<W>>,
}

impl<W: SharedWork> Clone for SharedCommits<W> {
    fn clone(&self) -> Self {
        SharedCommits {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<W: SharedWork> {
    db: Db,
    /// How much one transaction carries (see [`SharedWork::choose`]).
    limit: usize,
    /// Keys with writes in flight, each with those not yet taken by its task.
    queues: Mutex<HashMap<W::Key, Vec<Queued<W>>>>,
}

/// A write waiting for its key's task.
struct Queued<W: SharedWork> {
    item: W::Item,
    answer: oneshot::Sender<Outcome<W>>,
}

impl<W: SharedWork> SharedCommits<W> {
    /// `limit`: how much one transaction carries (1: each write alone); on SQLite no more
    /// than one commit of its writer lane carries.
    pub fn new(db: Db, limit: usize) -> SharedCommits<W> {
        SharedCommits {
            inner: Arc::new(Inner {
                limit: db.shared_batch_limit(limit).max(1),
                db,
                queues: Mutex::default(),
            }),
        }
    }

    /// The database the writes go to.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The write's answer, once committed.
    pub async fn submit(&self, key: W::Key, item: W::Item) -> Outcome<W> {
        if !self.inner.db.shares_commits() {
            return store_alone::<W>(&self.inner.db, key, Arc::new([item]), 0).await;
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

/// Stores the item at `index` of `items` in a transaction of its own: a refusal rolls back.
async fn store_alone<W: SharedWork>(
    db: &Db,
    key: W::Key,
    items: Arc<[W::Item]>,
    index: usize,
) -> Outcome<W> {
    db.write_checked(move |conn, wakes| {
        let one = std::slice::from_ref(&items[index]);
        let mut answers = W::store(conn, key, one, wakes)?;
        // `store` answers once per item; a missing answer fails the write.
        answers.pop().ok_or(diesel::result::Error::NotFound)
    })
    .await
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
    while let Some(batch) = inner.next_batch(key) {
        let (items, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|q| (q.item, q.answer)).unzip();
        let items: Arc<[W::Item]> = items.into();
        let outcomes = store_batch::<W>(&inner.db, key, &items).await;
        answer_batch::<W>(&inner.db, key, &items, answers, outcomes);
    }
    ends.early = false;
}

/// Stores a batch in one transaction: each write's outcome, in the batch's order, or None
/// for a write the batch left out.
async fn store_batch<W: SharedWork>(
    db: &Db,
    key: W::Key,
    items: &Arc<[W::Item]>,
) -> Vec<Option<Outcome<W>>> {
    let batch = items.clone();
    let several = items.len() > 1;
    let stored = db
        .write_shared(items.len(), move |conn, wakes| {
            let answered = if several {
                W::store_several(conn, key, &batch, wakes)?
            } else {
                W::store(conn, key, &batch, wakes)?
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            let writes = answered.iter().filter(|a| matches!(a, Some(Ok(_)))).count();
            Ok((writes, answered))
        })
        .await;
    match stored {
        Ok(answered) if answered.len() == items.len() => {
            answered.into_iter().map(|a| a.map(Ok)).collect()
        }
        Ok(_) => {
            // `store` answers once per item; if it did not, each goes alone.
            tracing::error!(key = ?key, "a shared {} answered for another number of writes", W::WHAT);
            alone::<W>(db, key, items)
                .await
                .into_iter()
                .map(Some)
                .collect()
        }
        Err(e) => failed::<W>(db, key, items, e)
            .await
            .into_iter()
            .map(Some)
            .collect(),
    }
}

/// Tells each write of a batch its outcome. A write left out of the batch is stored alone, on
/// a task of its own, so the writes queued behind it do not wait for the rows it waits for.
/// Each `answer.send` may find its client gone (hung up): the write is stored all the same.
fn answer_batch<W: SharedWork>(
    db: &Db,
    key: W::Key,
    items: &Arc<[W::Item]>,
    answers: Vec<oneshot::Sender<Outcome<W>>>,
    outcomes: Vec<Option<Outcome<W>>>,
) {
    for (index, (answer, outcome)) in answers.into_iter().zip(outcomes).enumerate() {
        match outcome {
            Some(outcome) => {
                let _ = answer.send(outcome);
            }
            None => {
                let (db, items) = (db.clone(), items.clone());
                tokio::spawn(async move {
                    let _ = answer.send(store_alone::<W>(&db, key, items, index).await);
                });
            }
        }
    }
}

/// What each write of a batch whose transaction failed with `e` hears, in the batch's order.
async fn failed<W: SharedWork>(
    db: &Db,
    key: W::Key,
    items: &Arc<[W::Item]>,
    e: DbError,
) -> Vec<Outcome<W>> {
    match items.len() {
        // A lone write hears its own error.
        1 => vec![Err(e)],
        // The database could not be reached or was too busy: the writes alone would fare no
        // better, and each client retries.
        n if e.is_unreachable_or_timed_out() => {
            (0..n).map(|_| Err(e.same_for_another_caller())).collect()
        }
        // Anything else may be one write's doing, or the mix's (a deadlock): each goes
        // alone, which gives it its own outcome. Nothing of the batch was stored, or (a
        // connection lost during the commit) all of it, which storing again then finds (a
        // repeated `client_msg_id`, a cursor already there).
        n => {
            tracing::warn!(key = ?key, writes = n, error = %e,
                "a shared {} transaction failed; its writes go one by one", W::WHAT);
            alone::<W>(db, key, items).await
        }
    }
}

/// Each write of `items` stored in a transaction of its own, in order.
async fn alone<W: SharedWork>(db: &Db, key: W::Key, items: &Arc<[W::Item]>) -> Vec<Outcome<W>> {
    let mut outcomes = Vec::with_capacity(items.len());
    for index in 0..items.len() {
        outcomes.push(store_alone::<W>(db, key, items.clone(), index).await);
    }
    outcomes
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
