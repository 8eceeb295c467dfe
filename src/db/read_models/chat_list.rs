//! The caller's groups as a chat list: each with its cursors, unread count inputs and a preview
//! of its last line, in group order or by latest activity. Every figure comes from the
//! membership row, the group row, at most one message row per group and the index ranges the
//! unread rule reads (see `unread`): no message counting.

use crate::domain::entries::EntryKind;
use std::sync::LazyLock;

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};

use crate::db::engine::fixed_sql::fixed_sql;
use crate::db::engine::raw_sql::RawSql;
use crate::db::member_cursors::unread::{
    unread_sql, UnreadInputs, MENTIONS_OVER_ROWS, NOT_COUNTED_OVER_ROWS,
};

use crate::db::AnyConnection;
use crate::domain::PREVIEW_CHARS;
use crate::schema::{device_cursors, group_members, group_msgs, groups};

diesel::define_sql_function! {
    /// The characters of `text` from `start` (1-based), at most `length` of them; both engines
    /// count characters, not bytes.
    fn substr(text: Nullable<Text>, start: Integer, length: Integer) -> Nullable<Text>;
}

/// One group of the caller's list, as the calling device sees it.
#[derive(Queryable, Debug, Clone)]
pub struct ChatListRow {
    pub group_id: i64,
    pub name: String,
    pub last_msg_id: i64,
    pub last_activity_at: NaiveDateTime,
    pub joined_after_msg_id: i64,
    pub default_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub own_msgs_after_read: i64,
    pub not_counted_above_read: i64,
    pub unread_mention_count: i64,
    /// The named device's delivered cursor, when it acked in this group.
    pub device_ack_msg_id: Option<i64>,
    pub last_message: Option<LastMessage>,
}

/// The group's last line (its newest entry that is not a change entry), when the member may see
/// it and it is still stored.
#[derive(Queryable, Debug, Clone)]
pub struct LastMessage {
    pub msg_id: i64,
    pub kind: EntryKind,
    pub sender_id: String,
    pub created_at: NaiveDateTime,
    /// Up to one character more than a preview holds, so the caller knows it was cut.
    pub content_start: String,
    /// A system line's facts (who joined, the new name).
    pub detail: Option<String>,
}

impl ChatListRow {
    pub fn unread(&self) -> UnreadInputs {
        UnreadInputs {
            last_msg_id: self.last_msg_id,
            last_read_msg_id: self.last_read_msg_id,
            own_msgs_after_read: self.own_msgs_after_read,
            not_counted_above_read: self.not_counted_above_read,
        }
    }

    /// The delivered cursor of the device asking: the default device's, or a named device's
    /// (which starts where the member joined until its first ack).
    pub fn device_ack(&self, named_device: bool) -> i64 {
        if named_device {
            self.device_ack_msg_id.unwrap_or(self.joined_after_msg_id)
        } else {
            self.default_ack_msg_id
        }
    }
}

/// The order of a chat list page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListOrder {
    /// By group id, after the given one.
    ById { after_group_id: i64 },
    /// Latest activity first, after the given (activity time, group id) position.
    Recent {
        before: Option<(NaiveDateTime, i64)>,
    },
}

/// The id of the group's newest entry that is a line of its own (change entries only change
/// an earlier one): a backward walk of the group's index that stops at the first such entry.
const LAST_LINE: &str = "(SELECT l.msg_id FROM group_msgs l WHERE l.group_id = groups.group_id \
       AND l.kind NOT IN ('recall', 'edit', 'delete') ORDER BY l.msg_id DESC LIMIT 1)";

/// The filter of a list of unread groups only; built once, so its text is the same on every
/// call and the query stays prepared.
static UNREAD_ONLY: LazyLock<String> = LazyLock::new(|| format!("{} > 0", unread_sql()));

