//! SIGKILL the server while a device is due a notification (within its grace period, so
//! nothing is built yet), and again while a notification is being delivered (the push
//! service hangs): after each restart the notification goes out, the second one with the key
//! of the attempt the killed server made, since it was stored before it was sent.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::server::start_server_with;
use crate::support::child_server::ChildServer;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::http::Reply;
use crate::support::push_receiver::{Behaviour, PushReceiver, Received};
use crate::support::scratch_db::ScratchDb;

const PUSH_SECRET: &str = "push-secret-push-secret-push-secret-0123";
/// Restarts, migrations and a lease running out, on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

mod due_and_in_flight_notifications_survive_sigkill {
    use crate::support::engine::Engine;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::survive_sigkill(Engine::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(chorus_pg_tests),
        ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
    )]
    async fn postgres() {
        super::survive_sigkill(Engine::Postgres).await
    }
}

struct Run {
    dir: tempfile::TempDir,
    database: ScratchDb,
    client: reqwest::Client,
    push: PushReceiver,
}

impl Run {
    async fn start(&self, log_name: &str) -> (ChildServer, ApiClient) {
        let env = [
            ("CHORUS_PUSH_URL", self.push.url.as_str()),
            ("CHORUS_PUSH_SECRET", PUSH_SECRET),
            ("CHORUS_PUSH_GRACE_MS", "1500"),
            ("CHORUS_PUSH_INTERVAL_MS", "300"),
            ("CHORUS_PUSH_TIMEOUT_MS", "500"),
            ("CHORUS_PUSH_BACKOFF_MAX_MS", "500"),
        ];
        let dir: &Path = self.dir.path();
        let url = self.database.url();
        let server = start_server_with(dir, url, log_name, &self.client, &env).await;
        let api = ApiClient::with_client(self.client.clone(), server.base.clone());
        (server, api)
    }
}

fn with_badge(r: &Received, badge: i64) -> bool {
    r.body["badge"] == badge
}

async fn send(api: &ApiClient, group: i64, n: usize) {
    let reply = api.send("alice", group, &format!("c-{n}"), "wake up").await;
    assert!(matches!(reply, Reply::Answered(201, _)), "{reply:?}");
}

async fn survive_sigkill(engine: Engine) {
    let _serial = crate::SERIAL.lock().await;
    let run = Run {
        dir: tempfile::tempdir().expect("temp dir"),
        database: ScratchDb::for_test(engine),
        client: crate::support::http::client(Duration::from_secs(20)),
        push: PushReceiver::start(PUSH_SECRET),
    };
    let (mut server, api) = run.start("server-1.log").await;
    let group = api.create_group("alice", "push", &["bob"]).await;
    let target = json!({"platform": "fcm", "token": "bob-phone-token"});
    let path = "/v1/me/devices/phone/push-target";
    let reply = api
        .call(Method::PUT, path, "bob#phone", Some(&target))
        .await;
    assert!(matches!(reply, Reply::Answered(200, _)), "{reply:?}");
    for n in 0..3 {
        send(&api, group, n).await;
    }
    server.kill();

    let (mut server, api) = run.start("server-2.log").await;
    run.push
        .wait_for(PATIENCE, "the due notification after a restart", |r| {
            r.iter()
                .any(|p| p.answered == Behaviour::Take && with_badge(p, 3))
        })
        .await;

    run.push.set(Behaviour::Hang);
    send(&api, group, 3).await;
    let hung = run
        .push
        .wait_for(PATIENCE, "an attempt at the fourth message", |r| {
            r.iter().any(|p| with_badge(p, 4))
        })
        .await;
    let key = hung
        .iter()
        .find(|p| with_badge(p, 4))
        .expect("found")
        .key
        .clone();
    server.kill();
    run.push.set(Behaviour::Take);

    let (mut server, _api) = run.start("server-3.log").await;
    run.push
        .wait_for(
            PATIENCE,
            "the killed attempt, delivered after a restart",
            |r| {
                r.iter()
                    .any(|p| p.answered == Behaviour::Take && p.key == key)
            },
        )
        .await;
    let log = server.log();
    server.kill();
    assert!(!log.contains("panicked"), "{log}");
}
