//! The retention job: receipt changes are not core data (the seeds: delete, don't keep), so
//! rows older than the retention period are deleted in small batches, in the background.

use std::time::Duration;

use chrono::Utc;

use crate::db::receipts::delete_changes_before;
use crate::db::Db;

const BATCH: i64 = 1000;
/// Longest a writing transaction may be in flight. Rows are kept this much longer than
/// cursors live, so a row that committed just after a cursor's snapshot was taken is still
/// there when that cursor, at the edge of expiring, is read.
const MAX_GRACE_SECS: i64 = 120;

/// Deletes everything older than `retention_secs` plus the grace; returns how many rows went.
pub async fn sweep(db: &Db, retention_secs: i64) -> Result<usize, crate::db::DbError> {
    let grace = MAX_GRACE_SECS.min(retention_secs.max(1));
    let cutoff = Utc::now().naive_utc() - chrono::Duration::seconds(retention_secs + grace);
    let mut total = 0;
    loop {
        let deleted = db
            .write(move |conn| delete_changes_before(conn, cutoff, BATCH))
            .await?;
        total += deleted;
        if (deleted as i64) < BATCH {
            return Ok(total);
        }
        // Let other writers in between batches (SQLite has one writer).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs [`sweep`] every `interval` until the process ends.
pub async fn run(db: Db, retention_secs: i64, interval: Duration) {
    let mut ticker = tokio::time::interval(interval.max(Duration::from_secs(1)));
    loop {
        ticker.tick().await;
        match sweep(&db, retention_secs).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "expired receipt changes deleted"),
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; retrying next round"),
        }
    }
}
