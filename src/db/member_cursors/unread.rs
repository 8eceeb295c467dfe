//! The unread rule, in one place.
//!
//! A member's unread count is the number of entries above their read cursor that are
//! messages (kind `message`: not recalled, not deleted, not a change entry, not a system line)
//! from someone else. It is computed without counting message rows:
//!
//! `unread = last_msg_id − last_read_msg_id − own_msgs_after_read − not_counted_above_read`
//!
//! - `own_msgs_after_read` is kept in the membership row: a send that leaves the sender's read
//!   cursor behind adds one, a read cursor that moves subtracts the sender's own messages it
//!   passes, and recalling or deleting one of them above the cursor subtracts one.
//! - `not_counted_above_read` counts the entries of any other kind above the cursor through a
//!   partial index holding only those entries, so its cost grows with the recalls, edits,
//!   deletes and system lines in the unread range (normally none), never with the messages.
//!
//! The two sets are disjoint (own counts only kind `message`), so nothing is subtracted twice.
//!
//! The unread mention count is the number of messages above the read cursor that mention the
//! member by name (one `mentions` row each) or mention everyone (found through a partial index
//! of such messages), not sent by the member, each message once.
//!
//! The SQL fragments below are scalar subqueries over the current `group_members` row, for any
//! query whose FROM names that table without an alias.

use std::collections::HashMap;
use std::sync::LazyLock;

use diesel::prelude::*;
use diesel::sql_types::BigInt;

use crate::db::engine::distribution::one_group;
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::AnyConnection;
use crate::domain::GroupId;

/// SQL about a membership row (`group_members`) that reads other tables of the row's group:
/// the text around each place the group is named. Over the rows of many groups the group is
/// the row's column; over one group's rows it is that group's id, bound, because on Citus a
/// subquery that names its group only through the outer row runs on every shard.
pub struct GroupScoped(&'static [&'static str]);

impl GroupScoped {
    /// The text for rows of any group.
    pub fn over_rows(&self) -> String {
        self.0.join("group_members.group_id")
    }

    /// `query` with the text for rows of `group_id` alone appended.
    pub fn for_group(&self, query: RawSql, group_id: GroupId) -> RawSql {
        let (last, before) = self.0.split_last().expect("text around the group");
        before
            .iter()
            .fold(query, |query, part| query.sql(part).int(group_id))
            .sql(last)
    }
}

/// Entries above the member's read cursor that never count as unread.
pub const NOT_COUNTED_ABOVE_READ: GroupScoped = GroupScoped(&[
    "(SELECT count(*) FROM group_msgs nc WHERE nc.group_id = ",
    " AND nc.msg_id > group_members.last_read_msg_id AND nc.kind <> 'message')",
]);

/// Messages above the member's read cursor that mention them, by name or as everyone.
pub const MENTIONS_ABOVE_READ: GroupScoped = GroupScoped(&[
    "((SELECT count(*) FROM mentions mn WHERE mn.group_id = ",
    " AND mn.user_id = group_members.user_id \
         AND mn.msg_id > group_members.last_read_msg_id) \
   + (SELECT count(*) FROM group_msgs ma WHERE ma.group_id = ",
    " AND ma.mention_all \
         AND ma.msg_id > group_members.last_read_msg_id AND ma.kind = 'message' \
         AND ma.sender_id <> group_members.user_id \
         AND NOT EXISTS (SELECT 1 FROM mentions mx WHERE mx.group_id = ma.group_id \
                           AND mx.msg_id = ma.msg_id AND mx.user_id = group_members.user_id)))",
]);

/// [`NOT_COUNTED_ABOVE_READ`] and [`MENTIONS_ABOVE_READ`] over rows of any group, spelled once.
pub static NOT_COUNTED_OVER_ROWS: LazyLock<String> =
    LazyLock::new(|| NOT_COUNTED_ABOVE_READ.over_rows());
pub static MENTIONS_OVER_ROWS: LazyLock<String> = LazyLock::new(|| MENTIONS_ABOVE_READ.over_rows());

/// The figures of one membership that its unread count is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnreadInputs {
    pub last_msg_id: i64,
    pub last_read_msg_id: i64,
    pub own_msgs_after_read: i64,
    pub not_counted_above_read: i64,
}

impl UnreadInputs {
    pub fn unread_count(&self) -> i64 {
        (self.last_msg_id
            - self.last_read_msg_id
            - self.own_msgs_after_read
            - self.not_counted_above_read)
            .max(0)
    }
}

/// [`UnreadInputs::unread_count`] in SQL (PostgreSQL) over columns named as its fields.
pub const UNREAD_OF_INPUTS: &str = "GREATEST(0, last_msg_id - last_read_msg_id \
     - own_msgs_after_read - not_counted_above_read)";

/// The SQL of a membership's unread count, for sums and filters over `group_members` joined
/// with `groups`.
pub fn unread_sql() -> String {
    format!(
        "(groups.last_msg_id - group_members.last_read_msg_id \
          - group_members.own_msgs_after_read - {})",
        *NOT_COUNTED_OVER_ROWS
    )
}

#[derive(QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AboveRead {
    /// The group's last entry, read with the counts so that they agree (an entry committed
    /// since the caller last read the group, or a recall of the member's own message, counts
    /// in all or in none).
    #[diesel(sql_type = BigInt)]
    pub last_msg_id: i64,
    /// The member's own messages above the read cursor, read with the counts too.
    #[diesel(sql_type = BigInt)]
    pub own_msgs_after_read: i64,
    #[diesel(sql_type = BigInt)]
    pub not_counted: i64,
    #[diesel(sql_type = BigInt)]
    pub mentions: i64,
}

