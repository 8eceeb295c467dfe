//! Every table's row count and the full rows of the two tables updated in place, taken before
//! and after a request, and the rows written between two such snapshots.

use std::collections::{BTreeMap, HashMap};

use chorus::db::AnyConnection;
use chorus::schema::{group_members, groups};
use diesel::prelude::*;

/// Every table's row count (inserts and deletes, in whatever tables the schema has now),
/// plus the full rows of the two tables the design updates in place, so an update shows as a
/// changed row. Net counts: a request that inserted and deleted in one table would cancel.
pub struct Snapshot {
    counts: BTreeMap<String, i64>,
    groups: HashMap<i64, (String, String, i64)>,
    members: HashMap<(i64, String), (String, i64, i64, i64)>,
}

type MemberColumns = (i64, String, String, i64, i64, i64);

#[derive(QueryableByName)]
struct TableName {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

#[derive(QueryableByName)]
struct RowCount {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// The application's tables, read from the catalog so that tables added later are counted.
fn table_names(conn: &mut AnyConnection) -> Vec<String> {
    let query = match conn {
        AnyConnection::Sqlite(_) => {
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '__diesel%'"
        }
        AnyConnection::Postgresql(_) => {
            "SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename NOT LIKE '__diesel%'"
        }
    };
    let names: Vec<TableName> =
        chorus::on_engine!(conn, |c| diesel::sql_query(query).load(c)).expect("list tables");
    names.into_iter().map(|t| t.name).collect()
}

fn row_count(conn: &mut AnyConnection, table: &str) -> i64 {
    let query = format!("SELECT COUNT(*) AS n FROM \"{table}\"");
    let count: RowCount = chorus::on_engine!(conn, |c| diesel::sql_query(&query).get_result(c))
        .unwrap_or_else(|e| panic!("count rows of {table}: {e}"));
    count.n
}

pub fn snapshot(conn: &mut AnyConnection) -> Snapshot {
    let counts = table_names(conn)
        .into_iter()
        .map(|t| {
            let n = row_count(conn, &t);
            (t, n)
        })
        .collect();
    let groups = groups::table
        .select((
            groups::group_id,
            groups::name,
            groups::owner_id,
            groups::last_msg_id,
        ))
        .load::<(i64, String, String, i64)>(conn)
        .expect("read groups");
    let members = group_members::table
        .select((
            group_members::group_id,
            group_members::user_id,
            group_members::role,
            group_members::joined_after_msg_id,
            group_members::last_ack_msg_id,
            group_members::last_read_msg_id,
        ))
        .load::<MemberColumns>(conn)
        .expect("read group_members");
    Snapshot {
        counts,
        groups: groups
            .into_iter()
            .map(|(id, n, o, last)| (id, (n, o, last)))
            .collect(),
        members: members
            .into_iter()
            .map(|(g, u, role, joined, ack, read)| ((g, u), (role, joined, ack, read)))
            .collect(),
    }
}

/// Keys present in only one map, or with different values: rows inserted, deleted or updated.
fn changed<K: std::hash::Hash + Eq, V: PartialEq>(a: &HashMap<K, V>, b: &HashMap<K, V>) -> u64 {
    let updated_or_deleted = a.iter().filter(|(k, v)| b.get(k) != Some(v)).count();
    let inserted = b.keys().filter(|k| !a.contains_key(k)).count();
    (updated_or_deleted + inserted) as u64
}

/// Rows written per table, summed over the samples.
#[derive(Default)]
pub struct RowsWritten {
    pub samples: u64,
    pub by_table: BTreeMap<String, u64>,
}

impl RowsWritten {
    pub fn add(&mut self, before: &Snapshot, after: &Snapshot) {
        self.samples += 1;
        for (table, n) in &after.counts {
            let written = match table.as_str() {
                "groups" => changed(&before.groups, &after.groups),
                "group_members" => changed(&before.members, &after.members),
                _ => (n - before.counts.get(table).copied().unwrap_or(0)).unsigned_abs(),
            };
            *self.by_table.entry(table.clone()).or_default() += written;
        }
    }

    pub fn per_request(&self, table: &str) -> f64 {
        self.by_table.get(table).copied().unwrap_or(0) as f64 / self.samples.max(1) as f64
    }

    pub fn total_per_request(&self) -> f64 {
        self.by_table.values().sum::<u64>() as f64 / self.samples.max(1) as f64
    }
}
