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

/// The query behind [`changed_groups`]; binds: $1 user, $2 the polling device ('' for the
/// default one), $3 the group to continue after, $4 the limit.
fn changed_groups_sql(from: &Snapshot, to: &Snapshot) -> String {
    format!(
        "SELECT group_id FROM ( \
           SELECT m.group_id AS group_id FROM group_msgs m \
             JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = $1 \
            WHERE m.msg_id > gm.joined_after_msg_id AND {messages} \
           UNION \
           SELECT e.group_id AS group_id FROM member_events e \
            WHERE e.user_id = $1 AND NOT (e.kind = 'read' AND e.device_id = $2) AND {members} \
         ) changed \
         WHERE group_id > $3 ORDER BY group_id LIMIT $4",
        messages = window("m", FeedTable::GroupMsgs, from, to),
        members = window("e", FeedTable::MemberEvents, from, to),
    )
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
    diesel::sql_query(changed_groups_sql(from, to))
        .bind::<Text, _>(user_id)
        .bind::<Text, _>(device_column)
        .bind::<BigInt, _>(after_group_id)
        .bind::<BigInt, _>(limit)
        .load(conn)
}

/// The query behind [`changed_receipts`]; binds: $1 sender, $2 and $3 the (group, msg) to
/// continue after, $4 the limit.
fn changed_receipts_sql(from: &Snapshot, to: &Snapshot) -> String {
    format!(
        "SELECT DISTINCT m.group_id AS group_id, m.msg_id AS msg_id \
         FROM receipt_events e \
         JOIN group_msgs m ON m.group_id = e.group_id AND m.sender_id = $1 \
              AND m.msg_id > e.from_msg_id AND m.msg_id <= e.to_msg_id \
         JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = $1 \
              AND m.msg_id > gm.joined_after_msg_id \
         WHERE e.reader_id <> $1 \
           AND (m.group_id > $2 OR (m.group_id = $2 AND m.msg_id > $3)) \
           AND {window} \
         ORDER BY m.group_id, m.msg_id LIMIT $4",
        window = window("e", FeedTable::ReceiptEvents, from, to),
    )
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
    diesel::sql_query(changed_receipts_sql(from, to))
        .bind::<Text, _>(sender_id)
        .bind::<BigInt, _>(after.group_id)
        .bind::<BigInt, _>(after.msg_id)
        .bind::<BigInt, _>(limit)
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

    /// SQLite numbers `$n` parameters by their first appearance, PostgreSQL by n: the two
    /// agree only when each query introduces $1, $2, … in order, with no gap.
    fn placeholders_in_order(sql: &str) -> usize {
        let mut seen: Vec<usize> = Vec::new();
        let mut rest = sql;
        while let Some(at) = rest.find('$') {
            let digits: String = rest[at + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            rest = &rest[at + 1 + digits.len()..];
            let n: usize = digits.parse().expect("a numbered placeholder");
            if !seen.contains(&n) {
                assert_eq!(n, seen.len() + 1, "placeholder ${n} out of order in {sql}");
                seen.push(n);
            }
        }
        seen.len()
    }

    #[test]
    fn feed_queries_number_their_binds_in_order_on_both_engines() {
        let sqlite = Snapshot::Sqlite(FeedMarks {
            group_msgs: 1,
            receipt_events: 1,
            member_events: 1,
        });
        for snapshot in [pg(5, 9, vec![6]), sqlite] {
            assert_eq!(
                placeholders_in_order(&changed_groups_sql(&snapshot, &snapshot)),
                4
            );
            assert_eq!(
                placeholders_in_order(&changed_receipts_sql(&snapshot, &snapshot)),
                4
            );
        }
    }
}
