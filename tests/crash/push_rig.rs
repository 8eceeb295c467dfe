//! What the push crash tests share: a database, a push receiver, and `chorus serve` child
//! processes with quick push timings that deliver to it.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::server::start_server_with;
use crate::support::child_server::ChildServer;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::http::Reply;
use crate::support::push_receiver::PushReceiver;
use crate::support::scratch_db::ScratchDb;

pub const PUSH_SECRET: &str = "push-secret-push-secret-push-secret-0123";
/// Restarts, migrations and a lease running out, on a loaded two-core machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub struct PushRun {
    dir: tempfile::TempDir,
    database: ScratchDb,
    pub client: reqwest::Client,
    pub push: PushReceiver,
}

impl PushRun {
    pub fn new(engine: Engine) -> PushRun {
        PushRun {
            dir: tempfile::tempdir().expect("temp dir"),
            database: ScratchDb::for_test(engine),
            client: crate::support::http::client(Duration::from_secs(20)),
            push: PushReceiver::start(PUSH_SECRET),
        }
    }

    /// A server on the run's database, its data directory `<run>/<name>` (a restarted server
    /// takes the same name), logging to `log`; a delivery attempt gives up after `timeout`.
    pub async fn start(&self, name: &str, log: &str, timeout: Duration) -> ChildServer {
        let timeout_ms = timeout.as_millis().to_string();
        let env = [
            ("CHORUS_PUSH_URL", self.push.url.as_str()),
            ("CHORUS_PUSH_SECRET", PUSH_SECRET),
            ("CHORUS_PUSH_GRACE_MS", "1500"),
            ("CHORUS_PUSH_INTERVAL_MS", "300"),
            ("CHORUS_PUSH_TIMEOUT_MS", timeout_ms.as_str()),
            ("CHORUS_PUSH_BACKOFF_MAX_MS", "500"),
        ];
        let dir: &Path = &self.dir.path().join(name);
        std::fs::create_dir_all(dir).expect("data dir");
        start_server_with(dir, self.database.url(), log, &self.client, &env).await
    }

    pub fn api(&self, server: &ChildServer) -> ApiClient {
        ApiClient::with_client(self.client.clone(), server.base.clone())
    }
}

/// Registers a push target for `user`'s device `device`, its token `<user>-token`.
pub async fn register_phone(api: &ApiClient, user: &str, device: &str) {
    let target = json!({"platform": "fcm", "token": format!("{user}-token")});
    let caller = format!("{user}#{device}");
    let path = format!("/v1/me/devices/{device}/push-target");
    let reply = api.call(Method::PUT, &path, &caller, Some(&target)).await;
    assert!(matches!(reply, Reply::Answered(200, _)), "{reply:?}");
}

/// A message from `sender`, answered 201.
pub async fn send(api: &ApiClient, sender: &str, group: i64, client_msg_id: &str) {
    let reply = api.send(sender, group, client_msg_id, "wake up").await;
    assert!(matches!(reply, Reply::Answered(201, _)), "{reply:?}");
}
