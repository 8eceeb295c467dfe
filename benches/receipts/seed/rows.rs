//! The rows a storm wrote: row counts of the tables it writes to, and PostgreSQL's own
//! counters of rows inserted and updated.

use std::collections::BTreeMap;
use std::time::Duration;

use chorus::db::AnyConnection;
use chorus::schema::{group_members, group_msgs, receipt_events};
use diesel::prelude::*;

use crate::support::engine::Engine;

/// PostgreSQL flushes a backend's table statistics at most every 10 s while it idles.
const PG_STATS_SETTLE: Duration = Duration::from_secs(11);

#[derive(Clone, Copy, Default)]
pub struct RowCounts {
    pub msgs: i64,
    pub events: i64,
    pub members: i64,
}

pub fn row_counts(conn: &mut AnyConnection) -> RowCounts {
    RowCounts {
        msgs: group_msgs::table.count().get_result(conn).expect("count"),
        events: receipt_events::table
            .count()
            .get_result(conn)
            .expect("count"),
        members: group_members::table
            .count()
            .get_result(conn)
            .expect("count"),
    }
}

#[derive(QueryableByName)]
struct PgTableStat {
    #[diesel(sql_type = diesel::sql_types::Text)]
    relname: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    ins: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    upd: i64,
}

/// PostgreSQL's own counters of rows inserted and updated per table (None on SQLite).
fn pg_table_stats(conn: &mut AnyConnection) -> Option<PgRows> {
    let AnyConnection::Postgresql(c) = conn else {
        return None;
    };
    let rows: Vec<PgTableStat> = diesel::sql_query(
        "SELECT relname::text AS relname, n_tup_ins AS ins, n_tup_upd AS upd \
         FROM pg_stat_user_tables \
         WHERE relname IN ('groups', 'group_members', 'group_msgs', 'receipt_events')",
    )
    .load(c)
    .ok()?;
    Some(
        rows.into_iter()
            .map(|r| (r.relname, (r.ins, r.upd)))
            .collect(),
    )
}

impl RowCounts {
    /// Rows added since `before`.
    pub fn since(self, before: RowCounts) -> RowCounts {
        RowCounts {
            msgs: self.msgs - before.msgs,
            events: self.events - before.events,
            members: self.members - before.members,
        }
    }
}

/// Rows inserted and updated per table, by PostgreSQL's own counters.
pub type PgRows = BTreeMap<String, (i64, i64)>;

/// PostgreSQL's counters once its table statistics have settled; None on SQLite.
pub async fn settled_pg_stats(engine: Engine, conn: &mut AnyConnection) -> Option<PgRows> {
    if engine != Engine::Postgres {
        return None;
    }
    eprintln!("seed: waiting for PostgreSQL's table statistics to settle");
    tokio::time::sleep(PG_STATS_SETTLE).await;
    pg_table_stats(conn)
}

/// What the counters grew by between two readings.
pub fn pg_growth(before: Option<PgRows>, after: Option<PgRows>) -> Option<PgRows> {
    let (before, after) = (before?, after?);
    let growth = after
        .iter()
        .map(|(t, (i, u))| {
            let (bi, bu) = before.get(t).copied().unwrap_or((0, 0));
            (t.clone(), (i - bi, u - bu))
        })
        .collect();
    Some(growth)
}
