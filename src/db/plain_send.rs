//! Plain messages to one group on PostgreSQL in one round trip: the function
//! `chorus_send_messages` (made by the migration `send_messages_together`) checks membership,
//! takes the next ids, stores the messages and moves their senders' cursors, and runs as its
//! own transaction, with no BEGIN or COMMIT to wait for. It stores each message or leaves it
//! out; whatever it leaves out (a refusal, a repeat of an earlier `client_msg_id`) goes
//! through the general path ([`super::messages::send`]), which is the one place that decides
//! those answers. [`super::shared_sends`] decides which messages go together.

use chrono::NaiveDateTime;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamp};

use super::messages::{new_row, MessageDraft, UserEntry};
use super::models::{now_utc, MessageRow};
use crate::domain::GroupId;
use crate::wake::{WakeEvent, Wakes};

/// A plain message: text, and the client's data if any (no mentions, no reply).
#[derive(Debug, Clone)]
pub struct PlainMessage {
    pub sender_id: String,
    /// The sender's device, when signed in as one.
    pub device_id: Option<String>,
    pub client_msg_id: String,
    pub content: String,
    pub ext: Option<String>,
}

/// Stores `messages`, all to `group_id`, in one statement; the answer has one element per
/// message, in order: the stored row, or None for a message left to the general path.
pub fn store_together(
    conn: &mut PgConnection,
    group_id: GroupId,
    messages: &[PlainMessage],
    wakes: &mut Wakes,
) -> QueryResult<Vec<Option<MessageRow>>> {
    let column =
        |field: fn(&PlainMessage) -> &str| -> Vec<&str> { messages.iter().map(field).collect() };
    let optional = |field: fn(&PlainMessage) -> Option<&str>| -> Vec<Option<&str>> {
        messages.iter().map(field).collect()
    };
    let stored = diesel::sql_query(
        "SELECT ordinal, stored_msg_id, stored_at \
         FROM chorus_send_messages($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind::<BigInt, _>(group_id.0)
    .bind::<Array<Text>, _>(column(|m| &m.sender_id))
    .bind::<Array<Nullable<Text>>, _>(optional(|m| m.device_id.as_deref()))
    .bind::<Array<Text>, _>(column(|m| &m.client_msg_id))
    .bind::<Array<Text>, _>(column(|m| &m.content))
    .bind::<Array<Nullable<Text>>, _>(optional(|m| m.ext.as_deref()))
    .bind::<Timestamp, _>(now_utc())
    .load::<Stored>(conn)?;
    // The statement has committed by now: whatever follows must not fail, or the commit
    // would go uncounted and its waiters unwoken.
    if !stored.is_empty() {
        wakes.record(WakeEvent::MessageSent(group_id.0));
    }
    let mut rows: Vec<Option<MessageRow>> = vec![None; messages.len()];
    for stored in stored {
        let index = usize::try_from(stored.ordinal - 1)
            .ok()
            .filter(|i| *i < messages.len());
        match index {
            Some(index) => rows[index] = Some(messages[index].row(group_id, &stored)),
            // Cannot happen; if it did, the message it meant stays None and its sender's
            // general path answers with what was stored.
            None => tracing::error!(
                ordinal = stored.ordinal,
                sent = messages.len(),
                "chorus_send_messages answered for a message it was not sent"
            ),
        }
    }
    Ok(rows)
}

/// What the function answers for each stored message.
#[derive(QueryableByName)]
struct Stored {
    /// The message's position in the call's arrays, from 1.
    #[diesel(sql_type = Integer)]
    ordinal: i32,
    #[diesel(sql_type = BigInt)]
    stored_msg_id: i64,
    #[diesel(sql_type = Timestamp)]
    stored_at: NaiveDateTime,
}

impl PlainMessage {
    fn row(&self, group_id: GroupId, stored: &Stored) -> MessageRow {
        let draft = MessageDraft {
            ext: self.ext.clone(),
            ..MessageDraft::text(&self.content)
        };
        new_row(
            group_id.0,
            stored.stored_msg_id,
            &self.sender_id,
            &self.client_msg_id,
            &UserEntry::Message(draft),
            stored.stored_at,
        )
    }
}
