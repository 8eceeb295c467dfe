//! The black-box harness of this binary: a real server on port 0 per test with its own
//! database (from tests/support), a real HTTP client, and every response body checked against
//! the schema `openapi.yaml` gives for it.

use std::sync::Arc;
use std::time::Duration;

use chorus::config::Settings;
use chorus::startup::Stopper;
use reqwest::Method;
use serde_json::Value;

use crate::spec_check::check_against_spec;
use crate::support::engine::Engine;
use crate::support::histogram;
use crate::support::scratch_db::ScratchDb;
use crate::support::server::{self, InProcessServer};
use crate::support::tokens::TokenMint;

/// Longer than any long-poll a test makes (60 s at most), so only a hung server trips it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Generates `mod <scenario> { fn sqlite(); fn postgres(); }` for scenarios written once as
/// `async fn <scenario>(app: TestApp)`. The PostgreSQL run is ignored unless
/// CHORUS_TEST_DATABASE_URL was set when the tests were built (see build.rs).
#[macro_export]
macro_rules! on_both_engines {
    (with $adjust:ident: $($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            use $crate::support::engine::Engine;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::helpers::spawn_app_with(Engine::Sqlite, super::$adjust).await;
                super::$scenario(app).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                let app = $crate::helpers::spawn_app_with(Engine::Postgres, super::$adjust).await;
                super::$scenario(app).await
            }
        }
    )* };
    // Scenarios that start their own server (say, beside a push receiver):
    // `async fn <scenario>(engine: Engine)`.
    (by engine: $($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            use $crate::support::engine::Engine;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$scenario(Engine::Sqlite).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                super::$scenario(Engine::Postgres).await
            }
        }
    )* };
    // Checks of the database alone, with no server and nothing to await:
    // `fn <scenario>(engine: Engine)`.
    (blocking by engine: $($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            use $crate::support::engine::Engine;
            #[test]
            fn sqlite() {
                super::$scenario(Engine::Sqlite)
            }
            #[test]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            fn postgres() {
                super::$scenario(Engine::Postgres)
            }
        }
    )* };
    ($($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            use $crate::support::engine::Engine;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$scenario($crate::helpers::spawn_app(Engine::Sqlite).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                super::$scenario($crate::helpers::spawn_app(Engine::Postgres).await).await
            }
        }
    )* };
}

/// `mod <scenario> { fn postgres(); }` for a scenario that exists on PostgreSQL only (several
/// instances, PostgreSQL's own statistics), written as `async fn <scenario>()`; ignored, as
/// every PostgreSQL run, unless CHORUS_TEST_DATABASE_URL was set when the tests were built.
#[macro_export]
macro_rules! on_postgres {
    ($($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                super::$scenario().await
            }
        }
    )* };
}

pub fn random_suffix() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

pub struct TestApp {
    pub address: String,
    pub engine: Engine,
    pub database_url: String,
    pub stopper: Stopper,
    pub client: reqwest::Client,
    mint: Arc<TokenMint>,
    /// None when this app is another instance's address (see [`TestApp::via`]).
    _server: Option<InProcessServer>,
    /// Shared with the apps reached through other instances; dropped after the last of them.
    _db: Arc<ScratchDb>,
}

/// A response with its status and JSON body (Null when there is none), already checked
/// against the spec.
#[derive(Debug)]
pub struct TestResponse {
    pub status: u16,
    pub body: Value,
    /// The body as the server wrote it, for checks of exact bytes.
    pub text: String,
}

