//! The server under test: in this process on its own database, with a client of it and the
//! tokens of its users.

use chorus::config::Settings;
use chorus::db::AnyConnection;

use crate::args::EngineSetup;
use crate::support::http::Http;
use crate::support::scratch_db::ScratchDb;
use crate::support::server::InProcessServer;
use crate::support::tokens::TokenMint;
use crate::REQUEST_TIMEOUT;

pub struct BenchServer {
    pub http: Http,
    mint: TokenMint,
    server: InProcessServer,
    // Dropped last: the PostgreSQL database goes after the server that uses it.
    _db: ScratchDb,
}

impl BenchServer {
    /// Err says why the setup is skipped.
    pub async fn start(setup: EngineSetup) -> Result<BenchServer, String> {
        BenchServer::start_with(setup, |_| {}).await
    }

    /// [`BenchServer::start`] with `adjust` applied to the settings last.
    pub async fn start_with(
        setup: EngineSetup,
        adjust: impl FnOnce(&mut Settings),
    ) -> Result<BenchServer, String> {
        let db = ScratchDb::for_bench(setup.engine())?;
        let server = InProcessServer::start(db.url(), |settings| {
            settings.pool_size = 8;
            settings.workers = 0;
            settings.sqlite_sync = setup.sqlite_sync();
            adjust(settings);
        })
        .await?;
        Ok(BenchServer {
            http: Http::new(server.base.clone(), REQUEST_TIMEOUT),
            mint: TokenMint::new(),
            server,
            _db: db,
        })
    }

    pub fn token(&self, user: &str) -> String {
        self.mint.token(user)
    }

    pub fn tokens(&self, users: &[String]) -> std::sync::Arc<Vec<String>> {
        std::sync::Arc::new(self.mint.tokens(users))
    }

    /// The server's database settings, for a pool of the bench's own on the same database.
    pub fn db_settings(&self) -> &chorus::db::DbSettings {
        self.server.db_settings()
    }

    /// A connection of the bench's own, for seeding and counting rows.
    pub fn direct_connection(&self) -> AnyConnection {
        self.server.direct_connection()
    }

    /// A graceful stop (nothing is in flight by now); the database is dropped after it.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}
