//! What entries point at: for a page, the messages that change entries changed and that
//! replies quote, and whom each message mentions (two queries for any page, not one per
//! entry); for an entry being appended, whether the message it names may be pointed at.

use crate::domain::entries::EntryKind;
use crate::domain::refusal::Refusal;
use std::collections::HashMap;

use diesel::prelude::*;

use crate::db::group::access::{Checked, Membership};
use crate::db::models::MessageRow;
use crate::db::AnyConnection;
use crate::domain::{GroupId, MsgId};
use crate::schema::{group_msgs, mentions};

#[derive(Debug, Default)]
pub struct EntryRefs {
    /// The entries that the page's change entries and replies name, by msg_id, as they are now.
    pub referenced: HashMap<i64, MessageRow>,
    /// Whom each message of the page mentions by name, by msg_id, in user id order.
    pub mentions: HashMap<i64, Vec<String>>,
}

impl EntryRefs {
    /// The entry `msg_id` as a member who joined after `joined_after_msg_id` may see it.
    pub fn visible(&self, msg_id: Option<i64>, joined_after_msg_id: i64) -> Option<&MessageRow> {
        msg_id
            .filter(|&id| id > joined_after_msg_id)
            .and_then(|id| self.referenced.get(&id))
    }
}

/// Loads what the given entries of one group point at.
pub fn load_refs(
    conn: &mut AnyConnection,
    group_id: GroupId,
    entries: &[MessageRow],
) -> QueryResult<EntryRefs> {
    let mut refs = load_referenced(conn, group_id, entries)?;
    refs.mentions = load_mentions(conn, group_id, entries)?;
    Ok(refs)
}

/// What one entry just appended points at, with the mentions it was stored with (so the
/// answer to a send reads no mention rows).
pub fn refs_of_new(
    conn: &mut AnyConnection,
    entry: &MessageRow,
    stored_mentions: Vec<String>,
) -> QueryResult<EntryRefs> {
    let mut refs = load_referenced(conn, GroupId(entry.group_id), std::slice::from_ref(entry))?;
    if !stored_mentions.is_empty() {
        refs.mentions.insert(entry.msg_id, stored_mentions);
    }
    Ok(refs)
}

/// The entries that change entries and replies among `entries` name, as they are now.
fn load_referenced(
    conn: &mut AnyConnection,
    group_id: GroupId,
    entries: &[MessageRow],
) -> QueryResult<EntryRefs> {
    let mut refs = EntryRefs::default();
    let named: Vec<i64> = entries
        .iter()
        .flat_map(|e| [e.target_msg_id, e.reply_to_msg_id])
        .flatten()
        .collect();
    if !named.is_empty() {
        let rows: Vec<MessageRow> = group_msgs::table
            .filter(group_msgs::group_id.eq(group_id))
            .filter(group_msgs::msg_id.eq_any(&named))
            .select(MessageRow::as_select())
            .load(conn)?;
        refs.referenced = rows.into_iter().map(|r| (r.msg_id, r)).collect();
    }
    Ok(refs)
}

/// Whom each message among `entries` mentions by name.
fn load_mentions(
    conn: &mut AnyConnection,
    group_id: GroupId,
    entries: &[MessageRow],
) -> QueryResult<HashMap<i64, Vec<String>>> {
    let ids = entries.iter().filter(|e| e.kind == EntryKind::Message);
    let (Some(low), Some(high)) = (
        ids.clone().map(|e| e.msg_id).min(),
        ids.map(|e| e.msg_id).max(),
    ) else {
        return Ok(HashMap::new());
    };
    // A page is a run of ids: one range of the primary key.
    let rows: Vec<(i64, String)> = mentions::table
        .filter(mentions::group_id.eq(group_id))
        .filter(mentions::msg_id.between(low, high))
        .order((mentions::msg_id.asc(), mentions::user_id.asc()))
        .select((mentions::msg_id, mentions::user_id))
        .load(conn)?;
    let mut by_message: HashMap<i64, Vec<String>> = HashMap::new();
    for (msg_id, user_id) in rows {
        by_message.entry(msg_id).or_default().push(user_id);
    }
    Ok(by_message)
}

pub fn find_message(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
) -> QueryResult<Option<MessageRow>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.eq(msg_id))
        .select(MessageRow::as_select())
        .first(conn)
        .optional()
}

/// The message that `field` names for `member`, from the entry `appending` being appended: an
/// earlier entry of the group from after they joined, and still a message: not recalled or
/// deleted, not a change entry or a system line.
pub fn visible_message(
    conn: &mut AnyConnection,
    member: &Membership,
    field: &'static str,
    msg_id: MsgId,
    appending: MsgId,
) -> Checked<MessageRow> {
    let group_id = GroupId(member.group.group_id);
    let found = find_message(conn, group_id, msg_id)?
        .filter(|m| m.msg_id > member.member.joined_after_msg_id && m.msg_id < appending.0);
    let Some(entry) = found else {
        return Ok(Err(Refusal::NoSuchEntry {
            field,
            group_id,
            msg_id: msg_id.0,
        }));
    };
    Ok(match entry.kind {
        EntryKind::Message => Ok(entry),
        EntryKind::Recalled | EntryKind::Deleted => Err(Refusal::Retracted {
            msg_id: entry.msg_id,
            kind: entry.kind,
        }),
        kind => Err(Refusal::NotAMessage {
            field,
            msg_id: entry.msg_id,
            kind,
        }),
    })
}
