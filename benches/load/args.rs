//! The bench's command line: which scenario, on which engine setups.

use chorus::config::SqliteSync;

use crate::support::engine::Engine;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Core,
    Send,
    Pull,
    Ack,
    Storage,
    ChatList,
    PollReads,
    MessageKinds,
    Push,
    GroupCommit,
    AckPaths,
}

impl Scenario {
    /// `core` runs every scenario but the message-kinds, push, group-commit and ack-paths
    /// ones, which
    /// seed tens of thousands of rows or start servers of their own and answer narrower
    /// questions.
    pub fn includes(self, part: Scenario) -> bool {
        self == part
            || (self == Scenario::Core
                && !matches!(
                    part,
                    Scenario::MessageKinds
                        | Scenario::Push
                        | Scenario::GroupCommit
                        | Scenario::AckPaths
                ))
    }
}

/// An engine as a run sets it up: SQLite runs twice, with `synchronous = FULL` (the default)
/// and `NORMAL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineSetup {
    SqliteFull,
    SqliteNormal,
    Postgres,
}

impl EngineSetup {
    pub fn engine(self) -> Engine {
        match self {
            EngineSetup::SqliteFull | EngineSetup::SqliteNormal => Engine::Sqlite,
            EngineSetup::Postgres => Engine::Postgres,
        }
    }

    /// The server's SQLite durability (PostgreSQL ignores it).
    pub fn sqlite_sync(self) -> SqliteSync {
        match self {
            EngineSetup::SqliteNormal => SqliteSync::Normal,
            EngineSetup::SqliteFull | EngineSetup::Postgres => SqliteSync::Full,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            EngineSetup::SqliteFull => "SQLite, synchronous = FULL (default)",
            EngineSetup::SqliteNormal => "SQLite, synchronous = NORMAL",
            EngineSetup::Postgres => "PostgreSQL",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            EngineSetup::SqliteFull => "SQLite FULL",
            EngineSetup::SqliteNormal => "SQLite NORMAL",
            EngineSetup::Postgres => "PostgreSQL",
        }
    }
}

pub struct Args {
    pub scenario: Scenario,
    pub engines: Vec<EngineSetup>,
}

pub const USAGE: &str =
    "usage: cargo bench --bench load -- [core|send|pull|ack|storage|chat-list|poll-reads|message-kinds|push|group-commit|ack-paths] [--engine sqlite|postgres|both]";

pub fn parse_args() -> Result<Args, String> {
    let mut scenario = Scenario::Core;
    let all = vec![
        EngineSetup::SqliteFull,
        EngineSetup::SqliteNormal,
        EngineSetup::Postgres,
    ];
    let mut engines = all.clone();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo bench appends --bench to a harness = false target.
            "--bench" => {}
            "--engine" => {
                engines = match args.next().as_deref() {
                    Some("sqlite") => vec![EngineSetup::SqliteFull, EngineSetup::SqliteNormal],
                    Some("postgres") => vec![EngineSetup::Postgres],
                    Some("both") => all.clone(),
                    other => return Err(format!("unknown engine {other:?}")),
                }
            }
            "core" => scenario = Scenario::Core,
            "send" => scenario = Scenario::Send,
            "pull" => scenario = Scenario::Pull,
            "ack" => scenario = Scenario::Ack,
            "storage" => scenario = Scenario::Storage,
            "chat-list" => scenario = Scenario::ChatList,
            "poll-reads" => scenario = Scenario::PollReads,
            "message-kinds" => scenario = Scenario::MessageKinds,
            "push" => scenario = Scenario::Push,
            "group-commit" => scenario = Scenario::GroupCommit,
            "ack-paths" => scenario = Scenario::AckPaths,
            "-h" | "--help" => return Err("Chorus load benchmark".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args { scenario, engines })
}
