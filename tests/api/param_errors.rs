//! Path and query parameters of the wrong type: a 400 whose message names the parameter and
//! what it accepts in plain words, whichever route it is on.

use reqwest::Method;

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    a_path_parameter_that_is_not_a_whole_number_is_named_with_its_range,
    a_query_parameter_of_the_wrong_type_is_named_with_its_range,
    a_query_parameter_given_twice_is_named,
);

const ANY_ID: &str = "must be a whole number, 1 or more";
const ZERO_OR_MORE: &str = "must be a whole number, 0 or more";
/// As the spec says: values above 60 are taken as 60.
const TIMEOUT: &str = "timeout_s: must be a whole number of seconds, 0 or more (above 60 waits 60)";

/// (template as in openapi.yaml, path sent, expected error code, expected message)
type Case = (&'static str, String, &'static str, String);

async fn assert_cases(app: &TestApp, cases: Vec<Case>) {
    for (template, path, code, message) in cases {
        let r = app
            .call(Method::GET, template, &path, Some("alice"), None)
            .await;
        assert_eq!(r.status, 400, "{path}: {:?}", r.body);
        assert_eq!(r.error_code(), code, "{path}: {:?}", r.body);
        assert_eq!(r.body["error"]["message"], message, "{path}");
    }
}

async fn a_path_parameter_that_is_not_a_whole_number_is_named_with_its_range(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let receipts = "/v1/groups/{group_id}/messages/{msg_id}/receipts";
    let group_id = format!("group_id: {ANY_ID}");
    let msg_id = format!("msg_id: {ANY_ID}");

    let cases: Vec<Case> = vec![
        (
            "/v1/groups/{group_id}",
            "/v1/groups/abc".into(),
            "invalid_path",
            group_id.clone(),
        ),
        (
            "/v1/groups/{group_id}/messages",
            "/v1/groups/99999999999999999999/messages".into(),
            "invalid_path",
            group_id.clone(),
        ),
        (
            "/v1/groups/{group_id}/members",
            "/v1/groups/1.5/members".into(),
            "invalid_path",
            group_id.clone(),
        ),
        (
            receipts,
            format!("/v1/groups/{group}/messages/two/receipts"),
            "invalid_path",
            msg_id,
        ),
        (
            receipts,
            "/v1/groups/x/messages/1/receipts".into(),
            "invalid_path",
            group_id,
        ),
    ];
    assert_cases(&app, cases).await;
}

async fn a_query_parameter_of_the_wrong_type_is_named_with_its_range(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let messages = "/v1/groups/{group_id}/messages";
    let limit = "limit: must be a whole number from 1 to 200".to_owned();
    let on_messages = |query: &str| format!("/v1/groups/{group}/messages?{query}");

    let cases: Vec<Case> = vec![
        (
            messages,
            on_messages("limit=99999999999999999999"),
            "invalid_query",
            limit.clone(),
        ),
        (
            messages,
            on_messages("limit=ten"),
            "invalid_query",
            limit.clone(),
        ),
        (
            messages,
            on_messages("after_msg_id=1e99"),
            "invalid_query",
            format!("after_msg_id: {ZERO_OR_MORE}"),
        ),
        (
            messages,
            on_messages("limit=5&before_msg_id=last"),
            "invalid_query",
            format!("before_msg_id: {ZERO_OR_MORE}"),
        ),
        (
            messages,
            on_messages("with_receipts=yes"),
            "invalid_query",
            "with_receipts: must be true or false".into(),
        ),
        (
            "/v1/me/groups",
            "/v1/me/groups?unread_only=1".into(),
            "invalid_query",
            "unread_only: must be true or false".into(),
        ),
        (
            "/v1/me/groups",
            "/v1/me/groups?limit=".into(),
            "invalid_query",
            limit.clone(),
        ),
        (
            "/v1/groups/{group_id}/members",
            format!("/v1/groups/{group}/members?limit=-"),
            "invalid_query",
            limit.clone(),
        ),
        (
            "/v1/sync",
            "/v1/sync?timeout_s=soon".into(),
            "invalid_query",
            TIMEOUT.into(),
        ),
        // Seconds are whole, and the rule says the same as for a negative number.
        (
            "/v1/receipts",
            "/v1/receipts?timeout_s=1.5".into(),
            "invalid_query",
            TIMEOUT.into(),
        ),
        (
            "/v1/sync",
            "/v1/sync?timeout_s=-1".into(),
            "validation_failed",
            TIMEOUT.into(),
        ),
        (
            "/v1/receipts",
            "/v1/receipts?limit=1%2C2".into(),
            "invalid_query",
            limit,
        ),
    ];
    assert_cases(&app, cases).await;
}

async fn a_query_parameter_given_twice_is_named(app: TestApp) {
    let cases: Vec<Case> = vec![(
        "/v1/me/groups",
        "/v1/me/groups?limit=5&order=id&limit=6".into(),
        "invalid_query",
        "limit: must be given at most once".into(),
    )];
    assert_cases(&app, cases).await;
}
