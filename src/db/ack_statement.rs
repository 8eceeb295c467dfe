//! Acks on PostgreSQL in one round trip: one statement, run as its own transaction, does
//! what [`super::cursors::ack`] does in a transaction of several. Its parts are data-modifying
//! common table expressions made from the rules the general path uses (how a member's
//! cursors move, how a device's cursor moves, what is above the read cursor, how a device's
//! badge is lowered), so there is one statement of each rule.
//!
//! It answers only an ack it can answer exactly as the general path would. Whenever the
//! general path would refuse something (a group that does not exist, a caller who is not a
//! member, an ack beyond the group's last message) it writes nothing and answers None, and
//! the general path gives the refusal. So does a batch that names a group more than once,
//! whose acks the general path applies one after another.

use std::collections::HashSet;
use std::sync::OnceLock;

use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamp};

use super::cursors::{AckRequest, CursorState};
use super::devices::DEVICE_CURSOR_FORWARD;
use super::member_events::{device_column, MemberEventKind};
use super::members::advance_member_sql;
use super::models::now_utc;
use super::push_due::{LOWER_BADGES, LOWER_BADGES_OF_DEVICE};
use super::unread::{MENTIONS_ABOVE_READ, NOT_COUNTED_ABOVE_READ, UNREAD_OF_INPUTS};
use crate::domain::DeviceId;
use crate::wake::{WakeEvent, Wakes};

/// Applies `acks` (distinct groups) for `user_id` on `device` (None: the default device), or
/// writes nothing and answers None when only the general path can answer. Also answers how
/// many writes committed: one when the ack moved anything, none when it moved nothing.
pub fn ack(
    conn: &mut PgConnection,
    user_id: &str,
    device: Option<&DeviceId>,
    acks: &[AckRequest],
    wakes: &mut Wakes,
) -> QueryResult<(usize, Option<Vec<CursorState>>)> {
    let mut named = HashSet::with_capacity(acks.len());
    if acks.is_empty() || !acks.iter().all(|a| named.insert(a.group_id)) {
        return Ok((0, None));
    }
    let (ack_to, read_to): (Vec<i64>, Vec<i64>) = acks.iter().map(AckRequest::targets).unzip();
    let group_ids: Vec<i64> = acks.iter().map(|a| a.group_id).collect();
    let rows: Vec<Acked> = diesel::sql_query(statement())
        .bind::<Array<BigInt>, _>(&group_ids)
        .bind::<Array<BigInt>, _>(&ack_to)
        .bind::<Array<BigInt>, _>(&read_to)
        .bind::<Text, _>(user_id)
        .bind::<Nullable<Text>, _>(device.map(DeviceId::as_str))
        .bind::<Text, _>(device_column(device))
        .bind::<Timestamp, _>(now_utc())
        .load(conn)?;
    // The statement has committed by now: whatever follows must not fail.
    if rows.len() != acks.len() {
        // Refused: nothing was written.
        return Ok((0, None));
    }
    let mut wrote = false;
    for row in &rows {
        wrote |= row.wrote;
        if row.receipts_changed {
            wakes.record(WakeEvent::CursorMoved(row.group_id));
        }
    }
    if rows.iter().any(|r| r.read_moved) {
        wakes.record(WakeEvent::ReadMoved(user_id.to_owned()));
    }
    let mut states = Vec::with_capacity(acks.len());
    for ack in acks {
        match rows.iter().find(|r| r.group_id == ack.group_id) {
            Some(row) => states.push(row.state()),
            None => {
                // Cannot happen (one row per distinct group was checked above); if it did,
                // the write stands and the general path answers with where it left things.
                tracing::error!(
                    group_id = ack.group_id,
                    "the ack statement answered without a group it was asked to ack"
                );
                return Ok((usize::from(wrote), None));
            }
        }
    }
    Ok((usize::from(wrote), Some(states)))
}

