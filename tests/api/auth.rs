//! Tokens and membership: who gets in, and the status everyone else gets.

use reqwest::Method;

use crate::helpers::TestApp;
use crate::on_both_engines;
use crate::spec_check::check_against_spec;

on_both_engines!(
    missing_malformed_forged_and_expired_tokens_get_401,
    non_members_get_403_and_unknown_groups_404,
);

async fn status_with_auth(app: &TestApp, header: Option<String>) -> (u16, serde_json::Value) {
    let mut request = app.client.get(format!("{}/v1/me/groups", app.address));
    if let Some(h) = header {
        request = request.header("Authorization", h);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    assert_eq!(
        response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap()),
        (status == 401).then_some("Bearer")
    );
    let body: serde_json::Value = response.json().await.unwrap();
    check_against_spec("GET", "/v1/me/groups", status, &body);
    (status, body)
}

async fn missing_malformed_forged_and_expired_tokens_get_401(app: TestApp) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let valid = app.token("alice");
    let forged = chorus::auth::TokenKeys::new(&[9u8; 32], false)
        .unwrap()
        .issue(&chorus::domain::UserId::parse("sub", "alice").unwrap(), 600)
        .unwrap();
    let expired = chorus::auth::TokenKeys::new(crate::support::tokens::SECRET.as_bytes(), false)
        .unwrap()
        .issue(
            &chorus::domain::UserId::parse("sub", "alice").unwrap(),
            -600,
        )
        .unwrap();
    let exp = chrono::Utc::now().timestamp() + 600;
    let alg_none = format!(
        "{}.{}.",
        b64.encode(r#"{"alg":"none","typ":"JWT"}"#),
        b64.encode(format!(r#"{{"sub":"alice","exp":{exp}}}"#))
    );
    let mut tampered = valid.clone();
    tampered.insert(valid.find('.').unwrap() + 3, 'x');

    let cases = [
        ("no header", None),
        ("empty bearer", Some("Bearer ".to_owned())),
        ("basic scheme", Some("Basic YWxpY2U6cHc=".to_owned())),
        ("garbage", Some("Bearer not-a-jwt".to_owned())),
        ("forged signature", Some(format!("Bearer {forged}"))),
        ("expired", Some(format!("Bearer {expired}"))),
        ("alg none", Some(format!("Bearer {alg_none}"))),
        ("tampered payload", Some(format!("Bearer {tampered}"))),
    ];
    for (name, header) in cases {
        let (status, body) = status_with_auth(&app, header).await;
        assert_eq!(status, 401, "{name}");
        assert_eq!(body["error"]["code"], "unauthorized", "{name}");
    }
    let (ok, _) = status_with_auth(&app, Some(format!("Bearer {valid}"))).await;
    assert_eq!(ok, 200);
}

async fn non_members_get_403_and_unknown_groups_404(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "secret").await;
    let m = Some("mallory");
    let path = |suffix: &str| format!("/v1/groups/{group}{suffix}");

    let responses = [
        app.get_group("mallory", group).await,
        app.list_members("mallory", group, "").await,
        app.list_messages("mallory", group, "").await,
        app.send("mallory", group, "m-1", "let me in").await,
        app.add_members("mallory", group, &["mallory"]).await,
        app.call(
            Method::DELETE,
            "/v1/groups/{group_id}/members/{user_id}",
            &path("/members/bob"),
            m,
            None,
        )
        .await,
    ];
    for r in &responses {
        assert_eq!(r.status, 403, "{:?}", r.body);
        assert_eq!(r.error_code(), "forbidden");
    }
    assert_eq!(app.get_group("mallory", 987_654).await.status, 404);
    assert_eq!(app.send("mallory", 987_654, "m-2", "x").await.status, 404);
    let unchanged = app.get_group("alice", group).await;
    assert_eq!(
        unchanged.body["last_msg_id"], 1,
        "the rejected send stored nothing"
    );
    assert_eq!(unchanged.body["member_count"], 2);
}
