//! Queries on `group_members`: membership changes and the members' cursors.

use crate::domain::entries::Role;
use crate::domain::refusal::Refusal;
use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use std::collections::HashSet;

use super::access::{member_of, Checked};
use super::groups::lock_group;
use super::member_events::{record_member_events, Cause, MemberEventKind};
use super::system_lines::{append_system_line, SystemLine};
use super::user_groups;
use crate::db::engine::distribution::one_group;
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::member_cursors::cursor_counts::{CursorMoves, MemberCursors};
use crate::db::member_cursors::receipts::record_change;
use crate::db::member_cursors::unread::own_messages_passed;
use crate::db::models::{now_utc, MemberRow, NewMember};
use crate::db::AnyConnection;
use crate::domain::{GroupId, MsgId};
use crate::schema::{group_members, groups};
use crate::wake_ups::events::{WakeEvent, Wakes};
use crate::{on_engine, refuse_unless};

pub fn find_member(
    conn: &mut AnyConnection,
    group_id: GroupId,
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
    group_id: GroupId,
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
    group_id: GroupId,
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
        .map(|id| NewMember::joining(group_id.0, id, Role::Member, locked.last_msg_id, now))
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

/// Keeps the group's member count with the rows: `change` members joined (or left, when
/// negative), in the transaction that inserted or deleted them.
fn count_members(conn: &mut AnyConnection, group_id: GroupId, change: i64) -> QueryResult<()> {
    RawSql::default()
        .sql("UPDATE groups SET member_count = member_count + ")
        .int(change)
        .sql(" WHERE group_id = ")
        .int(group_id)
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}

/// Inserts new members of a group, tells their other devices they joined, and wakes their
/// waiting polls (so they start watching it): what creating a group and adding members share.
pub fn insert_joined(
    conn: &mut AnyConnection,
    group_id: GroupId,
    rows: &[NewMember],
    wakes: &mut Wakes,
) -> QueryResult<()> {
    // In chunks, to stay below SQLite's limit on bind parameters in one statement.
    let mut cursor_moves = CursorMoves::default();
    for chunk in rows.chunks(500) {
        on_engine!(conn, |c| diesel::insert_into(group_members::table)
            .values(chunk)
            .execute(c))?;
    }
    for row in rows {
        // A new member's three cursors start together, at their join point.
        cursor_moves.joined(group_id, row.joined_after_msg_id);
    }
    cursor_moves.write(conn)?;
    count_members(conn, group_id, rows.len() as i64)?;
    let joined: Vec<&str> = rows.iter().map(|r| r.user_id.as_str()).collect();
    user_groups::record_joined(conn, group_id, &joined)?;
    record_member_events(
        conn,
        group_id,
        &joined,
        MemberEventKind::Joined,
        Cause::NotTheUser,
    )?;
    wakes.feed_rows_in(group_id);
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
    group_id: GroupId,
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
    // The row as it is when it goes: an ack may have moved its cursors since any read.
    let removed: Option<(i64, i64, i64)> =
        diesel::delete(group_members::table.find((group_id, user_id)))
            .returning((
                group_members::last_read_msg_id,
                group_members::delivered_msg_id,
                group_members::joined_after_msg_id,
            ))
            .get_result(conn)
            .optional()?;
    let Some((read, delivered, joined)) = removed else {
        let user_id = user_id.to_owned();
        return Ok(Err(Refusal::NoSuchMember { user_id }));
    };
    let cursors = MemberCursors {
        read,
        delivered,
        joined,
    };
    record_left_member(conn, group_id, actor_id, user_id, cursors, wakes)?;
    Ok(Ok(()))
}

/// What a member's leaving (their row already deleted, with `cursors` as it had them) writes
/// besides: the histogram of cursors and the member count, the user's list of groups, the
/// line in the group's log, the receipt change over every message they could see (their
/// leaving changes those messages' audience), and their own event for their other devices.
fn record_left_member(
    conn: &mut AnyConnection,
    group_id: GroupId,
    actor_id: &str,
    user_id: &str,
    cursors: MemberCursors,
    wakes: &mut Wakes,
) -> QueryResult<()> {
    let mut cursor_moves = CursorMoves::default();
    cursor_moves.left(group_id, cursors);
    cursor_moves.write(conn)?;
    count_members(conn, group_id, -1)?;
    user_groups::record_left(conn, group_id, user_id)?;
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
        group_id,
        user_id,
        MsgId(cursors.joined),
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
    Ok(())
}

/// A member's cursors after an ack, decided from the membership row as locked: each only
/// forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    /// The default device's delivered cursor.
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    /// Delivered to some device.
    pub delivered_msg_id: i64,
}

impl Advance {
    /// Where an ack to `read_to`, delivering through `delivered_to` (at least `read_to`),
    /// leaves `member`'s cursors; the default device's moves only when `default_device`
    /// acked. None when it leaves them all as they are.
    pub fn of(
        member: &MemberRow,
        default_device: bool,
        read_to: i64,
        delivered_to: i64,
    ) -> Option<Advance> {
        let after = Advance {
            last_ack_msg_id: if default_device {
                member.last_ack_msg_id.max(delivered_to)
            } else {
                member.last_ack_msg_id
            },
            last_read_msg_id: member.last_read_msg_id.max(read_to),
            delivered_msg_id: member.delivered_msg_id.max(delivered_to),
        };
        let before = Advance {
            last_ack_msg_id: member.last_ack_msg_id,
            last_read_msg_id: member.last_read_msg_id,
            delivered_msg_id: member.delivered_msg_id,
        };
        (after != before).then_some(after)
    }
}

