//! Acks on PostgreSQL in one round trip: one statement, run as its own transaction, does
//! what [`super::cursors::ack`] does in a transaction of several. Its parts are data-modifying
//! common table expressions made from the rules the general path uses (how a member's
//! cursors move, how a device's cursor moves, what is above the read cursor, how a device's
//! badge is lowered), so each rule is spelled once.
//!
//! It answers only an ack it can answer exactly as the general path would. Whenever the
//! general path would refuse something (a group that does not exist, a caller who is not a
//! member, an ack beyond the group's last message) it writes nothing and answers None, and
//! the general path gives the refusal. So does a batch that names a group more than once,
//! whose acks the general path applies one after another, and an ack whose member row
//! another write changed while the statement ran (see the statement's comments).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use chrono::NaiveDateTime;
use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamp, Untyped};

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
    let query = AckQuery {
        group_ids: acks.iter().map(|a| a.group_id).collect(),
        ack_to,
        read_to,
        user_id: user_id.to_owned(),
        device: device.map(|d| d.as_str().to_owned()),
        device_column: device_column(device).to_owned(),
        now: now_utc(),
    };
    let rows: Vec<Acked> = query.load(conn)?;
    // The statement has committed by now: whatever follows must not fail.
    if rows.len() != acks.len() {
        // Refused: nothing was written.
        return Ok((0, None));
    }
    let mut wrote = false;
    for row in &rows {
        wrote |= row.wrote;
        if row.state.receipts_changed {
            wakes.record(WakeEvent::CursorMoved(row.state.group_id));
        }
    }
    if rows.iter().any(|r| r.state.read_moved) {
        wakes.record(WakeEvent::ReadMoved(user_id.to_owned()));
    }
    let by_group: HashMap<i64, CursorState> = rows
        .iter()
        .map(|row| (row.state.group_id, row.state))
        .collect();
    // One row per asked group (the count was checked): every ack finds its own.
    let states = acks.iter().map(|a| by_group.get(&a.group_id).copied());
    Ok((usize::from(wrote), states.collect()))
}

/// The statement and its values: a query diesel keeps prepared on each connection, since
/// its text never changes. (`diesel::sql_query` prepares its text anew on every call, and
/// planning this statement takes about a millisecond, as long as running it.) The values go
/// first, once each, into a one-row `params`, which the rest of the statement reads.
struct AckQuery {
    group_ids: Vec<i64>,
    /// Where each group's delivered cursor goes (for this device).
    ack_to: Vec<i64>,
    /// Where each group's read cursor goes.
    read_to: Vec<i64>,
    user_id: String,
    /// None for the default device.
    device: Option<String>,
    /// The device as member events record it.
    device_column: String,
    now: NaiveDateTime,
}

impl QueryFragment<Pg> for AckQuery {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("WITH params AS (SELECT ");
        out.push_bind_param::<Array<BigInt>, _>(&self.group_ids)?;
        out.push_sql("::bigint[] AS group_ids, ");
        out.push_bind_param::<Array<BigInt>, _>(&self.ack_to)?;
        out.push_sql("::bigint[] AS ack_tos, ");
        out.push_bind_param::<Array<BigInt>, _>(&self.read_to)?;
        out.push_sql("::bigint[] AS read_tos, ");
        out.push_bind_param::<Text, _>(&self.user_id)?;
        out.push_sql("::text AS user_id, ");
        out.push_bind_param::<Nullable<Text>, _>(&self.device)?;
        out.push_sql("::text AS device_id, ");
        out.push_bind_param::<Text, _>(&self.device_column)?;
        out.push_sql("::text AS device_column, ");
        out.push_bind_param::<Timestamp, _>(&self.now)?;
        out.push_sql("::timestamp AS now)");
        out.push_sql(statement_after_params());
        Ok(())
    }
}

