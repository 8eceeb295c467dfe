//! Change feeds for long-polls: what committed between two snapshots.
//!
//! A [`Snapshot`] says which writes a reader could see. The changes between snapshots `from`
//! and `to` are the rows visible in `to` and not in `from`. On PostgreSQL each feed row stores
//! the id of the transaction that wrote it (`tx`) and visibility is PostgreSQL's own
//! (`pg_visible_in_snapshot`), so a row that took a low id but committed late is still caught
//! by the next window. On SQLite one writer commits in id order, so a snapshot is the next row
//! id of each feed table.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};

use super::raw_sql::RawSql;
use super::{AnyConnection, Engine};

/// What a reader could see: PostgreSQL's `pg_snapshot`, or SQLite's next feed row ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    Postgres {
        xmin: i64,
        xmax: i64,
        /// Transactions in progress when the snapshot was taken.
        xip: Vec<i64>,
    },
    Sqlite(FeedMarks),
}

/// SQLite: the next row id of each feed table when the snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedMarks {
    pub group_msgs: i64,
    pub receipt_events: i64,
    pub member_events: i64,
}

/// The tables change feeds read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FeedTable {
    GroupMsgs,
    ReceiptEvents,
    MemberEvents,
}

impl FeedMarks {
    fn of(&self, table: FeedTable) -> i64 {
        match table {
            FeedTable::GroupMsgs => self.group_msgs,
            FeedTable::ReceiptEvents => self.receipt_events,
            FeedTable::MemberEvents => self.member_events,
        }
    }
}

impl Snapshot {
    pub fn engine(&self) -> Engine {
        match self {
            Snapshot::Postgres { .. } => Engine::Postgres,
            Snapshot::Sqlite(_) => Engine::Sqlite,
        }
    }

    /// `xmin:xmax:xip,…` (PostgreSQL's own text form) or `s:<msgs>,<receipts>,<members>`.
    pub fn to_text(&self) -> String {
        match self {
            Snapshot::Postgres { xmin, xmax, xip } => {
                let xip: Vec<String> = xip.iter().map(i64::to_string).collect();
                format!("{xmin}:{xmax}:{}", xip.join(","))
            }
            Snapshot::Sqlite(m) => {
                format!(
                    "s:{},{},{}",
                    m.group_msgs, m.receipt_events, m.member_events
                )
            }
        }
    }

    pub fn parse(text: &str) -> Option<Snapshot> {
        if let Some(marks) = text.strip_prefix("s:") {
            let ids: Vec<i64> = marks
                .split(',')
                .map(|x| x.parse().ok().filter(|v| *v >= 1))
                .collect::<Option<_>>()?;
            let [group_msgs, receipt_events, member_events] = ids[..] else {
                return None;
            };
            return Some(Snapshot::Sqlite(FeedMarks {
                group_msgs,
                receipt_events,
                member_events,
            }));
        }
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
            .then_some(Snapshot::Postgres { xmin, xmax, xip })
    }
}

/// The two change feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// New messages in the caller's groups and changes to their own membership state: what
    /// `/v1/sync` reports.
    Messages,
    /// New rows of `receipt_events`: what `/v1/receipts` reports.
    Receipts,
}

#[derive(QueryableByName)]
struct SnapshotText {
    #[diesel(sql_type = Text)]
    snapshot: String,
}

#[derive(QueryableByName)]
struct NextIds {
    #[diesel(sql_type = BigInt)]
    group_msgs: i64,
    #[diesel(sql_type = BigInt)]
    receipt_events: i64,
    #[diesel(sql_type = BigInt)]
    member_events: i64,
}

/// What this connection can see now.
pub fn current_snapshot(conn: &mut AnyConnection) -> QueryResult<Snapshot> {
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
            let row: NextIds = diesel::sql_query(
                "SELECT (SELECT COALESCE(MAX(id), 0) + 1 FROM group_msgs) AS group_msgs, \
                        (SELECT COALESCE(MAX(id), 0) + 1 FROM receipt_events) AS receipt_events, \
                        (SELECT COALESCE(MAX(id), 0) + 1 FROM member_events) AS member_events",
            )
            .get_result(c)?;
            Ok(Snapshot::Sqlite(FeedMarks {
                group_msgs: row.group_msgs,
                receipt_events: row.receipt_events,
                member_events: row.member_events,
            }))
        }
    }
}

