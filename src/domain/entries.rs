//! What an entry of a group's log is, and what role a member has: each with the spelling it
//! is stored and answered with.

/// What an entry of a group's log is. Only [`EntryKind::Message`] counts as unread or has
/// receipts; the stored spelling is also the JSON one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A user's message.
    Message,
    /// A message its sender recalled: its content is gone.
    Recalled,
    /// A message the group's owner deleted: its content is gone.
    Deleted,
    /// A change entry: the sender recalled `target_msg_id`.
    Recall,
    /// A change entry: the sender edited `target_msg_id`.
    Edit,
    /// A change entry: the owner deleted `target_msg_id`.
    Delete,
    MemberJoined,
    MemberLeft,
    MemberRemoved,
    GroupRenamed,
}

impl EntryKind {
    pub const ALL: [EntryKind; 10] = [
        EntryKind::Message,
        EntryKind::Recalled,
        EntryKind::Deleted,
        EntryKind::Recall,
        EntryKind::Edit,
        EntryKind::Delete,
        EntryKind::MemberJoined,
        EntryKind::MemberLeft,
        EntryKind::MemberRemoved,
        EntryKind::GroupRenamed,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EntryKind::Message => "message",
            EntryKind::Recalled => "recalled",
            EntryKind::Deleted => "deleted",
            EntryKind::Recall => "recall",
            EntryKind::Edit => "edit",
            EntryKind::Delete => "delete",
            EntryKind::MemberJoined => "member_joined",
            EntryKind::MemberLeft => "member_left",
            EntryKind::MemberRemoved => "member_removed",
            EntryKind::GroupRenamed => "group_renamed",
        }
    }

    /// A change entry applies to another entry and is not shown as a line of its own.
    pub fn is_change(self) -> bool {
        matches!(
            self,
            EntryKind::Recall | EntryKind::Edit | EntryKind::Delete
        )
    }
}

/// Reads the stored spelling; the table's CHECK admits no other.
impl TryFrom<String> for EntryKind {
    type Error = String;

    fn try_from(stored: String) -> Result<EntryKind, String> {
        EntryKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == stored)
            .ok_or_else(|| format!("unknown entry kind {stored:?}"))
    }
}

/// A member's role in a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Owner,
    Member,
}

impl Role {
    /// The stored (and JSON) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
        }
    }
}

/// Reads the stored spelling; the table's CHECK admits no other.
impl TryFrom<String> for Role {
    type Error = String;

    fn try_from(stored: String) -> Result<Role, String> {
        match stored.as_str() {
            "owner" => Ok(Role::Owner),
            "member" => Ok(Role::Member),
            _ => Err(format!("unknown role {stored:?}")),
        }
    }
}