/// Appends the number of `member`'s own messages that a read cursor moving from the row's
/// `last_read_msg_id` to `read_to` passes (0 when it does not move forward): what the row's
/// `own_msgs_after_read` loses with the move. `member` names the `group_members` row, and
/// `read_to` is SQL over the statement's other tables. The sender index finds the messages,
/// so the cost grows with the member's own messages in the range, never with the others'.
///
/// `one_group`: the group of every row, when one; the count then names it (on Citus a
/// subquery that only refers to the outer row's group would run on every shard).
pub fn own_messages_passed(
    query: RawSql,
    member: &str,
    read_to: &str,
    one_group: Option<i64>,
) -> RawSql {
    let query = query.sql(&format!(
        "(CASE WHEN {member}.last_read_msg_id < {read_to} THEN (SELECT count(*) \
         FROM group_msgs own WHERE own.group_id = "
    ));
    let query = match one_group {
        Some(group_id) => query.int(group_id),
        None => query.sql(&format!("{member}.group_id")),
    };
    query.sql(&format!(
        " AND own.sender_id = {member}.user_id AND own.kind = 'message' \
         AND own.msg_id > {member}.last_read_msg_id AND own.msg_id <= {read_to}) \
         ELSE 0 END)"
    ))
}

/// For members whose acks just moved (or kept) their read cursors, by (group, user, read
/// cursor after the ack): the entries above that cursor that the unread rule skips, their
/// unread mentions, the member's own messages above it, and the group's last entry. One
/// query, run with `writes` (the acks' own writes, the membership rows' move among them) in
/// the same round trip where the engine allows ([`RawSql::load_after`]).
///
/// The answer is the same whether the query sees the membership rows as the writes leave
/// them (SQLite and Citus run the writes first) or as they were (PostgreSQL runs them as
/// parts of the same statement): the read cursor is the one given, and the own-message
/// count is the row's less what a move from the row's read cursor to the given one passes,
/// which is nothing once the row has moved.
pub fn above_read_after(
    conn: &mut AnyConnection,
    reads: &[(i64, &str, i64)],
    writes: Vec<RawSql>,
) -> QueryResult<HashMap<(i64, String), AboveRead>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        group_id: i64,
        #[diesel(sql_type = diesel::sql_types::Text)]
        user_id: String,
        #[diesel(embed)]
        above: AboveRead,
    }
    if reads.is_empty() {
        for write in writes {
            write.execute(conn)?;
        }
        return Ok(HashMap::new());
    }
    let query = above_read_query(reads);
    let found: Vec<Row> = query.load_after(writes, conn)?;
    Ok(found
        .into_iter()
        .map(|r| ((r.group_id, r.user_id), r.above))
        .collect())
}

/// The query of [`above_read_after`] for non-empty `reads`: the membership rows with the
/// given read cursors, joined to their groups, and the counts above each cursor.
fn above_read_query(reads: &[(i64, &str, i64)]) -> RawSql {
    let group = one_group(reads.iter().map(|r| r.0));
    let rows: Vec<Vec<Value<'_>>> = reads
        .iter()
        .map(|&(group_id, user_id, read_to)| {
            vec![
                Value::Int(group_id),
                Value::Text(user_id),
                Value::Int(read_to),
            ]
        })
        .collect();
    // The membership rows with the given read cursors, under the table's name, which the
    // counts below refer to.
    let query = RawSql::default().sql(
        "SELECT group_members.group_id, group_members.user_id, groups.last_msg_id, \
         group_members.own_msgs_after_read, CAST(",
    );
    let query = match group {
        Some(group_id) => NOT_COUNTED_ABOVE_READ.for_group(query, GroupId(group_id)),
        None => query.sql(&NOT_COUNTED_OVER_ROWS),
    }
    .sql(" AS BIGINT) AS not_counted, CAST(");
    let query = match group {
        Some(group_id) => MENTIONS_ABOVE_READ.for_group(query, GroupId(group_id)),
        None => query.sql(&MENTIONS_OVER_ROWS),
    }
    .sql(
        " AS BIGINT) AS mentions FROM (SELECT gm.group_id, gm.user_id, \
         t.read_to AS last_read_msg_id, gm.own_msgs_after_read - ",
    );
    own_messages_passed(query, "gm", "t.read_to", group)
        .sql(" AS own_msgs_after_read FROM group_members gm JOIN ")
        .rows("t", &["g", "u", "read_to"], &rows)
        .sql(" ON gm.group_id = t.g AND gm.user_id = t.u")
        .within_one_group("gm.group_id", group)
        .sql(") AS group_members JOIN groups ON groups.group_id = group_members.group_id")
        .within_one_group("groups.group_id", group)
        // One text whatever the count of rows on PostgreSQL (arrays), kept prepared.
        .keep_prepared()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_messages_and_uncounted_entries_are_subtracted_once_each() {
        let inputs = UnreadInputs {
            last_msg_id: 10,
            last_read_msg_id: 4,
            own_msgs_after_read: 2,
            not_counted_above_read: 1,
        };
        assert_eq!(inputs.unread_count(), 3);
    }

    #[test]
    fn never_negative() {
        let inputs = UnreadInputs {
            last_msg_id: 3,
            last_read_msg_id: 3,
            own_msgs_after_read: 0,
            not_counted_above_read: 0,
        };
        assert_eq!(inputs.unread_count(), 0);
    }
}
