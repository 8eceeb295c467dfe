//! The histogram of the members' cursors: for each group and message id, how many members have
//! their read cursor, their delivered cursor and their join point exactly there. Every write
//! that adds, moves or removes a member's cursors records its [`CursorMoves`] in the same
//! transaction (the write knows where each cursor was and where it goes; no trigger does it
//! behind its back, so the rows of one group stay on that group's shard).
//!
//! How many members have a cursor at or above a message is the sum of the rows at or above
//! it: as many rows as distinct cursor values there, however many members share them, so
//! receipt counts cost the same in a group of two and in a group of 100,000.
//!
//! On SQLite the moves count straight into `cursor_counts` (one writer: no one waits for
//! its rows). On PostgreSQL they are appended to `cursor_moves` instead, so that acks and sends of
//! one group never wait for each other on the row of the newest message, and
//! [`fold_group_moves`] moves those rows into `cursor_counts` in the background; a count reads
//! both tables, so it is exact whether a move was folded yet or not.

use std::collections::BTreeMap;

use diesel::sql_types::BigInt;
use diesel::{QueryResult, QueryableByName};

use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::models::MemberRow;
use crate::db::AnyConnection;
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

/// What a write does to the histogram: members counted in or out at message ids, netted per
/// (group, id). Filled by the write that moves the cursors, then written with it by
/// [`CursorMoves::statements`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CursorMoves {
    by_place: BTreeMap<(i64, i64), Tally>,
}

impl CursorMoves {
    fn add(&mut self, group_id: GroupId, msg_id: i64, tally: Tally) {
        *self.by_place.entry((group_id.0, msg_id)).or_default() += tally;
    }

    /// A member joined with all three cursors at `at`.
    pub fn joined(&mut self, group_id: GroupId, at: i64) {
        self.joined_many(group_id, at, 1);
    }

    /// `count` members joined with all three cursors at `at`.
    pub fn joined_many(&mut self, group_id: GroupId, at: i64, count: i64) {
        self.add(
            group_id,
            at,
            Tally {
                read: count,
                delivered: count,
                joined: count,
            },
        );
    }

    /// A member with these cursors left.
    pub fn left(&mut self, group_id: GroupId, cursors: MemberCursors) {
        let one = |read, delivered, joined| Tally {
            read,
            delivered,
            joined,
        };
        self.add(group_id, cursors.read, one(-1, 0, 0));
        self.add(group_id, cursors.delivered, one(0, -1, 0));
        self.add(group_id, cursors.joined, one(0, 0, -1));
    }

    /// A member's cursors moved from `before` to `after`.
    pub fn moved(&mut self, group_id: GroupId, before: MemberCursors, after: MemberCursors) {
        self.left(group_id, before);
        let one = |read, delivered, joined| Tally {
            read,
            delivered,
            joined,
        };
        self.add(group_id, after.read, one(1, 0, 0));
        self.add(group_id, after.delivered, one(0, 1, 0));
        self.add(group_id, after.joined, one(0, 0, 1));
    }

    pub fn is_empty(&self) -> bool {
        self.by_place.values().all(|t| *t == Tally::default())
    }

    /// The statements that write the moves, to run in the write's transaction (one on
    /// PostgreSQL, which appends them to `cursor_moves` for [`fold_group_moves`]; two on SQLite,
    /// which counts them into `cursor_counts` and drops the rows no cursor is at any more).
    /// None when nothing moved.
    pub fn statements(&self, conn: &AnyConnection) -> Vec<RawSql> {
        let rows = self.rows();
        if rows.is_empty() {
            return Vec::new();
        }
        let columns = MOVE_COLUMNS;
        let insert = |table: &str| {
            RawSql::default()
                .sql(&format!(
                    "INSERT INTO {table} \
                     (group_id, msg_id, read_members, delivered_members, joined_members) \
                     SELECT g, m, r, d, j FROM "
                ))
                .rows("t", &columns, &rows)
        };
        match conn {
            AnyConnection::Postgresql(_) => vec![insert("cursor_moves").keep_prepared()],
            AnyConnection::Sqlite(_) => vec![
                // `WHERE true` tells SQLite's parser the ON CONFLICT is the upsert's.
                insert("cursor_counts")
                    .sql(
                        " WHERE true ON CONFLICT (group_id, msg_id) DO UPDATE SET \
                         read_members = read_members + excluded.read_members, \
                         delivered_members = delivered_members + excluded.delivered_members, \
                         joined_members = joined_members + excluded.joined_members",
                    )
                    .keep_prepared(),
                RawSql::default()
                    .sql(
                        "DELETE FROM cursor_counts WHERE read_members = 0 \
                         AND delivered_members = 0 AND joined_members = 0 \
                         AND (group_id, msg_id) IN (SELECT g, m FROM ",
                    )
                    .rows("t", &columns, &rows)
                    .sql(")")
                    .keep_prepared(),
            ],
        }
    }

