//! PostgreSQL: the job that folds the cursor moves writes append into the histogram of cursors
//! receipt counts read (see `db::member_cursors::cursor_counts`). Counts are exact before a fold
//! too (they read the moves not yet folded); folding keeps the moves a count reads few.

use std::time::Duration;

use crate::db::member_cursors::cursor_counts::{fold_group_moves, groups_with_moves};
use crate::db::Db;

/// Groups looked up per round trip; each is folded in a transaction of its own, which holds
/// the histogram rows it updates only briefly and touches one group's shard.
const BATCH: i64 = 500;
/// How often the job looks for moves. A count reads at most about this long's worth of one
/// group's moves besides the histogram.
const INTERVAL: Duration = Duration::from_millis(200);

/// Folds every group's waiting moves, group by group, until no group has any left; returns
/// how many moves it folded.
async fn fold_waiting_moves(db: &Db) -> Result<i64, crate::db::DbError> {
    let mut total = 0;
    loop {
        let groups = db.upkeep(|conn| groups_with_moves(conn, BATCH)).await?;
        for &group_id in &groups {
            total += db
                .upkeep(move |conn| fold_group_moves(conn, group_id))
                .await?;
        }
        if (groups.len() as i64) < BATCH {
            return Ok(total);
        }
    }
}

/// Runs [`fold_waiting_moves`] every [`INTERVAL`] until the process ends. Every instance runs
/// it; two folding one group take turns and count each move once.
pub async fn run(db: Db) {
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(e) = fold_waiting_moves(&db).await {
            tracing::warn!(error = %e, "folding cursor moves failed; retrying next round");
        }
    }
}
