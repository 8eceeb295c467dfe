//! SQLite's writer lane with group commit: one thread owns the writer connection and commits
//! every write waiting for it in one transaction, so one disk flush serves them all.
//!
//! Each write runs in a savepoint of its own inside the batch: a write that fails or refuses
//! rolls back only itself, and the others commit. Every caller hears its outcome only after
//! the batch's COMMIT returned, so a 2xx still means the data is durable. The lane never
//! waits for more work: a lone write commits at once, and a batch forms only from the writes
//! that queued while the previous commit was flushing (bounded by `max_batch` clients'
//! writes: a job that stores several, such as a group's sends that queued together, counts
//! as that many).
//!
//! If a savepoint cannot be rolled back (SQLite may abandon the whole transaction on a full
//! disk or an I/O error), the batch is lost: every write in it, including those that had
//! succeeded, answers with that error, and none of them is stored.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};

use diesel::connection::TransactionManager;
use diesel::prelude::*;

use super::connection::AnyConnection;
use super::error::DbError;
use super::gated_pool::Pool;
use super::publish::publish_pending;
use super::wait_count::{WaitCount, Waiting};

type Manager = <AnyConnection as Connection>::TransactionManager;

/// A write waiting for the lane.
trait Write: Send {
    /// How many clients' writes it carries, for the batch's bound.
    fn carries(&self) -> usize;
    /// Runs the write in its savepoint and keeps the outcome until the batch's fate is known.
    fn run(self: Box<Self>, conn: &mut AnyConnection) -> Ran;
    /// Answers without running: the batch could not start or was lost before this write.
    fn fail(self: Box<Self>, error: DbError);
}

type Reply<T, R> = tokio::sync::oneshot::Sender<Result<Result<T, R>, DbError>>;

struct PendingWrite<F, C, T, R> {
    write: F,
    after_commit: C,
    /// How many clients' writes it carries (one, but for a shared write).
    carries: usize,
    /// How many of them a stored value stored (those not refused).
    writes: fn(&T) -> usize,
    reply: Reply<T, R>,
    /// Counts the write as waiting until it runs or fails.
    waiting: Waiting,
}

impl<F, C, T, R> Write for PendingWrite<F, C, T, R>
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<Result<T, R>> + Send + 'static,
    C: FnOnce(&T) + Send + 'static,
    T: Send + 'static,
    R: Send + 'static,
{
    fn carries(&self) -> usize {
        self.carries
    }

    fn run(self: Box<Self>, conn: &mut AnyConnection) -> Ran {
        let PendingWrite {
            write,
            after_commit,
            carries: _,
            writes,
            reply,
            waiting,
        } = *self;
        drop(waiting);
        let (outcome, lost_batch) = run_in_savepoint(conn, write);
        let writes = match &outcome {
            Ok(Ok(value)) => writes(value),
            _ => 0,
        };
        Ran {
            writes,
            answer: Box::new(move |batch_error| {
                let answer = match batch_error {
                    Some(e) => Err(e),
                    None => outcome,
                };
                if let Ok(Ok(value)) = &answer {
                    after_commit(value);
                }
                let _ = reply.send(answer);
            }),
            lost_batch,
        }
    }

    fn fail(self: Box<Self>, error: DbError) {
        let _ = self.reply.send(Err(error));
    }
}

type Job = Box<dyn Write>;

/// A write that ran inside the batch, waiting to hear whether the batch committed.
struct Ran {
    /// Sends the caller its outcome, or the error that lost the batch.
    answer: Box<dyn FnOnce(Option<DbError>) + Send>,
    /// Set when this write's savepoint could not be rolled back: the transaction is gone.
    lost_batch: Option<DbError>,
    /// The clients' writes it stored (none when refused or failed).
    writes: usize,
}

/// Commits, and the writes they carried, since the process started (both engines: on
/// PostgreSQL each write is a commit of its own). The pair sits behind one lock so a reader
/// never sees a commit without its writes: `/metrics` readers compare the two.
#[derive(Debug, Default)]
pub struct CommitCounters {
    commits_and_writes: Mutex<(u64, u64)>,
}

impl CommitCounters {
    pub fn committed(&self, writes: usize) {
        let mut totals = self.lock();
        totals.0 += 1;
        totals.1 += writes as u64;
    }

