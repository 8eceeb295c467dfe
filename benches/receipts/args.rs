//! The bench's command line: which scenarios, on which engines, and the settings that differ
//! from the production defaults only when asked for.

use chorus::config::SqliteSync;

use crate::support::engine::Engine;

/// `idle`'s waiting polls unless `--polls` says otherwise; one user, one connection each. A
/// process holds at most its open-file limit of sockets (`ulimit -n`): each server process
/// holds its share, each holder process at most `idle::holder::polls_per_holder`.
pub const DEFAULT_IDLE_POLLS: usize = 10_000;
/// Members of each of `idle`'s groups: `--polls` is at least one group.
pub const IDLE_GROUP_SIZE: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Seed,
    GroupSize,
    Idle,
    CrossInstance,
    LargeGroup,
}

/// Settings that differ from the production defaults only when asked for on the command
/// line, to find out what limits a run (never the defaults of a reported run).
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// SQLite durability for the in-process servers (`--sqlite-sync`), FULL by default.
    pub sqlite_sync: SqliteSync,
    /// Database connections per in-process server (`--pool-size`), 8 by default.
    pub pool_size: u32,
    /// `synchronous_commit = off` on the bench's PostgreSQL database (`--pg-async-commit`).
    pub pg_async_commit: bool,
}

const DEFAULT_TUNING: Tuning = Tuning {
    sqlite_sync: SqliteSync::Full,
    pool_size: 8,
    pg_async_commit: false,
};

static TUNING: std::sync::OnceLock<Tuning> = std::sync::OnceLock::new();

pub fn tuning() -> Tuning {
    *TUNING.get().unwrap_or(&DEFAULT_TUNING)
}

pub struct Args {
    pub scenarios: Vec<Scenario>,
    /// Waiting long-polls in `idle` (`--polls`), 10,000 by default.
    pub idle_polls: usize,
    /// Server processes sharing them in `idle` (`--instances`), 1 by default; more than one
    /// needs PostgreSQL.
    pub idle_instances: usize,
    /// None: each scenario's default (both engines; SQLite only for `idle`).
    pub engines: Option<Vec<Engine>>,
}

pub const USAGE: &str = "usage: cargo bench --bench receipts -- \
     [seed|group-size|idle|cross-instance|large-group|all] [--engine sqlite|postgres|both] \
     [--sqlite-sync full|normal] [--pool-size N] [--pg-async-commit] [--polls N (idle)] \
     [--instances N (idle, PostgreSQL)]";

pub fn parse_args() -> Result<Args, String> {
    let all = vec![
        Scenario::Seed,
        Scenario::GroupSize,
        Scenario::Idle,
        Scenario::CrossInstance,
        Scenario::LargeGroup,
    ];
    let mut scenarios = Vec::new();
    let mut engines = None;
    let mut tuning = DEFAULT_TUNING;
    let mut idle_polls = DEFAULT_IDLE_POLLS;
    let mut idle_instances = 1;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // cargo bench appends --bench to a harness = false target.
            "--bench" => {}
            "--engine" => {
                engines = Some(match args.next().as_deref() {
                    Some("sqlite") => vec![Engine::Sqlite],
                    Some("postgres") => vec![Engine::Postgres],
                    Some("both") => vec![Engine::Sqlite, Engine::Postgres],
                    other => return Err(format!("unknown engine {other:?}")),
                })
            }
            "--sqlite-sync" => {
                tuning.sqlite_sync = match args.next().as_deref() {
                    Some("full") => SqliteSync::Full,
                    Some("normal") => SqliteSync::Normal,
                    other => return Err(format!("unknown SQLite sync {other:?}")),
                };
            }
            "--pool-size" => {
                tuning.pool_size = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--pool-size needs a positive number")?;
            }
            "--pg-async-commit" => tuning.pg_async_commit = true,
            "--polls" => {
                idle_polls = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= IDLE_GROUP_SIZE)
                    .ok_or("--polls needs a number of at least one group")?;
            }
            "--instances" => {
                idle_instances = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--instances needs a positive number")?;
            }
            "seed" => scenarios.push(Scenario::Seed),
            "group-size" => scenarios.push(Scenario::GroupSize),
            "idle" => scenarios.push(Scenario::Idle),
            "cross-instance" => scenarios.push(Scenario::CrossInstance),
            "large-group" => scenarios.push(Scenario::LargeGroup),
            "all" => scenarios.extend(all.iter().copied()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if scenarios.is_empty() {
        scenarios = all;
    }
    TUNING.set(tuning).map_err(|_| "parse_args called twice")?;
    Ok(Args {
        scenarios,
        engines,
        idle_polls,
        idle_instances,
    })
}
