//! Read receipts of messages, derived from the members' cursors through a histogram of them,
//! so their cost follows how many distinct places the cursors are at, not the size of the
//! group.
//!
//! No row per (message, recipient) exists: a member has read message `m` when their
//! `last_read_msg_id >= m`, and has it delivered (to at least one of their devices) when
//! `delivered_msg_id >= m`, so one ack covering 1..N marks all N read with one row written.
//! The audience of `m` is the members who joined before it (`joined_after_msg_id < m`) and
//! are still members, minus its sender.
//!
//! A member's cursors start where they joined and never go back, so every member who joined after
//! `m` also has both cursors at or above `m`. That turns each count into differences of "how many
//! members have this cursor at or above `m`", which [`crate::db::member_cursors::cursor_counts`], a
//! histogram of the cursors kept by the statements that move them, answers from a few rows.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

use crate::db::engine::raw_sql::RawSql;
use crate::db::member_cursors::cursor_counts::{CursorCounts, Tally};
use crate::db::AnyConnection;
use crate::domain::{GroupId, MsgId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReceiptCounts {
    pub read_count: i64,
    pub unread_count: i64,
    pub delivered_count: i64,
}

/// The receipt counts of messages `msg_ids` of one sender in one group, in the order given.
/// One statement however many messages, so one snapshot: the group's size and the sender's
/// row beside the histogram of the cursors from the oldest message up.
pub fn receipt_counts(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
    msg_ids: &[MsgId],
) -> QueryResult<Vec<ReceiptCounts>> {
    if msg_ids.is_empty() {
        return Ok(Vec::new());
    }
    counts_of_messages(conn, group_id, sender_id, msg_ids)
}

/// One message's receipt counts and a page of its audience (see [`audience_page`]), read in
/// one snapshot so the page and the counts agree.
pub fn message_receipts(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
    sender_id: &str,
    after: Option<&str>,
    limit: i64,
) -> QueryResult<(ReceiptCounts, Vec<(String, bool)>)> {
    in_snapshot(conn, |conn| {
        let counts = counts_of_messages(conn, group_id, sender_id, &[msg_id])?;
        let counts = counts
            .into_iter()
            .next()
            .ok_or(diesel::result::Error::NotFound)?;
        let page = audience_page(conn, group_id, msg_id, sender_id, after, limit)?;
        Ok((counts, page))
    })
}

/// [`receipt_counts`] in one statement; `msg_ids` is not empty.
fn counts_of_messages(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
    msg_ids: &[MsgId],
) -> QueryResult<Vec<ReceiptCounts>> {
    let (oldest, newest) = (msg_ids.iter()).fold((i64::MAX, i64::MIN), |(oldest, newest), m| {
        (oldest.min(m.0), newest.max(m.0))
    });
    let (standing, cursors) = standing_and_cursors(conn, group_id, sender_id, oldest, newest)?;
    Ok(msg_ids
        .iter()
        .map(|m| standing.counts(m.0, &cursors.at_or_above(m.0)))
        .collect())
}

/// One page of a message's audience in user id order, after `after`: each member with
/// whether they have read it.
fn audience_page(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
    sender_id: &str,
    after: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<(String, bool)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        user_id: String,
        #[diesel(sql_type = BigInt)]
        last_read_msg_id: i64,
    }
    let mut query = RawSql::default()
        .sql("SELECT user_id, last_read_msg_id FROM group_members WHERE group_id = ")
        .int(group_id.0)
        .sql(" AND joined_after_msg_id < ")
        .int(msg_id.0)
        .sql(" AND user_id <> ")
        .text(sender_id);
    if let Some(after) = after {
        query = query.sql(" AND user_id > ").text(after);
    }
    let rows: Vec<Row> = query
        .sql(" ORDER BY user_id LIMIT ")
        .int(limit)
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| (r.user_id, r.last_read_msg_id >= msg_id.0))
        .collect())
}

