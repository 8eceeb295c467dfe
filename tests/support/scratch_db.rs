//! A database that exists for one test or bench run: a SQLite file in a temporary directory,
//! or a scratch PostgreSQL database. Either is gone when the value is dropped.

use crate::support::engine::{self, Engine};
use crate::support::scratch_pg::ScratchPg;

pub struct ScratchDb {
    url: String,
    second_node_url: String,
    engine: Engine,
    /// Held for its Drop: it deletes the SQLite directory or drops the PostgreSQL database.
    store: Store,
}

enum Store {
    Sqlite(tempfile::TempDir),
    Postgres(ScratchPg),
}

impl ScratchDb {
    /// `chorus.sqlite3` in a fresh directory under the system temp dir (on this machine the
    /// same disk as PostgreSQL's data, which keeps the benches' FULL and NORMAL comparable).
    pub fn sqlite() -> Result<ScratchDb, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let url = dir.path().join("chorus.sqlite3").display().to_string();
        Ok(ScratchDb {
            second_node_url: url.clone(),
            url,
            engine: Engine::Sqlite,
            store: Store::Sqlite(dir),
        })
    }

    /// `<prefix>_<random>` next to the database `admin_url` names.
    pub fn postgres(admin_url: &str, prefix: &str) -> Result<ScratchDb, String> {
        let db = ScratchPg::create(admin_url, prefix)?;
        Ok(ScratchDb {
            second_node_url: db
                .worker_urls()
                .into_iter()
                .next()
                .unwrap_or_else(|| db.url()),
            url: db.url(),
            engine: Engine::Postgres,
            store: Store::Postgres(db),
        })
    }

    /// A test's database; fails the test when it cannot be made.
    pub fn for_test(engine: Engine) -> ScratchDb {
        let db = match engine {
            Engine::Sqlite => ScratchDb::sqlite(),
            Engine::Postgres => ScratchDb::postgres(&engine::test_pg_admin_url(), "chorus_test"),
        };
        db.unwrap_or_else(|e| panic!("a {} test database: {e}", engine.name()))
    }

    /// A bench run's database; Err says why the engine is skipped.
    pub fn for_bench(engine: Engine) -> Result<ScratchDb, String> {
        match engine {
            Engine::Sqlite => ScratchDb::sqlite(),
            Engine::Postgres => ScratchDb::postgres(&engine::bench_pg_admin_url(), "chorus_bench")
                .map_err(|e| format!("{e}; set {}", engine::BENCH_PG_URL_VAR)),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Where a second instance attaches: on Citus the database on a worker, so that the tests
    /// run instances on different nodes; elsewhere the same URL.
    pub fn second_node_url(&self) -> &str {
        &self.second_node_url
    }

    /// The PostgreSQL database's name (None on SQLite), for settings made per database.
    pub fn postgres_name(&self) -> Option<&str> {
        match &self.store {
            Store::Postgres(db) => Some(db.name()),
            Store::Sqlite(_) => None,
        }
    }
}

/// Gathers PostgreSQL's planner statistics, as autovacuum does on a running service: it
/// analyzes a table once the rows changed since the last time pass 50 plus 10% of the table
/// (`autovacuum_analyze_threshold`, `autovacuum_analyze_scale_factor`), looking once a minute
/// (`autovacuum_naptime`). A table never analyzed has no column statistics, so the planner
/// guesses every condition's selectivity, and with a guess two indexes that both start with
/// `group_id` look alike; it took the one that walks the group where the other finds one
/// row: the send path's `client_msg_id` look-up read every earlier message of its sender in
/// the group (seeding 20,000 messages from one sender took 40-90 s instead of a few), and the
/// chat list's last line was looked for once per message of the group. A bench that measured
/// right after seeding would measure those plans, which no running service has for long.
pub fn analyze(conn: &mut chorus::db::AnyConnection) {
    use diesel::RunQueryDsl;
    if let chorus::db::AnyConnection::Postgresql(c) = conn {
        diesel::sql_query("ANALYZE")
            .execute(c)
            .expect("ANALYZE after seeding");
    }
}
