//! Migrations: every down.sql reverses its up.sql (apply all, revert all, apply all again),
//! and a migration that fills a new table from existing rows counts what is already there.

use crate::support::engine::Engine;
use crate::support::scratch_db::ScratchDb;
use chorus::db::{
    connect_once, is_ready, revert_all_migrations, revert_last_migration, run_migrations,
    AnyConnection, DbSettings,
};
use diesel::RunQueryDsl;

use crate::on_both_engines;
use crate::support::histogram;

on_both_engines!(blocking by engine:
    round_trip,
    the_cursor_histogram_counts_the_members_already_there,
    each_users_groups_are_listed_from_the_memberships_already_there,
);

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

/// Two groups whose members stand at different places when the cursor histogram's migration
/// runs: it counts them as they stand, so receipts are right from the first request after an
/// upgrade.
fn the_cursor_histogram_counts_the_members_already_there(engine: Engine) {
    let db = ScratchDb::for_test(engine);
    let mut conn = connect_once(&DbSettings::for_url(db.url())).unwrap();
    run_migrations(&mut conn).unwrap();
    for statement in [
        "INSERT INTO groups (group_id, name, owner_id, last_msg_id, created_at, last_activity_at) \
         VALUES (1, 'g', 'o', 9, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP), \
                (2, 'h', 'o', 4, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
        "INSERT INTO group_members (group_id, user_id, role, joined_after_msg_id, \
         last_ack_msg_id, last_read_msg_id, delivered_msg_id, joined_at) VALUES \
         (1, 'o', 'owner', 0, 9, 9, 9, CURRENT_TIMESTAMP), \
         (1, 'a', 'member', 0, 5, 3, 5, CURRENT_TIMESTAMP), \
         (1, 'b', 'member', 0, 5, 5, 5, CURRENT_TIMESTAMP), \
         (1, 'c', 'member', 4, 4, 4, 4, CURRENT_TIMESTAMP), \
         (1, 'd', 'member', 0, 0, 0, 0, CURRENT_TIMESTAMP), \
         (2, 'o', 'owner', 0, 4, 4, 4, CURRENT_TIMESTAMP), \
         (2, 'a', 'member', 2, 3, 2, 3, CURRENT_TIMESTAMP)",
    ] {
        diesel::sql_query(statement).execute(&mut conn).unwrap();
    }
    let histogram_exists =
        |conn: &mut AnyConnection| sql(conn, "SELECT 1 FROM cursor_counts").is_ok();
    let mut reverted = 0;
    while histogram_exists(&mut conn) {
        revert_last_migration(&mut conn).unwrap();
        reverted += 1;
    }
    assert!(reverted > 0);
    assert_eq!(run_migrations(&mut conn).unwrap(), reverted);

    let places = "SELECT group_id, msg_id FROM cursor_counts";
    assert_eq!(
        sql(&mut conn, places).unwrap(),
        9,
        "one row per group and place"
    );
    assert_eq!(histogram::disagreements(&mut conn), 0);
}

/// How many rows a query returns, or its error.
fn sql(conn: &mut AnyConnection, query: &str) -> diesel::QueryResult<i64> {
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let counted: Vec<Count> =
        diesel::sql_query(format!("SELECT count(*) AS n FROM ({query}) AS q")).load(conn)?;
    Ok(counted.first().map_or(0, |c| c.n))
}

/// Users already in groups when the migration that lists each user's groups runs: every
/// membership is listed, so long-polls wait on the right groups from the first request after
/// an upgrade.
fn each_users_groups_are_listed_from_the_memberships_already_there(engine: Engine) {
    let db = ScratchDb::for_test(engine);
    let mut conn = connect_once(&DbSettings::for_url(db.url())).unwrap();
    run_migrations(&mut conn).unwrap();
    let listed_exists = |conn: &mut AnyConnection| sql(conn, "SELECT 1 FROM user_groups").is_ok();
    let mut reverted = 0;
    while listed_exists(&mut conn) {
        revert_last_migration(&mut conn).unwrap();
        reverted += 1;
    }
    for statement in [
        "INSERT INTO groups (group_id, name, owner_id, last_msg_id, created_at, last_activity_at) \
         VALUES (1, 'g', 'o', 3, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP), \
                (2, 'h', 'o', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
        "INSERT INTO group_members (group_id, user_id, role, joined_after_msg_id, \
         last_ack_msg_id, last_read_msg_id, delivered_msg_id, joined_at) VALUES \
         (1, 'o', 'owner', 0, 3, 3, 3, CURRENT_TIMESTAMP), \
         (1, 'a', 'member', 0, 3, 3, 3, CURRENT_TIMESTAMP), \
         (2, 'o', 'owner', 0, 0, 0, 0, CURRENT_TIMESTAMP)",
    ] {
        diesel::sql_query(statement).execute(&mut conn).unwrap();
    }
    assert!(reverted > 0);
    assert_eq!(run_migrations(&mut conn).unwrap(), reverted);

    let listed = "SELECT user_id, group_id FROM user_groups WHERE \
                  (user_id = 'o' AND group_id IN (1, 2)) OR (user_id = 'a' AND group_id = 1)";
    assert_eq!(sql(&mut conn, listed).unwrap(), 3, "o in 1 and 2, a in 1");
    assert_eq!(sql(&mut conn, "SELECT 1 FROM user_groups").unwrap(), 3);
}
