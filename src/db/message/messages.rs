//! Queries on `group_msgs`: the idempotent append of a member's entry, the two page
//! directions, and message expiry.

use crate::domain::entries::EntryKind;
use crate::domain::refusal::Refusal;
use chrono::NaiveDateTime;
use diesel::prelude::*;

use std::collections::HashMap;

use super::entry_refs::visible_message;
use super::message_changes::{apply_change, Change, ChangeWindows};
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::group::access::{Checked, Membership};
use crate::db::group::groups::{
    lock_group, lock_group_and_members, record_appended, LockedWithMembers,
};
use crate::db::group::members::read_past_expired;
use crate::db::group::own_entries::{advance_past_own_entries, OwnEntry};
use crate::db::models::{now_utc, MessageRow, NewMessage};
use crate::db::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};
use crate::schema::{group_members, group_msgs, mentions};
use crate::wake_ups::events::{WakeEvent, Wakes};
use crate::{on_engine, refuse_unless};

#[derive(Debug)]
pub enum SendOutcome {
    Created(MessageRow),
    /// The sender already sent this `client_msg_id` to this group: the original entry.
    Existing(MessageRow),
}

/// A message as its sender wrote it, validated field by field (see `api::message_body`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDraft {
    pub content: String,
    /// Distinct user ids; each must be a member.
    pub mentions: Vec<String>,
    /// Mentions every member: only the owner may.
    pub mention_all: bool,
    pub reply_to: Option<MsgId>,
    /// A JSON object, stored and returned exactly as written.
    pub ext: Option<String>,
}

impl MessageDraft {
    /// Plain text: no mentions, no reply, no client data.
    pub fn text(content: &str) -> Self {
        MessageDraft {
            content: content.to_owned(),
            mentions: Vec::new(),
            mention_all: false,
            reply_to: None,
            ext: None,
        }
    }
}

/// What a member appends to a group's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserEntry {
    Message(MessageDraft),
    Change { change: Change, target: MsgId },
}

impl UserEntry {
    fn kind(&self) -> EntryKind {
        match self {
            UserEntry::Message(_) => EntryKind::Message,
            UserEntry::Change { change, .. } => change.kind(),
        }
    }
}

/// Who appends an entry, from which device.
#[derive(Debug, Clone, Copy)]
pub struct Author<'a> {
    pub user_id: &'a str,
    pub device: Option<&'a DeviceId>,
}

/// An entry a member asks to append: who, from which device, the key that makes a retry
/// harmless, and what.
#[derive(Debug, Clone)]
pub struct NewEntry {
    pub sender_id: String,
    pub device: Option<DeviceId>,
    pub client_msg_id: String,
    pub entry: UserEntry,
}

/// What appending one entry answers: the entry as stored, or why it was refused.
pub type Sent = Result<SendOutcome, Refusal>;

/// Appends one member's entry to the group's log (see [`send_entries`]).
pub fn send(
    conn: &mut AnyConnection,
    group_id: GroupId,
    author: Author<'_>,
    client_msg_id: &str,
    entry: &UserEntry,
    windows: ChangeWindows,
    wakes: &mut Wakes,
) -> Checked<SendOutcome> {
    let one = NewEntry {
        sender_id: author.user_id.to_owned(),
        device: author.device.cloned(),
        client_msg_id: client_msg_id.to_owned(),
        entry: entry.clone(),
    };
    let mut sent = send_entries(conn, group_id, &[one], windows, wakes)?;
    Ok(sent.pop().unwrap_or(Err(Refusal::NoGroup { group_id })))
}

