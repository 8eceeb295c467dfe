//! Long-polling over the change feeds: feed positions, and the wait loop shared by
//! `/v1/sync` and `/v1/receipts`.
//!
//! Words: a member's *cursors* are their delivered and read positions in a group (`db`); a
//! *feed position* ([`FeedPosition`]) is where a long-poll has read a change feed up to, and
//! travels to clients signed, as the opaque `cursor` query parameter; list endpoints page
//! with *page tokens* (`next_cursor`).
//!
//! A feed position holds a watermark (`seen`): every change published at or below it was
//! reported. A poll reports what was published since, and hands back a position at a newer
//! watermark. While a poll
//! waits it holds only a [`Registration`](crate::notify::Registration) (no connection, no
//! thread); a wake-up or the timeout makes it read again. Retrying with the same cursor after
//! a lost response repeats changes but never skips one.

use std::time::Duration;

use base64::Engine;
use diesel::QueryResult;
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::poll_timeout::parse_timeout;
use super::AppState;
use crate::db::group::user_groups::group_ids_of;
use crate::db::read_models::changes::{current_watermark, Feed, MessageRef, Watermark, WindowEnd};
use crate::db::{AnyConnection, DbError};
use crate::domain::parse_limit;
use crate::notify::{Registration, WaitRefused};
use crate::wake::WakeEvent;

/// How long a poll waits, before its first read, for this instance's committed writes to be
/// published: a client that wrote through this instance and then polls sees its own write
/// (and takes a fresh cursor after it). Publication follows a commit within a round trip;
/// the bound only matters while the database is away.
const CATCH_UP: Duration = Duration::from_secs(2);

#[derive(Deserialize)]
pub struct PollQuery {
    pub cursor: Option<String>,
    pub timeout_s: Option<i64>,
    pub limit: Option<i64>,
}

/// A position in a change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPosition {
    pub feed: Feed,
    /// Unix seconds when `seen` was read: the cursor's age, checked against retention.
    pub seen_at: i64,
    pub seen: Watermark,
    /// Set while a window of changes is being handed out page by page.
    pub window: Option<Window>,
}

/// The changes between `seen` and `upto`, reported up to and including `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub upto: Watermark,
    pub upto_at: i64,
    pub after: MessageRef,
}

/// The cursor format. Versions 1 and 2 (transaction snapshots, before published positions)
/// are still recognised, and answered as expired so clients start over as they do after
/// retention.
const CURSOR_VERSION: &str = "3";
const OUTDATED_CURSOR_VERSIONS: [&str; 2] = ["1", "2"];
/// Cursors are not accepted from more than this far in the future (clock skew between
/// instances).
const MAX_CLOCK_SKEW_SECS: i64 = 300;
const TAG_BYTES: usize = 16;

/// Signs and checks cursors, so only cursors this service issued are read: a client can
/// neither forge a watermark nor make an old cursor look new.
pub struct CursorSigner {
    key: Vec<u8>,
}

impl CursorSigner {
    /// Derives the cursor key from the token secret, so instances sharing a secret accept
    /// each other's cursors and the secret itself signs only tokens.
    pub fn new(secret: &[u8]) -> CursorSigner {
        CursorSigner {
            key: Self::mac(secret, b"chorus long-poll cursor key").to_vec(),
        }
    }

    fn mac(key: &[u8], data: &[u8]) -> [u8; 32] {
        use hmac::{KeyInit, Mac};
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key)
            .expect("HMAC accepts keys of any length");
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    fn sign(&self, text: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let tag = Self::mac(&self.key, text.as_bytes());
        format!("{}.{}", b64.encode(text), b64.encode(&tag[..TAG_BYTES]))
    }

    fn open(&self, raw: &str) -> Option<String> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (body, tag) = raw.split_once('.')?;
        let text = String::from_utf8(b64.decode(body).ok()?).ok()?;
        let expected = Self::mac(&self.key, text.as_bytes());
        let given = b64.decode(tag).ok()?;
        // Constant-time comparison: the tag must not be guessable byte by byte.
        let same = given.len() == TAG_BYTES
            && given
                .iter()
                .zip(&expected[..TAG_BYTES])
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        same.then_some(text)
    }
}

