//! System lines: entries of a group's log saying that its membership or its name changed, so
//! every member's devices learn of it through the ordinary pull and render it as a line. They
//! never count as unread and have no receipts.

use crate::domain::entries::EntryKind;
use crate::domain::GroupId;
use diesel::prelude::*;
use serde_json::json;

use super::groups::{allocate_msg_id, touch_activity};
use crate::db::models::{now_utc, NewMessage};
use crate::db::AnyConnection;
use crate::schema::group_msgs;
use crate::wake_ups::events::{WakeEvent, Wakes};

/// How many of the users a membership line names; `user_count` says how many there were.
pub const LISTED_USERS: usize = 100;

pub enum SystemLine<'a> {
    /// Users the actor added.
    Joined(&'a [String]),
    /// The actor left.
    Left,
    /// The actor removed this member.
    Removed(&'a str),
    /// The actor renamed the group to this.
    Renamed(&'a str),
}

impl SystemLine<'_> {
    fn kind(&self) -> EntryKind {
        match self {
            SystemLine::Joined(_) => EntryKind::MemberJoined,
            SystemLine::Left => EntryKind::MemberLeft,
            SystemLine::Removed(_) => EntryKind::MemberRemoved,
            SystemLine::Renamed(_) => EntryKind::GroupRenamed,
        }
    }

    /// The line's `detail` object: who it is about, or the new name.
    fn detail(&self, actor_id: &str) -> serde_json::Value {
        let users = |ids: &[&str]| {
            let listed: Vec<&str> = ids.iter().take(LISTED_USERS).copied().collect();
            json!({"user_ids": listed, "user_count": ids.len()})
        };
        match self {
            SystemLine::Joined(ids) => users(&ids.iter().map(String::as_str).collect::<Vec<_>>()),
            SystemLine::Left => users(&[actor_id]),
            SystemLine::Removed(user_id) => users(&[user_id]),
            SystemLine::Renamed(name) => json!({ "name": name }),
        }
    }
}

/// Appends a line written by `actor_id` to the group's log and returns its id. It takes the
/// group's next id under the row lock, as a send does, so ids stay contiguous. Nobody's
/// cursors move: every member's devices pull the line, and the unread rule skips it.
pub fn append_system_line(
    conn: &mut AnyConnection,
    group_id: GroupId,
    actor_id: &str,
    line: SystemLine<'_>,
    wakes: &mut Wakes,
) -> QueryResult<i64> {
    let msg_id = allocate_msg_id(conn, group_id)?;
    let now = now_utc();
    let detail = line.detail(actor_id).to_string();
    // A space cannot appear in a client's key, so a line never collides with a send.
    let client_msg_id = format!("system {msg_id}");
    diesel::insert_into(group_msgs::table)
        .values(&NewMessage {
            group_id: group_id.0,
            msg_id,
            kind: line.kind().as_str(),
            sender_id: actor_id,
            client_msg_id: &client_msg_id,
            content: "",
            created_at: now,
            target_msg_id: None,
            reply_to_msg_id: None,
            mention_all: false,
            ext: None,
            detail: Some(&detail),
        })
        .execute(conn)?;
    touch_activity(conn, group_id, now)?;
    wakes.record(WakeEvent::MessageSent(group_id));
    Ok(msg_id)
}
