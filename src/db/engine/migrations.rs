//! The embedded migrations of both engines: applied at start and by `chorus migrate`, one
//! instance at a time on PostgreSQL.

use diesel::connection::SimpleConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use super::connection::AnyConnection;
use super::distribution::{self, Distribution, Rows};

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// An arbitrary constant: instances starting together on one PostgreSQL take turns migrating.
const MIGRATION_LOCK_KEY: i64 = 0x4348_4f52_5553;

/// Applies pending migrations; returns how many ran. On a Citus database, the tables a fresh
/// schema creates are then distributed (see [`distribution`]); tables that already hold rows
/// are left to `chorus distribute`, and the error says so.
pub fn run_migrations(conn: &mut AnyConnection) -> anyhow::Result<usize> {
    match conn {
        AnyConnection::Postgresql(_) => with_migration_lock(conn, |conn| {
            let AnyConnection::Postgresql(c) = conn else {
                unreachable!("matched above");
            };
            let applied = c
                .run_pending_migrations(POSTGRES_MIGRATIONS)
                .map(|v| v.len())
                .map_err(|e| anyhow::anyhow!("migration failed: {e}"))?;
            if distribution::is_citus(conn)? {
                let done = distribution::distribute(conn, Rows::OnlyIfEmpty)?;
                if !done.distributed_now.is_empty() {
                    tracing::info!(tables = ?done.distributed_now, "distributed on Citus");
                }
            }
            Ok(applied)
        }),
        AnyConnection::Sqlite(c) => c
            .run_pending_migrations(SQLITE_MIGRATIONS)
            .map(|v| v.len())
            .map_err(|e| anyhow::anyhow!("migration failed: {e}")),
    }
}

/// `chorus distribute`: applies pending migrations, then distributes every table of a Citus
/// database that is not distributed yet, moving the rows it holds.
pub fn migrate_and_distribute(conn: &mut AnyConnection) -> anyhow::Result<Distribution> {
    run_migrations(conn)?;
    with_migration_lock(conn, |conn| Ok(distribution::distribute(conn, Rows::Move)?))
}

/// Runs `work` while holding the lock instances take turns through, with no statement
/// timeout (migrations may wait for another instance's and may run long).
fn with_migration_lock<T>(
    conn: &mut AnyConnection,
    work: impl FnOnce(&mut AnyConnection) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    conn.batch_execute("SET statement_timeout = 0")?;
    conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))?;
    let result = work(conn);
    conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))?;
    result
}

/// Reverts every applied migration (used by tests that check each `down.sql`).
pub fn revert_all_migrations(conn: &mut AnyConnection) -> anyhow::Result<usize> {
    let reverted = match conn {
        AnyConnection::Postgresql(c) => c
            .revert_all_migrations(POSTGRES_MIGRATIONS)
            .map(|v| v.len()),
        AnyConnection::Sqlite(c) => c.revert_all_migrations(SQLITE_MIGRATIONS).map(|v| v.len()),
    };
    reverted.map_err(|e| anyhow::anyhow!("migration revert failed: {e}"))
}

/// Reverts the latest applied migration (used by tests of how a migration treats the data it
/// finds).
pub fn revert_last_migration(conn: &mut AnyConnection) -> anyhow::Result<()> {
    let reverted = match conn {
        AnyConnection::Postgresql(c) => c.revert_last_migration(POSTGRES_MIGRATIONS).map(drop),
        AnyConnection::Sqlite(c) => c.revert_last_migration(SQLITE_MIGRATIONS).map(drop),
    };
    reverted.map_err(|e| anyhow::anyhow!("migration revert failed: {e}"))
}

/// True when the database answers and no migration is pending.
pub fn is_ready(conn: &mut AnyConnection) -> bool {
    let pending = match conn {
        AnyConnection::Postgresql(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
        AnyConnection::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
    };
    matches!(pending, Ok(false))
}