impl FeedPosition {
    pub fn at(feed: Feed, seen: Watermark, seen_at: i64) -> FeedPosition {
        FeedPosition {
            feed,
            seen_at,
            seen,
            window: None,
        }
    }

    pub fn encode(&self, signer: &CursorSigner) -> String {
        let feed = match self.feed {
            Feed::Messages => "m",
            Feed::Receipts => "r",
        };
        let mut text = format!(
            "{CURSOR_VERSION}.{feed}.{}.{}",
            self.seen_at,
            self.seen.to_text()
        );
        if let Some(w) = &self.window {
            text.push_str(&format!(
                ".{}.{}.{}.{}",
                w.upto.to_text(),
                w.upto_at,
                w.after.group_id,
                w.after.msg_id
            ));
        }
        signer.sign(&text)
    }

    /// Whether `raw` is a cursor this service issued in an older format.
    pub fn is_outdated(raw: &str, signer: &CursorSigner) -> bool {
        signer.open(raw).is_some_and(|text| {
            OUTDATED_CURSOR_VERSIONS
                .iter()
                .any(|v| text.split('.').next() == Some(v))
        })
    }

    /// Reads a cursor this service issued for `feed`; None for anything else.
    pub fn decode(raw: &str, feed: Feed, signer: &CursorSigner) -> Option<FeedPosition> {
        let text = signer.open(raw)?;
        let parts: Vec<&str> = text.split('.').collect();
        let feed_tag = match feed {
            Feed::Messages => "m",
            Feed::Receipts => "r",
        };
        if parts.len() < 4 || parts[0] != CURSOR_VERSION || parts[1] != feed_tag {
            return None;
        }
        let latest = chrono::Utc::now().timestamp() + MAX_CLOCK_SKEW_SECS;
        let time = |t: &str| t.parse::<i64>().ok().filter(|t| (0..=latest).contains(t));
        let seen_at = time(parts[2])?;
        let seen = Watermark::parse(parts[3])?;
        let window = match parts.len() {
            4 => None,
            8 => Some(Window {
                upto: Watermark::parse(parts[4])?,
                upto_at: time(parts[5])?,
                after: MessageRef {
                    group_id: parts[6].parse().ok()?,
                    msg_id: parts[7].parse().ok()?,
                },
            }),
            _ => return None,
        };
        Some(FeedPosition {
            feed,
            seen_at,
            seen,
            window,
        })
    }
}

/// One read of a feed: the items, and the cursor to continue from.
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: FeedPosition,
    pub has_more: bool,
}

/// Cuts rows of `window` fetched with `limit + 1` to a page (the extra row only says "more")
/// and finds the position to continue from: inside the same window while rows remain, else at
/// its end.
pub fn paginate<R>(
    cursor: &FeedPosition,
    window: Window,
    mut rows: Vec<R>,
    limit: i64,
    position: impl Fn(&R) -> MessageRef,
) -> Page<R> {
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = match rows.last() {
        Some(last) if has_more => FeedPosition {
            window: Some(Window {
                after: position(last),
                ..window
            }),
            ..cursor.clone()
        },
        _ => FeedPosition::at(cursor.feed, window.upto, window.upto_at),
    };
    Page {
        items: rows,
        next,
        has_more,
    }
}

/// Reads the window the next read of `cursor` covers: the one it is paging through, or
/// everything committed from its position until the read, which finds that end itself. `read`
/// gets the window's end and the position to read after; it returns the end's watermark with
/// the rows.
pub fn read_window<R>(
    conn: &mut AnyConnection,
    cursor: &FeedPosition,
    read: impl FnOnce(&mut AnyConnection, WindowEnd, MessageRef) -> QueryResult<(Watermark, Vec<R>)>,
) -> QueryResult<(Window, Vec<R>)> {
    match &cursor.window {
        Some(w) => {
            let (_, rows) = read(conn, WindowEnd::At(w.upto), w.after)?;
            Ok((w.clone(), rows))
        }
        None => {
            let start = MessageRef {
                group_id: 0,
                msg_id: 0,
            };
            // Taken before the read: the cursor's age, checked against retention, must not
            // count from later than its watermark.
            let upto_at = chrono::Utc::now().timestamp();
            let (upto, rows) = read(conn, WindowEnd::Now, start)?;
            let window = Window {
                upto,
                upto_at,
                after: start,
            };
            Ok((window, rows))
        }
    }
}

