//! A server that starts says where a person goes next: its listening line names the web
//! client, the API docs and the spec, each a URL that answers.
//!
//! These start the real binary and read its log, as someone who just ran it would.

use crate::on_postgres;
use crate::support::child_server::start_healthy;
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
