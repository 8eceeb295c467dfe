//! Change feeds for long-polls: what committed between two snapshots.
//!
//! A [`Snapshot`] says which writes a reader could see. The changes between snapshots `from`
//! and `to` are the rows visible in `to` and not in `from`. On PostgreSQL each feed row stores
//! the id of the transaction that wrote it (`tx`) and visibility is PostgreSQL's own
//! (`pg_visible_in_snapshot`), so a row that took a low id but committed late is still caught
//! by the next window. On SQLite one writer commits in id order, so a snapshot is simply
//! "ids below `xmax`" (`xmin = xmax`, no in-progress list).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

use super::AnyConnection;

/// PostgreSQL's `pg_snapshot` (`xmin:xmax:xip,…`), or SQLite's `n:n:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub xmin: i64,
    pub xmax: i64,
    /// Transactions in progress when the snapshot was taken (PostgreSQL only).
    pub xip: Vec<i64>,
}

impl Snapshot {
    pub fn to_text(&self) -> String {
        let xip: Vec<String> = self.xip.iter().map(i64::to_string).collect();
        format!("{}:{}:{}", self.xmin, self.xmax, xip.join(","))
    }

    pub fn parse(text: &str) -> Option<Snapshot> {
        let mut parts = text.splitn(3, ':');
        let xmin: i64 = parts.next()?.parse().ok()?;
        let xmax: i64 = parts.next()?.parse().ok()?;
        let xip_text = parts.next()?;
        let xip = if xip_text.is_empty() {
            Vec::new()
        } else {
            xip_text
                .split(',')
                .map(|x| x.parse().ok())
                .collect::<Option<Vec<i64>>>()?
        };
        // What PostgreSQL's pg_snapshot accepts: valid (non-zero low half) ids, xip ascending
        // within [xmin, xmax). Cursors are signed, so this guards against our own mistakes.
        let valid_id = |x: i64| x >= 1 && (x & 0xFFFF_FFFF) != 0;
        let ascending = xip.windows(2).all(|w| w[0] < w[1]);
        let in_range = xip.iter().all(|x| *x >= xmin && *x < xmax);
        (valid_id(xmin) && valid_id(xmax) && xmin <= xmax && ascending && in_range)
            .then_some(Snapshot { xmin, xmax, xip })
    }
}

/// The two change feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// New rows of `group_msgs`: what `/v1/sync` reports.
    Messages,
    /// New rows of `receipt_events`: what `/v1/receipts` reports.
    Receipts,
}

impl Feed {
    fn table(self) -> &'static str {
        match self {
            Feed::Messages => "group_msgs",
            Feed::Receipts => "receipt_events",
        }
    }
}

#[derive(QueryableByName)]
struct SnapshotText {
    #[diesel(sql_type = Text)]
    snapshot: String,
}

#[derive(QueryableByName)]
struct NextId {
    #[diesel(sql_type = BigInt)]
    next_id: i64,
}

/// What this connection can see now.
pub fn current_snapshot(conn: &mut AnyConnection, feed: Feed) -> QueryResult<Snapshot> {
    match conn {
        AnyConnection::Postgresql(c) => {
            let row: SnapshotText =
                diesel::sql_query("SELECT pg_current_snapshot()::text AS snapshot")
                    .get_result(c)?;
            Snapshot::parse(&row.snapshot).ok_or_else(|| {
                diesel::result::Error::DeserializationError(
                    format!("unexpected snapshot {}", row.snapshot).into(),
                )
            })
        }
        AnyConnection::Sqlite(c) => {
            let sql = format!(
                "SELECT COALESCE(MAX(id), 0) + 1 AS next_id FROM {}",
                feed.table()
            );
            let row: NextId = diesel::sql_query(sql).get_result(c)?;
            Ok(Snapshot {
                xmin: row.next_id,
                xmax: row.next_id,
                xip: Vec::new(),
            })
        }
    }
}

#[derive(QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRef {
    #[diesel(sql_type = BigInt)]
    pub group_id: i64,
}

#[derive(QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef {
    #[diesel(sql_type = BigInt)]
    pub group_id: i64,
    #[diesel(sql_type = BigInt)]
    pub msg_id: i64,
}

/// A change-feed query: `sql` holds its other conditions with binds `$1..$k`, and `{window}`
/// and `{limit}` where the window test and the limit go. The window binds follow the query's
/// own, so one function places and binds them for both engines.
struct WindowQuery<'a> {
    sql: &'a str,
    own_binds: usize,
    /// The change table's alias, whose rows the window selects.
    alias: &'a str,
}

