//! How these tests start the server: the debug binary cargo built, durable SQLite writes, only
//! warnings in its log.

use std::path::Path;
use std::time::Duration;

use crate::support::child_server::{test_binary, ChildConfig, ChildServer};
use crate::support::ports::free_port;

/// Starts `chorus serve` on `database_url` with its log at `dir/log_name`, and waits until it
/// answers /healthz; fails the test if it does not.
pub async fn start_server(
    dir: &Path,
    database_url: &str,
    log_name: &str,
    client: &reqwest::Client,
) -> ChildServer {
    start_server_with(dir, database_url, log_name, client, &[]).await
}

/// [`start_server`] with more settings.
pub async fn start_server_with(
    dir: &Path,
    database_url: &str,
    log_name: &str,
    client: &reqwest::Client,
    more: &[(&str, &str)],
) -> ChildServer {
    start_server_on(free_port(), dir, database_url, log_name, client, more).await
}

/// [`start_server_with`] on a given port, for a server restarted where its clients expect it.
pub async fn start_server_on(
    port: u16,
    dir: &Path,
    database_url: &str,
    log_name: &str,
    client: &reqwest::Client,
    more: &[(&str, &str)],
) -> ChildServer {
    let mut env = vec![("CHORUS_LOG", "warn"), ("CHORUS_SQLITE_SYNC", "full")];
    env.extend_from_slice(more);
    let config = ChildConfig {
        binary: test_binary(),
        data_dir: dir,
        database_url: Some(database_url),
        env: &env,
    };
    let mut server =
        ChildServer::spawn_on(&config, port, dir.join(log_name)).unwrap_or_else(|e| panic!("{e}"));
    server
        .wait_healthy(client, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    server
}
