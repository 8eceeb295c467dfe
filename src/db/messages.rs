//! Queries on `group_msgs`: the idempotent send and the two page directions.

use diesel::prelude::*;
use diesel::result::Error as DieselError;

use super::access::{member_of, Checked, Refusal};
use super::groups::{allocate_msg_id, release_msg_id, touch_activity};
use super::members::{advance_past_own_message, read_past_expired};
use super::models::{now_utc, MessageRow, NewMessage};
use super::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::schema::group_msgs;
use crate::wake::{WakeEvent, Wakes};
use crate::{on_engine, refuse_unless};

pub enum SendOutcome {
    Created(MessageRow),
    /// The sender already sent this `client_msg_id` to this group: the original message.
    Existing(MessageRow),
}

/// Stores a message once (inside the transaction `Db::write_checked` runs it in). A retry or a
/// racing duplicate with the same `client_msg_id` gets the original: the unique index decides
/// (`ON CONFLICT DO NOTHING`), and the duplicate hands its id back, so ids stay contiguous.
/// There is no lookup before the insert: retries are rare, and the hot path saves a query
/// (PostgreSQL also planned such a lookup badly on young tables, walking a sender's whole
/// history per send).
pub fn send(
    conn: &mut AnyConnection,
    group_id: i64,
    sender_id: &str,
    device: Option<&DeviceId>,
    client_msg_id: &str,
    content: &str,
    wakes: &mut Wakes,
) -> Checked<SendOutcome> {
    refuse_unless!(member_of(conn, group_id, sender_id)?);
    let msg_id = allocate_msg_id(conn, group_id)?;
    // Taken once the group's row lock is held, so a group's messages are stamped in id order.
    let now = now_utc();
    let message = NewMessage {
        group_id,
        msg_id,
        sender_id,
        client_msg_id,
        content,
        created_at: now,
    };
    let inserted = on_engine!(conn, |c| diesel::insert_into(group_msgs::table)
        .values(&message)
        .on_conflict_do_nothing()
        .execute(c))?;
    if inserted == 0 {
        // Sent before: the group row is still locked by this transaction, so the id can go
        // back and the next send takes it. The group's activity time was not touched.
        release_msg_id(conn, group_id)?;
        let original = find_by_client_msg_id(conn, group_id, sender_id, client_msg_id)?
            .ok_or(DieselError::NotFound)?;
        return Ok(Ok(SendOutcome::Existing(original)));
    }
    touch_activity(conn, group_id, now)?;
    match advance_past_own_message(conn, GroupId(group_id), sender_id, device, MsgId(msg_id)) {
        // The sender's membership row vanished between the check and the write.
        Err(DieselError::NotFound) => return Ok(Err(Refusal::NotMember { group_id })),
        other => other?,
    }
    wakes.record(WakeEvent::MessageSent(group_id));
    Ok(Ok(SendOutcome::Created(MessageRow {
        group_id,
        msg_id,
        sender_id: sender_id.to_owned(),
        client_msg_id: client_msg_id.to_owned(),
        content: content.to_owned(),
        created_at: now,
    })))
}

pub fn find_by_client_msg_id(
    conn: &mut AnyConnection,
    group_id: i64,
    sender_id: &str,
    client_msg_id: &str,
) -> QueryResult<Option<MessageRow>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::sender_id.eq(sender_id))
        .filter(group_msgs::client_msg_id.eq(client_msg_id))
        .select(MessageRow::as_select())
        .first(conn)
        .optional()
}

pub fn find_message(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
) -> QueryResult<Option<MessageRow>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.eq(msg_id))
        .select(MessageRow::as_select())
        .first(conn)
        .optional()
}

/// Deletes up to `batch` of the oldest messages created before `cutoff` (message
/// retention); returns how many went. Ids are never reused: the group's counter is not
/// touched. Read cursors below the expired messages move past them first, so they stop
/// counting as unread. Messages are stored in time order, so the walk reads the oldest rows by
/// primary key and stops at the first one still kept: no index on `created_at` is needed and a
/// sweep with nothing to delete reads one page.
pub fn delete_messages_before(
    conn: &mut AnyConnection,
    cutoff: chrono::NaiveDateTime,
    batch: i64,
    wakes: &mut Wakes,
) -> QueryResult<usize> {
    let oldest: Vec<(i64, i64, i64, chrono::NaiveDateTime)> = group_msgs::table
        .select((
            group_msgs::id,
            group_msgs::group_id,
            group_msgs::msg_id,
            group_msgs::created_at,
        ))
        .order(group_msgs::id.asc())
        .limit(batch)
        .load(conn)?;
    let expired: Vec<(i64, i64, i64)> = oldest
        .into_iter()
        .take_while(|(.., created_at)| *created_at < cutoff)
        .map(|(id, group_id, msg_id, _)| (id, group_id, msg_id))
        .collect();
    if expired.is_empty() {
        return Ok(0);
    }
    // Each group's expired messages are the oldest ones: everything up to its highest here.
    let mut through: std::collections::BTreeMap<i64, i64> = Default::default();
    for (_, group_id, msg_id) in &expired {
        let highest = through.entry(*group_id).or_default();
        *highest = (*highest).max(*msg_id);
    }
    let ids: Vec<i64> = expired.iter().map(|(id, ..)| *id).collect();
    for (group_id, msg_id) in through {
        read_past_expired(conn, GroupId(group_id), MsgId(msg_id), wakes)?;
    }
    diesel::delete(group_msgs::table.filter(group_msgs::id.eq_any(&ids))).execute(conn)
}

/// Up to `limit` messages with ids above `after_msg_id`, ascending.
pub fn page_after(
    conn: &mut AnyConnection,
    group_id: GroupId,
    after_msg_id: MsgId,
    limit: i64,
) -> QueryResult<Vec<MessageRow>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.gt(after_msg_id))
        .order(group_msgs::msg_id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(conn)
}

/// Up to `limit` messages with ids below `before_msg_id` and above `floor_msg_id`, the newest
/// ones first in the query, returned ascending.
pub fn page_before(
    conn: &mut AnyConnection,
    group_id: GroupId,
    before_msg_id: MsgId,
    floor_msg_id: MsgId,
    limit: i64,
) -> QueryResult<Vec<MessageRow>> {
    let mut rows: Vec<MessageRow> = group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.lt(before_msg_id))
        .filter(group_msgs::msg_id.gt(floor_msg_id))
        .order(group_msgs::msg_id.desc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(conn)?;
    rows.reverse();
    Ok(rows)
}