/// Appends members' entries to one group's log, in order, each once (inside a transaction
/// the caller runs): messages, and recalls, edits and deletes of earlier ones. Each entry
/// gets its own answer, in order. A refused entry writes nothing and takes no id, so the
/// others stand and ids stay contiguous; every refusal is decided before anything is
/// written.
///
/// The group's row lock, taken first, orders the group's writers: ids are handed out in
/// turn, entries are stamped in id order, and memberships read after it stay as read. A
/// repeat of a `client_msg_id` the sender used in this group, before or earlier in the same
/// call, gets the original entry, even when the entry would now be refused. The few
/// statements are the same however many entries there are: the lock, the senders'
/// memberships, the repeats, one insert, the mentions, the senders' cursors and the group's
/// counter; a change entry also reads and changes its target.
pub fn send_entries(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sends: &[NewEntry],
    windows: ChangeWindows,
    wakes: &mut Wakes,
) -> QueryResult<Vec<Sent>> {
    let senders: Vec<&str> = sends.iter().map(|s| s.sender_id.as_str()).collect();
    // The group's lock and the one membership check, by sender: a sender who is not a member
    // is missing. The rows stay locked: the cursor moves below are decided from them.
    let Some(LockedWithMembers {
        group: locked,
        members: memberships,
    }) = lock_group_and_members(conn, group_id, &senders)?
    else {
        let no_group = || Err(Refusal::NoGroup { group_id });
        return Ok(sends.iter().map(|_| no_group()).collect());
    };
    let sent_before = find_sent(conn, group_id, sends)?;
    // Taken once the group's row lock is held, so a group's entries are stamped in id order.
    let now = now_utc();
    let decided = decide_entries(
        conn,
        group_id,
        sends,
        (&memberships, sent_before),
        locked.last_msg_id,
        (now, windows),
    )?;
    if !decided.stored.is_empty() {
        write_appended(conn, group_id, &decided, &memberships, now, wakes)?;
    }
    Ok(decided.answers)
}

/// The entries senders stored before, by (sender, `client_msg_id`): a repeat's original.
type SentBefore = HashMap<(String, String), MessageRow>;

/// What [`decide_entries`] decided: each entry's answer, the rows to store, and the group's
/// last message id after them.
struct Decided<'s> {
    answers: Vec<Sent>,
    stored: Vec<(&'s NewEntry, MessageRow)>,
    last_msg_id: i64,
}

/// Decides every entry before anything is written: a repeat gets its original, a refused
/// entry its refusal and no id, each other entry the next id. `(memberships, sent_before)`:
/// the senders' memberships as locked, and what they sent before by `client_msg_id`;
/// `(now, windows)`: the time the entries are stamped with, and the change windows in force.
fn decide_entries<'s>(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sends: &'s [NewEntry],
    (memberships, mut sent_before): (&HashMap<String, Membership>, SentBefore),
    last_msg_id: i64,
    (now, windows): (NaiveDateTime, ChangeWindows),
) -> QueryResult<Decided<'s>> {
    let mut decided = Decided {
        answers: Vec::with_capacity(sends.len()),
        stored: Vec::new(),
        last_msg_id,
    };
    for send in sends {
        let key = (send.sender_id.clone(), send.client_msg_id.clone());
        if let Some(original) = sent_before.get(&key) {
            decided
                .answers
                .push(Ok(SendOutcome::Existing(original.clone())));
            continue;
        }
        let Some(membership) = memberships.get(&send.sender_id) else {
            decided.answers.push(Err(Refusal::NotMember { group_id }));
            continue;
        };
        let msg_id = MsgId(decided.last_msg_id + 1);
        let checked = match &send.entry {
            UserEntry::Message(draft) => check_message(conn, membership, msg_id, draft)?,
            UserEntry::Change { change, target } => {
                apply_change(conn, membership, *target, msg_id, change, now, windows)?
            }
        };
        if let Err(refusal) = checked {
            decided.answers.push(Err(refusal));
            continue;
        }
        decided.last_msg_id = msg_id.0;
        let row = new_row(
            group_id,
            msg_id.0,
            &send.sender_id,
            &send.client_msg_id,
            &send.entry,
            now,
        );
        sent_before.insert(key, row.clone());
        decided.answers.push(Ok(SendOutcome::Created(row.clone())));
        decided.stored.push((send, row));
    }
    Ok(decided)
}

/// Writes what [`decide_entries`] stored: in one round trip where the engine allows, the
/// entries, the senders' cursors and the group's counter; then the mentions, after the rows
/// they point at. Records the wake-up.
fn write_appended(
    conn: &mut AnyConnection,
    group_id: GroupId,
    decided: &Decided<'_>,
    memberships: &HashMap<String, Membership>,
    now: NaiveDateTime,
    wakes: &mut Wakes,
) -> QueryResult<()> {
    let stored = &decided.stored;
    let own_advance =
        advance_past_own_entries(group_id, &own_entries_by_user(stored), memberships)?;
    let mut writes = vec![insert_rows(stored)];
    writes.extend(own_advance.statements(conn));
    let any_message = stored.iter().any(|(_, row)| row.kind == EntryKind::Message);
    // A change entry does not move the group in the chat list.
    record_appended(
        conn,
        group_id,
        MsgId(decided.last_msg_id),
        any_message.then_some(now),
        writes,
    )?;
    store_mentions(conn, stored)?;
    wakes.record(WakeEvent::MessageSent(group_id));
    Ok(())
}

