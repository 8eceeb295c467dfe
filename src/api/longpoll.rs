//! The HTTP edge of long-polling (`/v1/sync`, `/v1/receipts`): the query parameters, the
//! client's cursor checked and opened, and the wait's failures in the API's words. The
//! positions and the wait themselves are the `feeds` service.
//!
//! Words: a member's *cursors* are their delivered and read positions in a group (`db`); a
//! *feed position* ([`FeedPosition`]) is where a long-poll has read a change feed up to, and
//! travels to clients signed, as the opaque `cursor` query parameter; list endpoints page
//! with *page tokens* (`next_cursor`).

use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::poll_timeout::parse_timeout;
use super::AppState;
use crate::db::read_models::changes::Feed;
use crate::domain::parse_limit;
use crate::feeds::page::Page;
use crate::feeds::position::FeedPosition;
use crate::feeds::wait::{starting_position, wait_for_changes, Fetch, PollError, Poller};
use crate::wake_ups::waiters::WaitRefused;

#[derive(Deserialize)]
pub struct PollQuery {
    pub cursor: Option<String>,
    pub timeout_s: Option<i64>,
    pub limit: Option<i64>,
}

/// Answers at once when there are changes (or no cursor was given); otherwise waits for a
/// wake-up or the timeout. A timeout answers with no items and a fresh cursor.
pub async fn long_poll<T: Send + 'static>(
    state: &AppState,
    user: &AuthUser,
    feed: Feed,
    query: &PollQuery,
    fetch: Fetch<AuthUser, T>,
) -> Result<Page<T>, ApiError> {
    let limit = parse_limit(query.limit)?;
    let timeout = parse_timeout(query.timeout_s)?;
    let Some(raw) = query.cursor.as_deref() else {
        let next = starting_position(&state.db, feed).await?;
        return Ok(Page {
            items: Vec::new(),
            next,
            has_more: false,
        });
    };
    let cursor = open_cursor(state, raw, feed)?;
    wait_for_changes(
        &state.db,
        &state.waiters,
        user,
        cursor,
        limit,
        timeout,
        fetch,
    )
    .await
    .map_err(poll_failed)
}

impl Poller for AuthUser {
    fn user_id(&self) -> &str {
        self.id()
    }
}

/// The feed position in a cursor a client sent: refused when this server did not issue it
/// for `feed`, expired when it is older than the retention period or from an older format.
fn open_cursor(state: &AppState, raw: &str, feed: Feed) -> Result<FeedPosition, ApiError> {
    let start_again = "Start again without a cursor and read current state from the \
                       per-group endpoints";
    if FeedPosition::is_outdated(raw, &state.cursors) {
        return Err(ApiError::CursorExpired(format!(
            "the cursor is from an older version of this server. {start_again}"
        )));
    }
    let cursor = FeedPosition::decode(raw, feed, &state.cursors).ok_or_else(|| {
        ApiError::Validation("cursor: not a cursor this server issued for this feed".into())
    })?;
    let age = chrono::Utc::now()
        .timestamp()
        .saturating_sub(cursor.seen_at);
    let kept = state.longpoll.retention_secs;
    if age > kept {
        return Err(ApiError::CursorExpired(format!(
            "the cursor is {age} s old; changes are kept {kept} s. {start_again}"
        )));
    }
    Ok(cursor)
}

/// The answer to a poll that got no page.
fn poll_failed(failure: PollError) -> ApiError {
    match failure {
        PollError::Database(e) => e.into(),
        PollError::Refused(refused @ WaitRefused::ShuttingDown) => {
            ApiError::Unavailable(refused.to_string())
        }
        PollError::Refused(other) => {
            ApiError::TooManyWaiters(format!("{other}; close one before opening another"))
        }
    }
}