impl WindowQuery<'_> {
    /// The SQL for this engine. PostgreSQL tests the writing transaction's id against both
    /// snapshots; SQLite compares row ids (commit order there).
    fn render(&self, conn: &AnyConnection) -> String {
        let n = self.own_binds + 1;
        let (window, limit_at) = match conn {
            AnyConnection::Postgresql(_) => {
                let col = format!("{}.tx", self.alias);
                (
                    format!(
                        "{col} >= ${a} AND {col} < ${b} \
                         AND NOT pg_visible_in_snapshot({col}::text::xid8, ${c}::text::pg_snapshot) \
                         AND pg_visible_in_snapshot({col}::text::xid8, ${d}::text::pg_snapshot)",
                        a = n,
                        b = n + 1,
                        c = n + 2,
                        d = n + 3
                    ),
                    n + 4,
                )
            }
            AnyConnection::Sqlite(_) => {
                let col = format!("{}.id", self.alias);
                (format!("{col} >= ${} AND {col} < ${}", n, n + 1), n + 2)
            }
        };
        self.sql
            .replace("{window}", &window)
            .replace("{limit}", &format!("${limit_at}"))
    }
}

/// Binds the window between `from` and `to` and the limit after the query's own binds, and
/// loads the rows on the connection's engine.
macro_rules! load_window {
    ($conn:expr, $query:expr, $from:expr, $to:expr, $limit:expr) => {
        match $conn {
            AnyConnection::Postgresql(c) => $query
                .bind::<BigInt, _>($from.xmin)
                .bind::<BigInt, _>($to.xmax)
                .bind::<Text, _>($from.to_text())
                .bind::<Text, _>($to.to_text())
                .bind::<BigInt, _>($limit)
                .load(c),
            AnyConnection::Sqlite(c) => $query
                .bind::<BigInt, _>($from.xmax)
                .bind::<BigInt, _>($to.xmax)
                .bind::<BigInt, _>($limit)
                .load(c),
        }
    };
}

/// Groups of `user_id` with messages committed between `from` and `to`, ordered by id, after
/// `after_group_id`.
pub fn changed_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    from: &Snapshot,
    to: &Snapshot,
    after_group_id: i64,
    limit: i64,
) -> QueryResult<Vec<GroupRef>> {
    let sql = WindowQuery {
        sql: "SELECT DISTINCT m.group_id AS group_id FROM group_msgs m \
              WHERE m.group_id IN (SELECT gm.group_id FROM group_members gm WHERE gm.user_id = $1) \
                AND m.group_id > $2 AND {window} \
              ORDER BY m.group_id LIMIT {limit}",
        own_binds: 2,
        alias: "m",
    }
    .render(conn);
    let query = diesel::sql_query(sql)
        .bind::<Text, _>(user_id)
        .bind::<BigInt, _>(after_group_id);
    load_window!(conn, query, from, to, limit)
}

/// Messages sent by `sender_id` whose receipts changed between `from` and `to` (someone else
/// acked a range covering them), ordered by (group, msg), after `after`. Only messages the
/// sender may still see: in groups they belong to, sent since they (last) joined.
pub fn changed_receipts(
    conn: &mut AnyConnection,
    sender_id: &str,
    from: &Snapshot,
    to: &Snapshot,
    after: MessageRef,
    limit: i64,
) -> QueryResult<Vec<MessageRef>> {
    let sql = WindowQuery {
        sql: "SELECT DISTINCT m.group_id AS group_id, m.msg_id AS msg_id \
              FROM receipt_events e \
              JOIN group_msgs m ON m.group_id = e.group_id AND m.sender_id = $1 \
                   AND m.msg_id > e.from_msg_id AND m.msg_id <= e.to_msg_id \
              JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = $2 \
                   AND m.msg_id > gm.joined_after_msg_id \
              WHERE e.reader_id <> $3 \
                AND (m.group_id > $4 OR (m.group_id = $5 AND m.msg_id > $6)) \
                AND {window} \
              ORDER BY m.group_id, m.msg_id LIMIT {limit}",
        own_binds: 6,
        alias: "e",
    }
    .render(conn);
    let query = diesel::sql_query(sql)
        .bind::<Text, _>(sender_id)
        .bind::<Text, _>(sender_id)
        .bind::<Text, _>(sender_id)
        .bind::<BigInt, _>(after.group_id)
        .bind::<BigInt, _>(after.group_id)
        .bind::<BigInt, _>(after.msg_id);
    load_window!(conn, query, from, to, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_text_round_trips_and_rejects_nonsense() {
        let s = Snapshot {
            xmin: 10,
            xmax: 15,
            xip: vec![11, 13],
        };
        assert_eq!(s.to_text(), "10:15:11,13");
        assert_eq!(Snapshot::parse("10:15:11,13"), Some(s));
        assert_eq!(Snapshot::parse("7:7:").unwrap().xip, Vec::<i64>::new());
        assert_eq!(Snapshot::parse("9:5:"), None);
        assert_eq!(Snapshot::parse("1:5:7"), None);
        assert_eq!(Snapshot::parse("a:b:"), None);
        assert_eq!(Snapshot::parse("-1:5:"), None);
        assert_eq!(Snapshot::parse("0:0:"), None);
        assert_eq!(Snapshot::parse("1:9:7,3"), None, "xip must ascend");
        assert_eq!(Snapshot::parse("4294967296:4294967296:"), None);
    }
}
