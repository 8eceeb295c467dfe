//! A plain message on PostgreSQL in one round trip: the function `chorus_send_message` (made
//! by the migration `send_message_function`) checks membership, takes the next id, stores the
//! message and moves the sender's cursors, and runs as its own transaction, with no BEGIN or
//! COMMIT to wait for. It stores a message or changes nothing; whatever it does not store (a
//! refusal, a repeat of an earlier `client_msg_id`) goes through the general path
//! ([`super::messages::send`]), which is the one place that decides those answers.

use chrono::NaiveDateTime;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamp};

use super::messages::{new_row, Author, MessageDraft, UserEntry};
use super::models::{now_utc, MessageRow};
use crate::wake::{WakeEvent, Wakes};

/// What [`store`] needs of a plain message: text, and the client's data if any.
pub struct PlainMessage<'a> {
    pub group_id: i64,
    pub author: Author<'a>,
    pub client_msg_id: &'a str,
    pub content: &'a str,
    pub ext: Option<&'a str>,
}

/// The stored message, or None when the function stored nothing.
pub fn store(
    conn: &mut PgConnection,
    message: &PlainMessage<'_>,
    wakes: &mut Wakes,
) -> QueryResult<Option<MessageRow>> {
    let stored = diesel::sql_query(
        "SELECT stored_msg_id, stored_at FROM chorus_send_message($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind::<BigInt, _>(message.group_id)
    .bind::<Text, _>(message.author.user_id)
    .bind::<Nullable<Text>, _>(message.author.device.map(|d| d.as_str()))
    .bind::<Text, _>(message.client_msg_id)
    .bind::<Text, _>(message.content)
    .bind::<Nullable<Text>, _>(message.ext)
    .bind::<Timestamp, _>(now_utc())
    .get_result::<Stored>(conn)
    .optional()?;
    let Some(stored) = stored else {
        return Ok(None);
    };
    wakes.record(WakeEvent::MessageSent(message.group_id));
    Ok(Some(message.row(stored)))
}

/// What the function answers for a stored message.
#[derive(QueryableByName)]
struct Stored {
    #[diesel(sql_type = BigInt)]
    stored_msg_id: i64,
    #[diesel(sql_type = Timestamp)]
    stored_at: NaiveDateTime,
}

impl PlainMessage<'_> {
    fn row(&self, stored: Stored) -> MessageRow {
        let draft = MessageDraft {
            ext: self.ext.map(str::to_owned),
            ..MessageDraft::text(self.content)
        };
        new_row(
            self.group_id,
            stored.stored_msg_id,
            self.author.user_id,
            self.client_msg_id,
            &UserEntry::Message(draft),
            stored.stored_at,
        )
    }
}
