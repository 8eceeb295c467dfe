//! The reference web client's files and the development-only token endpoint.

use chorus::config::Settings;
use serde_json::{json, Value};

use crate::helpers::{spawn_app, spawn_app_with};
use crate::spec_check::check_against_spec;
use crate::support::engine::Engine;

fn development_mode(s: &mut Settings) {
    s.jwt_secret = None;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_client_and_its_assets_are_served() {
    let app = spawn_app(Engine::Sqlite).await;

    let page = reqwest::get(format!("{}/", app.address)).await.unwrap();
    let script = reqwest::get(format!("{}/assets/app.js", app.address))
        .await
        .unwrap();
    let missing = reqwest::get(format!("{}/assets/nope.js", app.address))
        .await
        .unwrap();

    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    assert_eq!(script.status().as_u16(), 200);
    assert!(script.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert_eq!(missing.status().as_u16(), 404);
    let body: Value = missing.json().await.unwrap();
    check_against_spec("GET", "/assets/{name}", 404, &body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_tokens_exist_only_in_development_mode() {
    let dev = spawn_app_with(Engine::Sqlite, development_mode).await;
    let configured = spawn_app(Engine::Sqlite).await;
    let post = |address: &str, body: Value| {
        reqwest::Client::new()
            .post(format!("{address}/v1/dev/token"))
            .json(&body)
            .send()
    };

    let issued = post(&dev.address, json!({"user_id": "alice"}))
        .await
        .unwrap();
    let refused = post(&configured.address, json!({"user_id": "alice"}))
        .await
        .unwrap();
    let invalid = post(&dev.address, json!({"user_id": "not valid"}))
        .await
        .unwrap();

    assert_eq!(issued.status().as_u16(), 200);
    let issued: Value = issued.json().await.unwrap();
    check_against_spec("POST", "/v1/dev/token", 200, &issued);
    let token = issued["token"].as_str().unwrap();
    let mine = reqwest::Client::new()
        .get(format!("{}/v1/me/groups", dev.address))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        mine.status().as_u16(),
        200,
        "the token works on that server"
    );
    assert_eq!(
        refused.status().as_u16(),
        404,
        "no tokens from a server with a real secret"
    );
    let refused: Value = refused.json().await.unwrap();
    check_against_spec("POST", "/v1/dev/token", 404, &refused);
    assert_eq!(invalid.status().as_u16(), 400);
}
