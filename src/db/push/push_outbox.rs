//! The outbox columns of `push_targets`: at most one notification per device being delivered,
//! stored with the marks of what it tells (see `push_due`) in one transaction, leased to the
//! instance delivering it and settled when the push service took it or it was given up.
//!
//! Several instances share the work: building locks the device's row (`FOR UPDATE SKIP
//! LOCKED` on PostgreSQL; SQLite has one writer), so a notification is built once, and a
//! delivery attempt is leased (`lease_owner`, `lease_until`), so it is made by one instance;
//! when that instance dies, the lease runs out and another makes it.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text, Timestamp};

use crate::db::engine::raw_sql::RawSql;
use crate::db::AnyConnection;

/// Who holds a delivery attempt, until when.
#[derive(Debug, Clone)]
pub struct Lease {
    pub owner: String,
    pub until: NaiveDateTime,
}

/// A device that may be built a notification now.
#[derive(QueryableByName, Debug, Clone)]
pub struct BuildTarget {
    #[diesel(sql_type = Text)]
    pub device_id: String,
    #[diesel(sql_type = Text)]
    pub user_id: String,
    #[diesel(sql_type = Text)]
    pub platform: String,
    #[diesel(sql_type = Text)]
    pub token: String,
    #[diesel(sql_type = Timestamp)]
    pub registered_at: NaiveDateTime,
    #[diesel(sql_type = BigInt)]
    pub built_count: i64,
}

/// `FOR UPDATE SKIP LOCKED` where there is more than one writer: a row another instance is
/// working on is left to it.
fn skip_locked(conn: &AnyConnection) -> &'static str {
    match conn {
        AnyConnection::Postgresql(_) => " FOR UPDATE SKIP LOCKED",
        AnyConnection::Sqlite(_) => "",
    }
}

/// Locks the device's row for building, if it has no notification being delivered, got its
/// last one at or before `interval_cutoff`, and no other instance holds it.
pub fn lock_for_build(
    conn: &mut AnyConnection,
    device_id: &str,
    interval_cutoff: NaiveDateTime,
) -> QueryResult<Option<BuildTarget>> {
    let lock = skip_locked(conn);
    let rows: Vec<BuildTarget> = RawSql::default()
        .sql(
            "SELECT device_id, user_id, platform, token, registered_at, built_count \
             FROM push_targets \
             WHERE device_id = ",
        )
        .text(device_id)
        .sql(" AND pending_key IS NULL AND (last_built_at IS NULL OR last_built_at <= ")
        .time(interval_cutoff)
        .sql(")")
        .sql(lock)
        .load(conn)?;
    Ok(rows.into_iter().next())
}

/// A notification to deliver.
#[derive(QueryableByName, Debug, Clone)]
pub struct Pending {
    #[diesel(sql_type = Text)]
    pub device_id: String,
    /// The idempotency key: the same for every attempt.
    #[diesel(sql_type = Text, column_name = pending_key)]
    pub key: String,
    #[diesel(sql_type = Text, column_name = pending_body)]
    pub body: String,
    /// When it was built, for the delivery latency and the retry bound.
    #[diesel(sql_type = Timestamp, column_name = pending_since)]
    pub since: NaiveDateTime,
    /// Attempts that failed so far.
    #[diesel(sql_type = BigInt)]
    pub attempts: i64,
}

/// Stores a notification built now as the device's pending one, leased to its builder, and
/// counts it (its number ends its key).
pub fn store_pending(
    conn: &mut AnyConnection,
    pending: &Pending,
    lease: &Lease,
) -> QueryResult<()> {
    RawSql::default()
        .sql("UPDATE push_targets SET pending_key = ")
        .text(&pending.key)
        .sql(", pending_body = ")
        .text(&pending.body)
        .sql(", pending_since = ")
        .time(pending.since)
        .sql(", next_attempt_at = ")
        .time(pending.since)
        .sql(", last_built_at = ")
        .time(pending.since)
        .sql(", attempts = 0, built_count = built_count + 1, lease_owner = ")
        .text(&lease.owner)
        .sql(", lease_until = ")
        .time(lease.until)
        .sql(" WHERE device_id = ")
        .text(&pending.device_id)
        .execute(conn)
        .map(|_| ())
}

#[derive(QueryableByName)]
struct DueDevice {
    #[diesel(sql_type = Text)]
    device_id: String,
}

/// Up to `limit` devices whose next attempt is due and that no live lease holds (their
/// deliverer died, or an attempt failed and waited its backoff), oldest due first. A read,
/// so that a tick with nothing to retry takes no write lock (SQLite's single writer serves
/// the requests meanwhile), and so that each claim after it writes one device's row alone:
/// an update that picks its rows across devices would lock rows on every shard at once
/// where devices are distributed (Citus refuses it).
pub fn due_attempts(
    conn: &mut AnyConnection,
    now: NaiveDateTime,
    limit: i64,
) -> QueryResult<Vec<String>> {
    let rows: Vec<DueDevice> = RawSql::default()
        .sql(
            "SELECT device_id FROM push_targets \
             WHERE pending_key IS NOT NULL AND next_attempt_at <= ",
        )
        .time(now)
        .sql(" AND (lease_until IS NULL OR lease_until < ")
        .time(now)
        .sql(") ORDER BY next_attempt_at LIMIT ")
        .int(limit)
        .load(conn)?;
    Ok(rows.into_iter().map(|r| r.device_id).collect())
}

/// Leases the device's notification if its attempt is still due and free: another instance
/// that read the same list may have claimed it since, and then this claims nothing.
pub fn claim_attempt(
    conn: &mut AnyConnection,
    device_id: &str,
    lease: &Lease,
    now: NaiveDateTime,
) -> QueryResult<Option<Pending>> {
    let claimed: Vec<Pending> = RawSql::default()
        .sql("UPDATE push_targets SET lease_owner = ")
        .text(&lease.owner)
        .sql(", lease_until = ")
        .time(lease.until)
        .sql(" WHERE device_id = ")
        .text(device_id)
        .sql(" AND pending_key IS NOT NULL AND next_attempt_at <= ")
        .time(now)
        .sql(" AND (lease_until IS NULL OR lease_until < ")
        .time(now)
        .sql(") RETURNING device_id, pending_key, pending_body, pending_since, attempts")
        .load(conn)?;
    Ok(claimed.into_iter().next())
}

/// The notification is done with: delivered, or given up. A notification that was replaced
/// meanwhile (its key differs) is left alone.
pub fn settle(conn: &mut AnyConnection, device_id: &str, key: &str) -> QueryResult<()> {
    RawSql::default()
        .sql(
            "UPDATE push_targets SET pending_key = NULL, pending_body = NULL, \
               pending_since = NULL, next_attempt_at = NULL, attempts = 0, \
               lease_owner = NULL, lease_until = NULL WHERE device_id = ",
        )
        .text(device_id)
        .sql(" AND pending_key = ")
        .text(key)
        .execute(conn)
        .map(|_| ())
}

/// An attempt failed: the next is due at `next_at`, by whichever instance claims it then.
pub fn retry_later(
    conn: &mut AnyConnection,
    device_id: &str,
    key: &str,
    next_at: NaiveDateTime,
) -> QueryResult<()> {
    RawSql::default()
        .sql("UPDATE push_targets SET attempts = attempts + 1, next_attempt_at = ")
        .time(next_at)
        .sql(", lease_owner = NULL, lease_until = NULL WHERE device_id = ")
        .text(device_id)
        .sql(" AND pending_key = ")
        .text(key)
        .execute(conn)
        .map(|_| ())
}
