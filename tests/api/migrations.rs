//! Every down.sql reverses its up.sql: apply all, revert all, apply all again.

use crate::helpers::{Backend, TestDb};
use chorus::db::{connect_once, is_ready, revert_all_migrations, run_migrations, DbSettings};

fn round_trip(backend: Backend) {
    let Some((_db, url)) = TestDb::create(backend) else {
        eprintln!("skipped: {} is not set", crate::helpers::PG_URL_VAR);
        return;
    };
    let settings = DbSettings::for_url(&url);
    let mut conn = connect_once(&settings).unwrap();

    let applied = run_migrations(&mut conn).unwrap();
    assert!(is_ready(&mut conn));
    let reverted = revert_all_migrations(&mut conn).unwrap();
    assert!(!is_ready(&mut conn));
    let reapplied = run_migrations(&mut conn).unwrap();

    assert!(applied > 0);
    assert_eq!(applied, reverted);
    assert_eq!(
        applied, reapplied,
        "up after down succeeds: down removed everything up made"
    );
    assert!(is_ready(&mut conn));
}

#[test]
fn migrations_round_trip_on_sqlite() {
    round_trip(Backend::Sqlite);
}

#[test]
#[cfg_attr(
    not(chorus_pg_tests),
    ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
)]
fn migrations_round_trip_on_postgres() {
    round_trip(Backend::Postgres);
}
