//! Citus: the schema distributed by key, so that every write of a group (its row, members,
//! messages, receipts, cursors and what pushes told its members' devices) lands on the one
//! shard that holds the group, a device's own rows on the shard of the device, and the list of
//! a user's groups on the shard of the user.
//!
//! A PostgreSQL database with the `citus` extension gets its tables distributed when Chorus
//! starts on it (while they are empty: a fresh schema costs nothing to distribute), or by
//! `chorus distribute`, which also moves the rows of an existing one-node database onto the
//! workers. Both skip what is distributed already, so either may run again.

use std::sync::atomic::{AtomicBool, Ordering};

use diesel::sql_types::{BigInt, Bool, Text};
use diesel::{QueryResult, QueryableByName, RunQueryDsl};

use super::connection::AnyConnection;

/// How Citus places a table's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Hash-distributed by `column`, co-located with the first table of that column (so that
    /// joins and foreign keys on it stay within one shard).
    ByKey { column: &'static str },
    /// A copy on every node: small, read everywhere, rarely written.
    Everywhere,
}

/// Every table, parents before the tables whose foreign keys reference them.
const TABLES: &[(&str, Placement)] = &[
    ("groups", Placement::ByKey { column: "group_id" }),
    ("group_members", Placement::ByKey { column: "group_id" }),
    ("group_msgs", Placement::ByKey { column: "group_id" }),
    ("mentions", Placement::ByKey { column: "group_id" }),
    ("receipt_events", Placement::ByKey { column: "group_id" }),
    ("member_events", Placement::ByKey { column: "group_id" }),
    ("cursor_counts", Placement::ByKey { column: "group_id" }),
    ("cursor_moves", Placement::ByKey { column: "group_id" }),
    ("device_cursors", Placement::ByKey { column: "group_id" }),
    ("push_group_state", Placement::ByKey { column: "group_id" }),
    (
        "devices",
        Placement::ByKey {
            column: "device_id",
        },
    ),
    (
        "push_targets",
        Placement::ByKey {
            column: "device_id",
        },
    ),
    ("user_groups", Placement::ByKey { column: "user_id" }),
    ("feed_clock", Placement::Everywhere),
    // Any node an instance attaches to can tell whether the schema is current.
    ("__diesel_schema_migrations", Placement::Everywhere),
];

/// What [`distribute`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Distribution {
    /// Tables distributed now.
    pub distributed_now: Vec<&'static str>,
    /// Tables that were distributed already.
    pub already: usize,
}

/// Why the schema could not be distributed.
#[derive(Debug, thiserror::Error)]
pub enum DistributeError {
    #[error("the database has no citus extension: there is nothing to distribute onto")]
    NotCitus,
    #[error(
        "table {table} holds rows and is not distributed yet; run `chorus distribute` once \
         (it moves the rows onto the workers) before serving from this Citus database"
    )]
    HoldsRows { table: &'static str },
    #[error("distributing {table}: {source}")]
    Database {
        table: &'static str,
        source: diesel::result::Error,
    },
    #[error("reading the distribution: {0}")]
    Read(#[from] diesel::result::Error),
}

/// Whether the rows already in a table may be moved now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Distribute only empty tables (a server starting): a table with rows is an error.
    OnlyIfEmpty,
    /// Move them (`chorus distribute`): each table is locked while its rows are copied.
    Move,
}

/// Set once this process found its PostgreSQL database to be a Citus database (a process
/// serves one database: see [`on_citus`]).
static ON_CITUS: AtomicBool = AtomicBool::new(false);

/// True when this process's database is a Citus database (see [`on_citus`]).
pub fn serving_citus() -> bool {
    ON_CITUS.load(Ordering::Relaxed)
}

/// True when `conn` is a connection to the process's database and that database is a Citus
/// database: the engine layer then shapes statements so each runs on one shard (no
/// data-modifying `WITH` clauses over several tables, no lock over several groups in one
/// statement). Known from the start of the process: its migrations look.
pub fn on_citus(conn: &AnyConnection) -> bool {
    matches!(conn, AnyConnection::Postgresql(_)) && ON_CITUS.load(Ordering::Relaxed)
}

