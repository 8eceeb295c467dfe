//! Queries on `group_members`: membership changes and the members' cursors.

use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use std::collections::HashSet;

use super::access::{member_of, Checked, Refusal};
use super::devices;
use super::groups::lock_group;
use super::member_events::{record_member_events, Cause, MemberEventKind};
use super::models::{now_utc, MemberRow, NewMember, Role};
use super::raw_sql::RawSql;
use super::receipts::record_change;
use super::system_lines::{append_system_line, SystemLine};
use super::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::schema::{group_members, groups};
use crate::wake::{WakeEvent, Wakes};
use crate::{on_engine, refuse_unless};

pub fn find_member(
    conn: &mut AnyConnection,
    group_id: i64,
    user_id: &str,
) -> QueryResult<Option<MemberRow>> {
    group_members::table
        .find((group_id, user_id))
        .select(MemberRow::as_select())
        .first(conn)
        .optional()
}

/// One page of members ordered by user id, starting after `after_user_id`.
pub fn list_members(
    conn: &mut AnyConnection,
    group_id: i64,
    after_user_id: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<MemberRow>> {
    let mut query = group_members::table
        .filter(group_members::group_id.eq(group_id))
        .select(MemberRow::as_select())
        .order(group_members::user_id.asc())
        .limit(limit)
        .into_boxed();
    if let Some(after) = after_user_id {
        query = query.filter(group_members::user_id.gt(after));
    }
    query.load(conn)
}

/// The owner `actor_id` adds users who are not members yet (existing members are left as
/// they are); returns the users who joined. A line in the group's log says who joined; the new
/// members start just before it, so it is the first entry they pull.
pub fn add_members(
    conn: &mut AnyConnection,
    group_id: i64,
    actor_id: &str,
    user_ids: &[String],
    max_members: i64,
    wakes: &mut Wakes,
) -> Checked<Vec<String>> {
    let actor = refuse_unless!(member_of(conn, group_id, actor_id)?);
    refuse_unless!(actor.require_owner("add members"));
    let locked = lock_group(conn, group_id)?;
    let existing: HashSet<String> = group_members::table
        .filter(group_members::group_id.eq(group_id))
        .filter(group_members::user_id.eq_any(user_ids))
        .select(group_members::user_id)
        .load::<String>(conn)?
        .into_iter()
        .collect();
    let now = now_utc();
    let rows: Vec<NewMember> = user_ids
        .iter()
        .filter(|id| !existing.contains(*id))
        .map(|id| NewMember::joining(group_id, id, Role::Member, locked.last_msg_id, now))
        .collect();
    refuse_unless!(within_cap(locked.member_count, rows.len(), max_members));
    if rows.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let joined: Vec<String> = rows.iter().map(|r| r.user_id.clone()).collect();
    append_system_line(conn, group_id, actor_id, SystemLine::Joined(&joined), wakes)?;
    insert_joined(conn, group_id, &rows, wakes)?;
    Ok(Ok(rows.into_iter().map(|r| r.user_id).collect()))
}

/// Whether a group of `current` members may take `adding` more under the cap `max`.
pub fn within_cap(current: i64, adding: usize, max: i64) -> Result<(), Refusal> {
    let adding = adding as i64;
    if current + adding > max {
        return Err(Refusal::TooManyMembers {
            current,
            adding,
            max,
        });
    }
    Ok(())
}

/// Inserts new members of a group, tells their other devices they joined, and wakes their
/// waiting polls (so they start watching it): what creating a group and adding members share.
pub fn insert_joined(
    conn: &mut AnyConnection,
    group_id: i64,
    rows: &[NewMember],
    wakes: &mut Wakes,
) -> QueryResult<()> {
    // In chunks, to stay below SQLite's limit on bind parameters in one statement.
    for chunk in rows.chunks(500) {
        on_engine!(conn, |c| diesel::insert_into(group_members::table)
            .values(chunk)
            .execute(c))?;
    }
    let joined: Vec<&str> = rows.iter().map(|r| r.user_id.as_str()).collect();
    record_member_events(
        conn,
        group_id,
        &joined,
        MemberEventKind::Joined,
        Cause::NotTheUser,
    )?;
    for user in joined {
        wakes.record(WakeEvent::MembershipChanged(user.to_owned()));
    }
    Ok(())
}

/// `actor_id` removes `user_id` from the group: the owner anyone but themselves, any member
/// themselves (leaving). The member leaves the audience of every message they could see, so
/// those messages' receipts change; a line in the group's log tells the others.
pub fn remove_member(
    conn: &mut AnyConnection,
    group_id: i64,
    actor_id: &str,
    user_id: &str,
    wakes: &mut Wakes,
) -> Checked<()> {
    let actor = refuse_unless!(member_of(conn, group_id, actor_id)?);
    if user_id != actor_id {
        refuse_unless!(actor.require_owner("remove other members"));
    }
    if user_id == actor.group.owner_id {
        return Ok(Err(Refusal::OwnerCannotLeave));
    }
    // The group's row first, as a send takes it before the sender's row: a removal racing
    // the removed member's send waits instead of deadlocking with it.
    lock_group(conn, group_id)?;
    let Some(member) = find_member(conn, group_id, user_id)? else {
        let user_id = user_id.to_owned();
        return Ok(Err(Refusal::NoSuchMember { user_id }));
    };
    diesel::delete(group_members::table.find((group_id, user_id))).execute(conn)?;
    let line = if user_id == actor_id {
        SystemLine::Left
    } else {
        SystemLine::Removed(user_id)
    };
    append_system_line(conn, group_id, actor_id, line, wakes)?;
    // Read after the delete: a message committed meanwhile is in the range too.
    let last_msg_id: i64 = groups::table
        .find(group_id)
        .select(groups::last_msg_id)
        .first(conn)?;
    record_change(
        conn,
        GroupId(group_id),
        user_id,
        MsgId(member.joined_after_msg_id),
        MsgId(last_msg_id),
    )?;
    record_member_events(
        conn,
        group_id,
        &[user_id],
        MemberEventKind::Left,
        Cause::NotTheUser,
    )?;
    wakes.record(WakeEvent::CursorMoved(group_id));
    wakes.record(WakeEvent::MembershipChanged(user_id.to_owned()));
    Ok(Ok(()))
}

/// The ids of every group the user belongs to (what their long-polls wait on).
pub fn my_group_ids(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Vec<i64>> {
    group_members::table
        .filter(group_members::user_id.eq(user_id))
        .select(group_members::group_id)
        .load(conn)
}

/// Where an ack moves a member's cursors: each only forwards.
#[derive(Debug, Clone, Copy)]
pub struct Advance {
    /// The default device's delivered cursor (0 leaves it: a named device acked).
    pub default_ack_to: i64,
    pub read_to: i64,
    /// Delivered to some device: at least `read_to`.
    pub delivered_to: i64,
}

/// A member's cursors after a move.
#[derive(Queryable, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberCursorsAfter {
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub delivered_msg_id: i64,
    pub own_msgs_after_read: i64,
}

/// `CASE WHEN <column> < to THEN to ELSE <column> END`: "never backwards" in the one spelling
/// both engines accept (no GREATEST on SQLite, no two-argument MAX on PostgreSQL). The
/// values are integers, written into the SQL as such.
fn forward_to(column: &str, to: i64) -> SqlLiteral<BigInt> {
    sql(&format!(
        "CASE WHEN {column} < {to} THEN {to} ELSE {column} END"
    ))
}

/// `UPDATE group_members SET …`: the one rule for moving a member's cursors forward, given
/// SQL for where each goes (integers, or columns of a joined table whose names differ from
/// the membership row's). Racing moves cannot lower each other, and the count of the
/// member's own messages above the read cursor moves with the cursor (the sender index
/// bounds that count to their own messages in the range the cursor passes). SET expressions
/// all see the row as it was before the update, on both engines; an ack_to of 0 never moves
/// a cursor, which is at least 0.
pub(super) fn advance_member_sql(ack_to: &str, read_to: &str, delivered_to: &str) -> String {
    format!(
        "UPDATE group_members SET \
           last_ack_msg_id = CASE WHEN last_ack_msg_id < {ack_to} THEN {ack_to} \
             ELSE last_ack_msg_id END, \
           own_msgs_after_read = CASE WHEN last_read_msg_id < {read_to} \
             THEN own_msgs_after_read - (SELECT count(*) FROM group_msgs m \
               WHERE m.group_id = group_members.group_id \
                 AND m.sender_id = group_members.user_id AND m.kind = 'message' \
                 AND m.msg_id > group_members.last_read_msg_id \
                 AND m.msg_id <= {read_to}) \
             ELSE own_msgs_after_read END, \
           last_read_msg_id = CASE WHEN last_read_msg_id < {read_to} THEN {read_to} \
             ELSE last_read_msg_id END, \
           delivered_msg_id = CASE WHEN delivered_msg_id < {delivered_to} \
             THEN {delivered_to} ELSE delivered_msg_id END"
    )
}

/// Moves one member's cursors forward in each of several groups, in one statement, by
/// [`advance_member_sql`]'s rule. Returns the cursors after the move by group; a group whose
/// membership row is gone (removed since it was read) is missing.
///
/// On PostgreSQL the caller has locked the rows first, with [`lock_memberships`]: under READ
/// COMMITTED an UPDATE that waits for a row changed meanwhile (a recall of the member's own
/// message lowering their count) updates the row as it is now but counts the messages in
/// its subquery as they were when it started, and would subtract the recalled message a
/// second time. An UPDATE after the lock starts after whatever the lock waited for.
pub fn advance_members(
    conn: &mut AnyConnection,
    user_id: &str,
    moves: &[(i64, Advance)],
) -> QueryResult<Vec<(i64, MemberCursorsAfter)>> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Vec<i64>> = moves
        .iter()
        .map(|(group_id, to)| vec![*group_id, to.default_ack_to, to.read_to, to.delivered_to])
        .collect();
    let query = RawSql::default()
        .sql(&advance_member_sql(
            "t.ack_to",
            "t.read_to",
            "t.delivered_to",
        ))
        .sql(" FROM ")
        .int_rows("t", &["g", "ack_to", "read_to", "delivered_to"], &rows)
        .sql(" WHERE group_members.group_id = t.g AND group_members.user_id = ")
        .text(user_id)
        .sql(
            " RETURNING group_id, last_ack_msg_id, last_read_msg_id, delivered_msg_id, \
             own_msgs_after_read",
        )
        // Kept for one group (the ack of one group), whose text is the same every time.
        .keep_prepared();
    let moved: Vec<MovedMember> = query.load(conn)?;
    Ok(moved
        .into_iter()
        .map(|m| {
            let after = MemberCursorsAfter {
                last_ack_msg_id: m.last_ack_msg_id,
                last_read_msg_id: m.last_read_msg_id,
                delivered_msg_id: m.delivered_msg_id,
                own_msgs_after_read: m.own_msgs_after_read,
            };
            (m.group_id, after)
        })
        .collect())
}

