//! Queries on `group_members`: access checks, membership changes and the two cursors.

use diesel::prelude::*;

use super::announce::announce;
use super::groups::{count_members, lock_last_msg_id};
use super::models::{now_utc, GroupRow, MemberRow, NewMember, Role};
use super::receipts::record_change;
use super::AnyConnection;
use crate::on_engine;
use crate::schema::{group_members, groups};
use crate::wake::WakeEvent;

/// What a user may do with a group, found in one query.
pub enum Access {
    NoGroup,
    NotMember(GroupRow),
    Member(GroupRow, MemberRow),
}

pub fn access(conn: &mut AnyConnection, group_id: i64, user_id: &str) -> QueryResult<Access> {
    let found: Option<(GroupRow, Option<MemberRow>)> = groups::table
        .left_join(
            group_members::table.on(group_members::group_id
                .eq(groups::group_id)
                .and(group_members::user_id.eq(user_id))),
        )
        .filter(groups::group_id.eq(group_id))
        .select((GroupRow::as_select(), Option::<MemberRow>::as_select()))
        .first(conn)
        .optional()?;
    Ok(match found {
        None => Access::NoGroup,
        Some((group, None)) => Access::NotMember(group),
        Some((group, Some(member))) => Access::Member(group, member),
    })
}

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

pub enum AddOutcome {
    /// The users who were not members yet and now are.
    Added(Vec<String>),
    /// The group would exceed its member limit; nothing was added.
    TooMany { current: i64, max: i64 },
}

/// Adds users who are not members yet; existing members are left as they are.
pub fn add_members(
    conn: &mut AnyConnection,
    group_id: i64,
    user_ids: &[String],
    max_members: i64,
    instance: &str,
) -> QueryResult<AddOutcome> {
    conn.transaction(|conn| {
        let last_msg_id = lock_last_msg_id(conn, group_id)?;
        let existing: Vec<String> = group_members::table
            .filter(group_members::group_id.eq(group_id))
            .filter(group_members::user_id.eq_any(user_ids))
            .select(group_members::user_id)
            .load(conn)?;
        let now = now_utc();
        let rows: Vec<NewMember> = user_ids
            .iter()
            .filter(|id| !existing.contains(id))
            .map(|id| NewMember::joining(group_id, id, Role::Member, last_msg_id, now))
            .collect();
        let current = count_members(conn, group_id)?;
        if current + rows.len() as i64 > max_members {
            return Ok(AddOutcome::TooMany {
                current,
                max: max_members,
            });
        }
        if !rows.is_empty() {
            on_engine!(conn, |c| diesel::insert_into(group_members::table)
                .values(&rows)
                .execute(c))?;
        }
        for row in &rows {
            announce(conn, instance, &WakeEvent::MemberAdded(row.user_id.clone()))?;
        }
        Ok(AddOutcome::Added(
            rows.into_iter().map(|r| r.user_id).collect(),
        ))
    })
}

/// Removes a membership; true when there was one. The member leaves the audience of every
/// message they could see, so those messages' receipts change.
pub fn remove_member(
    conn: &mut AnyConnection,
    group_id: i64,
    user_id: &str,
    instance: &str,
) -> QueryResult<bool> {
    conn.transaction(|conn| {
        let Some(member) = find_member(conn, group_id, user_id)? else {
            return Ok(false);
        };
        diesel::delete(group_members::table.find((group_id, user_id))).execute(conn)?;
        let last_msg_id: i64 = groups::table
            .find(group_id)
            .select(groups::last_msg_id)
            .first(conn)?;
        record_change(
            conn,
            group_id,
            user_id,
            member.joined_after_msg_id,
            last_msg_id,
        )?;
        announce(conn, instance, &WakeEvent::CursorMoved(group_id))?;
        Ok(true)
    })
}

/// The ids of every group the user belongs to (what their long-polls wait on).
pub fn my_group_ids(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Vec<i64>> {
    group_members::table
        .filter(group_members::user_id.eq(user_id))
        .select(group_members::group_id)
        .load(conn)
}

/// The caller's row of `/v1/me/groups` for each of the given groups they belong to.
pub fn my_groups_by_id(
    conn: &mut AnyConnection,
    user_id: &str,
    group_ids: &[i64],
) -> QueryResult<Vec<MyGroupRow>> {
    group_members::table
        .inner_join(groups::table)
        .filter(group_members::user_id.eq(user_id))
        .filter(group_members::group_id.eq_any(group_ids))
        .select(MyGroupRow::as_select())
        .order(group_members::group_id.asc())
        .load(conn)
}

/// Moves a member's cursors forward to at least the given values, never backwards, in one
/// statement (so two racing acks cannot lower each other). Returns the cursors after the move.
pub fn advance_cursors(
    conn: &mut AnyConnection,
    group_id: i64,
    user_id: &str,
    ack_to: i64,
    read_to: i64,
) -> QueryResult<(i64, i64)> {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;
    // CASE rather than GREATEST/MAX: the one spelling both engines accept.
    let ack = sql::<BigInt>("CASE WHEN last_ack_msg_id < ")
        .bind::<BigInt, _>(ack_to)
        .sql(" THEN ")
        .bind::<BigInt, _>(ack_to)
        .sql(" ELSE last_ack_msg_id END");
    let read = sql::<BigInt>("CASE WHEN last_read_msg_id < ")
        .bind::<BigInt, _>(read_to)
        .sql(" THEN ")
        .bind::<BigInt, _>(read_to)
        .sql(" ELSE last_read_msg_id END");
    diesel::update(group_members::table.find((group_id, user_id)))
        .set((
            group_members::last_ack_msg_id.eq(ack),
            group_members::last_read_msg_id.eq(read),
        ))
        .returning((
            group_members::last_ack_msg_id,
            group_members::last_read_msg_id,
        ))
        .get_result(conn)
}

/// One row of a user's group list with the figures unread counts are computed from: a
/// membership joined with its group.
#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = group_members)]
pub struct MyGroupRow {
    #[diesel(select_expression = groups::group_id)]
    pub group_id: i64,
    #[diesel(select_expression = groups::name)]
    pub name: String,
    #[diesel(select_expression = groups::last_msg_id)]
    pub last_msg_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
}

/// A page of the user's groups ordered by id. Unread counts come from two columns of the
/// same row (`last_msg_id - last_read_msg_id`), so no message rows are counted.
pub fn my_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    after_group_id: i64,
    unread_only: bool,
    limit: i64,
) -> QueryResult<Vec<MyGroupRow>> {
    let mut query = group_members::table
        .inner_join(groups::table)
        .filter(group_members::user_id.eq(user_id))
        .filter(group_members::group_id.gt(after_group_id))
        .select(MyGroupRow::as_select())
        .order(group_members::group_id.asc())
        .limit(limit)
        .into_boxed();
    if unread_only {
        query = query.filter(groups::last_msg_id.gt(group_members::last_read_msg_id));
    }
    query.load(conn)
}
