//! Change feeds for long-polls: what committed between two snapshots.
//!
//! A [`Snapshot`] says which writes a reader could see. The changes between snapshots `from`
//! and `to` are the rows visible in `to` and not in `from`. On PostgreSQL each feed row stores
//! the id of the transaction that wrote it (`tx`) and visibility is PostgreSQL's own
//! (`pg_visible_in_snapshot`), so a row that took a low id but committed late is still caught
//! by the next window. On SQLite one writer commits in id order, so a snapshot is the next row
//! id of each feed table.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

use super::raw_sql::RawSql;
use super::{AnyConnection, Engine, MultiBackend};

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
    // Every long-poll and feed read starts here, so the statements stay prepared.
    if let AnyConnection::Postgresql(_) = conn {
        let rows: Vec<SnapshotText> = RawSql::default()
            .sql("SELECT pg_current_snapshot()::text AS snapshot")
            .keep_prepared()
            .load(conn)?;
        return parse_snapshot_text(rows.first().map(|row| row.snapshot.as_str()));
    }
    let rows: Vec<NextIds> = RawSql::default()
        .sql(
            "SELECT (SELECT COALESCE(MAX(id), 0) + 1 FROM group_msgs) AS group_msgs, \
                    (SELECT COALESCE(MAX(id), 0) + 1 FROM receipt_events) AS receipt_events, \
                    (SELECT COALESCE(MAX(id), 0) + 1 FROM member_events) AS member_events",
        )
        .keep_prepared()
        .load(conn)?;
    let row = rows
        .into_iter()
        .next()
        .ok_or(diesel::result::Error::NotFound)?;
    Ok(Snapshot::Sqlite(FeedMarks {
        group_msgs: row.group_msgs,
        receipt_events: row.receipt_events,
        member_events: row.member_events,
    }))
}

/// Where a window of changes ends.
#[derive(Debug, Clone, Copy)]
pub enum WindowEnd<'a> {
    /// At a snapshot an earlier read took: the window a cursor is paging through.
    At(&'a Snapshot),
    /// At what the read itself sees: a new window. On PostgreSQL the reading statement's own
    /// snapshot ends it, so taking it costs no statement of its own.
    Now,
}

/// The end of a window as a feed query writes it.
#[derive(Debug, Clone, Copy)]
enum QueryEnd<'a> {
    Snapshot(&'a Snapshot),
    /// The statement's own snapshot (PostgreSQL only).
    Statement,
}

/// Appends the SQL condition "row `alias` of `table` committed after `from` and by `to`". The
/// snapshots are bound, not written into the text, so the text is the same on every call and
/// the statement stays prepared. Snapshots of the other engine select nothing.
fn window(query: RawSql, alias: &str, table: FeedTable, from: &Snapshot, to: QueryEnd) -> RawSql {
    debug_assert!(
        !matches!((from, to), (Snapshot::Sqlite(_), QueryEnd::Statement)),
        "SQLite has no statement snapshot to end a window at: read_end takes its snapshot first"
    );
    match (from, to) {
        (
            Snapshot::Postgres { xmin, .. },
            QueryEnd::Snapshot(to @ Snapshot::Postgres { xmax, .. }),
        ) => not_visible_in(query, alias, *xmin, from)
            .sql(&format!(" AND {alias}.tx < "))
            .int(*xmax)
            .sql(&format!(
                " AND pg_visible_in_snapshot({alias}.tx::text::xid8, CAST("
            ))
            .text(&to.to_text())
            .sql(" AS pg_snapshot))"),
        // Every row a statement reads was written by a transaction its own snapshot sees, so
        // "committed by the end" holds without a condition. That needs a reading transaction
        // that wrote no feed rows itself (its own rows it reads, yet its snapshot does not
        // list it as seen, so the next window would report them again): feed reads run as
        // statements of their own, never inside a write.
        (Snapshot::Postgres { xmin, .. }, QueryEnd::Statement) => {
            not_visible_in(query, alias, *xmin, from)
        }
        (Snapshot::Sqlite(from), QueryEnd::Snapshot(Snapshot::Sqlite(to))) => query
            .sql(&format!("{alias}.id >= "))
            .int(from.of(table))
            .sql(&format!(" AND {alias}.id < "))
            .int(to.of(table)),
        _ => query.sql("1 = 0"),
    }
}