impl TestResponse {
    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

pub async fn spawn_app(engine: Engine) -> TestApp {
    spawn_app_with(engine, |_| {}).await
}

/// A server on a fresh database, with the test sizing and then `adjust` applied.
pub async fn spawn_app_with(engine: Engine, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_on(ScratchDb::for_test(engine), adjust).await
}

/// A server on `db` as it is (a database a test prepared, say restored from a dump), with the
/// test sizing and then `adjust` applied.
pub async fn spawn_app_on(db: ScratchDb, adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let engine = db.engine();
    let db = Arc::new(db);
    let server = InProcessServer::start(db.url(), |settings| {
        server::test_sizing(settings);
        adjust(settings);
    })
    .await
    .unwrap_or_else(|e| panic!("build application: {e}"));
    TestApp {
        address: server.base.clone(),
        engine,
        database_url: db.url().to_owned(),
        stopper: server.stopper.clone(),
        client: crate::support::http::client(REQUEST_TIMEOUT),
        mint: Arc::new(TokenMint::new()),
        _server: Some(server),
        _db: db,
    }
}

/// A second server on the same database (another instance behind a load balancer).
pub struct SecondInstance {
    server: InProcessServer,
}

impl TestApp {
    pub async fn second_instance(&self) -> SecondInstance {
        self.second_instance_with(|_| {}).await
    }

    /// A second instance with the test sizing and then `adjust` applied.
    /// On Citus it attaches to a worker, where this one attaches to the coordinator.
    pub async fn second_instance_with(&self, adjust: impl FnOnce(&mut Settings)) -> SecondInstance {
        let server = InProcessServer::start(self._db.second_node_url(), |settings| {
            server::test_sizing(settings);
            adjust(settings);
        })
        .await
        .unwrap_or_else(|e| panic!("build second instance: {e}"));
        SecondInstance { server }
    }

    /// The same app, reached through another instance's address.
    pub fn via(&self, instance: &SecondInstance) -> TestApp {
        TestApp {
            address: instance.server.base.clone(),
            engine: self.engine,
            database_url: self.database_url.clone(),
            stopper: self.stopper.clone(),
            client: self.client.clone(),
            mint: self.mint.clone(),
            _server: None,
            _db: self._db.clone(),
        }
    }

    /// A token for `caller`: a user id for the user's default device, or `user#device` for
    /// one of their named devices.
    pub fn token(&self, caller: &str) -> String {
        self.mint.token(caller)
    }

    /// Sends a request as `user` (None: no Authorization header) and checks the response
    /// against the spec entry for `template` (the path as written in openapi.yaml).
    pub async fn call(
        &self,
        method: Method,
        template: &str,
        path: &str,
        user: Option<&str>,
        body: Option<Value>,
    ) -> TestResponse {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{}", self.address, path));
        if let Some(user) = user {
            request = request.bearer_auth(self.token(user));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| {
                panic!("{method} {path} -> {status}: body is not JSON ({e}): {text}")
            })
        };
        check_against_spec(method.as_str(), template, status, &body);
        TestResponse { status, body, text }
    }
}

impl TestApp {
    /// Whether `text` is anywhere in what the database stores. SQLite: the bytes of its files
    /// after a checkpoint that empties the write-ahead log. PostgreSQL: any live message row
    /// (dead row versions are vacuum's to reclaim).
    pub async fn stored_text_contains(&self, text: &str) -> bool {
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let (url, text) = (self.database_url.clone(), text.to_owned());
        let engine = self.engine;
        tokio::task::spawn_blocking(move || match engine {
            Engine::Sqlite => {
                let mut conn = diesel::SqliteConnection::establish(&url).expect("open SQLite");
                conn.batch_execute("PRAGMA busy_timeout = 5000; PRAGMA wal_checkpoint(TRUNCATE);")
                    .expect("checkpoint");
                [url.clone(), format!("{url}-wal")].iter().any(|path| {
                    let bytes = std::fs::read(path).unwrap_or_default();
                    bytes.windows(text.len()).any(|w| w == text.as_bytes())
                })
            }
            Engine::Postgres => {
                use diesel::prelude::*;
                let mut conn = diesel::PgConnection::establish(&url).expect("open PostgreSQL");
                let pattern = format!("%{text}%");
                let found: i64 = chorus::schema::group_msgs::table
                    .filter(chorus::schema::group_msgs::content.like(pattern))
                    .count()
                    .get_result(&mut conn)
                    .expect("count rows");
                found > 0
            }
        })
        .await
        .expect("database check")
    }
}

