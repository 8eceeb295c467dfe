//! Settings, from command-line flags or `CHORUS_*` environment variables (flags win).
//! Every default is written once, in [`defaults`]. Secrets never reach a log: the JWT and push
//! secrets are [`SecretString`]s (their `Debug` prints `[REDACTED]`) and the database URL's
//! password is hidden by [`redact_url`] in `Debug` and in `--help`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::SecretString;

use crate::db::DbSettings;
use crate::redact::redact_url;

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

/// Variables renamed since an earlier release, as (old name, new name): the old name is still
/// read where the new one is not set, so an operator's configuration keeps working.
const RENAMED_VARIABLES: [(&str, &str); 2] = [
    ("CHORUS_POSTGRES_SEND_BATCH", "CHORUS_SEND_BATCH"),
    ("CHORUS_POSTGRES_ACK_BATCH", "CHORUS_ACK_BATCH"),
];

impl Cli {
    /// The command line and the environment, with each renamed variable read under its old
    /// name where only that is set; also the messages saying which were, for the log once it
    /// is set up. Call it before any other thread exists: it changes the process environment.
    pub fn parse_reading_old_names() -> (Cli, Vec<String>) {
        let mut read = Vec::new();
        for (old, new) in RENAMED_VARIABLES {
            if let (Some(value), None) = (std::env::var_os(old), std::env::var_os(new)) {
                std::env::set_var(new, value);
                read.push(format!("{old} is read as {new}, its new name; rename it"));
            }
        }
        (Cli::parse(), read)
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the HTTP server (the default when no command is given).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// On a PostgreSQL database with the citus extension: apply pending migrations, then
    /// distribute every table not distributed yet, moving its rows onto the workers (each
    /// table is locked while it moves). Safe to run again; `serve` distributes a fresh,
    /// empty schema by itself.
    Distribute,
    /// Print a bearer token for USER_ID, signed with the configured (or development) secret.
    Token {
        /// The user id the token speaks for (its `sub` claim).
        user_id: String,
        /// The device the token speaks for (its `device_id` claim): each device keeps its own
        /// delivered cursor. Omitted: the user's default device.
        #[arg(long)]
        device: Option<String>,
        /// How long the token stays valid, in hours.
        #[arg(long, default_value_t = defaults::TOKEN_TTL_HOURS)]
        ttl_hours: i64,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// SQLite durability; defined with the connection set-up that applies it.
pub use crate::db::SqliteSync;

/// The value of every setting that is not given. The flags (and so `chorus --help`),
/// [`Settings::defaults`] and the database's one-off connections all read these.
pub mod defaults {
    use super::{LogFormat, SqliteSync};

    pub const BIND: &str = "127.0.0.1:8080";
    pub const DATA_DIR: &str = "chorus-data";
    pub const POOL_SIZE: u32 = 8;
    pub const POOL_TIMEOUT_MS: u64 = 3000;
    pub const STATEMENT_TIMEOUT_MS: u64 = 10_000;
    pub const SQLITE_SYNC: SqliteSync = SqliteSync::Full;
    /// None: the SQLite database may grow until the disk is full.
    pub const SQLITE_MAX_SIZE_MB: Option<u64> = None;
    pub const SQLITE_WRITE_BATCH: u64 = 64;
    pub const SEND_BATCH: u64 = 64;
    pub const ACK_BATCH: u64 = 64;
    /// SQLite's own default page cache (`PRAGMA cache_size = -2000`), per connection.
    pub const SQLITE_CACHE_KIB: u64 = 2000;
    pub const KEEP_ALIVE_SECS: u64 = 75;
    /// 0: one HTTP worker per core.
    pub const WORKERS: usize = 0;
    pub const RECEIPT_RETENTION_SECS: i64 = 7 * 24 * 3600;
    pub const DEVICE_RETENTION_SECS: i64 = 30 * 24 * 3600;
    pub const RECALL_WINDOW_SECS: i64 = 24 * 3600;
    pub const EDIT_WINDOW_SECS: i64 = 24 * 3600;
    pub const MAX_GROUP_MEMBERS: i64 = 100_000;
    pub const RETENTION_INTERVAL_SECS: u64 = 60;
    pub const LONGPOLL_MAX_PER_USER: usize = 8;
    pub const LONGPOLL_MAX_TOTAL: usize = 20_000;
    pub const LOG_FORMAT: LogFormat = LogFormat::Text;
    pub const LOG: &str = "info";
    pub const LOG_BACKTRACES: bool = false;
    /// `chorus token --ttl-hours`.
    pub const TOKEN_TTL_HOURS: i64 = 24;
    /// None: push is off (targets may still be registered).
    pub const PUSH_URL: Option<&str> = None;
    /// Long enough for an app in the foreground to ack what it was just sent.
    pub const PUSH_GRACE_MS: u64 = 5_000;
    pub const PUSH_INTERVAL_MS: u64 = 10_000;
    pub const PUSH_TIMEOUT_MS: u64 = 5_000;
    /// A notification older than this is stale: it is given up rather than delivered late.
    pub const PUSH_RETRY_FOR_SECS: u64 = 900;
    pub const PUSH_BACKOFF_MAX_MS: u64 = 60_000;
    /// Private by default: notifications carry counts, not text.
    pub const PUSH_CONTENT: bool = false;
}

#[derive(Args, Clone, derive_more::Debug)]
pub struct Settings {
    /// Address and port to listen on.
    #[arg(long, env = "CHORUS_BIND", default_value = defaults::BIND, global = true)]
    pub bind: String,

    /// Database URL: postgres://… for PostgreSQL, or a SQLite file path. Unset: an embedded
    /// SQLite file in the data directory.
    #[arg(
        long,
        env = "CHORUS_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    #[debug("{:?}", database_url.as_deref().map(redact_url))]
    pub database_url: Option<String>,

    /// Directory for the embedded database and the development secret.
    #[arg(long, env = "CHORUS_DATA_DIR", default_value = defaults::DATA_DIR, global = true)]
    pub data_dir: PathBuf,

    /// HS256 secret for bearer tokens (at least 32 bytes). Unset: development mode with a
    /// generated secret kept in the data directory.
    #[arg(long, env = "CHORUS_JWT_SECRET", hide_env_values = true, global = true)]
    pub jwt_secret: Option<SecretString>,

    /// Database connections (PostgreSQL: the pool; SQLite: readers, plus one writer).
    #[arg(long, env = "CHORUS_POOL_SIZE", default_value_t = defaults::POOL_SIZE, global = true)]
    pub pool_size: u32,

    /// How long requests wait for a database connection while the pool hands none out
    /// before they get 503 (a busy pool serves its queue in order instead).
    #[arg(long, env = "CHORUS_POOL_TIMEOUT_MS", default_value_t = defaults::POOL_TIMEOUT_MS, global = true)]
    pub pool_timeout_ms: u64,

    /// PostgreSQL: longest a single statement may run before it is cancelled (the request
    /// then gets 503).
    #[arg(long, env = "CHORUS_STATEMENT_TIMEOUT_MS", default_value_t = defaults::STATEMENT_TIMEOUT_MS, global = true)]
    pub statement_timeout_ms: u64,

    /// SQLite durability.
    #[arg(long, env = "CHORUS_SQLITE_SYNC", value_enum, default_value_t = defaults::SQLITE_SYNC, global = true)]
    pub sqlite_sync: SqliteSync,

    /// SQLite: the largest the database may grow, in MiB (SQLite's `max_page_count`), so a
    /// shared disk keeps room for everything else on it. Beyond it, writes that need more
    /// space are refused with 507 as on a full disk. Unset: no cap.
    #[arg(long, env = "CHORUS_SQLITE_MAX_SIZE_MB", global = true)]
    pub sqlite_max_size_mb: Option<u64>,

    /// SQLite: the most writes one commit (one disk flush) may carry. Writes that arrive
    /// while a commit flushes wait for the next one and share it; a lone write never waits.
    /// 1 gives every write a commit of its own.
    #[arg(long, env = "CHORUS_SQLITE_WRITE_BATCH", default_value_t = defaults::SQLITE_WRITE_BATCH,
          value_parser = clap::value_parser!(u64).range(1..=4096), global = true)]
    pub sqlite_write_batch: u64,

    /// The most messages to one group that one transaction (one hold of the group's lock,
    /// one run of the send's statements, one flush) may carry. Sends to a group that arrive
    /// while its last transaction commits wait for the next one and share it; a lone send
    /// never waits. 1 gives every send a transaction of its own. On SQLite also bounded by
    /// CHORUS_SQLITE_WRITE_BATCH. (CHORUS_POSTGRES_SEND_BATCH, its name while only
    /// PostgreSQL batched sends, is still read.)
    #[arg(long, env = "CHORUS_SEND_BATCH", default_value_t = defaults::SEND_BATCH,
          value_parser = clap::value_parser!(u64).range(1..=1000), global = true)]
    pub send_batch: u64,

    /// The most acks (group entries, of any users' requests on this instance) that one
    /// transaction (one commit, one flush) may carry; a request holding more goes alone. Acks
    /// that arrive while the last such transaction runs wait for the next one and share it; a
    /// lone ack never waits. 1 gives every request a transaction of its own. On SQLite also
    /// bounded by CHORUS_SQLITE_WRITE_BATCH. (CHORUS_POSTGRES_ACK_BATCH, its former name, is
    /// still read.)
    #[arg(long, env = "CHORUS_ACK_BATCH", default_value_t = defaults::ACK_BATCH,
          value_parser = clap::value_parser!(u64).range(1..=1000), global = true)]
    pub ack_batch: u64,

    /// SQLite: the page cache of each database connection, in KiB (`PRAGMA cache_size`).
    /// The server holds the pool's connections plus one writer, so the caches together take
    /// at most (CHORUS_POOL_SIZE + 1) times this; they fill as the database grows, then hold.
    #[arg(long, env = "CHORUS_SQLITE_CACHE_KIB", default_value_t = defaults::SQLITE_CACHE_KIB,
          value_parser = clap::value_parser!(u64).range(64..=1_048_576), global = true)]
    pub sqlite_cache_kib: u64,

    /// How long an idle HTTP keep-alive connection stays open. Keep it above your load
    /// balancer's idle timeout, so the proxy never reuses a connection Chorus is closing.
    #[arg(long, env = "CHORUS_KEEP_ALIVE_SECS", default_value_t = defaults::KEEP_ALIVE_SECS, global = true)]
    pub keep_alive_secs: u64,

    /// HTTP worker threads (0: one per core).
    #[arg(long, env = "CHORUS_WORKERS", default_value_t = defaults::WORKERS, global = true)]
    pub workers: usize,

    /// How long receipt changes are kept for `/v1/receipts`, and how old a long-poll cursor
    /// may be before it gets 410 `cursor_expired`.
    #[arg(long, env = "CHORUS_RECEIPT_RETENTION_SECS", default_value_t = defaults::RECEIPT_RETENTION_SECS, global = true)]
    pub receipt_retention_secs: i64,

    /// Forget a device (and its delivered cursors) unused for this many seconds; a signed-out
    /// device's refusal of its old tokens is kept as long.
    #[arg(long, env = "CHORUS_DEVICE_RETENTION_SECS", default_value_t = defaults::DEVICE_RETENTION_SECS, global = true)]
    pub device_retention_secs: i64,

    /// The most members a group may have; adding beyond it is refused with 409
    /// `too_many_members`. Receipts, sends and acks were measured flat up to 100,000.
    #[arg(long, env = "CHORUS_MAX_GROUP_MEMBERS", default_value_t = defaults::MAX_GROUP_MEMBERS,
          value_parser = clap::value_parser!(i64).range(2..=1_000_000), global = true)]
    pub max_group_members: i64,

    /// A message's sender may recall it for this many seconds after sending (then 409
    /// `recall_window_passed`). The owner may delete any message at any time.
    #[arg(long, env = "CHORUS_RECALL_WINDOW_SECS", default_value_t = defaults::RECALL_WINDOW_SECS, value_parser = clap::value_parser!(i64).range(0..), global = true)]
    pub recall_window_secs: i64,

    /// A message's sender may edit it for this many seconds after sending (then 409
    /// `edit_window_passed`).
    #[arg(long, env = "CHORUS_EDIT_WINDOW_SECS", default_value_t = defaults::EDIT_WINDOW_SECS, value_parser = clap::value_parser!(i64).range(0..), global = true)]
    pub edit_window_secs: i64,

    /// Delete messages older than this many seconds. Unset: keep messages forever.
    #[arg(long, env = "CHORUS_MESSAGE_RETENTION_SECS", global = true)]
    pub message_retention_secs: Option<i64>,

    /// How often the retention job deletes expired receipt changes (and messages).
    #[arg(long, env = "CHORUS_RETENTION_INTERVAL_SECS", default_value_t = defaults::RETENTION_INTERVAL_SECS, global = true)]
    pub retention_interval_secs: u64,

    /// Long-polls one user may have waiting at once; more get 429.
    #[arg(long, env = "CHORUS_LONGPOLL_MAX_PER_USER", default_value_t = defaults::LONGPOLL_MAX_PER_USER, global = true)]
    pub longpoll_max_per_user: usize,

    /// Long-polls the server holds at once; more get 429.
    #[arg(long, env = "CHORUS_LONGPOLL_MAX_TOTAL", default_value_t = defaults::LONGPOLL_MAX_TOTAL, global = true)]
    pub longpoll_max_total: usize,

    /// Wake devices through the operator's push service at this URL (http://…): each
    /// notification is POSTed there as JSON. Unset: push is off (devices may still register
    /// push targets).
    #[arg(long, env = "CHORUS_PUSH_URL", global = true)]
    pub push_url: Option<String>,

    /// The secret that signs each notification (`X-Chorus-Signature: sha256=<hex HMAC-SHA256
    /// of the body>`), at least 32 bytes; required with CHORUS_PUSH_URL.
    #[arg(
        long,
        env = "CHORUS_PUSH_SECRET",
        hide_env_values = true,
        global = true
    )]
    pub push_secret: Option<SecretString>,

    /// A device is due a push for a message it has not acked this many milliseconds after it
    /// was sent, so an app in the foreground that acks at once gets none.
    #[arg(long, env = "CHORUS_PUSH_GRACE_MS", default_value_t = defaults::PUSH_GRACE_MS, global = true)]
    pub push_grace_ms: u64,

    /// At most one notification per device per this many milliseconds; what comes meanwhile
    /// is coalesced into the next.
    #[arg(long, env = "CHORUS_PUSH_INTERVAL_MS", default_value_t = defaults::PUSH_INTERVAL_MS, global = true)]
    pub push_interval_ms: u64,

    /// How long one request to the push service may take before it counts as failed.
    #[arg(long, env = "CHORUS_PUSH_TIMEOUT_MS", default_value_t = defaults::PUSH_TIMEOUT_MS, global = true)]
    pub push_timeout_ms: u64,

    /// How long a notification is retried (with backoff) before it is given up.
    #[arg(long, env = "CHORUS_PUSH_RETRY_FOR_SECS", default_value_t = defaults::PUSH_RETRY_FOR_SECS, global = true)]
    pub push_retry_for_secs: u64,

    /// The longest wait between two attempts at one notification (the backoff doubles up to it).
    #[arg(long, env = "CHORUS_PUSH_BACKOFF_MAX_MS", default_value_t = defaults::PUSH_BACKOFF_MAX_MS, global = true)]
    pub push_backoff_max_ms: u64,

    /// Put message content in notifications: the first characters of each group's last
    /// message and its sender. Off: counts only.
    #[arg(long, env = "CHORUS_PUSH_CONTENT", default_value_t = defaults::PUSH_CONTENT,
          action = clap::ArgAction::Set, global = true)]
    pub push_content: bool,

    /// Log output format.
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value_t = defaults::LOG_FORMAT, global = true)]
    pub log_format: LogFormat,

    /// Log filter: a default level and levels per target, e.g. `chorus=debug,info`.
    #[arg(long, env = "CHORUS_LOG", default_value = defaults::LOG, global = true)]
    pub log: String,

    /// Add a backtrace to the log line of every internal error (costly; for debugging).
    /// Without it such a line holds the error and its causes only, whatever RUST_BACKTRACE
    /// says.
    #[arg(long, env = "CHORUS_LOG_BACKTRACES", default_value_t = defaults::LOG_BACKTRACES,
          action = clap::ArgAction::Set, global = true)]
    pub log_backtraces: bool,

    /// Whether this instance tells other instances of its writes (PostgreSQL). Not a flag:
    /// always on for a server. In-process tests turn it off to play an instance whose
    /// announcements are lost, as when it dies between a commit and its announcement.
    #[arg(skip = true)]
    pub announce_wakes: bool,

    /// Whether sends to one group, and acks, that arrive together are stored in one
    /// transaction (see `db::engine::shared_commits`). Not a flag: always on for a server. Benches
    /// turn it off to measure each write alone side by side.
    #[arg(skip = true)]
    pub shared_commits: bool,
}

