//! Row structs (what a query returns) kept apart from insert forms (what a write takes).

use chrono::NaiveDateTime;
use diesel::prelude::*;

use crate::domain::entries::{EntryKind, Role};
use crate::schema::{group_members, group_msgs, groups};

#[derive(Queryable, QueryableByName, Selectable, Debug, Clone)]
#[diesel(table_name = groups)]
pub struct GroupRow {
    pub group_id: i64,
    pub name: String,
    pub owner_id: String,
    pub last_msg_id: i64,
    pub created_at: NaiveDateTime,
    /// When the group last had a message (its creation until then).
    pub last_activity_at: NaiveDateTime,
    /// Kept by the database itself (triggers on `group_members`), so no write can forget it.
    pub member_count: i64,
}

#[derive(Insertable)]
#[diesel(table_name = groups)]
pub struct NewGroup<'a> {
    pub name: &'a str,
    pub owner_id: &'a str,
    pub last_msg_id: i64,
    pub created_at: NaiveDateTime,
    pub last_activity_at: NaiveDateTime,
}

#[derive(Queryable, QueryableByName, Selectable, Debug, Clone)]
#[diesel(table_name = group_members)]
pub struct MemberRow {
    pub group_id: i64,
    pub user_id: String,
    pub role: Role,
    pub joined_after_msg_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub joined_at: NaiveDateTime,
    pub delivered_msg_id: i64,
    pub own_msgs_after_read: i64,
}

#[derive(Insertable, Clone)]
#[diesel(table_name = group_members)]
pub struct NewMember {
    pub group_id: i64,
    pub user_id: String,
    pub role: &'static str,
    pub joined_after_msg_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub joined_at: NaiveDateTime,
    pub delivered_msg_id: i64,
    pub own_msgs_after_read: i64,
}

impl NewMember {
    /// A member who joins now: their cursors start at the group's current last message.
    pub fn joining(
        group_id: i64,
        user_id: &str,
        role: Role,
        last_msg_id: i64,
        now: NaiveDateTime,
    ) -> Self {
        NewMember {
            group_id,
            user_id: user_id.to_owned(),
            role: role.as_str(),
            joined_after_msg_id: last_msg_id,
            last_ack_msg_id: last_msg_id,
            last_read_msg_id: last_msg_id,
            joined_at: now,
            delivered_msg_id: last_msg_id,
            own_msgs_after_read: 0,
        }
    }
}

impl MemberRow {
    pub fn is_owner(&self) -> bool {
        self.role == Role::Owner
    }
}

/// One entry of a group's log: a message, a change to a message, or a system line.
#[derive(Queryable, QueryableByName, Selectable, Debug, Clone)]
#[diesel(table_name = group_msgs)]
pub struct MessageRow {
    pub group_id: i64,
    pub msg_id: i64,
    pub kind: EntryKind,
    pub sender_id: String,
    pub client_msg_id: String,
    pub content: String,
    pub created_at: NaiveDateTime,
    /// The message a change entry changed.
    pub target_msg_id: Option<i64>,
    pub reply_to_msg_id: Option<i64>,
    pub mention_all: bool,
    /// The client's JSON object, exactly as sent.
    pub ext: Option<String>,
    /// A system line's JSON object.
    pub detail: Option<String>,
    pub edited_at: Option<NaiveDateTime>,
    pub retracted_at: Option<NaiveDateTime>,
}

#[derive(Insertable)]
#[diesel(table_name = group_msgs)]
pub struct NewMessage<'a> {
    pub group_id: i64,
    pub msg_id: i64,
    pub kind: &'static str,
    pub sender_id: &'a str,
    pub client_msg_id: &'a str,
    pub content: &'a str,
    pub created_at: NaiveDateTime,
    pub target_msg_id: Option<i64>,
    pub reply_to_msg_id: Option<i64>,
    pub mention_all: bool,
    pub ext: Option<&'a str>,
    pub detail: Option<&'a str>,
}

/// Now, in UTC, truncated to microseconds so both engines store the same value.
pub fn now_utc() -> NaiveDateTime {
    use chrono::{SubsecRound, Utc};
    Utc::now().naive_utc().trunc_subsecs(6)
}