/// PostgreSQL: "row `alias` was written by a transaction that `from` does not see". `xmin` is
/// `from`'s: it sees every older transaction, and the bound lets the `tx` index narrow the
/// scan.
fn not_visible_in(query: RawSql, alias: &str, xmin: i64, from: &Snapshot) -> RawSql {
    query
        .sql(&format!("{alias}.tx >= "))
        .int(xmin)
        .sql(&format!(
            " AND NOT pg_visible_in_snapshot({alias}.tx::text::xid8, CAST("
        ))
        .text(&from.to_text())
        .sql(" AS pg_snapshot))")
}

/// A feed read's window end, resolved for its engine: a snapshot (a paging cursor's, copied
/// because the read returns its window's end, or one taken just now), or the reading
/// statement's own, which it returns (PostgreSQL).
enum ReadEnd {
    At(Snapshot),
    Statement,
}

fn read_end(conn: &mut AnyConnection, end: WindowEnd) -> QueryResult<ReadEnd> {
    Ok(match (end, &*conn) {
        (WindowEnd::At(snapshot), _) => ReadEnd::At(snapshot.clone()),
        (WindowEnd::Now, AnyConnection::Postgresql(_)) => ReadEnd::Statement,
        // SQLite's snapshot is the feed tables' next row ids: with one writer committing in
        // id order, ids read just before the query bound what it reads.
        (WindowEnd::Now, AnyConnection::Sqlite(_)) => ReadEnd::At(current_snapshot(conn)?),
    })
}

/// The order of each feed's rows, by its output columns. The feed's own query and, when it is
/// wrapped, the wrapper (whose output columns are the feed's and `snapshot`) order by the same
/// text: pages are cut and continued in this order.
const CHANGED_GROUPS_ORDER: &str = " ORDER BY group_id";
const CHANGED_RECEIPTS_ORDER: &str = " ORDER BY group_id, msg_id";

/// Wraps a feed query that ends at the statement's snapshot so that it returns that snapshot
/// too: in a `snapshot` column of every row, and in a row of its own (its other columns null)
/// when the window holds no changes. `order` is the feed's.
fn with_statement_snapshot(feed_query: impl FnOnce(RawSql) -> RawSql, order: &str) -> RawSql {
    let query = RawSql::default().sql(
        "SELECT now_snapshot.snapshot AS snapshot, window_rows.* \
         FROM (SELECT pg_current_snapshot()::text AS snapshot) now_snapshot LEFT JOIN (",
    );
    feed_query(query).sql(") window_rows ON true").sql(order)
}

/// A snapshot PostgreSQL gave as text (`pg_current_snapshot()::text`); an error when the
/// statement returned no row or a text this module cannot read.
fn parse_snapshot_text(text: Option<&str>) -> QueryResult<Snapshot> {
    let text = text.ok_or(diesel::result::Error::NotFound)?;
    Snapshot::parse(text).ok_or_else(|| {
        diesel::result::Error::DeserializationError(format!("unexpected snapshot {text}").into())
    })
}

/// A row of a feed read wrapped by [`with_statement_snapshot`]: the snapshot, and the feed's
/// own columns (null in the row of an empty window).
trait WithSnapshot: QueryableByName<MultiBackend> + 'static {
    type Item;
    fn snapshot(&self) -> &str;
    fn item(self) -> Option<Self::Item>;
}

/// A changed group, with the snapshot of the statement that found it.
#[derive(QueryableByName)]
struct GroupAt {
    #[diesel(sql_type = Text)]
    snapshot: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    group_id: Option<i64>,
}

