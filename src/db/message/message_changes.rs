//! Recall, edit and delete: what a change entry does to the message it names. The change entry
//! itself is appended to the group's log like any send (see `messages::send`); this applies it
//! to the target, in the same transaction, once the target is known to allow it.

use crate::domain::entries::EntryKind;
use crate::domain::refusal::Refusal;
use chrono::NaiveDateTime;
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::BigInt;

use super::entry_refs::visible_message;
use crate::db::group::access::{Checked, Membership};
use crate::db::models::MessageRow;
use crate::db::AnyConnection;
use crate::domain::MsgId;
use crate::refuse_unless;
use crate::schema::{group_members, group_msgs, mentions};

/// How long after sending its sender may recall or edit a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeWindows {
    pub recall_secs: i64,
    pub edit_secs: i64,
}

/// A change to an earlier message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// By its sender, within the recall window: the content is erased.
    Recall,
    /// By its sender, within the edit window: the content is replaced (no history is kept).
    Edit { content: String },
    /// By the group's owner, any message: the content is erased.
    Delete,
}

impl Change {
    pub fn kind(&self) -> EntryKind {
        match self {
            Change::Recall => EntryKind::Recall,
            Change::Edit { .. } => EntryKind::Edit,
            Change::Delete => EntryKind::Delete,
        }
    }
}

/// Applies `change` (entry `appending`) by the member `author` to message `target_msg_id`, at
/// `now`. The group's
/// row is locked by the change entry's id, so two changes to one message apply one after the
/// other and the second sees the first.
pub fn apply_change(
    conn: &mut AnyConnection,
    author: &Membership,
    target_msg_id: MsgId,
    appending: MsgId,
    change: &Change,
    now: NaiveDateTime,
    windows: ChangeWindows,
) -> Checked<()> {
    let target = refuse_unless!(visible_message(
        conn,
        author,
        "target_msg_id",
        target_msg_id,
        appending
    )?);
    let member = &author.member;
    match change {
        Change::Recall | Change::Edit { .. } if target.sender_id != member.user_id => {
            return Ok(Err(Refusal::NotSender {
                msg_id: target.msg_id,
            }));
        }
        Change::Delete => refuse_unless!(author.require_owner("delete messages")),
        Change::Recall => refuse_unless!(within(&target, change, windows.recall_secs, now)),
        Change::Edit { .. } => refuse_unless!(within(&target, change, windows.edit_secs, now)),
    }
    match change {
        Change::Recall => retract(conn, &target, EntryKind::Recalled, now)?,
        Change::Delete => retract(conn, &target, EntryKind::Deleted, now)?,
        Change::Edit { content } => {
            diesel::update(
                group_msgs::table
                    .filter(group_msgs::group_id.eq(target.group_id))
                    .filter(group_msgs::msg_id.eq(target.msg_id)),
            )
            .set((
                group_msgs::content.eq(content),
                group_msgs::edited_at.eq(Some(now)),
            ))
            .execute(conn)?;
        }
    }
    Ok(Ok(()))
}

fn within(
    target: &MessageRow,
    change: &Change,
    window_secs: i64,
    now: NaiveDateTime,
) -> Result<(), Refusal> {
    if (now - target.created_at).num_seconds() < window_secs {
        Ok(())
    } else {
        Err(Refusal::WindowPassed {
            change: change.kind(),
            msg_id: target.msg_id,
            window_secs,
        })
    }
}

/// Erases a message's content, client data, mentions and reply, and marks it `kind`. The row
/// is updated in place, so the text is gone from the table (on SQLite `secure_delete` also
/// zeroes the freed bytes). If the sender's read cursor is below it, it was one of their own
/// messages above the cursor, and now it no longer is.
fn retract(
    conn: &mut AnyConnection,
    target: &MessageRow,
    kind: EntryKind,
    now: NaiveDateTime,
) -> QueryResult<()> {
    let (group_id, msg_id) = (target.group_id, target.msg_id);
    diesel::update(
        group_msgs::table
            .filter(group_msgs::group_id.eq(group_id))
            .filter(group_msgs::msg_id.eq(msg_id)),
    )
    .set((
        group_msgs::kind.eq(kind.as_str()),
        group_msgs::content.eq(""),
        group_msgs::ext.eq(None::<String>),
        group_msgs::reply_to_msg_id.eq(None::<i64>),
        group_msgs::mention_all.eq(false),
        group_msgs::retracted_at.eq(Some(now)),
    ))
    .execute(conn)?;
    diesel::delete(
        mentions::table
            .filter(mentions::group_id.eq(group_id))
            .filter(mentions::msg_id.eq(msg_id)),
    )
    .execute(conn)?;
    diesel::update(
        group_members::table
            .find((group_id, &target.sender_id))
            .filter(group_members::last_read_msg_id.lt(msg_id)),
    )
    .set(group_members::own_msgs_after_read.eq(sql::<BigInt>("own_msgs_after_read - 1")))
    .execute(conn)?;
    Ok(())
}