impl Settings {
    /// Every setting at its default, as if no flag or variable was given (tests start here).
    pub fn defaults() -> Settings {
        Settings {
            bind: defaults::BIND.into(),
            database_url: None,
            data_dir: defaults::DATA_DIR.into(),
            jwt_secret: None,
            pool_size: defaults::POOL_SIZE,
            pool_timeout_ms: defaults::POOL_TIMEOUT_MS,
            statement_timeout_ms: defaults::STATEMENT_TIMEOUT_MS,
            sqlite_sync: defaults::SQLITE_SYNC,
            sqlite_max_size_mb: defaults::SQLITE_MAX_SIZE_MB,
            sqlite_write_batch: defaults::SQLITE_WRITE_BATCH,
            send_batch: defaults::SEND_BATCH,
            ack_batch: defaults::ACK_BATCH,
            sqlite_cache_kib: defaults::SQLITE_CACHE_KIB,
            keep_alive_secs: defaults::KEEP_ALIVE_SECS,
            workers: defaults::WORKERS,
            receipt_retention_secs: defaults::RECEIPT_RETENTION_SECS,
            device_retention_secs: defaults::DEVICE_RETENTION_SECS,
            recall_window_secs: defaults::RECALL_WINDOW_SECS,
            edit_window_secs: defaults::EDIT_WINDOW_SECS,
            max_group_members: defaults::MAX_GROUP_MEMBERS,
            message_retention_secs: None,
            retention_interval_secs: defaults::RETENTION_INTERVAL_SECS,
            longpoll_max_per_user: defaults::LONGPOLL_MAX_PER_USER,
            longpoll_max_total: defaults::LONGPOLL_MAX_TOTAL,
            push_url: defaults::PUSH_URL.map(str::to_owned),
            push_secret: None,
            push_grace_ms: defaults::PUSH_GRACE_MS,
            push_interval_ms: defaults::PUSH_INTERVAL_MS,
            push_timeout_ms: defaults::PUSH_TIMEOUT_MS,
            push_retry_for_secs: defaults::PUSH_RETRY_FOR_SECS,
            push_backoff_max_ms: defaults::PUSH_BACKOFF_MAX_MS,
            push_content: defaults::PUSH_CONTENT,
            log_format: defaults::LOG_FORMAT,
            log: defaults::LOG.into(),
            log_backtraces: defaults::LOG_BACKTRACES,
            announce_wakes: true,
            shared_commits: true,
        }
    }

