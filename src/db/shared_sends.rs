//! Plain sends to one group that arrive together share one transaction (PostgreSQL): one
//! hold of the group's lock, one commit, one range of ids, where each send alone would hold
//! the lock through a commit of its own and the group's senders would queue behind it.
//!
//! Each group with sends in flight has a queue and one task that drains it: the task takes
//! every send waiting (up to the limit), stores them with one statement
//! ([`super::plain_send::store_together`]), answers each, and goes again while sends keep
//! arriving. A lone send goes at once, without waiting for company; a batch forms only from
//! the sends that queued while the previous one was being written. Each send answers only
//! after its batch committed, so a 2xx still means the message is durable. Each keeps its own
//! outcome: a send the statement leaves out (a refusal, a repeat of a `client_msg_id`)
//! answers None, and its caller takes the general path. When the statement fails, none of
//! the batch is stored (or, if the connection died during the commit, all may be: a retry
//! with the same `client_msg_id` finds out). A lone send then hears its error; each send of
//! a failed batch of several goes alone through the general path, except when the database
//! was unreachable or timed out, which every send of the batch hears.
//!
//! A queued send waits for the batch being written when it arrives and for the batches queued
//! ahead of it, then for its own: each bounded by the pool's and the statement's timeouts
//! (and, after a failed batch of several, its own transaction on the general path).
//!
//! Groups are independent: each has its own task, on its own connection. Another instance's
//! sends to the same group take the group's lock in turn, so ids stay contiguous.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::error::DbError;
use super::models::MessageRow;
use super::plain_send::{store_together, PlainMessage};
use super::pool::Db;
use crate::domain::GroupId;

/// The queues of one instance, shared by all its workers.
#[derive(Clone)]
pub struct SharedSends {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    /// The most sends one statement carries.
    limit: usize,
    /// Groups with sends in flight, each with those not yet taken by its task.
    queues: Mutex<HashMap<GroupId, Vec<Queued>>>,
}

/// A send waiting for its group's task.
struct Queued {
    message: PlainMessage,
    answer: oneshot::Sender<Result<Option<MessageRow>, DbError>>,
}

impl SharedSends {
    /// `limit`: the most sends one transaction carries (1: each alone).
    pub fn new(db: Db, limit: usize) -> SharedSends {
        SharedSends {
            inner: Arc::new(Inner {
                db,
                limit: limit.max(1),
                queues: Mutex::default(),
            }),
        }
    }

    /// The message as stored, once committed; None when the general path must take it: the
    /// engine has no such statement, or the statement left it out.
    pub async fn send(
        &self,
        group_id: GroupId,
        message: PlainMessage,
    ) -> Result<Option<MessageRow>, DbError> {
        if !self.inner.db.writes_in_one_statement() {
            return Ok(None);
        }
        let (answer, answered) = oneshot::channel();
        let queued = Queued { message, answer };
        // A group's entry exists exactly while its task runs.
        let starts_task = match self.inner.lock().entry(group_id) {
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
            tokio::spawn(drain(self.inner.clone(), group_id));
        }
        answered.await.map_err(|_| DbError::Task)?
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<GroupId, Vec<Queued>>> {
        // Every change to the map is a single insert, push, drain or remove, so a panic
        // cannot leave it half-changed and a poisoned lock is usable.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next batch of the group's sends, oldest first; None, and the group's entry gone,
    /// when none is waiting (the caller's task then ends).
    fn next_batch(&self, group_id: GroupId) -> Option<Vec<Queued>> {
        let mut queues = self.lock();
        let waiting = queues.get_mut(&group_id)?;
        if waiting.is_empty() {
            queues.remove(&group_id);
            return None;
        }
        let take = waiting.len().min(self.limit);
        Some(waiting.drain(..take).collect())
    }
}

/// A group's task: writes its sends, batch after batch, until none is waiting.
async fn drain(inner: Arc<Inner>, group_id: GroupId) {
    let mut ends = EndsTask {
        inner: inner.clone(),
        group_id,
        early: true,
    };
    // Each `answer.send` may find its client gone (hung up): the send is stored all the same.
    while let Some(batch) = inner.next_batch(group_id) {
        let (messages, answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|q| (q.message, q.answer)).unzip();
        let stored = inner
            .db
            .write_one_statement(move |conn, wakes| {
                let rows = store_together(conn, group_id, &messages, wakes)?;
                let writes = rows.iter().filter(|r| r.is_some()).count();
                Ok((writes, rows))
            })
            .await;
        let outcomes = outcomes(stored, answers.len(), group_id);
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            let _ = answer.send(outcome);
        }
    }
    ends.early = false;
}

/// What each send of a batch of `sends` hears, in the batch's order, from what storing it
/// gave: its row, or None (the general path takes it), or an error.
fn outcomes(
    stored: Result<Option<Vec<Option<MessageRow>>>, DbError>,
    sends: usize,
    group_id: GroupId,
) -> Vec<Result<Option<MessageRow>, DbError>> {
    match stored {
        Ok(rows) => rows
            .unwrap_or_else(|| vec![None; sends])
            .into_iter()
            .map(Ok)
            .collect(),
        // A lone send hears its own error.
        Err(e) if sends == 1 => vec![Err(e)],
        // The database could not be reached or was too busy for the statement: the sends
        // alone would fare no better, and each client retries with its `client_msg_id`.
        Err(e) if e.is_unreachable_or_timed_out() => (0..sends)
            .map(|_| Err(e.same_for_another_caller()))
            .collect(),
        // Anything else may be one send's doing, or the mix's (a deadlock): each goes alone
        // through the general path, which gives it its own outcome. Nothing of the batch was
        // stored, or (a connection lost during the commit) all of it, which the general path
        // then finds by `client_msg_id`.
        Err(e) => {
            tracing::warn!(group_id = group_id.0, sends, error = %e,
                "a shared send statement failed; its sends go one by one");
            (0..sends).map(|_| Ok(None)).collect()
        }
    }
}

/// Removes the group's entry if its task ends any other way than by finding its queue empty
/// (a panic, the runtime shutting down): the sends still queued then hear an error instead
/// of waiting for a task that is gone, and the next send starts a new task. (After a normal
/// end the entry is already gone, and may belong to a new task.)
struct EndsTask {
    inner: Arc<Inner>,
    group_id: GroupId,
    early: bool,
}

impl Drop for EndsTask {
    fn drop(&mut self) {
        if self.early {
            self.inner.lock().remove(&self.group_id);
        }
    }
}