/// PostgreSQL: locks the user's membership rows of `group_ids`, in group order (see
/// [`lock_in_group_order`]), by a statement of its own. SQLite has one writer and no row
/// locks.
pub fn lock_memberships(
    conn: &mut AnyConnection,
    user_id: &str,
    group_ids: &[i64],
) -> QueryResult<()> {
    lock_in_group_order(conn, "group_members", "user_id", user_id, group_ids).map(|_| ())
}

/// PostgreSQL: locks the rows of `table` whose `key_column` is `key` in `group_ids`, in group
/// order, and answers the groups whose rows it found (and locked). An `UPDATE … FROM (VALUES
/// …)` locks rows in whatever order its plan reaches them, so two multi-group writes of one
/// user could take them in opposite orders and deadlock; locking first, sorted, gives every
/// such write the same order. SQLite has one writer and no row locks: None.
pub(super) fn lock_in_group_order(
    conn: &mut AnyConnection,
    table: &str,
    key_column: &str,
    key: &str,
    group_ids: &[i64],
) -> QueryResult<Option<Vec<i64>>> {
    #[derive(diesel::QueryableByName)]
    struct Locked {
        #[diesel(sql_type = BigInt)]
        group_id: i64,
    }
    if !matches!(conn, AnyConnection::Postgresql(_)) {
        return Ok(None);
    }
    if group_ids.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let locked: Vec<Locked> = RawSql::default()
        .sql(&format!(
            "SELECT group_id FROM {table} WHERE {key_column} = "
        ))
        .text(key)
        .sql(" AND group_id IN ")
        .int_list(group_ids)
        .sql(" ORDER BY group_id FOR NO KEY UPDATE")
        .load(conn)?;
    Ok(Some(locked.into_iter().map(|row| row.group_id).collect()))
}