impl TestApp {
    /// The user ids the mentions table holds rows for, for one message, read straight from
    /// storage (the API reports counts, which cannot tell a row per member from a flag).
    pub async fn stored_mention_rows(&self, group_id: i64, msg_id: i64) -> Vec<String> {
        use chorus::schema::mentions;
        use diesel::prelude::*;
        let url = self.database_url.clone();
        tokio::task::spawn_blocking(move || {
            let settings = chorus::db::DbSettings::for_url(&url);
            let mut conn = chorus::db::connect_once(&settings).expect("open the test database");
            mentions::table
                .filter(mentions::group_id.eq(group_id))
                .filter(mentions::msg_id.eq(msg_id))
                .select(mentions::user_id)
                .order(mentions::user_id)
                .load::<String>(&mut conn)
                .expect("read the mentions table")
        })
        .await
        .expect("database check")
    }
}

impl TestApp {
    /// The value of the unlabelled series `name` on /metrics, when it is exported.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        self.metrics(&[name]).await.pop().flatten()
    }

    /// Several metrics from one reading of `/metrics`, so they describe the same instant.
    pub async fn metrics(&self, names: &[&str]) -> Vec<Option<f64>> {
        let text = self
            .client
            .get(format!("{}/metrics", self.address))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        names.iter().map(|name| value(name)).collect()
    }
}

impl TestApp {
    /// Commits and the writes they carried, read from one `/metrics` response: read apart,
    /// a background job's write (the retention sweep) could land between the two readings.
    pub async fn commits_and_writes(&self) -> (f64, f64) {
        match self
            .metrics(&["chorus_db_commits_total", "chorus_db_writes_total"])
            .await[..]
        {
            [Some(commits), Some(writes)] => (commits, writes),
            ref missing => panic!("commit metrics missing: {missing:?}"),
        }
    }
}

/// A value a test reads back from PostgreSQL: the query names its one column `value`.
#[derive(diesel::QueryableByName)]
struct SqlValue {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

impl TestApp {
    /// PostgreSQL only: runs `sql` (one or more statements) on the test's database, on a
    /// connection of its own, as an operator or a test's own trigger would.
    pub async fn run_postgres_sql(&self, sql: &str) {
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let (url, sql) = (self.database_url.clone(), sql.to_owned());
        tokio::task::spawn_blocking(move || {
            let mut conn = diesel::PgConnection::establish(&url).expect("open PostgreSQL");
            conn.batch_execute(&sql)
                .unwrap_or_else(|e| panic!("run {sql}: {e}"));
        })
        .await
        .expect("SQL task");
    }

    /// True when the test's database is a Citus database (the PostgreSQL tests were pointed
    /// at a coordinator): where a test asserts how one PostgreSQL node shares its work, not
    /// what a client sees, that part does not apply.
    pub async fn on_citus(&self) -> bool {
        if self.engine != Engine::Postgres {
            return false;
        }
        let found = "SELECT CAST(count(*) AS TEXT) AS value FROM pg_extension \
                     WHERE extname = 'citus'";
        self.postgres_values(found).await == ["1"]
    }