type Fetch<T> =
    fn(&mut AnyConnection, &AuthUser, &FeedPosition, i64) -> diesel::QueryResult<Page<T>>;

/// Answers at once when there are changes (or no cursor was given); otherwise waits for a
/// wake-up or the timeout. A timeout answers with no items and a fresh cursor.
pub async fn long_poll<T: Send + 'static>(
    state: &AppState,
    user: &AuthUser,
    feed: Feed,
    query: &PollQuery,
    fetch: Fetch<T>,
) -> Result<Page<T>, ApiError> {
    let limit = parse_limit(query.limit)?;
    let timeout = parse_timeout(query.timeout_s)?;
    let Some(raw) = query.cursor.as_deref() else {
        state.db.writes_published(CATCH_UP).await;
        let seen = state.db.read(current_watermark).await?;
        let next = FeedPosition::at(feed, seen, chrono::Utc::now().timestamp());
        return Ok(Page {
            items: Vec::new(),
            next,
            has_more: false,
        });
    };
    let cursor = open_cursor(state, raw, feed)?;
    wait_for_changes(state, user, feed, cursor, limit, timeout, fetch).await
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

/// Reads the feed after `cursor`; while nothing is there, waits for a wake-up or the timeout.
async fn wait_for_changes<T: Send + 'static>(
    state: &AppState,
    user: &AuthUser,
    feed: Feed,
    mut cursor: FeedPosition,
    limit: i64,
    timeout: Duration,
    fetch: Fetch<T>,
) -> Result<Page<T>, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let done = || timeout.is_zero() || state.notifier.is_shutting_down();
    state.db.writes_published(CATCH_UP).await;
    let (mut registration, first) =
        register_and_read(state, user, feed, cursor.clone(), limit, fetch).await?;
    let mut read: Result<Page<T>, DbError> = Ok(first);
    loop {
        match read {
            Ok(page) if !page.items.is_empty() || page.has_more || done() => return Ok(page),
            Ok(page) => cursor = page.next,
            // A waiter outlives a database outage: it keeps its cursor and reads again on the
            // next wake-up (every waiter is woken when the listener reconnects).
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
            // The old registration goes first: it counts against the caller's waiters.
            drop(registration);
            let (again, page) =
                register_and_read(state, user, feed, cursor.clone(), limit, fetch).await?;
            registration = again;
            Ok(page)
        } else {
            let (caller, current) = (user.clone(), cursor.clone());
            state
                .db
                .read(move |conn| fetch(conn, &caller, &current, limit))
                .await
        };
    }
}

/// Registers the caller's wait on every group they belong to (plus their own joins), then
/// reads the feed after `cursor`, in one database call: registering first means a change
/// that commits after the read still wakes the waiter.
async fn register_and_read<T: Send + 'static>(
    state: &AppState,
    user: &AuthUser,
    feed: Feed,
    cursor: FeedPosition,
    limit: i64,
    fetch: Fetch<T>,
) -> Result<(Registration, Page<T>), ApiError> {
    let (caller, notifier) = (user.clone(), state.notifier.clone());
    let registered = state
        .db
        .read(move |conn| {
            let groups = group_ids_of(conn, caller.id())?;
            let keys = wake_keys(feed, caller.id(), groups);
            Ok(match notifier.register(caller.id(), keys) {
                Ok(registration) => Ok((registration, fetch(conn, &caller, &cursor, limit)?)),
                Err(refused) => Err(refused),
            })
        })
        .await?;
    registered.map_err(refusal_to_wait)
}

/// The answer to a wait the notifier refused.
fn refusal_to_wait(refused: WaitRefused) -> ApiError {
    match refused {
        WaitRefused::ShuttingDown => ApiError::Unavailable(refused.to_string()),
        other => ApiError::TooManyWaiters(format!("{other}; close one before opening another")),
    }
}

