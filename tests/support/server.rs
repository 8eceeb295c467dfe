//! The real server in this process on 127.0.0.1 port 0, driven over HTTP like any client would.

use std::path::Path;
use std::time::Duration;

use chorus::config::{Settings, SqliteSync};
use chorus::db::{self, AnyConnection, DbSettings};
use chorus::startup::{Application, Stopper};

use crate::support::tokens::SECRET;

/// The production defaults, except what a harnessed server must have: port 0, the harness's
/// token secret, the given database and data directory.
pub fn base_settings(database_url: &str, data_dir: &Path) -> Settings {
    let mut settings = Settings::defaults();
    settings.bind = "127.0.0.1:0".into();
    settings.database_url = Some(database_url.to_owned());
    settings.data_dir = data_dir.to_path_buf();
    settings.jwt_secret = Some(SECRET.into());
    settings
}

/// Small for tests: many test servers run at once on a two-core machine.
pub fn test_sizing(settings: &mut Settings) {
    settings.pool_size = 4;
    settings.workers = 2;
    settings.sqlite_sync = SqliteSync::Normal;
}

pub struct InProcessServer {
    /// `http://127.0.0.1:<port>`
    pub base: String,
    pub stopper: Stopper,
    db_settings: DbSettings,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _data_dir: tempfile::TempDir,
}

impl InProcessServer {
    /// Starts a server on `database_url` with [`base_settings`] changed by `adjust`.
    pub async fn start(
        database_url: &str,
        adjust: impl FnOnce(&mut Settings),
    ) -> Result<InProcessServer, String> {
        let data_dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let mut settings = base_settings(database_url, data_dir.path());
        adjust(&mut settings);
        let db_settings = settings.db_settings().map_err(|e| e.to_string())?;
        let app = Application::build(&settings)
            .await
            .map_err(|e| format!("server did not start: {e:#}"))?;
        let base = format!("http://127.0.0.1:{}", app.port());
        let stopper = app.stopper();
        let task = tokio::spawn(app.run_until_stopped());
        Ok(InProcessServer {
            base,
            stopper,
            db_settings,
            task,
            _data_dir: data_dir,
        })
    }

    /// The database settings the server runs with (a bench may open its own pool alike).
    pub fn db_settings(&self) -> &DbSettings {
        &self.db_settings
    }

    /// A database connection of the caller's own, beside the server's pool.
    pub fn direct_connection(&self) -> AnyConnection {
        db::connect_once(&self.db_settings).expect("open a direct database connection")
    }

    /// A graceful stop: waiting long-polls answer at once, requests in flight finish.
    pub async fn stop(self) {
        self.stopper.stop().await;
        let stopped = tokio::time::timeout(Duration::from_secs(10), self.task).await;
        if !matches!(stopped, Ok(Ok(Ok(())))) {
            eprintln!("warning: the server did not stop cleanly: {stopped:?}");
        }
    }
}
