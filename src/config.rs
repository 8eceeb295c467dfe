//! Settings, from command-line flags or `CHORUS_*` environment variables (flags win).
//! The secret is never printed: `Debug` on [`Settings`] masks it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::db::DbSettings;

#[derive(Parser, Debug)]
#[command(
    name = "chorus",
    version,
    about = "Group messages over plain HTTP: send, pull what you missed, ack, and see who read it.",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: Settings,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP server (the default when no command is given).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Print a bearer token for USER_ID, signed with the configured (or development) secret.
    Token {
        /// The user id the token speaks for (its `sub` claim).
        user_id: String,
        /// The device the token speaks for (its `device_id` claim): each device keeps its own
        /// delivered cursor. Omitted: the user's default device.
        #[arg(long)]
        device: Option<String>,
        /// How long the token stays valid, in hours.
        #[arg(long, default_value_t = 24)]
        ttl_hours: i64,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SqliteSync {
    /// Every commit reaches the disk before the client hears 2xx (survives power loss).
    Full,
    /// Commits survive a process crash; the last ones may be lost on power loss. Faster.
    Normal,
}

#[derive(Args, Clone)]
pub struct Settings {
    /// Address and port to listen on.
    #[arg(
        long,
        env = "CHORUS_BIND",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub bind: String,

    /// Database URL: postgres://… for PostgreSQL, or a SQLite file path. Unset: an embedded
    /// SQLite file in the data directory.
    #[arg(long, env = "CHORUS_DATABASE_URL", global = true)]
    pub database_url: Option<String>,

    /// Directory for the embedded database and the development secret.
    #[arg(
        long,
        env = "CHORUS_DATA_DIR",
        default_value = "chorus-data",
        global = true
    )]
    pub data_dir: PathBuf,

    /// HS256 secret for bearer tokens (at least 32 bytes). Unset: development mode with a
    /// generated secret kept in the data directory.
    #[arg(long, env = "CHORUS_JWT_SECRET", hide_env_values = true, global = true)]
    pub jwt_secret: Option<String>,

    /// Database connections (PostgreSQL: the pool; SQLite: readers, plus one writer).
    #[arg(long, env = "CHORUS_POOL_SIZE", default_value_t = 8, global = true)]
    pub pool_size: u32,

    /// How long a request waits for a database connection before it gets 503.
    #[arg(
        long,
        env = "CHORUS_POOL_TIMEOUT_MS",
        default_value_t = 3000,
        global = true
    )]
    pub pool_timeout_ms: u64,

    /// PostgreSQL: longest a single statement may run before it is cancelled (the request
    /// then gets 503).
    #[arg(
        long,
        env = "CHORUS_STATEMENT_TIMEOUT_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub statement_timeout_ms: u64,

    /// SQLite durability.
    #[arg(long, env = "CHORUS_SQLITE_SYNC", value_enum, default_value_t = SqliteSync::Full, global = true)]
    pub sqlite_sync: SqliteSync,

    /// How long an idle HTTP keep-alive connection stays open. Keep it above your load
    /// balancer's idle timeout, so the proxy never reuses a connection Chorus is closing.
    #[arg(
        long,
        env = "CHORUS_KEEP_ALIVE_SECS",
        default_value_t = 75,
        global = true
    )]
    pub keep_alive_secs: u64,

    /// HTTP worker threads (0: one per core).
    #[arg(long, env = "CHORUS_WORKERS", default_value_t = 0, global = true)]
    pub workers: usize,

    /// How long receipt changes are kept for `/v1/receipts`, and how old a long-poll cursor
    /// may be before it gets 410 `cursor_expired`.
    #[arg(long, env = "CHORUS_RECEIPT_RETENTION_SECS", default_value_t = 7 * 24 * 3600, global = true)]
    pub receipt_retention_secs: i64,

    /// Forget a device (and its delivered cursors) unused for this many seconds; a signed-out
    /// device's refusal of its old tokens is kept as long.
    #[arg(long, env = "CHORUS_DEVICE_RETENTION_SECS", default_value_t = 30 * 24 * 3600, global = true)]
    pub device_retention_secs: i64,

    /// Delete messages older than this many seconds. Unset: keep messages forever.
    #[arg(long, env = "CHORUS_MESSAGE_RETENTION_SECS", global = true)]
    pub message_retention_secs: Option<i64>,

    /// How often the retention job deletes expired receipt changes (and messages).
    #[arg(
        long,
        env = "CHORUS_RETENTION_INTERVAL_SECS",
        default_value_t = 60,
        global = true
    )]
    pub retention_interval_secs: u64,

    /// Long-polls one user may have waiting at once; more get 429.
    #[arg(
        long,
        env = "CHORUS_LONGPOLL_MAX_PER_USER",
        default_value_t = 8,
        global = true
    )]
    pub longpoll_max_per_user: usize,

    /// Long-polls the server holds at once; more get 429.
    #[arg(
        long,
        env = "CHORUS_LONGPOLL_MAX_TOTAL",
        default_value_t = 20_000,
        global = true
    )]
    pub longpoll_max_total: usize,

    /// Log output format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Log filter, in tracing's EnvFilter syntax.
    #[arg(long, env = "CHORUS_LOG", default_value = "info", global = true)]
    pub log: String,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("bind", &self.bind)
            .field(
                "database_url",
                &self.database_url.as_deref().map(redact_url),
            )
            .field("data_dir", &self.data_dir)
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<set>"))
            .field("pool_size", &self.pool_size)
            .field("pool_timeout_ms", &self.pool_timeout_ms)
            .field("statement_timeout_ms", &self.statement_timeout_ms)
            .field("sqlite_sync", &self.sqlite_sync)
            .field("keep_alive_secs", &self.keep_alive_secs)
            .field("workers", &self.workers)
            .field("receipt_retention_secs", &self.receipt_retention_secs)
            .field("device_retention_secs", &self.device_retention_secs)
            .field("message_retention_secs", &self.message_retention_secs)
            .field("retention_interval_secs", &self.retention_interval_secs)
            .field("longpoll_max_per_user", &self.longpoll_max_per_user)
            .field("longpoll_max_total", &self.longpoll_max_total)
            .field("log_format", &self.log_format)
            .finish()
    }
}

