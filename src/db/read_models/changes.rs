//! Change feeds for long-polls: what was published between two watermarks.
//!
//! Each feed row carries the position publication stamped on it (`pos`, see
//! [`crate::db::engine::publish`]): the feed clock's value at the publication that found it
//! committed. Publications take turns, so what any reader sees published is a prefix of the clock.
//! A [`Watermark`] is a clock value a reader has read up to: the changes between watermarks `from`
//! and `to` are the rows with `from < pos <= to`, and none can appear there later.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable};

use crate::db::engine::distribution::on_citus;
use crate::db::engine::publish::ClockValue;
use crate::db::engine::raw_sql::RawSql;
use crate::db::{AnyConnection, MultiBackend};

/// A feed clock value: every change published at or below it has been seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Watermark(i64);

impl Watermark {
    pub fn to_text(self) -> String {
        self.0.to_string()
    }

    /// A clock value as [`Watermark::to_text`] writes it; None for anything else.
    pub fn parse(text: &str) -> Option<Watermark> {
        let value: i64 = text.parse().ok()?;
        (value >= 0 && value.to_string() == text).then_some(Watermark(value))
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

/// The newest watermark a reader may take: every change published at or below it is visible
/// to the reader's next statement.
///
/// On one node that is the clock's value. On Citus a publication commits node by node, so a reader
/// may see the clock moved while the rows it stamped on another node are not visible yet. But each
/// publication updates the clock on every node, and so waits there for the one before it to commit:
/// a reader that sees value `c` anywhere knows publication `c - 1` committed everywhere. It reads
/// up to `c - 1`; the publication after a busy one closes it (see [`crate::db::engine::publish`]),
/// so a change never waits for the next write to become readable.
pub fn current_watermark(conn: &mut AnyConnection) -> QueryResult<Watermark> {
    // Every long-poll without a cursor starts here, so the statement stays prepared.
    let rows: Vec<ClockValue> = RawSql::default()
        .sql(CLOCK_NOW)
        .keep_prepared()
        .load(conn)?;
    let published = rows
        .first()
        .map(|row| row.published)
        .ok_or(diesel::result::Error::NotFound)?;
    match on_citus(conn) {
        true => Ok(Watermark((published - 1).max(0))),
        false => Ok(Watermark(published)),
    }
}

/// The clock's value as a subquery: what has been published when the statement runs.
const CLOCK_NOW: &str = "SELECT published FROM feed_clock WHERE clock_id = 0";

/// Where a window of changes ends.
#[derive(Debug, Clone, Copy)]
pub enum WindowEnd {
    /// At a watermark an earlier read took: the window a cursor is paging through.
    At(Watermark),
    /// At what the read itself sees: a new window. On one node the reading statement reads
    /// the clock in its own snapshot, so taking it costs no statement of its own; on Citus,
    /// where one statement's reads on different nodes share no snapshot, the clock is read
    /// first ([`current_watermark`]).
    Now,
}

/// Appends the SQL condition "row `alias` was published after `from` and by `to`". The
/// watermarks are bound, not written into the text, so the text is the same on every call
/// and the statement stays prepared.
fn window(query: RawSql, alias: &str, from: Watermark, to: WindowEnd) -> RawSql {
    let query = query.sql(&format!("{alias}.pos > ")).int(from.0);
    match to {
        WindowEnd::At(to) => query.sql(&format!(" AND {alias}.pos <= ")).int(to.0),
        // In one statement's snapshot no row has a position above the clock: publication
        // stamps rows and moves the clock in one transaction.
        WindowEnd::Now => query,
    }
}

/// The order of each feed's rows, by its output columns. The feed's own query and, when it is
/// wrapped, the wrapper (whose output columns are the feed's and `watermark`) order by the
/// same text: pages are cut and continued in this order.
const CHANGED_GROUPS_ORDER: &str = " ORDER BY group_id";
const CHANGED_RECEIPTS_ORDER: &str = " ORDER BY group_id, msg_id";

/// Wraps a feed query that ends at the clock the statement sees so that it returns that
/// value too: in a `watermark` column of every row, and in a row of its own (its other
/// columns null) when the window holds no changes. `order` is the feed's.
fn with_clock(feed_query: impl FnOnce(RawSql) -> RawSql, order: &str) -> RawSql {
    let query = RawSql::default().sql(&format!(
        "SELECT clock.published AS watermark, window_rows.* FROM ({CLOCK_NOW}) clock LEFT JOIN ("
    ));
    feed_query(query).sql(") window_rows ON 1 = 1").sql(order)
}

/// A row of a feed read wrapped by [`with_clock`]: the clock, and the feed's own columns
/// (null in the row of an empty window).
trait WithWatermark: QueryableByName<MultiBackend> + 'static {
    type Item;
    fn watermark(&self) -> Watermark;
    fn item(self) -> Option<Self::Item>;
}

/// A changed group, with the clock of the statement that found it.
#[derive(QueryableByName)]
struct GroupAt {
    #[diesel(sql_type = BigInt)]
    watermark: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    group_id: Option<i64>,
}

impl WithWatermark for GroupAt {
    type Item = GroupRef;
    fn watermark(&self) -> Watermark {
        Watermark(self.watermark)
    }
    fn item(self) -> Option<GroupRef> {
        Some(GroupRef {
            group_id: self.group_id?,
        })
    }
}

/// A message whose receipts changed, with the clock of the statement that found it.
#[derive(QueryableByName)]
struct MessageAt {
    #[diesel(sql_type = BigInt)]
    watermark: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    group_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    msg_id: Option<i64>,
}

impl WithWatermark for MessageAt {
    type Item = MessageRef;
    fn watermark(&self) -> Watermark {
        Watermark(self.watermark)
    }
    fn item(self) -> Option<MessageRef> {
        Some(MessageRef {
            group_id: self.group_id?,
            msg_id: self.msg_id?,
        })
    }
}

/// Runs a feed query over the window ending at `end` and returns the end's watermark with the
/// rows: `query` writes the feed's statement from a start and an end; `order` is the feed's
/// order.
fn read_feed<R: WithWatermark>(
    conn: &mut AnyConnection,
    end: WindowEnd,
    order: &str,
    query: impl Fn(RawSql, WindowEnd) -> RawSql,
) -> QueryResult<(Watermark, Vec<R::Item>)>
where
    R::Item: QueryableByName<MultiBackend> + 'static,
{
    match end {
        WindowEnd::At(to) => {
            let items = query(RawSql::default(), end).load(conn)?;
            Ok((to, items))
        }
        WindowEnd::Now if on_citus(conn) => {
            let to = current_watermark(conn)?;
            let items = query(RawSql::default(), WindowEnd::At(to)).load(conn)?;
            Ok((to, items))
        }
        WindowEnd::Now => {
            let rows: Vec<R> = with_clock(|start| query(start, end), order).load(conn)?;
            let to = rows
                .first()
                .map(R::watermark)
                .ok_or(diesel::result::Error::NotFound)?;
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

/// Groups with changes for `user_id` published after `from` and by `end`, ordered by id, after
/// `after_group_id`: messages sent since they joined, and changes to their own membership
/// state (read elsewhere, joined, left), except reads by the polling device itself, which
/// already knows of them. Returns the watermark that ends the window with them.
pub fn changed_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    device_column: &str,
    from: Watermark,
    end: WindowEnd,
    after_group_id: i64,
    limit: i64,
) -> QueryResult<(Watermark, Vec<GroupRef>)> {
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
    from: Watermark,
    to: WindowEnd,
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
    let query = window(query, "m", from, to)
        .sql(" UNION SELECT e.group_id AS group_id FROM member_events e WHERE e.user_id = ")
        .text(user_id)
        .sql(" AND NOT (e.kind = 'read' AND e.device_id = ")
        .text(device_column)
        .sql(") AND ");
    window(query, "e", from, to)
        .sql(" ) changed WHERE group_id > ")
        .int(after_group_id)
        .sql(CHANGED_GROUPS_ORDER)
        .sql(" LIMIT ")
        .int(limit)
        .keep_prepared()
}

/// Messages sent by `sender_id` whose receipts changed (published) after `from` and by `end`
/// (someone else acked a range covering them), ordered by (group, msg), after `after`. Only
/// messages the sender may still see: in groups they belong to, sent since they (last) joined.
/// Returns the watermark that ends the window with them.
pub fn changed_receipts(
    conn: &mut AnyConnection,
    sender_id: &str,
    from: Watermark,
    end: WindowEnd,
    after: MessageRef,
    limit: i64,
) -> QueryResult<(Watermark, Vec<MessageRef>)> {
    read_feed::<MessageAt>(conn, end, CHANGED_RECEIPTS_ORDER, |start, to| {
        changed_receipts_query(start, sender_id, from, to, after, limit)
    })
}

fn changed_receipts_query(
    start: RawSql,
    sender_id: &str,
    from: Watermark,
    to: WindowEnd,
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
    window(query, "e", from, to)
        .sql(CHANGED_RECEIPTS_ORDER)
        .sql(" LIMIT ")
        .int(limit)
        .keep_prepared()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermark_text_round_trips_and_rejects_nonsense() {
        assert_eq!(Watermark::parse("17"), Some(Watermark(17)));
        assert_eq!(Watermark(17).to_text(), "17");
        assert_eq!(Watermark::parse("0"), Some(Watermark(0)));
        for bad in [
            "",
            "-1",
            "+3",
            "017",
            "1.5",
            "a",
            "10:15:11,13",
            "99999999999999999999",
        ] {
            assert_eq!(Watermark::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_new_window_ends_at_the_clock_its_statement_sees_and_returns_it() {
        let sql = |from: i64, user: &str| {
            with_clock(
                |start| {
                    changed_groups_query(start, user, "", Watermark(from), WindowEnd::Now, 0, 10)
                },
                CHANGED_GROUPS_ORDER,
            )
            .as_text()
        };
        let text = sql(5, "bob");
        assert_eq!(text, sql(20, "ann"), "one text for every call");
        assert!(
            text.starts_with(
                "SELECT clock.published AS watermark, window_rows.* FROM (SELECT published \
                 FROM feed_clock WHERE clock_id = 0) clock LEFT JOIN (SELECT"
            ),
            "{text}"
        );
        assert!(text.ends_with(") window_rows ON 1 = 1 ORDER BY group_id"));
        assert!(text.contains("m.pos > $2"), "{text}");
        assert!(
            !text.contains("m.pos <="),
            "no upper bound: the statement sees no position above its clock"
        );
    }

    #[test]
    fn windows_bind_the_watermarks_so_the_text_never_changes() {
        let end = WindowEnd::At(Watermark(12));
        let start = RawSql::default;
        let sql = changed_groups_query(start(), "bob", "phone", Watermark(5), end, 0, 10);
        let other = changed_groups_query(start(), "ann", "", Watermark(7), end, 4, 10);
        let sql = sql.as_text();
        assert_eq!(
            sql,
            other.as_text(),
            "one text for every watermark and caller"
        );
        assert!(sql.contains("m.pos > $2 AND m.pos <= $3"), "{sql}");
        assert!(sql.contains("e.pos > $6 AND e.pos <= $7"), "{sql}");
        assert!(
            !sql.contains("bob") && !sql.contains("12"),
            "values are bound, never inlined"
        );
    }
}
