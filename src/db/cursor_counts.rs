//! The histogram of the members' cursors: for each group and message id, how many members have
//! their read cursor, their delivered cursor and their join point exactly there. Triggers on
//! `group_members` keep it (see its migration), so every write that moves a cursor counts
//! itself and no caller here writes it.
//!
//! How many members have a cursor at or above a message is the sum of the rows at or above
//! it: as many rows as distinct cursor values there, however many members share them, so
//! receipt counts cost the same in a group of two and in a group of 100,000.
//!
//! On SQLite the triggers count straight into `cursor_counts` (one writer: no one waits for
//! its rows). On PostgreSQL they append to `cursor_moves` instead, so that acks and sends of
//! one group never wait for each other on the row of the newest message, and
//! [`fold_moves`] moves those rows into `cursor_counts` in the background; a count reads
//! both tables, so it is exact whether a move was folded yet or not.

use diesel::sql_types::BigInt;
use diesel::{QueryResult, QueryableByName};

use super::raw_sql::RawSql;
use super::AnyConnection;
use crate::domain::GroupId;

/// How many members have each cursor at or above one message id, or at exactly one id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, QueryableByName)]
pub struct Tally {
    #[diesel(sql_type = BigInt)]
    pub read: i64,
    #[diesel(sql_type = BigInt)]
    pub delivered: i64,
    #[diesel(sql_type = BigInt)]
    pub joined: i64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.read += other.read;
        self.delivered += other.delivered;
        self.joined += other.joined;
    }
}

/// The histogram of one group's cursors from `oldest` up, with everything at or above
/// `newest` summed into one entry: enough to tell the tally at any id in [oldest, newest].
pub struct CursorCounts {
    /// (id, members with cursors exactly there), the entry at `newest` holding all above it.
    rows: Vec<(i64, Tally)>,
}

impl CursorCounts {
    /// One statement, so one snapshot and one round trip. `oldest <= newest`.
    pub fn read(
        conn: &mut AnyConnection,
        group_id: GroupId,
        oldest: i64,
        newest: i64,
    ) -> QueryResult<CursorCounts> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = BigInt)]
            msg_id: i64,
            #[diesel(embed)]
            tally: Tally,
        }
        let histogram = match conn {
            AnyConnection::Postgresql(_) => {
                "(SELECT group_id, msg_id, read_members, delivered_members, joined_members \
                 FROM cursor_counts UNION ALL \
                 SELECT group_id, msg_id, read_members, delivered_members, joined_members \
                 FROM cursor_moves) AS h"
            }
            AnyConnection::Sqlite(_) => "cursor_counts AS h",
        };
        let sums = "CAST(COALESCE(sum(read_members), 0) AS BIGINT) AS read, \
                    CAST(COALESCE(sum(delivered_members), 0) AS BIGINT) AS delivered, \
                    CAST(COALESCE(sum(joined_members), 0) AS BIGINT) AS joined";
        let rows: Vec<Row> = RawSql::default()
            .sql("SELECT CAST(")
            .int(newest)
            .sql(&format!(
                " AS BIGINT) AS msg_id, {sums} FROM {histogram} WHERE group_id = "
            ))
            .int(group_id.0)
            .sql(" AND msg_id >= ")
            .int(newest)
            .sql(&format!(
                " UNION ALL SELECT msg_id, {sums} FROM {histogram} WHERE group_id = "
            ))
            .int(group_id.0)
            .sql(" AND msg_id >= ")
            .int(oldest)
            .sql(" AND msg_id < ")
            .int(newest)
            .sql(" GROUP BY msg_id")
            .keep_prepared()
            .load(conn)?;
        Ok(CursorCounts {
            rows: rows.into_iter().map(|r| (r.msg_id, r.tally)).collect(),
        })
    }

    /// How many members have each cursor at or above `msg_id`, which lies in the range read.
    pub fn at_or_above(&self, msg_id: i64) -> Tally {
        let mut tally = Tally::default();
        for &(at, members) in &self.rows {
            if at >= msg_id {
                tally += members;
            }
        }
        tally
    }
}

/// PostgreSQL: folds up to `limit` cursor moves into `cursor_counts` (any of them: moves add
/// up the same in any order), then deletes the rows no cursor is at any more; returns how
/// many moves it folded. The caller runs it in a transaction of its own, which holds the rows
/// it updates only for these two statements. Moves another instance's fold holds are
/// skipped, not waited for; rows are updated in (group, id) order, so two folds do not wait
/// for each other in a cycle (should one ever, PostgreSQL fails one and the next round
/// folds its moves).
pub fn fold_moves(conn: &mut AnyConnection, limit: i64) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Folded {
        #[diesel(sql_type = BigInt)]
        moves: i64,
    }
    let folded: Vec<Folded> = RawSql::default()
        .sql(
            "WITH taken AS (DELETE FROM cursor_moves WHERE ctid = ANY(ARRAY(\
             SELECT ctid FROM cursor_moves LIMIT ",
        )
        .int(limit)
        .sql(
            " FOR UPDATE SKIP LOCKED)) \
             RETURNING group_id, msg_id, read_members, delivered_members, joined_members), \
             folded AS (INSERT INTO cursor_counts AS c \
             (group_id, msg_id, read_members, delivered_members, joined_members) \
             SELECT group_id, msg_id, sum(read_members), sum(delivered_members), \
             sum(joined_members) FROM taken GROUP BY group_id, msg_id ORDER BY group_id, msg_id \
             ON CONFLICT (group_id, msg_id) DO UPDATE SET \
             read_members = c.read_members + excluded.read_members, \
             delivered_members = c.delivered_members + excluded.delivered_members, \
             joined_members = c.joined_members + excluded.joined_members) \
             SELECT CAST(count(*) AS BIGINT) AS moves FROM taken",
        )
        .keep_prepared()
        .load(conn)?;
    let moves = folded.first().map_or(0, |f| f.moves);
    if moves > 0 {
        RawSql::default()
            .sql(
                "DELETE FROM cursor_counts \
                 WHERE read_members = 0 AND delivered_members = 0 AND joined_members = 0",
            )
            .keep_prepared()
            .execute(conn)?;
    }
    Ok(moves)
}