/// `CASE WHEN <column> < to THEN to ELSE <column> END`: "never backwards" in the one spelling
/// both engines accept (no GREATEST on SQLite, no two-argument MAX on PostgreSQL). The
/// values are integers, written into the SQL as such.
fn forward_to(column: &str, to: i64) -> SqlLiteral<BigInt> {
    sql(&format!(
        "CASE WHEN {column} < {to} THEN {to} ELSE {column} END"
    ))
}

/// The statement that writes members' cursors where acks left them, each (group, user) to
/// its [`Advance`]; the count of the member's own messages above the read cursor moves with
/// the cursor ([`own_messages_passed`]). None when nothing moves. For a caller that locked
/// the rows and read them as locked ([`super::access::lock_memberships`]), and so decided
/// the moves from rows nobody else can change; it starts after the locks, so the count sees
/// whatever the locks waited for (a recall of the member's own message, which lowered it).
pub fn advance_members(moves: &[((i64, &str), Advance)]) -> Option<RawSql> {
    if moves.is_empty() {
        return None;
    }
    let rows: Vec<Vec<Value<'_>>> = moves
        .iter()
        .map(|((group_id, user_id), to)| {
            vec![
                Value::Int(*group_id),
                Value::Text(user_id),
                Value::Int(to.last_ack_msg_id),
                Value::Int(to.last_read_msg_id),
                Value::Int(to.delivered_msg_id),
            ]
        })
        .collect();
    let one_group = one_group(moves.iter().map(|m| m.0 .0));
    let query = RawSql::default().sql(
        "UPDATE group_members SET last_ack_msg_id = t.ack_to, \
         own_msgs_after_read = own_msgs_after_read - ",
    );
    let query = own_messages_passed(query, "group_members", "t.read_to", one_group);
    Some(
        query
            .sql(
                ", last_read_msg_id = t.read_to, delivered_msg_id = t.delivered_to \
                 FROM ",
            )
            .rows("t", &["g", "u", "ack_to", "read_to", "delivered_to"], &rows)
            .sql(" WHERE group_members.group_id = t.g AND group_members.user_id = t.u")
            .within_one_group("group_members.group_id", one_group)
            // Kept for one membership (the ack of one group), whose text is the same every
            // time.
            .keep_prepared(),
    )
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
    let through_msg_id = through.0;
    let behind = members_behind(conn, group_id, through_msg_id)?;
    if behind.is_empty() {
        return Ok(());
    }
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
    let moved_now: HashSet<&str> = moved.iter().map(String::as_str).collect();
    let mut cursor_moves = CursorMoves::default();
    for (user_id, was) in &behind {
        // Locked since they were read: each row moved exactly so.
        let now = MemberCursors {
            read: through_msg_id,
            delivered: was.delivered.max(through_msg_id),
            joined: was.joined,
        };
        if moved_now.contains(user_id.as_str()) {
            cursor_moves.moved(group_id, *was, now);
        }
    }
    cursor_moves.write(conn)?;
    let users: Vec<&str> = moved.iter().map(String::as_str).collect();
    record_member_events(
        conn,
        group_id,
        &users,
        MemberEventKind::Read,
        Cause::NotTheUser,
    )?;
    wakes.feed_rows_in(group_id);
    for user in moved {
        wakes.record(WakeEvent::ReadMoved(user));
    }
    Ok(())
}

/// A member's three cursors as a statement returns them.
#[derive(diesel::QueryableByName)]
struct UserCursors {
    #[diesel(sql_type = diesel::sql_types::Text)]
    user_id: String,
    #[diesel(sql_type = BigInt)]
    last_read_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    delivered_msg_id: i64,
    #[diesel(sql_type = BigInt)]
    joined_after_msg_id: i64,
}

impl UserCursors {
    fn cursors(&self) -> MemberCursors {
        MemberCursors {
            read: self.last_read_msg_id,
            delivered: self.delivered_msg_id,
            joined: self.joined_after_msg_id,
        }
    }
}

/// The members of the group whose read cursor is below `through_msg_id`, with their cursors,
/// locked on PostgreSQL until the transaction ends (SQLite has one writer).
fn members_behind(
    conn: &mut AnyConnection,
    group_id: GroupId,
    through_msg_id: i64,
) -> QueryResult<Vec<(String, MemberCursors)>> {
    let lock = match conn {
        AnyConnection::Postgresql(_) => " ORDER BY user_id FOR NO KEY UPDATE",
        AnyConnection::Sqlite(_) => "",
    };
    let rows: Vec<UserCursors> = RawSql::default()
        .sql(
            "SELECT user_id, last_read_msg_id, delivered_msg_id, joined_after_msg_id \
             FROM group_members WHERE group_id = ",
        )
        .int(group_id)
        .sql(" AND last_read_msg_id < ")
        .int(through_msg_id)
        .sql(lock)
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let cursors = r.cursors();
            (r.user_id, cursors)
        })
        .collect())
}
