//! What operators rely on: health checks, metrics, request ids.

use crate::helpers::{spawn_app, TestApp};
use crate::on_both_engines;
use crate::support::engine::Engine;

on_both_engines!(
    a_trimmed_request_keeps_repeated_headers_in_order_and_the_ones_after_them,
    metrics_show_the_database_calls_waiting_for_a_connection,
);
on_both_engines!(with a_large_pool: a_ready_server_has_every_pooled_connection_open);

/// Larger than the connections a server opens on its own at start (its first reads and
/// background jobs), so a pool that opened them only as needed would show fewer.
const LARGE_POOL: u32 = 12;

fn a_large_pool(settings: &mut chorus::config::Settings) {
    settings.pool_size = LARGE_POOL;
}

/// A server that answers has opened its whole pool: no request waits for a connection to be
/// opened (a wait in which a later request could be served first). On SQLite the pool is
/// the readers, plus the writer's one connection.
async fn a_ready_server_has_every_pooled_connection_open(app: TestApp) {
    let open = match app
        .metrics(&["chorus_db_connections_in_use", "chorus_db_connections_idle"])
        .await[..]
    {
        [Some(in_use), Some(idle)] => in_use + idle,
        ref missing => panic!("connection metrics missing: {missing:?}"),
    };
    let expected = match app.engine {
        Engine::Sqlite => LARGE_POOL + 1,
        Engine::Postgres => LARGE_POOL,
    };
    assert_eq!(open, f64::from(expected), "connections open at start");
}

/// Requests whose database work waits (every connection busy on PostgreSQL, the single writer
/// on SQLite) show in `chorus_db_calls_waiting`, and leave it when they are served. The wait
/// is made honestly: a transaction of the test's own holds what every send needs.
async fn metrics_show_the_database_calls_waiting_for_a_connection(app: TestApp) {
    const SENDS: usize = 8;
    let mut groups = Vec::new();
    for _ in 0..SENDS {
        groups.push(app.group_with("alice", &["bob"]).await);
    }
    // Background jobs (publication, folding the groups' cursor moves) may still hold a place
    // in the queue right after the set-up: at rest means the gauge comes back to zero.
    assert_eq!(waiting_settles_at_zero(&app).await, Some(0.0), "at rest");
    let lock = match app.engine {
        // The transaction itself holds SQLite's write lock, which the writer needs.
        Engine::Sqlite => "",
        // Four connections (the tests' pool) wait on the lock; the other sends queue.
        Engine::Postgres => "LOCK TABLE group_members IN ACCESS EXCLUSIVE MODE",
    };
    let held = app.transaction_held(lock).await;
    let ids: Vec<String> = (0..SENDS).map(|i| format!("queued-{i}")).collect();
    let sends = groups
        .iter()
        .zip(&ids)
        .map(|(group, id)| app.send("alice", *group, id, "x"));
    let watch = async {
        let mut most = 0.0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while most < 4.0 && std::time::Instant::now() < deadline {
            most = app
                .metric("chorus_db_calls_waiting")
                .await
                .unwrap_or(0.0)
                .max(most);
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        held.commit().await;
        most
    };
    let (answers, most_waiting) = tokio::join!(futures::future::join_all(sends), watch);

    assert!(most_waiting >= 4.0, "the queue showed: {most_waiting}");
    for answer in &answers {
        assert_eq!(answer.status, 201, "{}", answer.text);
    }
    // The sends' answers do not end every wait they caused: a background job (folding the
    // sends' cursor moves, say) may have queued behind them and still be waiting for its turn.
    assert_eq!(waiting_settles_at_zero(&app).await, Some(0.0), "all served");
}

/// `chorus_db_calls_waiting` once it reads zero, or as it reads after 10 s: the gauge must
/// come back to zero, not be there at the first look.
async fn waiting_settles_at_zero(app: &TestApp) -> Option<f64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut waiting = app.metric("chorus_db_calls_waiting").await;
    while waiting != Some(0.0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        waiting = app.metric("chorus_db_calls_waiting").await;
    }
    waiting
}