    /// (commits, writes)
    pub fn read(&self) -> (u64, u64) {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        // Two counters cannot be left half-updated by a panic, so a poisoned lock is usable.
        self.commits_and_writes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The sending end of the lane; the thread ends once every clone is dropped.
#[derive(Clone)]
pub struct WriteLane {
    jobs: mpsc::Sender<Job>,
    /// Writes submitted that have not begun to run.
    waiting: WaitCount,
    /// The most clients' writes one commit carries.
    max_batch: usize,
}

impl WriteLane {
    /// Starts the lane's thread on the writer pool (one connection, taken per batch, so a
    /// broken connection is replaced by the pool).
    pub fn start(
        writer: Pool,
        max_batch: usize,
        counters: Arc<CommitCounters>,
    ) -> std::io::Result<WriteLane> {
        let max_batch = max_batch.max(1);
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("chorus-sqlite-writer".into())
            .spawn(move || run_lane(&writer, &queue, max_batch, &counters))?;
        Ok(WriteLane {
            jobs,
            waiting: WaitCount::default(),
            max_batch,
        })
    }

    /// The most clients' writes one commit carries.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// How many writes wait for the lane (submitted, not yet running).
    pub fn writes_waiting(&self) -> usize {
        self.waiting.now()
    }

    /// Runs `f` in the next batch; the outcome arrives once the batch committed. A refusal
    /// (`Ok(Err(_))`) or an error rolls back only what `f` did. `after_commit` runs on the
    /// lane once `f`'s work is committed, whether or not the caller is still waiting.
    /// `carries` says how many clients' writes `f` stores at most (the batch's bound counts
    /// them), `writes` how many a stored value did store (the commit counters count them).
    pub async fn submit<T, R, F, C>(
        &self,
        f: F,
        after_commit: C,
        carries: usize,
        writes: fn(&T) -> usize,
    ) -> Result<Result<T, R>, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<Result<T, R>> + Send + 'static,
        C: FnOnce(&T) + Send + 'static,
        T: Send + 'static,
        R: Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(PendingWrite {
            write: f,
            after_commit,
            carries,
            writes,
            reply,
            waiting: self.waiting.enter(),
        });
        self.jobs.send(job).map_err(|_| DbError::Task)?;
        answer.await.map_err(|_| DbError::Task)?
    }
}

fn run_lane(
    writer: &Pool,
    queue: &mpsc::Receiver<Job>,
    max_batch: usize,
    counters: &CommitCounters,
) {
    // A job taken from the queue that did not fit the last batch: the next one starts with it.
    let mut held: Option<Job> = None;
    loop {
        let first = match held.take() {
            Some(job) => job,
            None => match queue.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut carried = first.carries();
        let mut batch = vec![first];
        while carried < max_batch {
            match queue.try_recv() {
                Ok(job) if carried + job.carries() > max_batch => {
                    held = Some(job);
                    break;
                }
                Ok(job) => {
                    carried += job.carries();
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        run_batch(writer, batch, counters);
    }
}

/// One transaction for the whole batch; each write answers after its fate is known.
fn run_batch(writer: &Pool, batch: Vec<Job>, counters: &CommitCounters) {
    let mut conn = match writer.get() {
        Ok(conn) => conn,
        Err(e) => return fail_all(batch, &DbError::from(e)),
    };
    let begun = begin_immediate(&mut conn);
    conn.record(&begun);
    if let Err(e) = begun {
        return fail_all(batch, &DbError::Query(e));
    }
    let mut ran: Vec<Ran> = Vec::with_capacity(batch.len());
    let mut jobs = batch.into_iter();
    for job in jobs.by_ref() {
        let done = job.run(&mut conn);
        let lost = done
            .lost_batch
            .as_ref()
            .map(DbError::same_for_another_caller);
        ran.push(done);
        if let Some(lost) = lost {
            let _ = Manager::rollback_transaction(&mut conn);
            for done in ran {
                (done.answer)(Some(lost.same_for_another_caller()));
            }
            return fail_all(jobs.collect(), &lost);
        }
    }
    // The batch's feed rows get their positions in the batch itself: with one writer,
    // positions follow commits.
    let committed = publish_pending(&mut conn).and_then(|_| Manager::commit_transaction(&mut conn));
    conn.record(&committed);
    match committed {
        Ok(()) => counters.committed(ran.iter().map(|done| done.writes).sum()),
        Err(_) => {
            let _ = Manager::rollback_transaction(&mut conn);
        }
    }
    let batch_error = committed.err().map(DbError::Query);
    for done in ran {
        (done.answer)(batch_error.as_ref().map(DbError::same_for_another_caller));
    }
}

/// `BEGIN IMMEDIATE`: the write lock is taken (waiting up to the busy timeout for an outside
/// process) before the first read.
fn begin_immediate(conn: &mut AnyConnection) -> QueryResult<()> {
    match conn {
        AnyConnection::Sqlite(c) => {
            diesel::connection::AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")
        }
        AnyConnection::Postgresql(_) => Manager::begin_transaction(conn),
    }
}

/// Runs `f` in a savepoint, released when it returns `Ok(Ok(_))` and rolled back otherwise
/// (a panic too). The second value is set when the rollback itself failed.
fn run_in_savepoint<T, R, F>(
    conn: &mut AnyConnection,
    f: F,
) -> (Result<Result<T, R>, DbError>, Option<DbError>)
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<Result<T, R>>,
{
    if let Err(e) = Manager::begin_transaction(conn) {
        let lost = DbError::Query(e);
        return (Err(lost.same_for_another_caller()), Some(lost));
    }
    let outcome = match catch_unwind(AssertUnwindSafe(|| f(conn))) {
        Ok(Ok(Ok(value))) => match Manager::commit_transaction(conn) {
            Ok(()) => return (Ok(Ok(value)), None),
            Err(e) => Err(DbError::Query(e)),
        },
        Ok(Ok(Err(refusal))) => Ok(Err(refusal)),
        Ok(Err(e)) => Err(DbError::Query(e)),
        Err(_panic) => Err(DbError::Task),
    };
    match Manager::rollback_transaction(conn) {
        Ok(()) => (outcome, None),
        // The transaction went with it (SQLite abandons it on some errors, a full disk
        // among them). What lost the batch is this write's own error, when it had one: the
        // others hear that, not "no such savepoint".
        Err(rollback) => {
            let cause = match &outcome {
                Err(e) => e.same_for_another_caller(),
                Ok(_) => DbError::Query(rollback),
            };
            (outcome, Some(cause))
        }
    }
}

fn fail_all(jobs: Vec<Job>, error: &DbError) {
    for job in jobs {
        job.fail(error.same_for_another_caller());
    }
}
