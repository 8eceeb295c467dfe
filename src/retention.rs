//! The retention job. Receipt changes and member events are not core data (they only feed
//! long-polls), so rows older than the retention period are deleted; devices unused for the
//! device retention period are forgotten; messages too expire, when a message retention is
//! configured. Deletion runs in the background in small batches, so no transaction (and
//! on SQLite, no turn of the single writer) is long.

use std::time::Duration;

use chrono::Utc;

use crate::db::device::devices::forget_devices_before;
use crate::db::group::member_events::delete_member_events_before;
use crate::db::member_cursors::receipts::delete_changes_before;
use crate::db::message::messages::delete_messages_before;
use crate::db::{AnyConnection, Db, DbError};
use crate::wake_ups::events::Wakes;

const BATCH: i64 = 1000;
/// Longest a writing transaction may be in flight. Receipt changes are kept this much longer
/// than cursors live, so a row that committed just after a cursor's snapshot was taken is
/// still there when that cursor, at the edge of expiring, is read.
const MAX_GRACE_SECS: i64 = 120;

#[derive(Debug, Clone, Copy)]
pub struct RetentionPolicy {
    /// Receipt changes and member events (the long-poll feeds).
    pub receipt_changes_secs: i64,
    /// Devices unused this long are forgotten, with their cursors.
    pub devices_secs: i64,
    /// None keeps messages forever.
    pub messages_secs: Option<i64>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub receipt_changes: usize,
    pub member_events: usize,
    pub devices: usize,
    pub messages: usize,
}

/// Deletes everything the policy says has expired.
pub async fn sweep(db: &Db, policy: RetentionPolicy) -> Result<Swept, DbError> {
    let now = Utc::now().naive_utc();
    let grace = MAX_GRACE_SECS.min(policy.receipt_changes_secs.max(1));
    let changes_cutoff = now - chrono::Duration::seconds(policy.receipt_changes_secs + grace);
    let devices_cutoff = now - chrono::Duration::seconds(policy.devices_secs);
    let mut swept = Swept {
        receipt_changes: delete_in_batches(db, move |conn, _| {
            delete_changes_before(conn, changes_cutoff, BATCH)
        })
        .await?,
        member_events: delete_in_batches(db, move |conn, _| {
            delete_member_events_before(conn, changes_cutoff, BATCH)
        })
        .await?,
        devices: delete_in_batches(db, move |conn, _| {
            forget_devices_before(conn, devices_cutoff, BATCH)
        })
        .await?,
        messages: 0,
    };
    if let Some(secs) = policy.messages_secs {
        let cutoff = now - chrono::Duration::seconds(secs);
        swept.messages = delete_in_batches(db, move |conn, wakes| {
            delete_messages_before(conn, cutoff, BATCH, wakes)
        })
        .await?;
    }
    Ok(swept)
}

/// Runs `delete` (which deletes up to [`BATCH`] rows and says how many) until a batch comes
/// back short; returns the total.
async fn delete_in_batches<F>(db: &Db, delete: F) -> Result<usize, DbError>
where
    F: Fn(&mut AnyConnection, &mut Wakes) -> diesel::QueryResult<usize> + Clone + Send + 'static,
{
    let mut total = 0;
    loop {
        let deleted = db.write(delete.clone()).await?;
        total += deleted;
        if (deleted as i64) < BATCH {
            return Ok(total);
        }
        // Let other writers in between batches (SQLite has one writer).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs [`sweep`] every `interval` until the process ends.
pub async fn run(db: Db, policy: RetentionPolicy, interval: Duration) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_secs(1)));
    loop {
        ticker.tick().await;
        match sweep(&db, policy).await {
            Ok(swept) if swept == Swept::default() => {}
            Ok(swept) => tracing::info!(
                receipt_changes = swept.receipt_changes,
                member_events = swept.member_events,
                devices = swept.devices,
                messages = swept.messages,
                "expired rows deleted"
            ),
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; retrying next round"),
        }
    }
}