#[derive(diesel::QueryableByName)]
struct MovedMember {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
    #[diesel(sql_type = BigInt)]
    last_ack_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    last_read_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    delivered_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    own_msgs_after_read: i64,
}

/// After the member wrote entry `msg_id` to the group's log: each cursor that was at the entry
/// before it (they had everything) moves onto it; a read cursor that stays behind counts one
/// more own message above it when the entry is a message (`counted`), the only kind the
/// unread rule counts. So their own entry is never unread, and nothing they had not received
/// is skipped. Of the delivered cursors only the writing device's moves.
pub fn advance_past_own_entry(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_id: &str,
    device: Option<&DeviceId>,
    msg_id: MsgId,
    counted: bool,
) -> QueryResult<()> {
    let (previous, msg_id) = (msg_id.0 - 1, msg_id.0);
    // One text whatever the values, so each connection keeps it prepared. Every SET
    // expression reads the row as it was before the update, on both engines.
    let move_if_at = |query: RawSql, column: &str| {
        query
            .sql(&format!("{column} = CASE WHEN {column} = "))
            .int(previous)
            .sql(" THEN ")
            .int(msg_id)
            .sql(&format!(" ELSE {column} END"))
    };
    let mut query = RawSql::default()
        .sql("UPDATE group_members SET own_msgs_after_read = CASE WHEN last_read_msg_id = ")
        .int(previous)
        .sql(" THEN own_msgs_after_read ELSE own_msgs_after_read + ")
        .int(i64::from(counted))
        .sql(" END, ");
    query = move_if_at(query, "last_read_msg_id").sql(", ");
    query = move_if_at(query, "delivered_msg_id");
    if device.is_none() {
        // The default device's delivered cursor is the membership row's own.
        query = move_if_at(query.sql(", "), "last_ack_msg_id");
    }
    let updated = query
        .sql(" WHERE group_id = ")
        .int(group_id.0)
        .sql(" AND user_id = ")
        .text(user_id)
        .keep_prepared()
        .execute(conn)?;
    if updated == 0 {
        // The sender's membership vanished between the access check and the send.
        return Err(diesel::result::Error::NotFound);
    }
    if let Some(device) = device {
        devices::advance_device_past_own(conn, group_id, user_id, device, MsgId(msg_id))?;
    }
    Ok(())
}