/// The statement that inserts the rows of `stored`, for the caller to run in the round trip
/// of its next statement ([`RawSql::execute_after`]). The text of one row, the common case,
/// is the same every time and stays prepared; several rows make a text of their own.
fn insert_rows(stored: &[(&NewEntry, MessageRow)]) -> RawSql {
    let mut query = RawSql::default().sql(
        "INSERT INTO group_msgs (group_id, msg_id, kind, sender_id, client_msg_id, content, \
         created_at, target_msg_id, reply_to_msg_id, mention_all, ext, detail) VALUES ",
    );
    for (n, (_, row)) in stored.iter().enumerate() {
        let row = row.insertable();
        query = query
            .sql(if n == 0 { "(" } else { ", (" })
            .int(row.group_id)
            .sql(", ")
            .int(row.msg_id)
            .sql(", ")
            .text(row.kind)
            .sql(", ")
            .text(row.sender_id)
            .sql(", ")
            .text(row.client_msg_id)
            .sql(", ")
            .text(row.content)
            .sql(", ")
            .time(row.created_at)
            .sql(", ")
            .maybe_int(row.target_msg_id)
            .sql(", ")
            .maybe_int(row.reply_to_msg_id)
            .sql(", ")
            .flag(row.mention_all)
            .sql(", ")
            .maybe_text(row.ext)
            .sql(", ")
            .maybe_text(row.detail)
            .sql(")");
    }
    match stored {
        [_] => query.keep_prepared(),
        _ => query,
    }
}

/// The entries `stored` appended, by sender (user id order), each sender's in id order.
fn own_entries_by_user<'a>(
    stored: &'a [(&'a NewEntry, MessageRow)],
) -> Vec<(&'a str, Vec<OwnEntry<'a>>)> {
    let mut by_user: std::collections::BTreeMap<&str, Vec<OwnEntry<'_>>> = Default::default();
    for (send, row) in stored {
        by_user
            .entry(send.sender_id.as_str())
            .or_default()
            .push(OwnEntry {
                msg_id: MsgId(row.msg_id),
                device: send.device.as_ref(),
                counted: row.kind == EntryKind::Message,
            });
    }
    by_user.into_iter().collect()
}

/// The entries among `sends` that their senders already appended to the group, by sender and
/// `client_msg_id`: one look-up per key in the group's unique index on them.
///
/// Planned anew on every call on PostgreSQL, never kept prepared there: PostgreSQL fixes the
/// plan of a prepared text after a few calls, and when those come while the table is empty
/// (a new database) the primary key looks as good as the unique index, so the plan it keeps
/// walks every entry of the group. (For the same reason the sender index holds messages
/// only: on a table without statistics it tied with the unique index and walked all of a
/// sender's entries.) SQLite plans each run for its values, and keeps the text parsed.
fn find_sent(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sends: &[NewEntry],
) -> QueryResult<SentBefore> {
    const COLUMNS: &str = "SELECT m.group_id, m.msg_id, m.kind, m.sender_id, m.client_msg_id, \
         m.content, m.created_at, m.target_msg_id, m.reply_to_msg_id, m.mention_all, m.ext, \
         m.detail, m.edited_at, m.retracted_at FROM ";
    let query = match sends {
        [] => return Ok(HashMap::new()),
        [one] => RawSql::default()
            .sql(COLUMNS)
            .sql("group_msgs m WHERE m.group_id = ")
            .int(group_id.0)
            .sql(" AND m.sender_id = ")
            .text(&one.sender_id)
            .sql(" AND m.client_msg_id = ")
            .text(&one.client_msg_id)
            .keep_prepared_on_sqlite(),
        several => {
            let keys: Vec<Vec<Value<'_>>> = several
                .iter()
                .map(|s| vec![Value::Text(&s.sender_id), Value::Text(&s.client_msg_id)])
                .collect();
            let query =
                RawSql::default()
                    .sql(COLUMNS)
                    .rows("k", &["sender_id", "client_msg_id"], &keys);
            match conn {
                // One probe of the unique index per key, whatever the planner thinks of the
                // table: as a plain join, a young table without statistics gets a hash join
                // over every entry of the group. The LIMIT keeps the subquery from being
                // merged into such a join.
                AnyConnection::Postgresql(_) => query
                    .sql(" CROSS JOIN LATERAL (SELECT * FROM group_msgs WHERE group_id = ")
                    .int(group_id.0)
                    .sql(
                        " AND sender_id = k.sender_id AND client_msg_id = k.client_msg_id \
                         LIMIT 1) m",
                    ),
                // SQLite reads the keys once and probes the index per key (see
                // `RawSql::rows`).
                AnyConnection::Sqlite(_) => query
                    .sql(
                        " JOIN group_msgs m ON m.sender_id = k.sender_id \
                         AND m.client_msg_id = k.client_msg_id WHERE m.group_id = ",
                    )
                    .int(group_id.0),
            }
        }
    };
    let found: Vec<MessageRow> = query.load(conn)?;
    Ok(found
        .into_iter()
        .map(|row| ((row.sender_id.clone(), row.client_msg_id.clone()), row))
        .collect())
}

