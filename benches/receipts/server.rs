//! The bench's databases and in-process servers: the harness's, with the command line's
//! tuning applied.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use chorus::db::AnyConnection;
use diesel::{Connection, RunQueryDsl};

use crate::api::CountingHttp;
use crate::args::tuning;
use crate::support::engine::{self, Engine};
use crate::support::scratch_db::ScratchDb;
use crate::support::server::InProcessServer;

/// A database for one run; with `--pg-async-commit`, PostgreSQL's commits do not wait for
/// the disk. Err says why the engine is skipped.
pub fn bench_database(engine: Engine) -> Result<ScratchDb, String> {
    let db = ScratchDb::for_bench(engine)?;
    if let (true, Some(name)) = (tuning().pg_async_commit, db.postgres_name()) {
        let mut admin = diesel::PgConnection::establish(&engine::bench_pg_admin_url())
            .map_err(|e| format!("cannot reconnect: {e}"))?;
        diesel::sql_query(format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .execute(&mut admin)
        .map_err(|e| format!("cannot set synchronous_commit: {e}"))?;
    }
    Ok(db)
}

/// One server instance in this process, and a client of it that counts its requests.
pub struct Server {
    pub http: CountingHttp,
    inner: InProcessServer,
}

impl Server {
    pub async fn start(url: &str, requests: &Arc<AtomicU64>) -> Result<Server, String> {
        let inner = InProcessServer::start(url, |settings| {
            // The production defaults (pool of 8, one actix worker per core, SQLite FULL)
            // unless the command line asks otherwise.
            settings.pool_size = tuning().pool_size;
            settings.workers = 0;
            settings.sqlite_sync = tuning().sqlite_sync;
        })
        .await?;
        Ok(Server {
            http: CountingHttp::new(inner.base.clone(), requests.clone()),
            inner,
        })
    }

    /// A connection of the bench's own, for counting rows.
    pub fn direct_connection(&self) -> AnyConnection {
        self.inner.direct_connection()
    }

    /// Stops the server; waiting long-polls answer at once.
    pub async fn stop(self) {
        self.inner.stop().await
    }
}
