//! Every down.sql reverses its up.sql: apply all, revert all, apply all again.

use crate::support::engine::Engine;
use crate::support::scratch_db::ScratchDb;
use chorus::db::{connect_once, is_ready, revert_all_migrations, run_migrations, DbSettings};

fn round_trip(engine: Engine) {
    let db = ScratchDb::for_test(engine);
    let settings = DbSettings::for_url(db.url());
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
    round_trip(Engine::Sqlite);
}

#[test]
#[cfg_attr(
    not(chorus_pg_tests),
    ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
)]
fn migrations_round_trip_on_postgres() {
    round_trip(Engine::Postgres);
}