/// The server trims each request's header map to the headers it has (a map starts with room
/// for 16). A request through proxies repeats some headers; after the trim every value must
/// still be there in order (the first `x-request-id` is the one answered) and the headers
/// after the repeated ones must still be read (the token, the body's type).
async fn a_trimmed_request_keeps_repeated_headers_in_order_and_the_ones_after_them(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let body = serde_json::json!({"client_msg_id": "repeated-headers", "content": "still read"});
    let response = app
        .client
        .post(format!("{}/v1/groups/{group}/messages", app.address))
        .header("via", "1.1 edge-a")
        .header("x-request-id", "first-id")
        .header("via", "1.1 edge-b")
        .header("x-request-id", "second-id")
        .header("via", "1.1 edge-c")
        .bearer_auth(app.token("alice"))
        .json(&body)
        .send()
        .await
        .expect("request");

    assert_eq!(
        response.status().as_u16(),
        201,
        "the token and the body were read"
    );
    assert_eq!(response.headers()["x-request-id"], "first-id");
    let stored = app.list_messages("bob", group, "").await;
    assert_eq!(stored.status, 200);
    assert_eq!(stored.body["messages"][0]["content"], "still read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_business_events() {
    let app = spawn_app(Engine::Sqlite).await;
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "one").await;
    app.ack("bob", group, serde_json::json!({"last_ack_msg_id": 1}))
        .await;

    let text = reqwest::get(format!("{}/metrics", app.address))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    assert!(text.contains("chorus_messages_sent_total 1"), "{text}");
    assert!(text.contains("chorus_acks_total 1"));
    assert!(text.contains(
        r#"chorus_http_requests_total{method="POST",route="/v1/groups/{group_id}/messages",status="201"} 1"#
    ));
    assert!(text.contains("chorus_http_request_duration_seconds_bucket"));
    assert!(text.contains("chorus_longpolls_waiting 0"));
    assert!(text.contains("chorus_db_connections_idle"));
    assert!(
        !text.contains(&format!("/v1/groups/{group}/")),
        "no concrete ids in labels"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_methods_and_paths_do_not_grow_the_metrics() {
    let app = spawn_app(Engine::Sqlite).await;
    let client = reqwest::Client::new();

    for i in 0..200 {
        let method = reqwest::Method::from_bytes(format!("X{i:06}").as_bytes()).unwrap();
        let response = client
            .request(method, format!("{}/nowhere/{i}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status().as_u16(),
            404,
            "an unknown path is a JSON 404"
        );
    }
    let text = reqwest::get(format!("{}/metrics", app.address))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let request_series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("chorus_http_requests_total{"))
        .collect();
    assert!(
        request_series.len() <= 3,
        "200 made-up methods and paths fold into a few series: {request_series:?}"
    );
    assert!(text.contains(
        r#"chorus_http_requests_total{method="other",route="unmatched",status="404"} 200"#
    ));
    assert!(!text.contains("X000"), "no made-up method reaches a label");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id_and_keeps_a_sane_one_from_the_client() {
    let app = spawn_app(Engine::Sqlite).await;
    let client = reqwest::Client::new();

    let generated = client
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    let kept = client
        .get(format!("{}/nowhere", app.address))
        .header("x-request-id", "edge-1234")
        .send()
        .await
        .unwrap();
    let replaced = client
        .get(format!("{}/healthz", app.address))
        .header("x-request-id", "bad id with spaces")
        .send()
        .await
        .unwrap();

    assert_eq!(generated.headers()["x-request-id"].len(), 16);
    assert_eq!(kept.headers()["x-request-id"], "edge-1234");
    assert_eq!(kept.status().as_u16(), 404, "errors carry it too");
    assert_ne!(replaced.headers()["x-request-id"], "bad id with spaces");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness_report_ok_with_a_migrated_database() {
    let app = spawn_app(Engine::Sqlite).await;

    let health = reqwest::get(format!("{}/healthz", app.address))
        .await
        .unwrap();
    let ready = reqwest::get(format!("{}/readyz", app.address))
        .await
        .unwrap();

    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(ready.status().as_u16(), 200);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docs_page_renders_the_spec_without_outside_assets() {
    let app = spawn_app(Engine::Sqlite).await;

    let page = reqwest::get(format!("{}/docs", app.address)).await.unwrap();

    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("id=\"pollReceipts\""));
    assert!(!html.contains("<script"), "no script needed");
    assert!(
        !html.contains("http://") || html.contains("http://127.0.0.1"),
        "no outside assets"
    );
}
