//! A server that starts says where a person goes next: its listening line names the web
//! client, the API docs and the spec, each a URL that answers.
//!
//! A setting under a former name is still read, with a warning to rename it.
//!
//! These start the real binary and read its log, as someone who just ran it would.

use std::time::Duration;

use crate::on_postgres;
use crate::support::child_server::{start_healthy, test_binary, ChildConfig, ChildServer};
use crate::support::engine::Engine;
use crate::support::scratch_db::ScratchDb;

on_postgres!(the_listening_line_names_the_web_client_docs_and_spec_on_postgres);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listening_line_names_the_web_client_docs_and_spec_on_sqlite() {
    the_listening_line_names_working_urls(Engine::Sqlite).await;
}

async fn the_listening_line_names_the_web_client_docs_and_spec_on_postgres() {
    the_listening_line_names_working_urls(Engine::Postgres).await;
}

async fn the_listening_line_names_working_urls(engine: Engine) {
    let db = ScratchDb::for_test(engine);
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, client) =
        start_healthy(dir.path(), Some(db.url()), &[("CHORUS_LOG", "info")]).await;

    let log = server.log();
    let line = log
        .lines()
        .find(|l| l.contains("listening"))
        .unwrap_or_else(|| panic!("a listening line:\n{log}"));
    let base = &server.base;
    for (field, path, looks_like) in [
        ("web_client", "/", "<html"),
        ("docs", "/docs", "<html"),
        ("spec", "/openapi.yaml", "openapi:"),
    ] {
        let url = format!("{base}{path}");
        assert!(
            line.contains(&format!("{field}={url}")),
            "the line gives {field}={url}: {line}"
        );
        let answer = client.get(&url).send().await.expect("an answer");
        assert_eq!(answer.status().as_u16(), 200, "{url} answers");
        let body = answer.text().await.expect("a body").to_lowercase();
        assert!(body.contains(looks_like), "{url} is what it says it is");
    }
}

/// A setting renamed since an earlier release still works under its old name, and the log
/// says to rename it. (Settings are read before any database is opened: SQLite stands for
/// both engines.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_under_its_former_name_is_read_and_the_log_says_to_rename_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, _client) =
        start_healthy(dir.path(), None, &[("CHORUS_POSTGRES_SEND_BATCH", "8")]).await;
    let log = server.log();
    assert!(
        log.lines().any(|l| l.contains(" WARN ")
            && l.contains("CHORUS_POSTGRES_SEND_BATCH is read as CHORUS_SEND_BATCH")),
        "a warning names the old and the new name:\n{log}"
    );

    // The value is the setting's: one out of range stops the server, named by the new name.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = ChildConfig {
        binary: test_binary(),
        data_dir: &dir.path().join("data"),
        database_url: None,
        env: &[("CHORUS_POSTGRES_ACK_BATCH", "0")],
    };
    let mut server = ChildServer::spawn(&config, dir.path().join("server.log")).expect("run");
    let client = crate::support::http::client(Duration::from_secs(2));
    let outcome = server.wait_healthy(&client, Duration::from_secs(30)).await;
    assert!(
        outcome.is_err_and(|e| e.contains("exited during start-up")),
        "an ack batch of 0 is refused"
    );
    let log = server.log();
    assert!(
        log.contains("--ack-batch") && log.contains("1..=1000"),
        "the error names the setting and what it accepts:\n{log}"
    );
}
