//! The long-poll wait: read a feed after a position; while nothing is there, wait for a
//! wake-up or the timeout, then read again.
//!
//! While a poll waits it holds only a [`Registration`] (no connection, no thread). It is
//! registered before its first read, so a change that commits after the read still wakes it.
//! Retrying with the same position after a lost answer repeats changes but never skips one.

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryResult;

use super::page::Page;
use super::position::FeedPosition;
use crate::db::group::user_groups::group_ids_of;
use crate::db::read_models::changes::{current_watermark, Feed};
use crate::db::{AnyConnection, Db, DbError};
use crate::domain::GroupId;
use crate::wake_ups::events::WakeEvent;
use crate::wake_ups::waiters::{Registration, WaitRefused, Waiters};

/// How long a poll waits, before its first read, for this instance's committed writes to be
/// published: a client that wrote through this instance and then polls sees its own write
/// (and takes a fresh position after it). Publication follows a commit within a round trip;
/// the bound only matters while the database is away.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Why a poll got no page.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error(transparent)]
    Database(#[from] DbError),
    /// The registry of waiters refused the wait (too many for the user, or shutting down).
    #[error(transparent)]
    Refused(#[from] WaitRefused),
}

/// Reads one page of a feed after a position for the caller `C`, with at most `limit` items.
pub type Fetch<C, T> = fn(&mut AnyConnection, &C, &FeedPosition, i64) -> QueryResult<Page<T>>;

/// Who polls, as the feed's reads take them: the wait covers the groups of their user.
pub trait Poller: Clone + Send + Sync + 'static {
    fn user_id(&self) -> &str;
}

/// The position a client starts from: everything published so far counts as seen (after
/// this instance's own writes are published, so the client's next poll reports nothing it
/// wrote before).
pub async fn starting_position(db: &Db, feed: Feed) -> Result<FeedPosition, DbError> {
    db.writes_published(CATCH_UP).await;
    let seen = db.read(current_watermark).await?;
    Ok(FeedPosition::at(feed, seen, chrono::Utc::now().timestamp()))
}

/// Reads the feed after `cursor`; while nothing is there, waits for a wake-up or the timeout.
/// A timeout answers with no items and the position the reads reached.
pub async fn wait_for_changes<C, T>(
    db: &Db,
    waiters: &Arc<Waiters>,
    poller: &C,
    mut cursor: FeedPosition,
    limit: i64,
    timeout: Duration,
    fetch: Fetch<C, T>,
) -> Result<Page<T>, PollError>
where
    C: Poller,
    T: Send + 'static,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let done = || timeout.is_zero() || waiters.is_shutting_down();
    db.writes_published(CATCH_UP).await;
    let (mut registration, first) =
        register_and_read(db, waiters, poller, cursor.clone(), limit, fetch).await?;
    let mut read: Result<Page<T>, DbError> = Ok(first);
    loop {
        match read {
            Ok(page) if !page.items.is_empty() || page.has_more || done() => return Ok(page),
            Ok(page) => cursor = page.next,
            // A waiter outlives a database outage: it keeps its position and reads again on
            // the next wake-up (every waiter is woken when the listener reconnects).
            Err(e) if e.is_unavailable() && !done() => {
                tracing::warn!(error = %e, "long-poll read failed; waiting on");
            }
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            _ = registration.woken() => {}
            _ = tokio::time::sleep_until(deadline) => {
                return Ok(Page { items: Vec::new(), next: cursor, has_more: false });
            }
        }
        read = if registration.take_joined() {
            // Wait on the new group too, registered again before the read as at the start.
            // The old registration goes first: it counts against the user's waiters.
            drop(registration);
            let (again, page) =
                register_and_read(db, waiters, poller, cursor.clone(), limit, fetch).await?;
            registration = again;
            Ok(page)
        } else {
            let (caller, current) = (poller.clone(), cursor.clone());
            db.read(move |conn| fetch(conn, &caller, &current, limit))
                .await
        };
    }
}

/// Registers the wait on every group the user belongs to (plus their own joins), then reads
/// the feed after `cursor`, in one database call: registering first means a change that
/// commits after the read still wakes the waiter.
async fn register_and_read<C, T>(
    db: &Db,
    waiters: &Arc<Waiters>,
    poller: &C,
    cursor: FeedPosition,
    limit: i64,
    fetch: Fetch<C, T>,
) -> Result<(Registration, Page<T>), PollError>
where
    C: Poller,
    T: Send + 'static,
{
    let (user_id, caller) = (poller.user_id().to_owned(), poller.clone());
    let registry = Arc::clone(waiters);
    let feed = cursor.feed;
    let registered = db
        .read(move |conn| {
            let groups = group_ids_of(conn, &user_id)?;
            let keys = wake_keys(feed, &user_id, groups);
            Ok(match registry.register(&user_id, keys) {
                Ok(registration) => Ok((registration, fetch(conn, &caller, &cursor, limit)?)),
                Err(refused) => Err(refused),
            })
        })
        .await?;
    Ok(registered?)
}

/// What a poll of `feed` waits for: its feed's events in each of the user's groups, and
/// changes to the user's own memberships (and, for `/v1/sync`, their reads elsewhere).
fn wake_keys(feed: Feed, user_id: &str, groups: Vec<i64>) -> Vec<WakeEvent> {
    let user = user_id.to_owned();
    let mut keys: Vec<WakeEvent> = groups
        .into_iter()
        .map(|g| match feed {
            Feed::Messages => WakeEvent::MessageSent(GroupId(g)),
            Feed::Receipts => WakeEvent::CursorMoved(GroupId(g)),
        })
        .collect();
    keys.push(WakeEvent::MembershipChanged(user.clone()));
    if feed == Feed::Messages {
        keys.push(WakeEvent::ReadMoved(user));
    }
    keys
}