/// What a poll of `feed` waits for: its feed's events in each of the user's groups, and
/// changes to the user's own memberships (and, for `/v1/sync`, their reads elsewhere).
fn wake_keys(feed: Feed, user_id: &str, groups: Vec<i64>) -> Vec<WakeEvent> {
    let user = user_id.to_owned();
    let mut keys: Vec<WakeEvent> = groups
        .into_iter()
        .map(|g| match feed {
            Feed::Messages => WakeEvent::MessageSent(g),
            Feed::Receipts => WakeEvent::CursorMoved(g),
        })
        .collect();
    keys.push(WakeEvent::MembershipChanged(user.clone()));
    if feed == Feed::Messages {
        keys.push(WakeEvent::ReadMoved(user));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_bound_to_their_feed() {
        let signer = CursorSigner::new(b"test secret");
        let seen = Watermark::parse("5").unwrap();
        let mut cursor = FeedPosition::at(Feed::Receipts, seen, 1_700_000_000);
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Receipts, &signer),
            Some(cursor.clone())
        );
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Messages, &signer),
            None
        );
        cursor.window = Some(Window {
            upto: Watermark::parse("9").unwrap(),
            upto_at: 1_700_000_005,
            after: MessageRef {
                group_id: 3,
                msg_id: 44,
            },
        });
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Receipts, &signer),
            Some(cursor)
        );
        assert_eq!(
            FeedPosition::decode("not-a-cursor", Feed::Receipts, &signer),
            None
        );
        assert_eq!(FeedPosition::decode("", Feed::Receipts, &signer), None);
    }

    #[test]
    fn forged_tampered_and_foreign_cursors_are_refused() {
        let signer = CursorSigner::new(b"test secret");
        let other = CursorSigner::new(b"another secret");
        let now = chrono::Utc::now().timestamp();
        let cursor = FeedPosition::at(Feed::Messages, Watermark::parse("3").unwrap(), now);
        let issued = cursor.encode(&signer);
        let (body, tag) = issued.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let forged_body = b64.encode(format!("3.m.{now}.0"));

        assert_eq!(
            FeedPosition::decode(&issued, Feed::Messages, &signer),
            Some(cursor)
        );
        assert_eq!(
            FeedPosition::decode(&issued, Feed::Messages, &other),
            None,
            "another secret"
        );
        assert_eq!(
            FeedPosition::decode(&format!("{forged_body}.{tag}"), Feed::Messages, &signer),
            None
        );
        assert_eq!(
            FeedPosition::decode(body, Feed::Messages, &signer),
            None,
            "no tag"
        );
    }

    #[test]
    fn cursors_from_the_future_or_before_the_epoch_are_refused() {
        let signer = CursorSigner::new(b"test secret");
        for seen_at in [i64::MAX, i64::MIN] {
            let cursor = FeedPosition::at(Feed::Messages, Watermark::parse("3").unwrap(), seen_at);
            assert_eq!(
                FeedPosition::decode(&cursor.encode(&signer), Feed::Messages, &signer),
                None,
                "seen at {seen_at}"
            );
        }
    }

    #[test]
    fn cursors_of_the_previous_format_are_recognised_as_outdated() {
        let signer = CursorSigner::new(b"test secret");
        let current = FeedPosition::at(
            Feed::Messages,
            Watermark::parse("3").unwrap(),
            chrono::Utc::now().timestamp(),
        )
        .encode(&signer);
        let now = chrono::Utc::now().timestamp();
        let previous = signer.sign(&format!("1.m.{now}.3:3:"));
        let snapshots = signer.sign(&format!("2.m.{now}.3:3:"));

        assert!(FeedPosition::is_outdated(&previous, &signer));
        assert!(FeedPosition::is_outdated(&snapshots, &signer));
        assert_eq!(
            FeedPosition::decode(&snapshots, Feed::Messages, &signer),
            None
        );
        assert_eq!(
            FeedPosition::decode(&previous, Feed::Messages, &signer),
            None
        );
        assert!(!FeedPosition::is_outdated(&current, &signer));
        assert!(!FeedPosition::is_outdated("garbage", &signer));
    }
}