    /// PostgreSQL only: the rows of `query`, whose one column is text named `value`.
    pub async fn postgres_values(&self, query: &str) -> Vec<String> {
        use diesel::prelude::*;
        use diesel::Connection;
        let (url, query) = (self.database_url.clone(), query.to_owned());
        tokio::task::spawn_blocking(move || {
            let mut conn = diesel::PgConnection::establish(&url).expect("open PostgreSQL");
            diesel::sql_query(&query)
                .load::<SqlValue>(&mut conn)
                .unwrap_or_else(|e| panic!("run {query}: {e}"))
                .into_iter()
                .map(|row| row.value)
                .collect()
        })
        .await
        .expect("SQL task")
    }
}

/// A transaction of the test's own, open until [`HeldTransaction::commit`].
pub struct HeldTransaction {
    commit: std::sync::mpsc::Sender<()>,
    done: tokio::task::JoinHandle<()>,
}

impl HeldTransaction {
    /// Commits, and answers once it has, with the instant the commit was asked for: no write
    /// waiting for what the transaction holds can commit before it. (The instant the COMMIT
    /// returned would be too late a bound: the database frees the locks before its answer
    /// reaches the holder, so a queued write may commit and answer in between.)
    pub async fn commit(self) -> std::time::Instant {
        let asked = std::time::Instant::now();
        let _ = self.commit.send(());
        self.done.await.expect("the held transaction's task");
        asked
    }
}

impl TestApp {
    /// Begins a transaction on a connection of its own, runs `sql` in it (say, to lock
    /// rows), and holds it open until its `commit`. On SQLite the transaction is `BEGIN
    /// IMMEDIATE`: it holds the database's write lock, which every write needs.
    pub async fn transaction_held(&self, sql: &str) -> HeldTransaction {
        use diesel::connection::SimpleConnection;
        use diesel::Connection;
        let (engine, url, sql) = (self.engine, self.database_url.clone(), sql.to_owned());
        let (commit, wait) = std::sync::mpsc::channel::<()>();
        let (begun, is_begun) = tokio::sync::oneshot::channel::<()>();
        let done = tokio::task::spawn_blocking(move || {
            let hold = |conn: &mut dyn SimpleConnection, begin: &str| {
                conn.batch_execute(begin).expect("begin");
                if !sql.is_empty() {
                    conn.batch_execute(&sql)
                        .unwrap_or_else(|e| panic!("run {sql}: {e}"));
                }
                let _ = begun.send(());
                let _ = wait.recv();
                conn.batch_execute("COMMIT").expect("commit");
            };
            match engine {
                Engine::Sqlite => hold(
                    &mut diesel::SqliteConnection::establish(&url).expect("open SQLite"),
                    "BEGIN IMMEDIATE",
                ),
                Engine::Postgres => hold(
                    &mut diesel::PgConnection::establish(&url).expect("open PostgreSQL"),
                    "BEGIN",
                ),
            }
        });
        is_begun.await.expect("the transaction has begun");
        HeldTransaction { commit, done }
    }

    /// PostgreSQL only: waits until `count` sessions on the test's database wait for a lock
    /// (a write queued behind a held transaction), for at most 30 seconds.
    pub async fn until_waiting_for_locks(&self, count: usize) {
        // On Citus a write waits on the worker that holds the row: the cluster-wide view of
        // lock waits shows it.
        let query = if self.on_citus().await {
            "SELECT count(DISTINCT w.waiting_gpid)::text AS value FROM citus_lock_waits w \
             JOIN citus_stat_activity a ON a.global_pid = w.waiting_gpid \
             WHERE a.datname = current_database()"
        } else {
            "SELECT count(*)::text AS value FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'"
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let waiting: usize = self.postgres_values(query).await[0]
                .parse()
                .expect("a count");
            if waiting >= count {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{waiting} of {count} sessions waiting for a lock after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl TestApp {
    /// PostgreSQL only: waits until the folding job has folded every cursor move written so
    /// far into the histogram of cursors.
    pub async fn until_cursor_moves_folded(&self) {
        let waiting = "SELECT CAST(count(*) AS TEXT) AS value FROM cursor_moves";
        for _ in 0..200 {
            if self.postgres_values(waiting).await == ["0"] {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("cursor moves still unfolded after 5 s");
    }

    /// [`histogram::disagreements`] in the test's database, read on a connection of its own.
    pub async fn histogram_disagreements(&self) -> i64 {
        histogram::disagreements_at(&self.database_url).await
    }
}