/// The SQL condition "row `alias` of `table` committed after `from` and by `to`". Snapshots
/// hold only integers, so they are written into the SQL as literals and the query's own bind
/// parameters are not shifted by them. Snapshots of the other engine select nothing.
fn window(alias: &str, table: FeedTable, from: &Snapshot, to: &Snapshot) -> String {
    match (from, to) {
        (Snapshot::Postgres { xmin, .. }, Snapshot::Postgres { xmax, .. }) => format!(
            "{alias}.tx >= {xmin} AND {alias}.tx < {xmax} \
             AND NOT pg_visible_in_snapshot({alias}.tx::text::xid8, '{from}'::pg_snapshot) \
             AND pg_visible_in_snapshot({alias}.tx::text::xid8, '{to}'::pg_snapshot)",
            from = from.to_text(),
            to = to.to_text(),
        ),
        (Snapshot::Sqlite(from), Snapshot::Sqlite(to)) => format!(
            "{alias}.id >= {} AND {alias}.id < {}",
            from.of(table),
            to.of(table)
        ),
        _ => "1 = 0".to_owned(),
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

/// Groups with changes for `user_id` committed between `from` and `to`, ordered by id, after
/// `after_group_id`: messages sent since they joined, and changes to their own membership
/// state (read elsewhere, joined, left), except reads by the polling device itself, which
/// already knows of them.
pub fn changed_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    device_column: &str,
    from: &Snapshot,
    to: &Snapshot,
    after_group_id: i64,
    limit: i64,
) -> QueryResult<Vec<GroupRef>> {
    changed_groups_query(user_id, device_column, from, to, after_group_id, limit).load(conn)
}

fn changed_groups_query(
    user_id: &str,
    device_column: &str,
    from: &Snapshot,
    to: &Snapshot,
    after_group_id: i64,
    limit: i64,
) -> RawSql {
    RawSql::default()
        .sql(
            "SELECT group_id FROM ( \
               SELECT m.group_id AS group_id FROM group_msgs m \
                 JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = ",
        )
        .text(user_id)
        .sql(" WHERE m.msg_id > gm.joined_after_msg_id AND ")
        .sql(&window("m", FeedTable::GroupMsgs, from, to))
        .sql(" UNION SELECT e.group_id AS group_id FROM member_events e WHERE e.user_id = ")
        .text(user_id)
        .sql(" AND NOT (e.kind = 'read' AND e.device_id = ")
        .text(device_column)
        .sql(") AND ")
        .sql(&window("e", FeedTable::MemberEvents, from, to))
        .sql(" ) changed WHERE group_id > ")
        .int(after_group_id)
        .sql(" ORDER BY group_id LIMIT ")
        .int(limit)
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
    RawSql::default()
        .sql(
            "SELECT DISTINCT m.group_id AS group_id, m.msg_id AS msg_id \
             FROM receipt_events e \
             JOIN group_msgs m ON m.group_id = e.group_id AND m.sender_id = ",
        )
        .text(sender_id)
        .sql(
            " AND m.msg_id > e.from_msg_id AND m.msg_id <= e.to_msg_id AND m.kind = 'message' \
             JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = ",
        )
        .text(sender_id)
        .sql(" AND m.msg_id > gm.joined_after_msg_id WHERE e.reader_id <> ")
        .text(sender_id)
        .sql(" AND (m.group_id > ")
        .int(after.group_id)
        .sql(" OR (m.group_id = ")
        .int(after.group_id)
        .sql(" AND m.msg_id > ")
        .int(after.msg_id)
        .sql(")) AND ")
        .sql(&window("e", FeedTable::ReceiptEvents, from, to))
        .sql(" ORDER BY m.group_id, m.msg_id LIMIT ")
        .int(limit)
        .load(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(xmin: i64, xmax: i64, xip: Vec<i64>) -> Snapshot {
        Snapshot::Postgres { xmin, xmax, xip }
    }

    #[test]
    fn snapshot_text_round_trips_and_rejects_nonsense() {
        let s = pg(10, 15, vec![11, 13]);
        assert_eq!(s.to_text(), "10:15:11,13");
        assert_eq!(Snapshot::parse("10:15:11,13"), Some(s));
        assert_eq!(Snapshot::parse("7:7:"), Some(pg(7, 7, vec![])));
        assert_eq!(Snapshot::parse("9:5:"), None);
        assert_eq!(Snapshot::parse("1:5:7"), None);
        assert_eq!(Snapshot::parse("a:b:"), None);
        assert_eq!(Snapshot::parse("-1:5:"), None);
        assert_eq!(Snapshot::parse("0:0:"), None);
        assert_eq!(Snapshot::parse("1:9:7,3"), None, "xip must ascend");
        assert_eq!(Snapshot::parse("4294967296:4294967296:"), None);
        let sqlite = Snapshot::Sqlite(FeedMarks {
            group_msgs: 4,
            receipt_events: 1,
            member_events: 9,
        });
        assert_eq!(Snapshot::parse(&sqlite.to_text()), Some(sqlite));
        assert_eq!(Snapshot::parse("s:4,1"), None);
        assert_eq!(Snapshot::parse("s:4,1,0"), None);
        assert_eq!(Snapshot::parse("s:4,1,x"), None);
    }

    #[test]
    fn windows_hold_only_the_snapshots_numbers() {
        let from = pg(5, 9, vec![6]);
        let to = pg(7, 12, vec![]);
        let sql = changed_groups_query("bob", "phone", &from, &to, 0, 10);
        assert!(sql.as_text().contains("'5:9:6'::pg_snapshot"));
        assert!(sql.as_text().contains("'7:12:'::pg_snapshot"));
        assert!(
            !sql.as_text().contains("bob"),
            "user ids are bound, never inlined"
        );
        let sqlite = Snapshot::Sqlite(FeedMarks {
            group_msgs: 3,
            receipt_events: 1,
            member_events: 8,
        });
        assert_eq!(
            window("e", FeedTable::MemberEvents, &sqlite, &sqlite),
            "e.id >= 8 AND e.id < 8"
        );
        assert_eq!(window("m", FeedTable::GroupMsgs, &from, &sqlite), "1 = 0");
    }
}