/// Runs `f` in one read-only snapshot: counts taken by several statements must all see the
/// same members, or a member joining between two of them would be counted on one side only.
/// PostgreSQL's default isolation takes a snapshot per statement, so this asks for
/// REPEATABLE READ; SQLite keeps one snapshot for a transaction from its first read.
fn in_snapshot<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> QueryResult<T>,
) -> QueryResult<T> {
    let begin = match conn {
        AnyConnection::Postgresql(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        AnyConnection::Sqlite(_) => "BEGIN",
    };
    conn.batch_execute(begin)?;
    match f(conn) {
        Ok(value) => {
            conn.batch_execute("COMMIT")?;
            Ok(value)
        }
        Err(e) => {
            // The read's own error is the one to report; a failed rollback leaves a
            // connection the pool's health check discards.
            let _ = conn.batch_execute("ROLLBACK");
            Err(e)
        }
    }
}

/// The cursors of the sender, who is never in their own message's audience.
#[derive(Debug, Clone, Copy)]
struct SenderCursors {
    joined_after: i64,
    read: i64,
    delivered: i64,
}

/// The group's size and, if the sender is still a member, their cursors.
#[derive(Debug, Clone, Copy)]
struct Standing {
    members: i64,
    sender: Option<SenderCursors>,
}

/// The group's size and the sender's cursors, and the histogram of the cursors from `oldest`
/// to `newest`, read by one statement: every histogram row carries the group's figures.
fn standing_and_cursors(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
    oldest: i64,
    newest: i64,
) -> QueryResult<(Standing, CursorCounts)> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        member_count: i64,
        #[diesel(sql_type = Nullable<BigInt>)]
        joined_after_msg_id: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        last_read_msg_id: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        delivered_msg_id: Option<i64>,
        #[diesel(sql_type = BigInt)]
        msg_id: i64,
        #[diesel(embed)]
        tally: Tally,
    }
    let query = RawSql::default()
        .sql(
            "SELECT s.member_count, s.joined_after_msg_id, s.last_read_msg_id, \
             s.delivered_msg_id, c.msg_id, c.read, c.delivered, c.joined FROM \
             (SELECT g.member_count, m.joined_after_msg_id, m.last_read_msg_id, \
             m.delivered_msg_id FROM groups g LEFT JOIN group_members m \
             ON m.group_id = g.group_id AND m.user_id = ",
        )
        .text(sender_id)
        .sql(" WHERE g.group_id = ")
        .int(group_id.0)
        .sql(") s CROSS JOIN (");
    let rows: Vec<Row> = CursorCounts::query(query, conn, group_id, oldest, newest)
        .sql(") c")
        .keep_prepared()
        .load(conn)?;
    let first = rows.first().ok_or(diesel::result::Error::NotFound)?;
    let sender = match (
        first.joined_after_msg_id,
        first.last_read_msg_id,
        first.delivered_msg_id,
    ) {
        (Some(joined_after), Some(read), Some(delivered)) => Some(SenderCursors {
            joined_after,
            read,
            delivered,
        }),
        _ => None,
    };
    let standing = Standing {
        members: first.member_count,
        sender,
    };
    let cursors = CursorCounts::from_rows(rows.into_iter().map(|r| (r.msg_id, r.tally)));
    Ok((standing, cursors))
}

impl Standing {
    /// The counts of message `msg_id` from how many members (the sender included) have each
    /// cursor at or above it.
    fn counts(&self, msg_id: i64, at_or_above: &Tally) -> ReceiptCounts {
        // Members who joined at or after the message have both cursors at or above it too.
        let late = at_or_above.joined;
        let mut audience = self.members - late;
        let mut read = at_or_above.read - late;
        let mut delivered = at_or_above.delivered - late;
        if let Some(s) = self.sender.filter(|s| s.joined_after < msg_id) {
            audience -= 1;
            read -= i64::from(s.read >= msg_id);
            delivered -= i64::from(s.delivered >= msg_id);
        }
        ReceiptCounts {
            read_count: read,
            unread_count: audience - read,
            delivered_count: delivered,
        }
    }
}