impl WithSnapshot for GroupAt {
    type Item = GroupRef;
    fn snapshot(&self) -> &str {
        &self.snapshot
    }
    fn item(self) -> Option<GroupRef> {
        Some(GroupRef {
            group_id: self.group_id?,
        })
    }
}

/// A message whose receipts changed, with the snapshot of the statement that found it.
#[derive(QueryableByName)]
struct MessageAt {
    #[diesel(sql_type = Text)]
    snapshot: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    group_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    msg_id: Option<i64>,
}

impl WithSnapshot for MessageAt {
    type Item = MessageRef;
    fn snapshot(&self) -> &str {
        &self.snapshot
    }
    fn item(self) -> Option<MessageRef> {
        Some(MessageRef {
            group_id: self.group_id?,
            msg_id: self.msg_id?,
        })
    }
}

/// Runs a feed query over the window ending at `end` and returns the end's snapshot with the
/// rows: `query` writes the feed's statement from a start and an end; `order` is the feed's
/// order.
fn read_feed<R: WithSnapshot>(
    conn: &mut AnyConnection,
    end: WindowEnd,
    order: &str,
    query: impl Fn(RawSql, QueryEnd) -> RawSql,
) -> QueryResult<(Snapshot, Vec<R::Item>)>
where
    R::Item: QueryableByName<MultiBackend> + 'static,
{
    match read_end(conn, end)? {
        ReadEnd::At(to) => {
            let items = query(RawSql::default(), QueryEnd::Snapshot(&to)).load(conn)?;
            Ok((to, items))
        }
        ReadEnd::Statement => {
            let rows: Vec<R> =
                with_statement_snapshot(|start| query(start, QueryEnd::Statement), order)
                    .load(conn)?;
            let to = parse_snapshot_text(rows.first().map(|r| r.snapshot()))?;
            Ok((to, rows.into_iter().filter_map(R::item).collect()))
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

/// Groups with changes for `user_id` committed after `from` and by `end`, ordered by id, after
/// `after_group_id`: messages sent since they joined, and changes to their own membership
/// state (read elsewhere, joined, left), except reads by the polling device itself, which
/// already knows of them. Returns the snapshot that ends the window with them.
pub fn changed_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    device_column: &str,
    from: &Snapshot,
    end: WindowEnd,
    after_group_id: i64,
    limit: i64,
) -> QueryResult<(Snapshot, Vec<GroupRef>)> {
    read_feed::<GroupAt>(conn, end, CHANGED_GROUPS_ORDER, |start, to| {
        changed_groups_query(
            start,
            user_id,
            device_column,
            from,
            to,
            after_group_id,
            limit,
        )
    })
}

fn changed_groups_query(
    start: RawSql,
    user_id: &str,
    device_column: &str,
    from: &Snapshot,
    to: QueryEnd,
    after_group_id: i64,
    limit: i64,
) -> RawSql {
    let query = start
        .sql(
            "SELECT group_id FROM ( \
               SELECT m.group_id AS group_id FROM group_msgs m \
                 JOIN group_members gm ON gm.group_id = m.group_id AND gm.user_id = ",
        )
        .text(user_id)
        .sql(" WHERE m.msg_id > gm.joined_after_msg_id AND ");
    let query = window(query, "m", FeedTable::GroupMsgs, from, to)
        .sql(" UNION SELECT e.group_id AS group_id FROM member_events e WHERE e.user_id = ")
        .text(user_id)
        .sql(" AND NOT (e.kind = 'read' AND e.device_id = ")
        .text(device_column)
        .sql(") AND ");
    window(query, "e", FeedTable::MemberEvents, from, to)
        .sql(" ) changed WHERE group_id > ")
        .int(after_group_id)
        .sql(CHANGED_GROUPS_ORDER)
        .sql(" LIMIT ")
        .int(limit)
        .keep_prepared()
}

/// Messages sent by `sender_id` whose receipts changed after `from` and by `end` (someone
/// else acked a range covering them), ordered by (group, msg), after `after`. Only messages the
/// sender may still see: in groups they belong to, sent since they (last) joined. Returns the
/// snapshot that ends the window with them.
pub fn changed_receipts(
    conn: &mut AnyConnection,
    sender_id: &str,
    from: &Snapshot,
    end: WindowEnd,
    after: MessageRef,
    limit: i64,
) -> QueryResult<(Snapshot, Vec<MessageRef>)> {
    read_feed::<MessageAt>(conn, end, CHANGED_RECEIPTS_ORDER, |start, to| {
        changed_receipts_query(start, sender_id, from, to, after, limit)
    })
}

fn changed_receipts_query(
    start: RawSql,
    sender_id: &str,
    from: &Snapshot,
    to: QueryEnd,
    after: MessageRef,
    limit: i64,
) -> RawSql {
    let query = start
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
        .sql(")) AND ");
    window(query, "e", FeedTable::ReceiptEvents, from, to)
        .sql(CHANGED_RECEIPTS_ORDER)
        .sql(" LIMIT ")
        .int(limit)
        .keep_prepared()
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
    fn a_new_window_ends_at_the_statements_own_snapshot_and_returns_it() {
        let sql = |from: &Snapshot, user: &str| {
            with_statement_snapshot(
                |start| changed_groups_query(start, user, "", from, QueryEnd::Statement, 0, 10),
                CHANGED_GROUPS_ORDER,
            )
            .as_text()
        };
        let text = sql(&pg(5, 9, vec![6]), "bob");
        assert_eq!(
            text,
            sql(&pg(20, 30, vec![21]), "ann"),
            "one text for every call"
        );
        assert!(
            text.starts_with(
                "SELECT now_snapshot.snapshot AS snapshot, window_rows.* FROM (SELECT \
                 pg_current_snapshot()::text AS snapshot) now_snapshot LEFT JOIN (SELECT"
            ),
            "{text}"
        );
        assert!(text.ends_with(") window_rows ON true ORDER BY group_id"));
        assert!(
            text.contains("m.tx >= $2 AND NOT pg_visible_in_snapshot(m.tx::text::xid8, CAST($3"),
            "{text}"
        );
        assert!(
            !text.contains("m.tx <"),
            "no upper bound: the statement sees only what committed"
        );
    }

    #[test]
    fn windows_bind_the_snapshots_so_the_text_never_changes() {
        let from = pg(5, 9, vec![6]);
        let to = pg(7, 12, vec![]);
        let end = QueryEnd::Snapshot(&to);
        let start = RawSql::default;
        let sql = changed_groups_query(start(), "bob", "phone", &from, end, 0, 10).as_text();
        let other = changed_groups_query(start(), "ann", "", &pg(20, 30, vec![21, 22]), end, 4, 10);
        assert_eq!(
            sql,
            other.as_text(),
            "one text for every snapshot and caller"
        );
        assert!(
            sql.contains(
                "m.tx >= $2 AND NOT pg_visible_in_snapshot(m.tx::text::xid8, CAST($3 AS \
                 pg_snapshot)) AND m.tx < $4 AND pg_visible_in_snapshot(m.tx::text::xid8, \
                 CAST($5 AS pg_snapshot))"
            ),
            "{sql}"
        );
        assert!(
            !sql.contains("bob") && !sql.contains("5:9"),
            "values are bound, never inlined"
        );
        let sqlite = Snapshot::Sqlite(FeedMarks {
            group_msgs: 3,
            receipt_events: 1,
            member_events: 8,
        });
        let within = window(
            RawSql::default(),
            "e",
            FeedTable::MemberEvents,
            &sqlite,
            QueryEnd::Snapshot(&sqlite),
        );
        assert_eq!(within.as_text(), "e.id >= $1 AND e.id < $2");
        let mixed = window(
            RawSql::default(),
            "m",
            FeedTable::GroupMsgs,
            &from,
            QueryEnd::Snapshot(&sqlite),
        );
        assert_eq!(mixed.as_text(), "1 = 0");
    }
}
