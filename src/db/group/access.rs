//! Who may do what with a group: the one membership check every group route goes through,
//! answering a [`Refusal`] (mapped to its HTTP answer once, in `api::error`) when it says no.

use std::collections::{BTreeMap, HashMap};

use diesel::prelude::*;

use crate::db::engine::distribution::on_citus;
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::engine::row_locks::{group_by_group, Busy};
use crate::db::models::{GroupRow, MemberRow};
use crate::db::AnyConnection;
use crate::domain::refusal::Refusal;
use crate::domain::GroupId;
use crate::schema::{group_members, groups};

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
        let checked = member_of(conn, GroupId(group_id), user_id)?;
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
                (None, _) => Err(Refusal::NoGroup {
                    group_id: GroupId(group_id),
                }),
                (Some(group), member) => membership(group.clone(), member),
            };
            (key, checked)
        })
        .collect())
}

/// Columns of a membership as [`LockedRow`] reads them: the group's row (`g`) and the
/// member's (`m`), which share only `group_id`.
pub(super) const MEMBERSHIP_COLUMNS: &str = "g.group_id, g.name, g.owner_id, g.last_msg_id, \
     g.created_at, g.last_activity_at, g.member_count, m.user_id, m.role, \
     m.joined_after_msg_id, m.last_ack_msg_id, m.last_read_msg_id, m.joined_at, \
     m.delivered_msg_id, m.own_msgs_after_read";

/// A group's row and a member's, read together.
#[derive(QueryableByName)]
pub(super) struct LockedRow {
    #[diesel(embed)]
    pub group: GroupRow,
    #[diesel(embed)]
    pub member: MemberRow,
}

/// What [`lock_memberships`] found.
#[derive(Debug, Default)]
pub struct LockedMemberships {
    /// Each pair's membership, or why it is not one.
    pub found: HashMap<(i64, String), Result<Membership, Refusal>>,
    /// Pairs whose membership row another transaction holds, when asked not to wait for it
    /// (they are not in `found`).
    pub busy: Vec<(i64, String)>,
}

/// The memberships of (group, user) pairs, by pair, for a write that moves their cursors
/// without holding the groups' row locks (an ack): on PostgreSQL each membership row is
/// locked until the transaction ends, in (group, user) order, and read in the same round
/// trip, as it is once locked. Only the membership rows are locked, never the groups'
/// rows, which senders lock before their members' rows; a write that takes the group's row
/// uses [`super::groups::lock_group_and_members`]. With [`Busy::Skip`] a row another
/// transaction holds is not waited for but answered in `busy`. SQLite has one writer and no
/// row locks: the rows as they are.
///
/// On Citus each group's rows are locked by a query that names the group, so that it runs
/// on the group's shard (a lock over several shards is refused); several groups' queries go
/// in one statement, one `WITH` clause each, run in group order. A pair that the locking query does
/// not find (a refusal, or a row held when not waiting) is looked up once more, unlocked, to
/// tell which.
pub fn lock_memberships(
    conn: &mut AnyConnection,
    pairs: &[(i64, &str)],
    busy: Busy,
) -> QueryResult<LockedMemberships> {
    if !matches!(conn, AnyConnection::Postgresql(_)) {
        let found = memberships(conn, pairs)?;
        return Ok(LockedMemberships {
            found,
            busy: Vec::new(),
        });
    }
    let mut by_group: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for &(group_id, user_id) in pairs {
        by_group.entry(group_id).or_default().push(user_id);
    }
    let Some(query) = locking_query(conn, &by_group, busy) else {
        return Ok(LockedMemberships::default());
    };
    let locked: Vec<LockedRow> = query.load(conn)?;
    let found: HashMap<(i64, String), Result<Membership, Refusal>> = locked
        .into_iter()
        .map(|LockedRow { group, member }| {
            let key = (member.group_id, member.user_id.clone());
            (key, Ok(Membership { group, member }))
        })
        .collect();
    settle_missing(conn, pairs, found, busy)
}

