//! The two database engines every scenario runs on, and where tests and benches find PostgreSQL.

/// The PostgreSQL admin URL of the tests. Without it at build time the PostgreSQL variants are
/// compiled as ignored (see build.rs), so `cargo test` counts them as not run.
pub const TEST_PG_URL_VAR: &str = "CHORUS_TEST_DATABASE_URL";
/// The PostgreSQL admin URL of the benches; a bench asks for its engines on the command line,
/// so it falls back to the local server instead.
pub const BENCH_PG_URL_VAR: &str = "CHORUS_BENCH_DATABASE_URL";
pub const BENCH_PG_DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// For log lines and JSON records.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }

    /// For report headings.
    pub fn title(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

/// The admin URL a PostgreSQL test variant runs against. Such a variant only runs when the
/// variable was set at build time, so its absence now is a mistake worth failing on.
pub fn test_pg_admin_url() -> String {
    std::env::var(TEST_PG_URL_VAR).unwrap_or_else(|_| {
        panic!("{TEST_PG_URL_VAR} is not set: it names the PostgreSQL server the test runs on")
    })
}

pub fn bench_pg_admin_url() -> String {
    std::env::var(BENCH_PG_URL_VAR).unwrap_or_else(|_| BENCH_PG_DEFAULT_URL.into())
}
