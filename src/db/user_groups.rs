//! `user_groups`: the groups of each user, keyed by user. The membership itself (cursors,
//! role, join point) lives in `group_members`, keyed by group; this table only answers "which
//! groups are this user's?" from the user's own rows. On Citus that is one shard instead of
//! every shard of `group_members`, and a statement over the user's rows of group-keyed tables
//! that names those groups ([`UserGroups::to_prune`]) runs on their shards alone.
//!
//! A group the user left (or was removed from) keeps its row, marked with the time, while the
//! feeds still hold that change: `/v1/sync` reports it in `removed_group_ids`.

use chrono::NaiveDateTime;
use diesel::sql_types::{BigInt, Bool};
use diesel::QueryResult;
use diesel::QueryableByName;

use super::distribution::on_citus;
use super::models::now_utc;
use super::raw_sql::{RawSql, Value};
use super::AnyConnection;

/// Past this many groups a statement does not name them: with that many, they lie on nearly
/// every shard anyway, and the list would only lengthen the statement.
const MOST_GROUPS_NAMED: usize = 500;

/// A user's groups, as their rows in `user_groups` say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserGroups {
    /// The groups they belong to, by id.
    pub member_of: Vec<i64>,
    /// Every group in the table for them: those they belong to and those they left while the
    /// feeds still hold it, by id.
    pub with_left: Vec<i64>,
}

impl UserGroups {
    /// The groups a statement over this user's rows should name so that it runs on those
    /// groups' shards alone (`left_too`: also the groups they left): Some only on Citus, and
    /// only for a list short enough to be worth naming. Elsewhere an index on the user answers.
    pub fn to_prune(&self, conn: &AnyConnection, left_too: bool) -> Option<&[i64]> {
        let groups = match left_too {
            true => &self.with_left,
            false => &self.member_of,
        };
        (on_citus(conn) && groups.len() <= MOST_GROUPS_NAMED).then_some(groups.as_slice())
    }
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
    #[diesel(sql_type = Bool)]
    member: bool,
}

/// The groups of `user_id`.
pub fn of_user(conn: &mut AnyConnection, user_id: &str) -> QueryResult<UserGroups> {
    let rows: Vec<Row> = RawSql::default()
        .sql("SELECT group_id, left_at IS NULL AS member FROM user_groups WHERE user_id = ")
        .text(user_id)
        .sql(" ORDER BY group_id")
        .keep_prepared()
        .load(conn)?;
    let mut groups = UserGroups::default();
    for row in rows {
        if row.member {
            groups.member_of.push(row.group_id);
        }
        groups.with_left.push(row.group_id);
    }
    Ok(groups)
}

/// [`of_user`] when the engine can use the list (Citus), else an empty one without a read:
/// for a statement that only narrows itself with [`UserGroups::to_prune`].
pub fn of_user_to_prune(conn: &mut AnyConnection, user_id: &str) -> QueryResult<UserGroups> {
    match on_citus(conn) {
        true => of_user(conn, user_id),
        false => Ok(UserGroups::default()),
    }
}

/// Records that `user_ids` joined the group (again, for one who had left it). Part of the
/// statements that insert the membership rows.
pub(super) fn record_joined(
    conn: &mut AnyConnection,
    group_id: i64,
    user_ids: &[&str],
) -> QueryResult<()> {
    // In chunks, to stay below SQLite's limit on bind parameters in one statement.
    for chunk in user_ids.chunks(500) {
        let rows: Vec<Vec<Value<'_>>> = chunk.iter().map(|user| vec![Value::Text(user)]).collect();
        RawSql::default()
            .sql("INSERT INTO user_groups (user_id, group_id, left_at) SELECT t.u, ")
            .int(group_id)
            .sql(", NULL FROM ")
            .rows("t", &["u"], &rows)
            // SQLite reads `ON CONFLICT` after a bare `FROM` as a join's `ON`.
            .sql(" WHERE 1 = 1 ON CONFLICT (user_id, group_id) DO UPDATE SET left_at = NULL")
            .keep_prepared()
            .execute(conn)?;
    }
    Ok(())
}

/// Records that `user_id` left the group (or was removed). Part of the statement that
/// deletes the membership row.
pub(super) fn record_left(
    conn: &mut AnyConnection,
    group_id: i64,
    user_id: &str,
) -> QueryResult<()> {
    RawSql::default()
        .sql("UPDATE user_groups SET left_at = ")
        .time(now_utc())
        .sql(" WHERE user_id = ")
        .text(user_id)
        .sql(" AND group_id = ")
        .int(group_id)
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}

/// Deletes up to `batch` rows of groups left before `cutoff` (their member events are gone
/// by then too); returns how many went.
pub fn delete_left_before(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    RawSql::default()
        .sql(
            "DELETE FROM user_groups WHERE (user_id, group_id) IN \
             (SELECT user_id, group_id FROM user_groups WHERE left_at < ",
        )
        .time(cutoff)
        .sql(" LIMIT ")
        .int(batch)
        .sql(")")
        .execute(conn)
}