/// The row a member's entry is stored as.
pub(super) fn new_row(
    group_id: GroupId,
    msg_id: i64,
    sender_id: &str,
    client_msg_id: &str,
    entry: &UserEntry,
    now: chrono::NaiveDateTime,
) -> MessageRow {
    let mut row = MessageRow {
        group_id: group_id.0,
        msg_id,
        kind: entry.kind(),
        sender_id: sender_id.to_owned(),
        client_msg_id: client_msg_id.to_owned(),
        content: String::new(),
        created_at: now,
        target_msg_id: None,
        reply_to_msg_id: None,
        mention_all: false,
        ext: None,
        detail: None,
        edited_at: None,
        retracted_at: None,
    };
    match entry {
        UserEntry::Message(draft) => {
            row.content = draft.content.clone();
            row.reply_to_msg_id = draft.reply_to.map(|m| m.0);
            row.mention_all = draft.mention_all;
            row.ext = draft.ext.clone();
        }
        UserEntry::Change { target, .. } => row.target_msg_id = Some(target.0),
    }
    row
}

impl MessageRow {
    fn insertable(&self) -> NewMessage<'_> {
        NewMessage {
            group_id: self.group_id,
            msg_id: self.msg_id,
            kind: self.kind.as_str(),
            sender_id: &self.sender_id,
            client_msg_id: &self.client_msg_id,
            content: &self.content,
            created_at: self.created_at,
            target_msg_id: self.target_msg_id,
            reply_to_msg_id: self.reply_to_msg_id,
            mention_all: self.mention_all,
            ext: self.ext.as_deref(),
            detail: self.detail.as_deref(),
        }
    }
}

/// What a message may point at: everyone it mentions is a member, only the owner mentions
/// everyone, and a reply quotes an earlier message the sender can see.
fn check_message(
    conn: &mut AnyConnection,
    sender: &Membership,
    msg_id: MsgId,
    draft: &MessageDraft,
) -> Checked<()> {
    let group_id = sender.group.group_id;
    if draft.mention_all {
        refuse_unless!(sender.require_owner("mention everyone"));
    }
    if let Some(reply_to) = draft.reply_to {
        refuse_unless!(visible_message(
            conn,
            sender,
            "reply_to_msg_id",
            reply_to,
            msg_id
        )?);
    }
    if !draft.mentions.is_empty() {
        let members: Vec<String> = group_members::table
            .filter(group_members::group_id.eq(group_id))
            .filter(group_members::user_id.eq_any(&draft.mentions))
            .select(group_members::user_id)
            .load(conn)?;
        if let Some(outsider) = draft.mentions.iter().find(|m| !members.contains(m)) {
            let user_id = outsider.clone();
            return Ok(Err(Refusal::MentionOfNonMember { user_id }));
        }
    }
    Ok(Ok(()))
}

/// The members a message by `sender_id` stores as mentioned, in user id order: the sender is
/// left out (their own message never counts for them).
pub fn stored_mentions(sender_id: &str, mentioned: &[String]) -> Vec<String> {
    let mut stored: Vec<String> = mentioned
        .iter()
        .filter(|user| user.as_str() != sender_id)
        .cloned()
        .collect();
    stored.sort();
    stored
}

