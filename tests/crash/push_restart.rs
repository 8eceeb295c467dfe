//! SIGKILL the server while a device is due a notification (within its grace period, so
//! nothing is built yet), and again while a notification is being delivered (the push
//! service hangs): after each restart the notification goes out, the second one with the key
//! of the attempt the killed server made, since it was stored before it was sent.

use std::time::Duration;

use crate::push_rig::{self, register_phone, PushRun, PATIENCE};
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::push_receiver::{Behaviour, Received};

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

fn with_badge(r: &Received, badge: i64) -> bool {
    r.body["badge"] == badge
}

async fn send(api: &ApiClient, group: i64, n: usize) {
    push_rig::send(api, "alice", group, &format!("c-{n}")).await;
}

/// Attempts give up after this long, so a hanging push service holds one in flight.
const TIMEOUT: Duration = Duration::from_millis(500);

async fn survive_sigkill(engine: Engine) {
    let _serial = crate::SERIAL.lock().await;
    let run = PushRun::new(engine);
    let mut server = run.start("server", "server-1.log", TIMEOUT).await;
    let api = run.api(&server);
    let group = api.create_group("alice", "push", &["bob"]).await;
    register_phone(&api, "bob", "phone").await;
    for n in 0..3 {
        send(&api, group, n).await;
    }
    server.kill();

    let mut server = run.start("server", "server-2.log", TIMEOUT).await;
    let api = run.api(&server);
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

    let mut server = run.start("server", "server-3.log", TIMEOUT).await;
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
