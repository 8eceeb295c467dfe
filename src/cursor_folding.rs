//! PostgreSQL: the job that folds the cursor moves writes append into the histogram of
//! cursors receipt counts read (see `db::cursor_counts`). Counts are exact before a fold too
//! (they read the moves not yet folded); folding keeps the moves a count reads few.

use std::time::Duration;

use crate::db::cursor_counts::fold_moves;
use crate::db::Db;

/// Moves folded per transaction: each holds the histogram rows it updates only briefly.
const BATCH: i64 = 10_000;
/// How often the job looks for moves. A count reads at most about this long's worth of one
/// group's moves besides the histogram.
const INTERVAL: Duration = Duration::from_millis(200);

/// Folds every move waiting, a batch per transaction, until a batch comes back short;
/// returns how many it folded.
async fn fold_waiting_moves(db: &Db) -> Result<i64, crate::db::DbError> {
    let mut total = 0;
    loop {
        let folded = db.upkeep(|conn| fold_moves(conn, BATCH)).await?;
        total += folded;
        if folded < BATCH {
            return Ok(total);
        }
    }
}

/// Runs [`fold_waiting_moves`] every [`INTERVAL`] until the process ends. Every instance runs
/// it; their folds take disjoint moves.
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