/// Before messages of the group up to `through_msg_id` expire: every member whose read cursor
/// is below moves past them, so what no longer exists never counts as unread. One statement
/// for the group; the count of own messages above the cursor moves with it. The members'
/// other devices hear of it as of any read.
pub fn read_past_expired(
    conn: &mut AnyConnection,
    group_id: GroupId,
    through: MsgId,
    wakes: &mut Wakes,
) -> QueryResult<()> {
    let (group_id, through_msg_id) = (group_id.0, through.0);
    let own_after = sql::<BigInt>(&format!(
        "own_msgs_after_read - (SELECT count(*) FROM group_msgs m \
           WHERE m.group_id = group_members.group_id AND m.sender_id = group_members.user_id \
             AND m.kind = 'message' \
             AND m.msg_id > group_members.last_read_msg_id AND m.msg_id <= {through_msg_id})"
    ));
    let moved: Vec<String> = diesel::update(
        group_members::table
            .filter(group_members::group_id.eq(group_id))
            .filter(group_members::last_read_msg_id.lt(through_msg_id)),
    )
    .set((
        group_members::own_msgs_after_read.eq(own_after),
        group_members::last_read_msg_id.eq(through_msg_id),
        group_members::delivered_msg_id.eq(forward_to("delivered_msg_id", through_msg_id)),
    ))
    .returning(group_members::user_id)
    .get_results(conn)?;
    let users: Vec<&str> = moved.iter().map(String::as_str).collect();
    record_member_events(
        conn,
        group_id,
        &users,
        MemberEventKind::Read,
        Cause::NotTheUser,
    )?;
    for user in moved {
        wakes.record(WakeEvent::ReadMoved(user));
    }
    Ok(())
}
