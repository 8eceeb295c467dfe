//! An internal error is one log line with its cause, even with `RUST_BACKTRACE=1` in the
//! server's environment; a backtrace is added only when `CHORUS_LOG_BACKTRACES` asks.
//!
//! The error is real: the real binary runs on a database whose `group_members` table was
//! renamed behind its back, so the chat list query fails.

use std::time::Duration;

use diesel::RunQueryDsl;

use crate::on_postgres;
use crate::support::child_server::start_healthy;
use crate::support::engine::Engine;
use crate::support::scratch_db::ScratchDb;
use crate::support::tokens::TokenMint;

on_postgres!(an_internal_error_is_one_line_without_a_backtrace_on_postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_is_one_line_without_a_backtrace_on_sqlite() {
    one_line_without_a_backtrace(Engine::Sqlite).await;
}

async fn an_internal_error_is_one_line_without_a_backtrace_on_postgres() {
    one_line_without_a_backtrace(Engine::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chorus_log_backtraces_adds_the_backtrace() {
    let log = log_of_an_internal_error(Engine::Sqlite, &[("CHORUS_LOG_BACKTRACES", "true")]).await;

    assert!(
        log.contains("backtrace="),
        "asked for, the backtrace is logged:\n{log}"
    );
}

async fn one_line_without_a_backtrace(engine: Engine) {
    let log = log_of_an_internal_error(engine, &[]).await;

    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert_eq!(errors.len(), 1, "one line per internal error:\n{log}");
    assert!(
        errors[0].contains("group_members"),
        "the line holds the cause: {}",
        errors[0]
    );
    assert!(
        !log.contains("backtrace") && !log.contains("Caused by"),
        "no backtrace, no multi-line cause list:\n{log}"
    );
}

/// Starts the binary with `RUST_BACKTRACE=1` and `env`, breaks its database, makes one request
/// fail with 500, and returns the server's log.
async fn log_of_an_internal_error(engine: Engine, env: &[(&str, &str)]) -> String {
    let db = ScratchDb::for_test(engine);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut all_env = vec![("RUST_BACKTRACE", "1"), ("CHORUS_LOG", "warn")];
    all_env.extend_from_slice(env);
    let (server, client) = start_healthy(dir.path(), Some(db.url()), &all_env).await;

    let mut conn = chorus::db::connect_once(&chorus::db::DbSettings::for_url(db.url()))
        .expect("a direct connection");
    diesel::sql_query("ALTER TABLE group_members RENAME TO group_members_elsewhere")
        .execute(&mut conn)
        .expect("rename the table");
    let response = client
        .get(format!("{}/v1/me/groups", server.base))
        .bearer_auth(TokenMint::new().token("alice"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 500, "the query fails");

    tokio::time::sleep(Duration::from_millis(200)).await;
    server.log()
}