/// The group every one of `group_ids` names, if they all name one. A statement over rows of
/// one group says so with a constant (`WHERE group_id = $1`), so that Citus runs it on that
/// group's shard alone; over a table of rows (an array on PostgreSQL) it could not tell.
pub fn one_group(group_ids: impl IntoIterator<Item = i64>) -> Option<i64> {
    let mut group_ids = group_ids.into_iter();
    let first = group_ids.next()?;
    group_ids.all(|g| g == first).then_some(first)
}

/// True when the connection is to a PostgreSQL database with the `citus` extension.
pub fn is_citus(conn: &mut AnyConnection) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = Bool)]
        citus: bool,
    }
    if !matches!(conn, AnyConnection::Postgresql(_)) {
        return Ok(false);
    }
    let found: Vec<Found> = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AS citus",
    )
    .load(conn)?;
    let citus = found.first().is_some_and(|f| f.citus);
    if citus {
        ON_CITUS.store(true, Ordering::Relaxed);
    }
    Ok(citus)
}

/// Distributes every table of [`TABLES`] not distributed yet, in order. Run after the
/// migrations, by one instance at a time (the caller holds the migration lock).
pub fn distribute(conn: &mut AnyConnection, rows: Rows) -> Result<Distribution, DistributeError> {
    if !is_citus(conn)? {
        return Err(DistributeError::NotCitus);
    }
    let done = distributed_tables(conn)?;
    let mut distribution = Distribution::default();
    for &(table, placement) in TABLES {
        if done.iter().any(|t| t == table) {
            distribution.already += 1;
            continue;
        }
        let held_rows = holds_rows(conn, table)?;
        // A copy on every node of a few rows is cheap; moving a table's rows is not.
        if held_rows && rows == Rows::OnlyIfEmpty && placement != Placement::Everywhere {
            return Err(DistributeError::HoldsRows { table });
        }
        let statement = match placement {
            Placement::ByKey { column } => {
                let first = TABLES
                    .iter()
                    .find(|(_, p)| *p == placement)
                    .map_or(table, |(t, _)| t);
                let colocate = if first == table {
                    "'default'".to_owned()
                } else {
                    format!("'{first}'")
                };
                format!(
                    "SELECT create_distributed_table('{table}', '{column}', \
                     colocate_with => {colocate})"
                )
            }
            Placement::Everywhere => format!("SELECT create_reference_table('{table}')"),
        };
        diesel::sql_query(statement)
            .execute(conn)
            .map_err(|source| DistributeError::Database { table, source })?;
        if held_rows {
            // The rows copied onto the workers stay behind in the coordinator's local table
            // until this removes them.
            diesel::sql_query(format!(
                "SELECT truncate_local_data_after_distributing_table('{table}')"
            ))
            .execute(conn)
            .map_err(|source| DistributeError::Database { table, source })?;
        }
        distribution.distributed_now.push(table);
    }
    Ok(distribution)
}

/// The names of the tables Citus distributes (or copies to every node) now.
fn distributed_tables(conn: &mut AnyConnection) -> QueryResult<Vec<String>> {
    #[derive(QueryableByName)]
    struct Table {
        #[diesel(sql_type = Text)]
        name: String,
    }
    let tables: Vec<Table> = diesel::sql_query(
        "SELECT c.relname::text AS name FROM pg_dist_partition p \
         JOIN pg_class c ON c.oid = p.logicalrelid",
    )
    .load(conn)?;
    Ok(tables.into_iter().map(|t| t.name).collect())
}

fn holds_rows(conn: &mut AnyConnection, table: &str) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        rows: i64,
    }
    let counted: Vec<Count> = diesel::sql_query(format!(
        "SELECT CAST(count(*) AS BIGINT) AS rows FROM (SELECT 1 FROM {table} LIMIT 1) AS any_row"
    ))
    .load(conn)?;
    Ok(counted.first().is_some_and(|c| c.rows > 0))
}