/// The caller's memberships joined with everything a chat-list row shows, boxed so callers
/// add their own filters and order. A macro rather than a function: the joined query's type is
/// too long to write out.
macro_rules! chat_list_query {
    ($user_id:expr, $device_column:expr) => {
        group_members::table
            .inner_join(groups::table)
            .left_join(
                device_cursors::table.on(device_cursors::group_id
                    .eq(group_members::group_id)
                    .and(device_cursors::user_id.eq(group_members::user_id))
                    .and(device_cursors::device_id.eq($device_column.to_owned()))),
            )
            .left_join(
                group_msgs::table.on(group_msgs::group_id
                    .eq(groups::group_id)
                    .and(group_msgs::msg_id.eq(fixed_sql::<BigInt>(LAST_LINE)))
                    .and(group_msgs::msg_id.gt(group_members::joined_after_msg_id))),
            )
            .filter(group_members::user_id.eq($user_id.to_owned()))
            .select((
                groups::group_id,
                groups::name,
                groups::last_msg_id,
                groups::last_activity_at,
                group_members::joined_after_msg_id,
                group_members::last_ack_msg_id,
                group_members::last_read_msg_id,
                group_members::own_msgs_after_read,
                fixed_sql::<BigInt>(&NOT_COUNTED_OVER_ROWS),
                fixed_sql::<BigInt>(&MENTIONS_OVER_ROWS),
                device_cursors::last_ack_msg_id.nullable(),
                (
                    group_msgs::msg_id,
                    group_msgs::kind,
                    group_msgs::sender_id,
                    group_msgs::created_at,
                    substr(group_msgs::content.nullable(), 1, PREVIEW_CHARS as i32 + 1)
                        .assume_not_null(),
                    group_msgs::detail,
                )
                    .nullable(),
            ))
            .into_boxed()
    };
}

/// A page of the caller's groups; `device_column` is the calling device's id ('' for the
/// default one).
pub fn chat_list_page(
    conn: &mut AnyConnection,
    user_id: &str,
    device_column: &str,
    order: ListOrder,
    unread_only: bool,
    limit: i64,
) -> QueryResult<Vec<ChatListRow>> {
    let mut query = chat_list_query!(user_id, device_column);
    if unread_only {
        query = query.filter(fixed_sql::<Bool>(UNREAD_ONLY.as_str()));
    }
    query = match order {
        ListOrder::ById { after_group_id } => query
            .filter(group_members::group_id.gt(after_group_id))
            .order(groups::group_id.asc()),
        ListOrder::Recent { before } => {
            if let Some((at, group_id)) = before {
                let activity = groups::last_activity_at;
                query = query.filter(
                    activity
                        .lt(at)
                        .or(activity.eq(at).and(groups::group_id.lt(group_id))),
                );
            }
            query.order((groups::last_activity_at.desc(), groups::group_id.desc()))
        }
    };
    query.limit(limit).load(conn)
}

/// The given groups of the caller's (those they still belong to), by group id.
pub fn chat_list_rows(
    conn: &mut AnyConnection,
    user_id: &str,
    device_column: &str,
    group_ids: &[i64],
) -> QueryResult<Vec<ChatListRow>> {
    chat_list_query!(user_id, device_column)
        .filter(group_members::group_id.eq_any(group_ids.to_vec()))
        .order(groups::group_id.asc())
        .load(conn)
}

#[derive(QueryableByName)]
struct Total {
    #[diesel(sql_type = BigInt)]
    total: i64,
}

/// The caller's unread messages over all their groups (the app icon's badge): one pass over
/// their membership rows, with the same rule as each group's count.
pub fn total_unread(conn: &mut AnyConnection, user_id: &str) -> QueryResult<i64> {
    let rows: Vec<Total> = RawSql::default()
        .sql(&format!(
            "SELECT CAST(COALESCE(SUM(CASE WHEN unread > 0 THEN unread ELSE 0 END), 0) \
               AS BIGINT) AS total \
             FROM (SELECT {} AS unread \
                   FROM group_members JOIN groups ON groups.group_id = group_members.group_id \
                   WHERE group_members.user_id = ",
            unread_sql()
        ))
        .text(user_id)
        .sql(") per_group")
        .keep_prepared()
        .load(conn)?;
    rows.into_iter()
        .next()
        .map(|row| row.total)
        .ok_or(diesel::result::Error::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::engine::fixed_sql::tests::kept;

    #[test]
    fn every_form_of_the_chat_list_query_stays_prepared() {
        let rows = chat_list_query!("u", "").filter(group_members::group_id.eq_any(vec![1, 2]));
        let unread = chat_list_query!("u", "").filter(fixed_sql::<Bool>(UNREAD_ONLY.as_str()));
        assert!(kept(&rows));
        assert!(kept(&unread));
    }
}