    /// The database to use; the embedded default lives in the data directory (created here).
    pub fn db_settings(&self) -> std::io::Result<DbSettings> {
        match &self.database_url {
            Some(url) => Ok(self.db_settings_for_url(url)),
            None => {
                create_data_dir(&self.data_dir)?;
                let path = self.data_dir.join("chorus.sqlite3");
                Ok(self.db_settings_for_url(&path.display().to_string()))
            }
        }
    }

    /// These settings applied to the database at `url` (a `sqlite://` prefix is dropped).
    /// Touches nothing, so tools and tests can take the defaults from
    /// `Settings::defaults().db_settings_for_url(url)`.
    pub fn db_settings_for_url(&self, url: &str) -> DbSettings {
        DbSettings {
            url: url.strip_prefix("sqlite://").unwrap_or(url).to_owned(),
            pool_size: self.pool_size,
            pool_timeout: Duration::from_millis(self.pool_timeout_ms),
            statement_timeout: Duration::from_millis(self.statement_timeout_ms),
            sqlite_sync: self.sqlite_sync,
            sqlite_max_bytes: self
                .sqlite_max_size_mb
                .map(|mb| mb.saturating_mul(1024 * 1024)),
            sqlite_write_batch: self.sqlite_write_batch as usize,
            sqlite_cache_kib: self.sqlite_cache_kib,
            shared_commits: self.shared_commits,
        }
    }
}

