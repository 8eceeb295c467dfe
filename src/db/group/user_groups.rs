//! `user_groups`: the groups each user belongs to, keyed by user. The membership itself
//! (cursors, role, join point) lives in `group_members`, keyed by group; this table only
//! answers "which groups are this user's?" from the user's own rows, as every long-poll asks
//! when it registers its wait. On Citus that is one shard instead of every shard of
//! `group_members`.
//!
//! Only wake-ups rely on it, never what a feed reports: on Citus a membership commits on the
//! group's shard and the user's one after the other (a two-phase commit whose second half may
//! wait for recovery if a node fails), so the list may briefly lag the membership. A poll that
//! misses a wake-up that way still answers at its timeout with everything after its cursor.

use diesel::sql_types::BigInt;
use diesel::QueryResult;
use diesel::QueryableByName;

use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::AnyConnection;
use crate::domain::GroupId;

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
}

/// The ids of every group the user belongs to (what their long-polls wait on).
pub fn group_ids_of(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Vec<i64>> {
    let rows: Vec<Row> = RawSql::default()
        .sql("SELECT group_id FROM user_groups WHERE user_id = ")
        .text(user_id)
        .keep_prepared()
        .load(conn)?;
    Ok(rows.into_iter().map(|row| row.group_id).collect())
}

/// Lists the group among `user_ids`' groups. Part of the transaction that inserts their
/// membership rows.
pub(super) fn record_joined(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_ids: &[&str],
) -> QueryResult<()> {
    // The users go as one bound value (an array, or JSON on SQLite), however many there are.
    let rows: Vec<Vec<Value<'_>>> = user_ids
        .iter()
        .map(|user| vec![Value::Text(user)])
        .collect();
    RawSql::default()
        .sql("INSERT INTO user_groups (user_id, group_id) SELECT t.u, ")
        .int(group_id)
        .sql(" FROM ")
        .rows("t", &["u"], &rows)
        // A listing may be there already: one an instance of the release before this table
        // left behind when it removed a member (see DEPLOYING.md, upgrading). SQLite reads
        // `ON CONFLICT` after a bare `FROM` as a join's `ON`, hence the `WHERE`.
        .sql(" WHERE 1 = 1 ON CONFLICT (user_id, group_id) DO NOTHING")
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}

/// Takes the group off `user_id`'s groups. Part of the transaction that deletes their
/// membership row.
pub(super) fn record_left(
    conn: &mut AnyConnection,
    group_id: GroupId,
    user_id: &str,
) -> QueryResult<()> {
    RawSql::default()
        .sql("DELETE FROM user_groups WHERE user_id = ")
        .text(user_id)
        .sql(" AND group_id = ")
        .int(group_id)
        .keep_prepared()
        .execute(conn)
        .map(|_| ())
}
