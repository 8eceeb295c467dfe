//! Row locks taken in one order: by group, then by key within the group, so that two writes
//! of several rows never take them in opposite orders; on Citus one query per group, so that
//! each runs on its group's shard.

use std::collections::BTreeMap;

use diesel::prelude::*;
use diesel::sql_types::BigInt;

use super::connection::AnyConnection;
use super::raw_sql::RawSql;

/// What a locking read does with a row another transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Waits for it.
    Wait,
    /// Leaves it out.
    Skip,
}

/// One statement of one query per group, each naming its group (so that on Citus each runs
/// on its group's shard; a lock over several shards is refused): one `WITH` clause each, run
/// in group order, their rows together. `query_of` appends one group's query.
pub fn group_by_group(
    by_group: &BTreeMap<i64, Vec<&str>>,
    query_of: impl Fn(RawSql, i64, &[&str]) -> RawSql,
) -> RawSql {
    let mut query = RawSql::default();
    for (n, (group_id, keys)) in by_group.iter().enumerate() {
        let opening = if n == 0 { "WITH" } else { "," };
        query = query.sql(&format!("{opening} locked{n} AS ("));
        query = query_of(query, *group_id, keys).sql(")");
    }
    let union: Vec<String> = (0..by_group.len())
        .map(|n| format!("SELECT * FROM locked{n}"))
        .collect();
    query.sql(&format!(" {}", union.join(" UNION ALL ")))
}

/// PostgreSQL: locks the rows of `table` keyed by (group_id, `key_column`) for the pairs, in
/// (group, key) order, and answers the pairs whose rows it found (and locked). An `UPDATE …
/// FROM (VALUES …)` locks rows in whatever order its plan reaches them, so two writes of
/// several rows could take them in opposite orders and deadlock; locking first, sorted,
/// gives every such write the same order. Each group's rows are locked by a query that names
/// the group, so on Citus it runs on the group's shard (a lock over several shards is
/// refused); several groups' queries go in one statement, one `WITH` clause each, run in
/// group order. SQLite has one writer and no row locks: None.
pub fn lock_in_order(
    conn: &mut AnyConnection,
    table: &str,
    key_column: &str,
    pairs: &[(i64, &str)],
    busy: Busy,
) -> QueryResult<Option<Vec<(i64, String)>>> {
    #[derive(diesel::QueryableByName)]
    struct Locked {
        #[diesel(sql_type = BigInt)]
        group_id: i64,
        #[diesel(sql_type = diesel::sql_types::Text)]
        key: String,
    }
    if !matches!(conn, AnyConnection::Postgresql(_)) {
        return Ok(None);
    }
    if pairs.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut by_group: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for &(group_id, key) in pairs {
        by_group.entry(group_id).or_default().push(key);
    }
    let skip = if busy == Busy::Skip {
        " SKIP LOCKED"
    } else {
        ""
    };
    let lock_group_rows = |query: RawSql, group_id: i64, keys: &[&str]| {
        query
            .sql(&format!(
                "SELECT r.group_id, r.{key_column} AS key FROM {table} r WHERE r.group_id = "
            ))
            .int(group_id)
            .sql(&format!(" AND r.{key_column}"))
            .in_texts(keys)
            .sql(&format!(
                " ORDER BY r.{key_column} FOR NO KEY UPDATE OF r{skip}"
            ))
    };
    let query = if let [(group_id, keys)] = by_group.iter().collect::<Vec<_>>()[..] {
        // Kept prepared: the ack of one group, whose text is the same every time.
        lock_group_rows(RawSql::default(), *group_id, keys).keep_prepared()
    } else {
        group_by_group(&by_group, lock_group_rows)
    };
    let locked: Vec<Locked> = query.load(conn)?;
    Ok(Some(
        locked
            .into_iter()
            .map(|row| (row.group_id, row.key))
            .collect(),
    ))
}
