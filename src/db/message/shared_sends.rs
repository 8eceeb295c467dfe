//! Sending: the one operation every send takes, whatever the engine. Entries to one group
//! that arrive together share one transaction (see [`crate::db::engine::shared_commits`]):
//! one hold of the group's lock, one commit, one range of ids, where each send alone would
//! hold the lock through a commit of its own and the group's senders would queue behind it.
//! [`super::messages::send_entries`] decides each entry's answer; it is the same code for a
//! batch of one. Another instance's sends to the same group take the group's lock in turn,
//! so ids stay contiguous.

use crate::domain::refusal::Refusal;
use diesel::QueryResult;

use super::entry_refs::{load_refs, refs_of_new, EntryRefs};
use super::message_changes::ChangeWindows;
use super::messages::{send_entries, stored_mentions, NewEntry, SendOutcome, UserEntry};
use crate::db::engine::error::DbError;
use crate::db::engine::shared_commits::{Answered, SharedCommits, SharedWork};

use crate::db::AnyConnection;
use crate::domain::GroupId;
use crate::wake_ups::events::Wakes;

/// The send queues of one instance, shared by all its workers.
pub type SharedSends = SharedCommits<Sends>;

/// Entries to append, queued by group.
pub struct Sends;

/// An entry to append, with the change windows in force.
pub struct QueuedEntry {
    pub entry: NewEntry,
    pub windows: ChangeWindows,
}

/// A stored entry, or the original of a repeat, with what it points at as it is now.
pub type SentEntry = (SendOutcome, EntryRefs);

impl SharedWork for Sends {
    type Key = GroupId;
    type Item = QueuedEntry;
    type Answer = SentEntry;
    type Refused = Refusal;
    const WHAT: &'static str = "send";

    fn store(
        conn: &mut AnyConnection,
        group_id: GroupId,
        entries: &[QueuedEntry],
        wakes: &mut Wakes,
    ) -> QueryResult<Vec<Answered<Sends>>> {
        let Some(first) = entries.first() else {
            return Ok(Vec::new());
        };
        let sends: Vec<NewEntry> = entries.iter().map(|e| e.entry.clone()).collect();
        let sent = send_entries(conn, group_id, &sends, first.windows, wakes)?;
        // The author sees what their entry points at as they wrote it.
        sent.into_iter()
            .zip(&sends)
            .map(|(outcome, send)| {
                Ok(match outcome {
                    Ok(SendOutcome::Created(row)) => {
                        let mentioned = match &send.entry {
                            UserEntry::Message(draft) => {
                                stored_mentions(&row.sender_id, &draft.mentions)
                            }
                            UserEntry::Change { .. } => Vec::new(),
                        };
                        let refs = refs_of_new(conn, &row, mentioned)?;
                        Ok((SendOutcome::Created(row), refs))
                    }
                    Ok(SendOutcome::Existing(row)) => {
                        let refs = load_refs(conn, group_id, std::slice::from_ref(&row))?;
                        Ok((SendOutcome::Existing(row), refs))
                    }
                    Err(refusal) => Err(refusal),
                })
            })
            .collect()
    }
}

impl SharedSends {
    /// The entry as stored once committed (the original for a repeat), or why it was
    /// refused.
    pub async fn send(
        &self,
        group_id: GroupId,
        entry: NewEntry,
        windows: ChangeWindows,
    ) -> Result<Result<SentEntry, Refusal>, DbError> {
        self.submit(group_id, QueuedEntry { entry, windows }).await
    }
}