impl QueryId for AckQuery {
    type QueryId = ();
    // Not a type-keyed statement: diesel keys its cache by the text instead.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for AckQuery {
    type SqlType = Untyped;
}

impl RunQueryDsl<PgConnection> for AckQuery {}

/// The statement after `params`, built once.
fn statement_after_params() -> &'static str {
    static STATEMENT: OnceLock<String> = OnceLock::new();
    STATEMENT.get_or_init(|| {
        let param = |name: &str| format!("(SELECT {name} FROM params)");
        let (group_ids, ack_tos, read_tos) =
            (param("group_ids"), param("ack_tos"), param("read_tos"));
        let (user, device) = (param("user_id"), param("device_id"));
        let (device_column, now) = (param("device_column"), param("now"));
        let member_move = advance_member_sql("t.default_ack_to", "t.read_to", "t.ack_to");
        let read = MemberEventKind::Read.as_str();
        // What `cursors::ack` decides in Rust (`AckPlan`: whether an ack moves anything, a
        // device's cursor before its first ack, which moves change receipts or the read
        // position, the refusal beyond the last message) is decided here again in SQL;
        // a change to one is a change to the other, and the API tests run every ack of
        // their PostgreSQL runs through this statement and compare with the general path.
        // The badge rows are locked in group order, as `note_reads_on_device` locks them,
        // before the update (which reads the lock's rows). A badge row the push builder
        // changed after the statement began (it may have told of a newer message) is left
        // as it is: lowering it to this statement's count could leave it below the unread
        // count, and the builder would never correct the phone. The `= ANY(group_ids)`
        // conditions let PostgreSQL probe each row by key instead of scanning every row of
        // a user or device in thousands of groups.
        format!(
            // The member rows, locked in group order as every write that touches several
            // groups locks them. A group that is missing, a caller who is not a member and
            // an ack beyond the last message leave a row out, and then nothing is written.
            // So does a member row that another write changed after the statement began
            // (`seen`, the statement's snapshot, holds another version than `locked`, the
            // row as it is now): the messages the cursor rule counts would be read as they
            // were before that write (a recall of the member's own message, say, which
            // lowers their count), so the general path, whose update begins after its lock,
            // answers instead.
            ", asked AS ( \
               SELECT * FROM unnest({group_ids}, {ack_tos}, {read_tos}) \
                 AS a(group_id, ack_to, read_to)), \
             seen AS ( \
               SELECT gm.group_id, gm.xmin AS row_version \
               FROM asked a JOIN group_members gm ON gm.group_id = a.group_id \
               WHERE gm.user_id = {user} AND gm.group_id = ANY({group_ids}::bigint[])), \
             locked AS MATERIALIZED ( \
               SELECT a.group_id, a.ack_to, a.read_to, g.last_msg_id, gm.xmin AS row_version, \
                 gm.last_ack_msg_id AS ack_was, gm.last_read_msg_id AS read_was, \
                 gm.delivered_msg_id AS delivered_was, gm.own_msgs_after_read AS own_was, \
                 CASE WHEN {device} IS NULL THEN gm.last_ack_msg_id \
                   ELSE COALESCE(dc.last_ack_msg_id, gm.joined_after_msg_id) END \
                   AS device_ack_was \
               FROM asked a \
               JOIN groups g ON g.group_id = a.group_id \
               JOIN group_members gm ON gm.group_id = a.group_id AND gm.user_id = {user} \
               LEFT JOIN device_cursors dc ON dc.group_id = a.group_id \
                 AND dc.user_id = {user} AND dc.device_id = {device} \
               WHERE a.ack_to <= g.last_msg_id AND gm.group_id = ANY({group_ids}::bigint[]) \
               ORDER BY a.group_id FOR NO KEY UPDATE OF gm), \
             accepted AS ( \
               SELECT b.*, \
                 NOT (b.ack_to <= b.device_ack_was AND b.read_to <= b.read_was) AS moves, \
                 CASE WHEN {device} IS NULL THEN b.ack_to ELSE 0 END AS default_ack_to \
               FROM locked b \
               WHERE (SELECT count(*) FROM locked l JOIN seen s \
                   ON s.group_id = l.group_id AND s.row_version = l.row_version) \
                 = cardinality({group_ids})), \
             member_moved AS ( \
               {member_move} \
               FROM accepted t \
               WHERE group_members.group_id = t.group_id AND group_members.user_id = {user} \
                 AND t.moves AND (t.read_to > t.read_was OR t.ack_to > t.delivered_was \
                   OR t.default_ack_to > t.ack_was) \
               RETURNING group_members.group_id, group_members.last_ack_msg_id, \
                 group_members.last_read_msg_id, group_members.delivered_msg_id, \
                 group_members.own_msgs_after_read), \
             device_moved AS ( \
               INSERT INTO device_cursors (group_id, user_id, device_id, last_ack_msg_id) \
               SELECT t.group_id, {user}, {device}, t.ack_to FROM accepted t \
               WHERE {device} IS NOT NULL AND t.moves ORDER BY t.group_id \
               {DEVICE_CURSOR_FORWARD} \
               RETURNING group_id, last_ack_msg_id), \
             settled AS ( \
               SELECT t.group_id, {user} AS user_id, t.last_msg_id, t.read_was, \
                 t.delivered_was, \
                 COALESCE(m.last_read_msg_id, t.read_was) AS last_read_msg_id, \
                 COALESCE(m.delivered_msg_id, t.delivered_was) AS delivered_msg_id, \
                 COALESCE(m.own_msgs_after_read, t.own_was) AS own_msgs_after_read, \
                 CASE WHEN {device} IS NULL THEN COALESCE(m.last_ack_msg_id, t.ack_was) \
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
               SELECT group_id, user_id, read_was, delivered_msg_id, {now} FROM counted \
               WHERE receipts_changed), \
             read_event AS ( \
               INSERT INTO member_events (user_id, group_id, kind, device_id, created_at) \
               SELECT user_id, group_id, '{read}', {device_column}, {now} FROM counted WHERE read_moved), \
             badge_seen AS ( \
               SELECT ps.group_id, ps.xmin AS row_version \
               FROM counted c JOIN push_group_state ps \
                 ON ps.device_id = {device} AND ps.group_id = c.group_id \
               WHERE c.read_moved AND ps.group_id = ANY({group_ids}::bigint[])), \
             badge_rows AS MATERIALIZED ( \
               SELECT ps.group_id, ps.xmin AS row_version \
               FROM counted c JOIN push_group_state ps \
                 ON ps.device_id = {device} AND ps.group_id = c.group_id \
               WHERE c.read_moved AND ps.group_id = ANY({group_ids}::bigint[]) \
               ORDER BY ps.group_id FOR NO KEY UPDATE OF ps), \
             badge AS ( \
               {LOWER_BADGES} (SELECT c.group_id AS g, {UNREAD_OF_INPUTS} AS unread \
                 FROM counted c \
                 JOIN badge_rows b ON b.group_id = c.group_id \
                 JOIN badge_seen s ON s.group_id = b.group_id \
                   AND s.row_version = b.row_version) AS t \
               {LOWER_BADGES_OF_DEVICE} {device} \
                 AND push_group_state.group_id = ANY({group_ids}::bigint[])) \
             SELECT group_id, last_ack_msg_id, last_read_msg_id, last_msg_id, \
               own_msgs_after_read, not_counted_above_read, unread_mention_count, \
               receipts_changed, read_moved, wrote \
             FROM counted"
        )
    })
}

/// One group's row of the statement's answer: the cursor state the general path answers
/// too, and whether the statement wrote anything for it.
#[derive(QueryableByName)]
struct Acked {
    #[diesel(embed)]
    state: CursorState,
    #[diesel(sql_type = Bool)]
    wrote: bool,
}
