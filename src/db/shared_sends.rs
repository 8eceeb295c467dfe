//! Plain sends to one group that arrive together share one transaction (PostgreSQL): one
//! hold of the group's lock, one commit, one range of ids, where each send alone would hold
//! the lock through a commit of its own and the group's senders would queue behind it.
//!
//! Each group with sends in flight has a queue and one task that drains it (see
//! [`super::shared_statement`]); the task stores each batch with
//! [`super::plain_send::store_together`]. A send the statement leaves out (a refusal, a
//! repeat of a `client_msg_id`) answers None, and its caller takes the general path, which
//! finds a repeat by its `client_msg_id`. Another instance's sends to the same group take
//! the group's lock in turn, so ids stay contiguous.

use diesel::{PgConnection, QueryResult};

use super::error::DbError;
use super::models::MessageRow;
use super::plain_send::{store_together, PlainMessage};
use super::shared_statement::{SharedStatements, SharedWork};
use crate::domain::GroupId;
use crate::wake::Wakes;

/// The send queues of one instance, shared by all its workers.
pub type SharedSends = SharedStatements<PlainSends>;

/// Plain messages, queued by group.
pub struct PlainSends;

impl SharedWork for PlainSends {
    type Key = GroupId;
    type Item = PlainMessage;
    type Answer = MessageRow;
    const WHAT: &'static str = "send";

    fn store(
        conn: &mut PgConnection,
        group_id: GroupId,
        messages: &[PlainMessage],
        wakes: &mut Wakes,
    ) -> QueryResult<(usize, Vec<Option<MessageRow>>)> {
        let rows = store_together(conn, group_id, messages, wakes)?;
        let writes = rows.iter().filter(|r| r.is_some()).count();
        Ok((writes, rows))
    }
}

impl SharedSends {
    /// The message as stored, once committed; None when the general path must take it: the
    /// engine has no such statement, or the statement left it out.
    pub async fn send(
        &self,
        group_id: GroupId,
        message: PlainMessage,
    ) -> Result<Option<MessageRow>, DbError> {
        self.submit(group_id, message).await
    }
}
