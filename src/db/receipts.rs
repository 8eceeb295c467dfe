//! Read receipts, derived from members' cursors, and the receipt change feed's rows.
//!
//! No row per (message, recipient) exists: a member has read message `m` when their
//! `last_read_msg_id >= m`, and has it delivered (to at least one of their devices) when
//! `delivered_msg_id >= m`, so one ack covering 1..N marks all N read with one row written.
//! The audience of `m` is the members who joined before it (`joined_after_msg_id < m`) and
//! are still members, minus its sender.

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamp};

use super::models::now_utc;
use super::AnyConnection;
use crate::domain::{GroupId, MsgId};
use crate::schema::{group_members, receipt_events};

/// The cursor columns of one member: all receipts in a group are computed from these.
#[derive(Queryable, Debug, Clone)]
pub struct MemberCursors {
    pub user_id: String,
    pub joined_after_msg_id: i64,
    /// Delivered to at least one of the member's devices.
    pub delivered_msg_id: i64,
    pub last_read_msg_id: i64,
}

/// Every member's cursors, ordered by user id: one query on the membership primary key,
/// whatever the size of the group's history.
pub fn member_cursors(conn: &mut AnyConnection, group_id: i64) -> QueryResult<Vec<MemberCursors>> {
    group_members::table
        .filter(group_members::group_id.eq(group_id))
        .select((
            group_members::user_id,
            group_members::joined_after_msg_id,
            group_members::delivered_msg_id,
            group_members::last_read_msg_id,
        ))
        .order(group_members::user_id.asc())
        .load(conn)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReceiptCounts {
    pub read_count: i64,
    pub unread_count: i64,
    pub delivered_count: i64,
}

impl MemberCursors {
    /// Whether this member is in the audience of `msg_id` sent by `sender_id`.
    pub fn receives(&self, msg_id: i64, sender_id: &str) -> bool {
        self.joined_after_msg_id < msg_id && self.user_id != sender_id
    }

    pub fn has_read(&self, msg_id: i64) -> bool {
        self.last_read_msg_id >= msg_id
    }
}

pub fn count_receipts(members: &[MemberCursors], msg_id: i64, sender_id: &str) -> ReceiptCounts {
    let mut counts = ReceiptCounts::default();
    for member in members.iter().filter(|m| m.receives(msg_id, sender_id)) {
        if member.has_read(msg_id) {
            counts.read_count += 1;
        } else {
            counts.unread_count += 1;
        }
        if member.delivered_msg_id >= msg_id {
            counts.delivered_count += 1;
        }
    }
    counts
}

#[derive(Insertable)]
#[diesel(table_name = receipt_events)]
struct NewReceiptEvent<'a> {
    group_id: i64,
    reader_id: &'a str,
    from_msg_id: i64,
    to_msg_id: i64,
    created_at: NaiveDateTime,
}

/// Records that receipts of messages in `(from_msg_id, to_msg_id]` of the group may have changed.
pub fn record_change(
    conn: &mut AnyConnection,
    group_id: GroupId,
    reader_id: &str,
    from_msg_id: MsgId,
    to_msg_id: MsgId,
) -> QueryResult<()> {
    record_changes(conn, reader_id, &[(group_id, from_msg_id, to_msg_id)])
}

/// [`record_change`] for several groups of one reader, in one statement per 500 groups.
pub fn record_changes(
    conn: &mut AnyConnection,
    reader_id: &str,
    ranges: &[(GroupId, MsgId, MsgId)],
) -> QueryResult<()> {
    let created_at = now_utc();
    let rows: Vec<NewReceiptEvent> = ranges
        .iter()
        .map(|&(group_id, from, to)| NewReceiptEvent {
            group_id: group_id.0,
            reader_id,
            from_msg_id: from.0,
            to_msg_id: to.0,
            created_at,
        })
        .collect();
    if let [row] = rows.as_slice() {
        // One row (an ack of one group) as a single-row insert, which every engine keeps
        // prepared.
        return diesel::insert_into(receipt_events::table)
            .values(row)
            .execute(conn)
            .map(|_| ());
    }
    for chunk in rows.chunks(500) {
        crate::on_engine!(conn, |c| diesel::insert_into(receipt_events::table)
            .values(chunk)
            .execute(c))?;
    }
    Ok(())
}

/// Deletes up to `batch` receipt changes older than `cutoff`; returns how many went. Small
/// batches keep each transaction (and SQLite's single writer) short.
pub fn delete_changes_before(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    delete_oldest_before(conn, "receipt_events", cutoff, batch)
}

/// Deletes up to `batch` of the oldest rows of a feed table (one with an `id` in insertion order
/// and a `created_at`) created before `cutoff`; returns how many went.
pub(super) fn delete_oldest_before(
    conn: &mut AnyConnection,
    table: &'static str,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT id FROM {table} WHERE created_at < $1 ORDER BY id LIMIT $2)"
    ))
    .bind::<Timestamp, _>(cutoff)
    .bind::<BigInt, _>(batch)
    .execute(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(user: &str, joined_after: i64, delivered: i64, read: i64) -> MemberCursors {
        MemberCursors {
            user_id: user.into(),
            joined_after_msg_id: joined_after,
            delivered_msg_id: delivered,
            last_read_msg_id: read,
        }
    }

    #[test]
    fn counts_exclude_the_sender_and_later_joiners() {
        let members = [
            member("sender", 0, 5, 5),
            member("read", 0, 5, 5),
            member("delivered", 0, 4, 1),
            member("nothing", 0, 0, 0),
            member("late", 3, 3, 3),
        ];

        let counts = count_receipts(&members, 3, "sender");

        assert_eq!(
            counts,
            ReceiptCounts {
                read_count: 1,
                unread_count: 2,
                delivered_count: 2
            }
        );
    }
}
