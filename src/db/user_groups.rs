//! `user_groups`: the groups each user belongs to, keyed by user. The membership itself
//! (cursors, role, join point) lives in `group_members`, keyed by group; this table only
//! answers "which groups are this user's?" from the user's own rows. On Citus that is one
//! shard instead of every shard of `group_members`, and a feed read that names those groups
//! ([`groups_to_name`]) runs on their shards alone.

use diesel::sql_types::BigInt;
use diesel::QueryResult;
use diesel::QueryableByName;

use super::distribution::on_citus;
use super::raw_sql::{RawSql, Value};
use super::AnyConnection;

/// Past this many groups a statement does not name them: with that many, they lie on nearly
/// every shard anyway, and the list would only lengthen the statement.
const MOST_GROUPS_NAMED: usize = 500;

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    group_id: i64,
}

/// The ids of every group the user belongs to, in order (what their long-polls wait on).
pub fn group_ids_of(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Vec<i64>> {
    let rows: Vec<Row> = RawSql::default()
        .sql("SELECT group_id FROM user_groups WHERE user_id = ")
        .text(user_id)
        .sql(" ORDER BY group_id")
        .keep_prepared()
        .load(conn)?;
    Ok(rows.into_iter().map(|row| row.group_id).collect())
}

/// The user's groups for a statement over their rows of group-keyed tables to name, so that
/// it runs on those groups' shards alone: read only on Citus (elsewhere an index on the user
/// answers, and None says "do not name them"), and None too past [`MOST_GROUPS_NAMED`].
///
/// A feed read takes the list after it has fixed where its window ends: every change
/// published up to there was made by a member whose listing had committed, so the list holds
/// every group those changes are in. (One bound: a membership commits on the group's shard and
/// the user's shard one after the other; a reader between the two sees the group's rows but
/// not its listing. The sync feed reads the member's own events, joins among them, without
/// naming groups, so a join is reported even then.)
pub fn groups_to_name(conn: &mut AnyConnection, user_id: &str) -> QueryResult<Option<Vec<i64>>> {
    if !on_citus(conn) {
        return Ok(None);
    }
    let groups = group_ids_of(conn, user_id)?;
    Ok((groups.len() <= MOST_GROUPS_NAMED).then_some(groups))
}

/// Lists the group among `user_ids`' groups. Part of the transaction that inserts their
/// membership rows.
pub(super) fn record_joined(
    conn: &mut AnyConnection,
    group_id: i64,
    user_ids: &[&str],
) -> QueryResult<()> {
    // In chunks, to stay below SQLite's limit on bind parameters in one statement.
    for chunk in user_ids.chunks(500) {
        let rows: Vec<Vec<Value<'_>>> = chunk.iter().map(|user| vec![Value::Text(user)]).collect();
        RawSql::default()
            .sql("INSERT INTO user_groups (user_id, group_id) SELECT t.u, ")
            .int(group_id)
            .sql(" FROM ")
            .rows("t", &["u"], &rows)
            // SQLite reads `ON CONFLICT` after a bare `FROM` as a join's `ON`.
            .sql(" WHERE 1 = 1 ON CONFLICT (user_id, group_id) DO NOTHING")
            .keep_prepared()
            .execute(conn)?;
    }
    Ok(())
}

/// Takes the group off `user_id`'s groups. Part of the transaction that deletes their
/// membership row.
pub(super) fn record_left(
    conn: &mut AnyConnection,
    group_id: i64,
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