/// One row per member each stored message mentions by name (see [`stored_mentions`]).
fn store_mentions(conn: &mut AnyConnection, stored: &[(&NewEntry, MessageRow)]) -> QueryResult<()> {
    let mut rows = Vec::new();
    for (send, row) in stored {
        let UserEntry::Message(draft) = &send.entry else {
            continue;
        };
        for user in stored_mentions(&row.sender_id, &draft.mentions) {
            rows.push((
                mentions::group_id.eq(row.group_id),
                mentions::msg_id.eq(row.msg_id),
                mentions::user_id.eq(user),
            ));
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    on_engine!(conn, |c| diesel::insert_into(mentions::table)
        .values(&rows)
        .execute(c))?;
    Ok(())
}

/// Deletes up to `batch` of the oldest messages created before `cutoff` (message
/// retention); returns how many went. Ids are never reused: the group's counter is not
/// touched. Read cursors below the expired messages move past them first, so they stop
/// counting as unread. Messages are stored in time order, so the walk reads the oldest rows by
/// primary key and stops at the first one still kept: no index on `created_at` is needed and a
/// sweep with nothing to delete reads one page.
pub fn delete_messages_before(
    conn: &mut AnyConnection,
    cutoff: chrono::NaiveDateTime,
    batch: i64,
    wakes: &mut Wakes,
) -> QueryResult<usize> {
    let oldest: Vec<(i64, i64, i64, chrono::NaiveDateTime)> = group_msgs::table
        .select((
            group_msgs::id,
            group_msgs::group_id,
            group_msgs::msg_id,
            group_msgs::created_at,
        ))
        .order(group_msgs::id.asc())
        .limit(batch)
        .load(conn)?;
    let expired: Vec<(i64, i64, i64)> = oldest
        .into_iter()
        .take_while(|(.., created_at)| *created_at < cutoff)
        .map(|(id, group_id, msg_id, _)| (id, group_id, msg_id))
        .collect();
    if expired.is_empty() {
        return Ok(0);
    }
    // Each group's expired messages are the oldest ones: everything up to its highest here.
    let mut through: std::collections::BTreeMap<i64, i64> = Default::default();
    for (_, group_id, msg_id) in &expired {
        let highest = through.entry(*group_id).or_default();
        *highest = (*highest).max(*msg_id);
    }
    let ids: Vec<i64> = expired.iter().map(|(id, ..)| *id).collect();
    for (group_id, msg_id) in through {
        // The group's lock first, as every write that moves several members' rows takes it
        // (a send of several messages moves its senders'): rows locked in two orders by two
        // writers would deadlock. Groups in id order, like every write of several groups.
        lock_group(conn, GroupId(group_id))?;
        read_past_expired(conn, GroupId(group_id), MsgId(msg_id), wakes)?;
    }
    diesel::delete(group_msgs::table.filter(group_msgs::id.eq_any(&ids))).execute(conn)
}

/// Up to `limit` messages with ids above `after_msg_id` and below `below_msg_id`, ascending.
pub fn page_after(
    conn: &mut AnyConnection,
    group_id: GroupId,
    after_msg_id: MsgId,
    below_msg_id: MsgId,
    limit: i64,
) -> QueryResult<Vec<MessageRow>> {
    group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.gt(after_msg_id))
        .filter(group_msgs::msg_id.lt(below_msg_id))
        .order(group_msgs::msg_id.asc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(conn)
}

/// Up to `limit` messages with ids below `before_msg_id` and above `floor_msg_id`, the newest
/// ones first in the query, returned ascending.
pub fn page_before(
    conn: &mut AnyConnection,
    group_id: GroupId,
    before_msg_id: MsgId,
    floor_msg_id: MsgId,
    limit: i64,
) -> QueryResult<Vec<MessageRow>> {
    let mut rows: Vec<MessageRow> = group_msgs::table
        .filter(group_msgs::group_id.eq(group_id))
        .filter(group_msgs::msg_id.lt(before_msg_id))
        .filter(group_msgs::msg_id.gt(floor_msg_id))
        .order(group_msgs::msg_id.desc())
        .limit(limit)
        .select(MessageRow::as_select())
        .load(conn)?;
    rows.reverse();
    Ok(rows)
}
