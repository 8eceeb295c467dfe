//! Bad input: every case gets a JSON error with the right status, and stores nothing.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{TestApp, TestResponse};
use crate::on_both_engines;
use crate::spec_check::check_against_spec;

on_both_engines!(
    malformed_bodies_get_json_errors_and_store_nothing,
    out_of_range_fields_fail_validation,
    bad_paths_and_queries_get_400,
    unknown_routes_and_methods_get_json_404_and_405,
);

/// (case name, content type, raw body, expected status, expected error code)
type RawCase = (
    &'static str,
    Option<&'static str>,
    Vec<u8>,
    u16,
    &'static str,
);

/// Posts raw bytes with a content type, as a misbehaving client would.
async fn post_raw(
    app: &TestApp,
    template: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> TestResponse {
    let mut request = app
        .client
        .post(format!("{}{}", app.address, path))
        .bearer_auth(app.token("alice"))
        .body(body);
    if let Some(ct) = content_type {
        request = request.header("Content-Type", ct);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let body: Value = serde_json::from_str(&text).expect("error bodies are JSON");
    check_against_spec("POST", template, status, &body);
    TestResponse { status, body, text }
}

/// Bodies of a send that are wrong in every way a client gets wrong: each with what it gets.
fn malformed_send_bodies() -> Vec<RawCase> {
    let json_ct: Option<&'static str> = Some("application/json");
    let huge =
        serde_json::to_vec(&json!({"client_msg_id": "c", "content": "x".repeat(70_000)})).unwrap();
    vec![
        (
            "invalid JSON",
            json_ct,
            b"{\"client_msg_id\": ".to_vec(),
            400,
            "invalid_json",
        ),
        ("empty body", json_ct, Vec::new(), 400, "invalid_json"),
        (
            "invalid UTF-8",
            json_ct,
            b"{\"client_msg_id\":\"a\",\"content\":\"\xff\xfe\"}".to_vec(),
            400,
            "invalid_json",
        ),
        (
            "missing field",
            json_ct,
            br#"{"content":"x"}"#.to_vec(),
            400,
            "validation_failed",
        ),
        (
            "wrong type",
            json_ct,
            br#"{"client_msg_id":5,"content":"x"}"#.to_vec(),
            400,
            "validation_failed",
        ),
        (
            "array body",
            json_ct,
            b"[]".to_vec(),
            400,
            "validation_failed",
        ),
        (
            "text/plain",
            Some("text/plain"),
            br#"{"client_msg_id":"a","content":"x"}"#.to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "no content type",
            None,
            br#"{"client_msg_id":"a","content":"x"}"#.to_vec(),
            415,
            "unsupported_media_type",
        ),
        ("body over 64 KiB", json_ct, huge, 413, "payload_too_large"),
        (
            // Which fields a body needs depends on its kind, so this one is checked after
            // parsing: the message names the field and the kind.
            "no content for a message",
            json_ct,
            br#"{"client_msg_id":"a"}"#.to_vec(),
            400,
            "validation_failed",
        ),
        (
            "NUL in content",
            json_ct,
            br#"{"client_msg_id":"a","content":"a\u0000b"}"#.to_vec(),
            400,
            "validation_failed",
        ),
        (
            "empty content",
            json_ct,
            br#"{"client_msg_id":"a","content":""}"#.to_vec(),
            400,
            "validation_failed",
        ),
        (
            "space in client_msg_id",
            json_ct,
            br#"{"client_msg_id":"a b","content":"x"}"#.to_vec(),
            400,
            "validation_failed",
        ),
    ]
}

async fn malformed_bodies_get_json_errors_and_store_nothing(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let path = format!("/v1/groups/{group}/messages");
    let t = "/v1/groups/{group_id}/messages";
    let cases = malformed_send_bodies();
    for (name, ct, body, status, code) in cases {
        let r = post_raw(&app, t, &path, ct, body).await;
        assert_eq!(
            (r.status, r.error_code()),
            (status, code),
            "{name}: {:?}",
            r.body
        );
    }
    let long_id = app.send("alice", group, &"k".repeat(129), "x").await;
    let content_too_big = app.send("alice", group, "big", &"é".repeat(8193)).await;
    let sql_looking = app
        .send(
            "alice",
            group,
            "';DROP/**/TABLE/**/group_msgs;--",
            "Robert'); DROP TABLE groups;--",
        )
        .await;

    assert_eq!(long_id.status, 400);
    assert_eq!(
        content_too_big.status, 400,
        "the bound is 16384 bytes, not characters"
    );
    assert_eq!(sql_looking.status, 201, "SQL-looking text is just text");
    assert_eq!(
        sql_looking.body["content"],
        "Robert'); DROP TABLE groups;--"
    );
    assert_eq!(
        app.get_group("alice", group).await.body["last_msg_id"],
        1,
        "only the valid send was stored"
    );
}

async fn out_of_range_fields_fail_validation(app: TestApp) {
    let long_name = "n".repeat(201);
    let too_many: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();

    let blank_name = app.create_group("alice", "   ", &[]).await;
    let name_too_long = app.create_group("alice", &long_name, &[]).await;
    let bad_member = app.create_group("alice", "ok", &["has space"]).await;
    let long_member = app.create_group("alice", "ok", &[&"u".repeat(65)]).await;
    let members_over_limit = app.create_group("alice", "ok", &too_many).await;

    for r in [
        &blank_name,
        &name_too_long,
        &bad_member,
        &long_member,
        &members_over_limit,
    ] {
        assert_eq!(r.status, 400, "{:?}", r.body);
        assert_eq!(r.error_code(), "validation_failed");
    }
    assert_eq!(
        app.my_groups("alice", "").await.body["groups"],
        json!([]),
        "no group was created"
    );
}

async fn bad_paths_and_queries_get_400(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let a = Some("alice");
    let msgs = "/v1/groups/{group_id}/messages";

    let cases = [
        (msgs, "/v1/groups/abc/messages".to_owned(), "invalid_path"),
        (
            msgs,
            "/v1/groups/99999999999999999999999/messages".to_owned(),
            "invalid_path",
        ),
        (
            msgs,
            format!("/v1/groups/{group}/messages?limit=0"),
            "validation_failed",
        ),
        (
            msgs,
            format!("/v1/groups/{group}/messages?limit=201"),
            "validation_failed",
        ),
        (
            msgs,
            format!("/v1/groups/{group}/messages?limit=ten"),
            "invalid_query",
        ),
        (
            msgs,
            format!("/v1/groups/{group}/messages?after_msg_id=-1"),
            "validation_failed",
        ),
        (
            msgs,
            format!("/v1/groups/{group}/messages?after_msg_id=1e99"),
            "invalid_query",
        ),
        (
            "/v1/me/groups",
            "/v1/me/groups?unread_only=maybe".to_owned(),
            "invalid_query",
        ),
        (
            "/v1/groups/{group_id}/members",
            format!("/v1/groups/{group}/members?cursor=%20x"),
            "validation_failed",
        ),
    ];
    for (template, path, code) in cases {
        let r = app.call(Method::GET, template, &path, a, None).await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, code),
            "{path}: {:?}",
            r.body
        );
    }
    let negative_group = app.get_group("alice", -5).await;
    assert_eq!(negative_group.status, 404);
}

async fn unknown_routes_and_methods_get_json_404_and_405(app: TestApp) {
    let unknown = app
        .client
        .get(format!("{}/v2/nothing", app.address))
        .send()
        .await
        .unwrap();
    let wrong_method = app
        .client
        .put(format!("{}/v1/acks", app.address))
        .send()
        .await
        .unwrap();

    assert_eq!(unknown.status().as_u16(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    assert_eq!(wrong_method.status().as_u16(), 405);
    assert_eq!(
        wrong_method
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap()),
        Some("POST"),
        "RFC 9110: a 405 says which methods the path takes"
    );
    let body: Value = wrong_method.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    assert_eq!(
        body["error"]["message"],
        "PUT is not allowed on /v1/acks; allowed: POST"
    );

    let on_a_group = app
        .client
        .put(format!("{}/v1/groups/1", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(on_a_group.status().as_u16(), 405);
    assert_eq!(
        on_a_group
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap()),
        Some("GET, PATCH")
    );
}
