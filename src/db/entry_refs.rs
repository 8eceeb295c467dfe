//! What the entries of a page point at: the messages that change entries changed and that
//! replies quote, and whom each message mentions. Two queries for any page, not one per entry.

use std::collections::HashMap;

use diesel::prelude::*;

use super::models::MessageRow;
use super::AnyConnection;
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
    group_id: i64,
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
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Ok(refs);
    };
    // A page is a contiguous run of ids: one range of the primary key.
    let (low, high) = (first.msg_id.min(last.msg_id), first.msg_id.max(last.msg_id));
    let rows: Vec<(i64, String)> = mentions::table
        .filter(mentions::group_id.eq(group_id))
        .filter(mentions::msg_id.between(low, high))
        .order((mentions::msg_id.asc(), mentions::user_id.asc()))
        .select((mentions::msg_id, mentions::user_id))
        .load(conn)?;
    for (msg_id, user_id) in rows {
        refs.mentions.entry(msg_id).or_default().push(user_id);
    }
    Ok(refs)
}