/// The statement that locks and reads the memberships of `by_group` (see
/// [`lock_memberships`]); None when there are none.
fn locking_query(
    conn: &AnyConnection,
    by_group: &BTreeMap<i64, Vec<&str>>,
    busy: Busy,
) -> Option<RawSql> {
    let skip = match busy {
        Busy::Skip => " SKIP LOCKED",
        Busy::Wait => "",
    };
    Some(match by_group.iter().collect::<Vec<_>>()[..] {
        [] => return None,
        // Kept prepared: the ack of one group, whose text is the same every time.
        [(group_id, users)] => {
            lock_in_group(RawSql::default(), GroupId(*group_id), users, skip).keep_prepared()
        }
        _ if !on_citus(conn) => lock_pairs(by_group, skip),
        _ => group_by_group(by_group, |query, group_id, users| {
            lock_in_group(query, GroupId(group_id), users, skip)
        }),
    })
}

/// Appends the query that locks and reads the memberships of `users` in one group, which it
/// names (so that on Citus it runs on the group's shard).
fn lock_in_group(query: RawSql, group_id: GroupId, users: &[&str], skip: &str) -> RawSql {
    query
        .sql(&format!(
            "SELECT {MEMBERSHIP_COLUMNS} FROM group_members m \
             JOIN groups g ON g.group_id = m.group_id WHERE m.group_id = "
        ))
        .int(group_id)
        .sql(" AND g.group_id = ")
        .int(group_id)
        .sql(" AND m.user_id")
        .in_texts(users)
        .sql(&format!(" ORDER BY m.user_id FOR NO KEY UPDATE OF m{skip}"))
}

/// One node: one query over every pair, its text the same however many (kept prepared),
/// locking in (group, user) order as it goes.
fn lock_pairs(by_group: &BTreeMap<i64, Vec<&str>>, skip: &str) -> RawSql {
    let rows: Vec<Vec<Value<'_>>> = by_group
        .iter()
        .flat_map(|(group_id, users)| {
            users
                .iter()
                .map(|user_id| vec![Value::Int(*group_id), Value::Text(user_id)])
        })
        .collect();
    RawSql::default()
        .sql(&format!("SELECT {MEMBERSHIP_COLUMNS} FROM "))
        .rows("t", &["g", "u"], &rows)
        .sql(
            " JOIN group_members m ON m.group_id = t.g AND m.user_id = t.u \
             JOIN groups g ON g.group_id = m.group_id",
        )
        .sql(&format!(
            " ORDER BY m.group_id, m.user_id FOR NO KEY UPDATE OF m{skip}"
        ))
        .keep_prepared()
}

/// Tells, for each pair the locking query did not find, why: a row held when not waiting
/// (`busy`), or a refusal, looked up once more without a lock.
fn settle_missing(
    conn: &mut AnyConnection,
    pairs: &[(i64, &str)],
    mut found: HashMap<(i64, String), Result<Membership, Refusal>>,
    busy: Busy,
) -> QueryResult<LockedMemberships> {
    let missing: Vec<(i64, &str)> = pairs
        .iter()
        .copied()
        .filter(|&(group_id, user_id)| !found.contains_key(&(group_id, user_id.to_owned())))
        .collect();
    if missing.is_empty() {
        return Ok(LockedMemberships {
            found,
            busy: Vec::new(),
        });
    }
    let mut held = Vec::new();
    for (key, checked) in memberships(conn, &missing)? {
        match checked {
            // Skipped: another transaction holds the row.
            Ok(_) if busy == Busy::Skip => held.push(key),
            // Waiting, a row is missed only when it did not exist as the locking query
            // began: the membership began since, after this request.
            Ok(membership) => {
                let group_id = membership.group.group_id;
                found.insert(
                    key,
                    Err(Refusal::NotMember {
                        group_id: GroupId(group_id),
                    }),
                );
            }
            Err(refusal) => {
                found.insert(key, Err(refusal));
            }
        }
    }
    Ok(LockedMemberships { found, busy: held })
}

/// The group and the user's membership, found in one query; a refusal when the group does not
/// exist or the user is not in it.
pub fn member_of(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_id: &str,
) -> Checked<Membership> {
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
            group_id: GroupId(group.group_id),
        }),
        Some(member) => Ok(Membership { group, member }),
    }
}
