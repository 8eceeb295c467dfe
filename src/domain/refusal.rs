//! Why a request was refused: every rule's "no", as one type, mapped to its HTTP answer once
//! (in `api::error`).

use super::entries::EntryKind;
use super::GroupId;

/// Why a request about a group was refused. Decided inside the database call that reads the
/// rows it depends on, answered by the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NoGroup {
        group_id: GroupId,
    },
    NotMember {
        group_id: GroupId,
    },
    /// Something only the group's owner may do; the text says what.
    OwnerOnly(&'static str),
    OwnerCannotLeave,
    NoSuchMember {
        user_id: String,
    },
    TooManyMembers {
        current: i64,
        adding: i64,
        max: i64,
    },
    NoMessage {
        group_id: GroupId,
        msg_id: i64,
    },
    ReceiptsOfOthers,
    /// Only recalled, deleted entries and plain messages have receipts: this entry has none.
    NoReceipts {
        msg_id: i64,
        kind: EntryKind,
    },
    /// A field names an entry of the group that does not exist, is not earlier, or is from
    /// before the caller joined.
    NoSuchEntry {
        field: &'static str,
        group_id: GroupId,
        msg_id: i64,
    },
    /// The entry a field names is not a message (a change entry or a system line).
    NotAMessage {
        field: &'static str,
        msg_id: i64,
        kind: EntryKind,
    },
    /// The message was already recalled or deleted.
    Retracted {
        msg_id: i64,
        kind: EntryKind,
    },
    /// Only a message's sender may recall or edit it.
    NotSender {
        msg_id: i64,
    },
    /// The message is older than the window in which it may be recalled or edited.
    WindowPassed {
        change: EntryKind,
        msg_id: i64,
        window_secs: i64,
    },
    /// A mention names someone who is not a member of the group.
    MentionOfNonMember {
        user_id: String,
    },
    AckBeyondLastMessage {
        group_id: GroupId,
        requested: i64,
        last_msg_id: i64,
    },
    /// One entry of a batch (`POST /v1/acks`) was refused, so the batch was.
    InBatch {
        index: usize,
        refusal: Box<Refusal>,
    },
}