impl Settings {
    /// Defaults for everything, as if no flag or variable was given (tests start from this).
    pub fn defaults() -> Settings {
        Settings {
            bind: "127.0.0.1:8080".into(),
            database_url: None,
            data_dir: "chorus-data".into(),
            jwt_secret: None,
            pool_size: 8,
            pool_timeout_ms: 3000,
            statement_timeout_ms: 10_000,
            sqlite_sync: SqliteSync::Full,
            keep_alive_secs: 75,
            workers: 0,
            receipt_retention_secs: 7 * 24 * 3600,
            device_retention_secs: 30 * 24 * 3600,
            message_retention_secs: None,
            retention_interval_secs: 60,
            longpoll_max_per_user: 8,
            longpoll_max_total: 20_000,
            log_format: LogFormat::Text,
            log: "info".into(),
        }
    }

    /// The database to use; the embedded default lives in the data directory.
    pub fn db_settings(&self) -> std::io::Result<DbSettings> {
        let url = match &self.database_url {
            Some(url) => url.strip_prefix("sqlite://").unwrap_or(url).to_owned(),
            None => {
                std::fs::create_dir_all(&self.data_dir)?;
                self.data_dir.join("chorus.sqlite3").display().to_string()
            }
        };
        Ok(DbSettings {
            url,
            pool_size: self.pool_size,
            pool_timeout: Duration::from_millis(self.pool_timeout_ms),
            statement_timeout: Duration::from_millis(self.statement_timeout_ms),
            sqlite_synchronous: match self.sqlite_sync {
                SqliteSync::Full => "FULL".into(),
                SqliteSync::Normal => "NORMAL".into(),
            },
        })
    }
}

/// The URL with any password replaced, for logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{}:***@{}", &url[..scheme_end], user, &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_password() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("chorus-data/x.sqlite3"), "chorus-data/x.sqlite3");
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let mut s = Settings::defaults();
        s.jwt_secret = Some("super-secret-value-that-is-long-enough".into());
        assert!(!format!("{s:?}").contains("super-secret"));
    }
}
