//! A group's life as its owner and the service see it: created with its first members,
//! renamed. Each change that members should learn of writes a system line.

use crate::domain::entries::Role;
use crate::domain::GroupId;
use diesel::prelude::*;

use super::access::{member_of, Checked};
use super::groups::find_group;
use super::members::{insert_joined, within_cap};
use super::system_lines::{append_system_line, SystemLine};
use crate::db::models::{now_utc, GroupRow, NewGroup, NewMember};
use crate::db::AnyConnection;
use crate::refuse_unless;
use crate::schema::groups;
use crate::wake_ups::events::Wakes;

/// Creates a group owned by `owner_id` with the given other members, if they fit under the
/// cap `max_members` (the owner counts).
pub fn create_group(
    conn: &mut AnyConnection,
    owner_id: &str,
    name: &str,
    member_ids: &[String],
    max_members: i64,
    wakes: &mut Wakes,
) -> Checked<GroupRow> {
    let others: Vec<&String> = member_ids.iter().filter(|id| *id != owner_id).collect();
    refuse_unless!(within_cap(0, others.len() + 1, max_members));
    let now = now_utc();
    let group_id: i64 = diesel::insert_into(groups::table)
        .values(&NewGroup {
            name,
            owner_id,
            last_msg_id: 0,
            created_at: now,
            last_activity_at: now,
        })
        .returning(groups::group_id)
        .get_result(conn)?;
    let mut rows = vec![NewMember::joining(group_id, owner_id, Role::Owner, 0, now)];
    rows.extend(
        others
            .into_iter()
            .map(|id| NewMember::joining(group_id, id, Role::Member, 0, now)),
    );
    insert_joined(conn, GroupId(group_id), &rows, wakes)?;
    let group = find_group(conn, GroupId(group_id))?.ok_or(diesel::result::Error::NotFound)?;
    Ok(Ok(group))
}

/// The owner `actor_id` renames the group; a line in its log tells the members. The same name
/// again changes nothing.
pub fn rename_group(
    conn: &mut AnyConnection,
    group_id: GroupId,
    actor_id: &str,
    name: &str,
    wakes: &mut Wakes,
) -> Checked<GroupRow> {
    let actor = refuse_unless!(member_of(conn, group_id, actor_id)?);
    refuse_unless!(actor.require_owner("rename the group"));
    if actor.group.name != name {
        diesel::update(groups::table.find(group_id))
            .set(groups::name.eq(name))
            .execute(conn)?;
        append_system_line(conn, group_id, actor_id, SystemLine::Renamed(name), wakes)?;
    }
    let group = find_group(conn, group_id)?.ok_or(diesel::result::Error::NotFound)?;
    Ok(Ok(group))
}