/// The database settings are the database layer's type; what their values are by default is
/// configuration, so the one-off constructor lives here beside the server's.
impl DbSettings {
    /// Settings for one-off connections to `url` (tools, tests): the server's defaults.
    pub fn for_url(url: &str) -> DbSettings {
        DbSettings {
            pool_size: 1,
            ..Settings::defaults().db_settings_for_url(url)
        }
    }
}

/// Creates the data directory (and its parents); the error names it and the setting.
pub fn create_data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        let reason = match e.kind() {
            std::io::ErrorKind::AlreadyExists => "it exists and is not a directory".to_owned(),
            _ => e.to_string(),
        };
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot create the data directory {} (CHORUS_DATA_DIR): {reason}",
                dir.display()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    #[test]
    fn debug_never_prints_secrets_but_shows_every_other_setting() {
        let mut s = Settings::defaults();
        s.jwt_secret = Some("super-secret-value-that-is-long-enough".into());
        s.push_secret = Some("push-secret-value-that-is-long-enough".into());
        s.database_url = Some("postgres://u:db-password@h/db".into());
        s.log = "chorus=debug".into();
        let printed = format!("{s:?}");
        assert!(!printed.contains("super-secret"), "{printed}");
        assert!(!printed.contains("push-secret"), "{printed}");
        assert!(!printed.contains("db-password"), "{printed}");
        assert!(printed.contains("postgres://u:***@h/db"), "{printed}");
        assert!(printed.contains("chorus=debug"), "{printed}");
    }

    #[test]
    fn defaults_are_what_the_flags_give_when_nothing_is_set() {
        // Ignore the CHORUS_* variables of whoever runs the test.
        let command = Cli::command().mut_args(|arg| arg.env(None::<&str>));
        let matches = command.try_get_matches_from(["chorus"]).expect("no flags");
        let parsed = Cli::from_arg_matches(&matches).expect("settings");
        assert_eq!(
            format!("{:?}", parsed.settings),
            format!("{:?}", Settings::defaults())
        );
    }

    #[test]
    fn every_setting_has_a_row_in_the_readme_configuration_table() {
        let readme = include_str!("../README.md");
        let command = Cli::command();
        let mut settings: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_env())
            .map(|env| env.to_string_lossy().into_owned())
            .collect();
        for sub in command.get_subcommands() {
            settings.extend(
                sub.get_arguments()
                    .filter_map(|arg| arg.get_env())
                    .map(|env| env.to_string_lossy().into_owned()),
            );
        }
        let missing: Vec<&String> = settings
            .iter()
            .filter(|env| !readme.contains(&format!("| `{env}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "settings with no README row: {missing:?}"
        );
    }

    #[test]
    fn a_page_cache_outside_its_range_is_refused_naming_the_range() {
        let command = Cli::command().mut_args(|arg| arg.env(None::<&str>));
        for bad in ["0", "63", "1048577", "lots"] {
            let error = command
                .clone()
                .try_get_matches_from(["chorus", "--sqlite-cache-kib", bad])
                .expect_err(bad)
                .to_string();
            assert!(error.contains("--sqlite-cache-kib"), "{bad}: {error}");
        }
        let matches = command
            .try_get_matches_from(["chorus", "--sqlite-cache-kib", "64"])
            .expect("the smallest cache");
        let parsed = Cli::from_arg_matches(&matches).expect("settings");
        assert_eq!(
            parsed.settings.db_settings_for_url("x").sqlite_cache_kib,
            64
        );
    }

    #[test]
    fn a_member_cap_outside_its_range_is_refused_naming_the_flag() {
        let command = Cli::command().mut_args(|arg| arg.env(None::<&str>));
        for bad in ["0", "1", "1000001", "-5", "many"] {
            let flag = format!("--max-group-members={bad}");
            let error = command
                .clone()
                .try_get_matches_from(["chorus", flag.as_str()])
                .expect_err(bad)
                .to_string();
            assert!(error.contains("--max-group-members"), "{bad}: {error}");
        }
        let matches = command
            .try_get_matches_from(["chorus", "--max-group-members", "2"])
            .expect("the smallest cap");
        let parsed = Cli::from_arg_matches(&matches).expect("settings");
        assert_eq!(parsed.settings.max_group_members, 2);
        assert_eq!(Settings::defaults().max_group_members, 100_000);
    }

    #[test]
    fn database_settings_take_the_pool_and_timeouts_from_the_settings() {
        let db = Settings::defaults().db_settings_for_url("sqlite://x.sqlite3");
        assert_eq!(db.url, "x.sqlite3");
        assert_eq!(db.pool_size, defaults::POOL_SIZE);
        assert_eq!(
            db.pool_timeout,
            Duration::from_millis(defaults::POOL_TIMEOUT_MS)
        );
        assert_eq!(db.sqlite_sync, SqliteSync::Full);
    }
}