    /// The non-zero moves as rows of [`MOVE_COLUMNS`], in (group, id) order.
    fn rows(&self) -> Vec<Vec<Value<'static>>> {
        self.by_place
            .iter()
            .filter(|(_, tally)| **tally != Tally::default())
            .map(|(&(group_id, msg_id), tally)| {
                vec![
                    Value::Int(group_id),
                    Value::Int(msg_id),
                    Value::Int(tally.read),
                    Value::Int(tally.delivered),
                    Value::Int(tally.joined),
                ]
            })
            .collect()
    }

    /// Writes the moves now, in the caller's transaction.
    pub fn write(&self, conn: &mut AnyConnection) -> QueryResult<()> {
        for statement in self.statements(conn) {
            statement.execute(conn)?;
        }
        Ok(())
    }
}

/// The columns of a table of moves: group, message id, and the change of each count there.
const MOVE_COLUMNS: [&str; 5] = ["g", "m", "r", "d", "j"];

/// Where one member's three cursors stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberCursors {
    pub read: i64,
    pub delivered: i64,
    pub joined: i64,
}

impl MemberCursors {
    /// Where a membership row's cursors stand.
    pub fn of(member: &MemberRow) -> MemberCursors {
        MemberCursors {
            read: member.last_read_msg_id,
            delivered: member.delivered_msg_id,
            joined: member.joined_after_msg_id,
        }
    }
}

/// The histogram of one group's cursors from `oldest` up, with everything at or above
/// `newest` summed into one entry: enough to tell the tally at any id in [oldest, newest].
pub struct CursorCounts {
    /// (id, members with cursors exactly there), the entry at `newest` holding all above it.
    rows: Vec<(i64, Tally)>,
}

impl CursorCounts {
    /// Appends a statement that reads the histogram of `group_id`'s cursors from `oldest` to
    /// `newest` (`oldest <= newest`): a row with the sums at or above `newest` and a row per
    /// place between them, in no particular order, each with the columns `msg_id`, `read`,
    /// `delivered` and `joined`. A caller wraps it as a subquery to read it beside other
    /// figures in one snapshot.
    pub(in crate::db) fn query(
        query: RawSql,
        conn: &AnyConnection,
        group_id: GroupId,
        oldest: i64,
        newest: i64,
    ) -> RawSql {
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
        query
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
    }

    /// The histogram from the rows [`CursorCounts::query`] returned.
    pub(in crate::db) fn from_rows(rows: impl IntoIterator<Item = (i64, Tally)>) -> CursorCounts {
        CursorCounts {
            rows: rows.into_iter().collect(),
        }
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

/// PostgreSQL: up to `limit` groups that have cursor moves waiting to be folded.
pub fn groups_with_moves(conn: &mut AnyConnection, limit: i64) -> QueryResult<Vec<GroupId>> {
    #[derive(QueryableByName)]
    struct Group {
        #[diesel(sql_type = BigInt)]
        group_id: i64,
    }
    let groups: Vec<Group> = RawSql::default()
        .sql("SELECT DISTINCT group_id FROM cursor_moves LIMIT ")
        .int(limit)
        .keep_prepared()
        .load(conn)?;
    Ok(groups.into_iter().map(|g| GroupId(g.group_id)).collect())
}

/// PostgreSQL: folds one group's cursor moves into `cursor_counts` (moves add up the same in
/// any order), then deletes that group's rows no cursor is at any more; returns how many
/// moves it folded. Every statement names the group, so it runs on the group's shard alone.
/// The caller runs it in a transaction of its own. Two instances folding one group at once
/// take turns on the moves' rows, and the second finds them gone: nothing is counted twice.
pub fn fold_group_moves(conn: &mut AnyConnection, group_id: GroupId) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Taken {
        #[diesel(sql_type = BigInt)]
        msg_id: i64,
        #[diesel(embed)]
        tally: Tally,
    }
    let taken: Vec<Taken> = RawSql::default()
        .sql("DELETE FROM cursor_moves WHERE group_id = ")
        .int(group_id.0)
        .sql(
            " RETURNING msg_id, read_members AS read, delivered_members AS delivered, \
             joined_members AS joined",
        )
        .keep_prepared()
        .load(conn)?;
    let folded = taken.len() as i64;
    let mut moves = CursorMoves::default();
    for row in taken {
        moves.add(group_id, row.msg_id, row.tally);
    }
    let rows = moves.rows();
    if rows.is_empty() {
        return Ok(folded);
    }
    RawSql::default()
        .sql(
            "INSERT INTO cursor_counts AS c \
             (group_id, msg_id, read_members, delivered_members, joined_members) \
             SELECT g, m, r, d, j FROM ",
        )
        .rows("t", &MOVE_COLUMNS, &rows)
        .sql(
            " ORDER BY m ON CONFLICT (group_id, msg_id) DO UPDATE SET \
             read_members = c.read_members + excluded.read_members, \
             delivered_members = c.delivered_members + excluded.delivered_members, \
             joined_members = c.joined_members + excluded.joined_members",
        )
        .keep_prepared()
        .execute(conn)?;
    RawSql::default()
        .sql("DELETE FROM cursor_counts WHERE group_id = ")
        .int(group_id.0)
        .sql(" AND read_members = 0 AND delivered_members = 0 AND joined_members = 0")
        .keep_prepared()
        .execute(conn)?;
    Ok(folded)
}