/// The statement, built once. Parameters: $1 the group ids, $2 where each group's delivered
/// cursor goes, $3 where its read cursor goes, $4 the user, $5 the device (NULL for the
/// default device), $6 the device as member events record it, $7 the time.
fn statement() -> &'static str {
    static STATEMENT: OnceLock<String> = OnceLock::new();
    STATEMENT.get_or_init(|| {
        let member_move = advance_member_sql("t.default_ack_to", "t.read_to", "t.ack_to");
        let read = MemberEventKind::Read.as_str();
        format!(
            // The member rows, locked in group order as every write that touches several
            // groups locks them; a row changed meanwhile is read as it is now. A group that
            // is missing, a caller who is not a member and an ack beyond the last message
            // leave a row out.
            "WITH asked AS ( \
               SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) \
                 AS a(group_id, ack_to, read_to)), \
             locked AS MATERIALIZED ( \
               SELECT a.group_id, a.ack_to, a.read_to, g.last_msg_id, \
                 gm.last_ack_msg_id AS ack_was, gm.last_read_msg_id AS read_was, \
                 gm.delivered_msg_id AS delivered_was, gm.own_msgs_after_read AS own_was, \
                 CASE WHEN $5::text IS NULL THEN gm.last_ack_msg_id \
                   ELSE COALESCE(dc.last_ack_msg_id, gm.joined_after_msg_id) END \
                   AS device_ack_was \
               FROM asked a \
               JOIN groups g ON g.group_id = a.group_id \
               JOIN group_members gm ON gm.group_id = a.group_id AND gm.user_id = $4 \
               LEFT JOIN device_cursors dc ON dc.group_id = a.group_id \
                 AND dc.user_id = $4 AND dc.device_id = $5 \
               WHERE a.ack_to <= g.last_msg_id \
               ORDER BY a.group_id FOR NO KEY UPDATE OF gm), \
             accepted AS ( \
               SELECT b.*, \
                 NOT (b.ack_to <= b.device_ack_was AND b.read_to <= b.read_was) AS moves, \
                 CASE WHEN $5::text IS NULL THEN b.ack_to ELSE 0 END AS default_ack_to \
               FROM locked b \
               WHERE (SELECT count(*) FROM locked) = cardinality($1::bigint[])), \
             member_moved AS ( \
               {member_move} \
               FROM accepted t \
               WHERE group_members.group_id = t.group_id AND group_members.user_id = $4 \
                 AND t.moves AND (t.read_to > t.read_was OR t.ack_to > t.delivered_was \
                   OR t.default_ack_to > t.ack_was) \
               RETURNING group_members.group_id, group_members.last_ack_msg_id, \
                 group_members.last_read_msg_id, group_members.delivered_msg_id, \
                 group_members.own_msgs_after_read), \
             device_moved AS ( \
               INSERT INTO device_cursors (group_id, user_id, device_id, last_ack_msg_id) \
               SELECT t.group_id, $4, $5, t.ack_to FROM accepted t \
               WHERE $5::text IS NOT NULL AND t.moves ORDER BY t.group_id \
               {DEVICE_CURSOR_FORWARD} \
               RETURNING group_id, last_ack_msg_id), \
             settled AS ( \
               SELECT t.group_id, $4::text AS user_id, t.last_msg_id, t.read_was, \
                 t.delivered_was, \
                 COALESCE(m.last_read_msg_id, t.read_was) AS last_read_msg_id, \
                 COALESCE(m.delivered_msg_id, t.delivered_was) AS delivered_msg_id, \
                 COALESCE(m.own_msgs_after_read, t.own_was) AS own_msgs_after_read, \
                 CASE WHEN $5::text IS NULL THEN COALESCE(m.last_ack_msg_id, t.ack_was) \
                   ELSE COALESCE(d.last_ack_msg_id, t.device_ack_was) END AS last_ack_msg_id, \
                 (m.group_id IS NOT NULL OR d.group_id IS NOT NULL) AS wrote \
               FROM accepted t \
               LEFT JOIN member_moved m ON m.group_id = t.group_id \
               LEFT JOIN device_moved d ON d.group_id = t.group_id), \
             counted AS ( \
               SELECT group_members.*, \
                 group_members.last_read_msg_id > group_members.read_was AS read_moved, \
                 (group_members.last_read_msg_id > group_members.read_was \
                   OR group_members.delivered_msg_id > group_members.delivered_was) \
                   AS receipts_changed, \
                 CAST({NOT_COUNTED_ABOVE_READ} AS BIGINT) AS not_counted_above_read, \
                 CAST({MENTIONS_ABOVE_READ} AS BIGINT) AS unread_mention_count \
               FROM settled AS group_members), \
             receipt_change AS ( \
               INSERT INTO receipt_events \
                 (group_id, reader_id, from_msg_id, to_msg_id, created_at) \
               SELECT group_id, user_id, read_was, delivered_msg_id, $7 FROM counted \
               WHERE receipts_changed), \
             read_event AS ( \
               INSERT INTO member_events (user_id, group_id, kind, device_id, created_at) \
               SELECT user_id, group_id, '{read}', $6, $7 FROM counted WHERE read_moved), \
             badge AS ( \
               {LOWER_BADGES} (SELECT group_id AS g, {UNREAD_OF_INPUTS} AS unread \
                 FROM counted WHERE read_moved) AS t \
               {LOWER_BADGES_OF_DEVICE} $5) \
             SELECT group_id, last_ack_msg_id, last_read_msg_id, last_msg_id, \
               own_msgs_after_read, not_counted_above_read, unread_mention_count, \
               receipts_changed, read_moved, wrote \
             FROM counted"
        )
    })
}

/// One group's row of the statement's answer.
#[derive(QueryableByName)]
struct Acked {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
    #[diesel(sql_type = BigInt)]
    last_ack_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    last_read_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    last_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    own_msgs_after_read: i64,
    #[diesel(sql_type = BigInt)]
    not_counted_above_read: i64,
    #[diesel(sql_type = BigInt)]
    unread_mention_count: i64,
    #[diesel(sql_type = Bool)]
    receipts_changed: bool,
    #[diesel(sql_type = Bool)]
    read_moved: bool,
    #[diesel(sql_type = Bool)]
    wrote: bool,
}

impl Acked {
    fn state(&self) -> CursorState {
        CursorState {
            group_id: self.group_id,
            last_ack_msg_id: self.last_ack_msg_id,
            last_read_msg_id: self.last_read_msg_id,
            last_msg_id: self.last_msg_id,
            own_msgs_after_read: self.own_msgs_after_read,
            not_counted_above_read: self.not_counted_above_read,
            unread_mention_count: self.unread_mention_count,
            receipts_changed: self.receipts_changed,
            read_moved: self.read_moved,
        }
    }
}
