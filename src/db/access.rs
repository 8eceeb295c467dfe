//! Who may do what with a group: the one membership check every group route goes through, and
//! the one type for every refusal (mapped to its HTTP answer once, in `api::error`).

use std::collections::HashMap;

use diesel::prelude::*;

use super::models::{EntryKind, GroupRow, MemberRow};
use super::AnyConnection;
use crate::schema::{group_members, groups};

/// Why a request about a group was refused. Decided inside the database call that reads the
/// rows it depends on, answered by the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NoGroup {
        group_id: i64,
    },
    NotMember {
        group_id: i64,
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
        group_id: i64,
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
        group_id: i64,
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
        group_id: i64,
        requested: i64,
        last_msg_id: i64,
    },
    /// One entry of a batch (`POST /v1/acks`) was refused, so the batch was.
    InBatch {
        index: usize,
        refusal: Box<Refusal>,
    },
}

/// The result of a database call that may refuse: the outer error is the database's, the
/// inner one the caller's (`state.db.read(…).await??` answers both).
pub type Checked<T> = QueryResult<Result<T, Refusal>>;

/// Inside a function returning [`Checked`]: the value of a `Result<_, Refusal>`, or return
/// the refusal. Writes run through `Db::write_checked`, which rolls back a refused write.
#[macro_export]
macro_rules! refuse_unless {
    ($result:expr) => {
        match $result {
            Ok(value) => value,
            Err(refusal) => return Ok(Err(refusal.into())),
        }
    };
}

/// A member's standing in a group: the group and their membership row.
#[derive(Debug, Clone)]
pub struct Membership {
    pub group: GroupRow,
    pub member: MemberRow,
}

impl Membership {
    pub fn require_owner(&self, what: &'static str) -> Result<(), Refusal> {
        if self.member.is_owner() {
            Ok(())
        } else {
            Err(Refusal::OwnerOnly(what))
        }
    }
}

/// The memberships of several (group, user) pairs, by pair: each one's membership, or why
/// it is not one (no such group, not a member). The groups' rows are as read here.
pub fn memberships(
    conn: &mut AnyConnection,
    pairs: &[(i64, &str)],
) -> QueryResult<HashMap<(i64, String), Result<Membership, Refusal>>> {
    if let [(group_id, user_id)] = *pairs {
        // The common case of one pair takes the query every engine keeps prepared.
        let checked = member_of(conn, group_id, user_id)?;
        return Ok(HashMap::from([((group_id, user_id.to_owned()), checked)]));
    }
    let mut group_ids: Vec<i64> = pairs.iter().map(|p| p.0).collect();
    group_ids.sort_unstable();
    group_ids.dedup();
    let mut user_ids: Vec<&str> = pairs.iter().map(|p| p.1).collect();
    user_ids.sort_unstable();
    user_ids.dedup();
    let found: Vec<(GroupRow, Option<MemberRow>)> = groups::table
        .left_join(
            group_members::table.on(group_members::group_id
                .eq(groups::group_id)
                .and(group_members::user_id.eq_any(&user_ids))),
        )
        .filter(groups::group_id.eq_any(&group_ids))
        .select((GroupRow::as_select(), Option::<MemberRow>::as_select()))
        .load(conn)?;
    let mut groups_found: HashMap<i64, GroupRow> = HashMap::new();
    let mut members: HashMap<(i64, String), MemberRow> = HashMap::new();
    for (group, member) in found {
        if let Some(member) = member {
            members.insert((member.group_id, member.user_id.clone()), member);
        }
        groups_found.insert(group.group_id, group);
    }
    Ok(pairs
        .iter()
        .map(|&(group_id, user_id)| {
            let key = (group_id, user_id.to_owned());
            let checked = match (groups_found.get(&group_id), members.remove(&key)) {
                (None, _) => Err(Refusal::NoGroup { group_id }),
                (Some(group), member) => membership(group.clone(), member),
            };
            (key, checked)
        })
        .collect())
}

/// The memberships of `user_ids` in a group whose row lock the caller holds, by user, for a
/// write that decides from them: on PostgreSQL each found row is locked until the
/// transaction ends, in user order, so it is read as it is now and stays so until the write
/// is done (SQLite has one writer). The lock covers the group's row too, which the caller
/// already holds: a write that does not hold it (an ack) must not use this. A user without a
/// row is refused as by [`memberships`].
pub fn lock_members_of(
    conn: &mut AnyConnection,
    group_id: i64,
    user_ids: &[&str],
) -> QueryResult<HashMap<String, Result<Membership, Refusal>>> {
    let mut user_ids = user_ids.to_vec();
    user_ids.sort_unstable();
    user_ids.dedup();
    // Built per engine: the selected rows' types name their backend.
    macro_rules! members_query {
        () => {
            groups::table
                .inner_join(
                    group_members::table.on(group_members::group_id
                        .eq(groups::group_id)
                        .and(group_members::user_id.eq_any(&user_ids))),
                )
                .filter(groups::group_id.eq(group_id))
                .order(group_members::user_id)
                .select((GroupRow::as_select(), MemberRow::as_select()))
        };
    }
    let found: Vec<(GroupRow, MemberRow)> = match conn {
        AnyConnection::Postgresql(c) => members_query!().for_no_key_update().load(c)?,
        AnyConnection::Sqlite(c) => members_query!().load(c)?,
    };
    let mut found: HashMap<String, (GroupRow, MemberRow)> = found
        .into_iter()
        .map(|(group, member)| (member.user_id.clone(), (group, member)))
        .collect();
    Ok(user_ids
        .into_iter()
        .map(|user_id| {
            let checked = match found.remove(user_id) {
                Some((group, member)) => membership(group, Some(member)),
                None => Err(Refusal::NotMember { group_id }),
            };
            (user_id.to_owned(), checked)
        })
        .collect())
}

/// The group and the user's membership, found in one query; a refusal when the group does not
/// exist or the user is not in it.
pub fn member_of(conn: &mut AnyConnection, group_id: i64, user_id: &str) -> Checked<Membership> {
    let found: Option<(GroupRow, Option<MemberRow>)> = groups::table
        .left_join(
            group_members::table.on(group_members::group_id
                .eq(groups::group_id)
                .and(group_members::user_id.eq(user_id))),
        )
        .filter(groups::group_id.eq(group_id))
        .select((GroupRow::as_select(), Option::<MemberRow>::as_select()))
        .first(conn)
        .optional()?;
    Ok(match found {
        None => Err(Refusal::NoGroup { group_id }),
        Some((group, member)) => membership(group, member),
    })
}

/// The membership a found group and member row make; a refusal when there is no member row.
fn membership(group: GroupRow, member: Option<MemberRow>) -> Result<Membership, Refusal> {
    match member {
        None => Err(Refusal::NotMember {
            group_id: group.group_id,
        }),
        Some(member) => Ok(Membership { group, member }),
    }
}
