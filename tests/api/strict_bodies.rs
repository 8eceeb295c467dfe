//! Request bodies are strict, and their errors speak JSON: a field the operation does not
//! take, a field of the wrong JSON type or a body that is not an object is a
//! `400 validation_failed` whose message starts with the field's path and says what is
//! accepted. Nothing is stored by a refused request.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;

on_both_engines!(
    a_typo_in_a_field_is_refused_naming_it_and_the_accepted_fields,
    wrong_json_types_are_named_by_path_in_json_words,
    an_integer_written_with_a_zero_fraction_is_an_integer,
);

/// (method, spec template, path, body, message the error starts with)
type Case = (Method, &'static str, String, Value, String);

async fn refused(app: &TestApp, cases: Vec<Case>) {
    for (method, template, path, body, said) in cases {
        let r = app
            .call(
                method.clone(),
                template,
                &path,
                Some("alice"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, "validation_failed"),
            "{method} {path} {body}: {:?}",
            r.body
        );
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(message, said, "{method} {path} {body}");
    }
}

async fn a_typo_in_a_field_is_refused_naming_it_and_the_accepted_fields(app: TestApp) {
    // A client that misspells `member_ids` must not get a group of one without knowing.
    let typo = app
        .call(
            Method::POST,
            "/v1/groups",
            "/v1/groups",
            Some("alice"),
            Some(json!({"name": "typo", "member_id": ["bob"]})),
        )
        .await;
    assert_eq!((typo.status, typo.error_code()), (400, "validation_failed"));
    assert_eq!(
        typo.body["error"]["message"],
        "member_id: unknown field; the accepted fields are name, member_ids"
    );
    assert_eq!(
        app.my_groups("alice", "").await.body["groups"],
        json!([]),
        "no group was created"
    );

    let group = app.group_with("alice", &["bob"]).await;
    let sent = app.send("alice", group, "c-1", "hello").await;
    assert_eq!(sent.status, 201);
    let g = |rest: &str| format!("/v1/groups/{group}{rest}");
    let before = (
        app.get_group("alice", group).await.body,
        app.my_groups("alice", "").await.body,
    );
    refused(
        &app,
        vec![
            (
                Method::PATCH,
                "/v1/groups/{group_id}",
                g(""),
                json!({"name": "new", "topic": "x"}),
                "topic: unknown field; the accepted fields are name".into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/members",
                g("/members"),
                json!({"user_id": ["dave"]}),
                "user_id: unknown field; the accepted fields are user_ids".into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/messages",
                g("/messages"),
                json!({"client_msg_id": "c-2", "content": "x", "mention": ["bob"]}),
                "mention: unknown field; the accepted fields are client_msg_id, kind, content, \
                 target_msg_id, mentions, mention_all, reply_to_msg_id, ext"
                    .into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/ack",
                g("/ack"),
                json!({"last_ack_msg_id": 1, "read": 1}),
                "read: unknown field; the accepted fields are last_ack_msg_id, last_read_msg_id"
                    .into(),
            ),
            (
                Method::POST,
                "/v1/acks",
                "/v1/acks".into(),
                json!({"acks": [{"group_id": group, "last_ack_msg_id": 1, "msg_id": 1}]}),
                "acks[0].msg_id: unknown field; the accepted fields are group_id, \
                 last_ack_msg_id, last_read_msg_id"
                    .into(),
            ),
        ],
    )
    .await;

    // Nothing of the refused requests was applied: the group and alice's cursors are as
    // they were.
    let after = (
        app.get_group("alice", group).await.body,
        app.my_groups("alice", "").await.body,
    );
    assert_eq!(after, before, "the refused requests changed nothing");
    assert_eq!(after.0["member_count"], 2);
    // The client's own data still goes where it belongs, in `ext`, whatever its fields.
    let with_ext = app
        .call(
            Method::POST,
            "/v1/groups/{group_id}/messages",
            &g("/messages"),
            Some("alice"),
            Some(json!({"client_msg_id": "c-3", "content": "x", "ext": {"anything": [1, {"a": null}]}})),
        )
        .await;
    assert_eq!(with_ext.status, 201, "{:?}", with_ext.body);
    assert_eq!(with_ext.body["ext"], json!({"anything": [1, {"a": null}]}));
}

async fn wrong_json_types_are_named_by_path_in_json_words(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let g = |rest: &str| format!("/v1/groups/{group}{rest}");
    refused(
        &app,
        vec![
            (
                Method::POST,
                "/v1/groups",
                "/v1/groups".into(),
                json!([1, 2]),
                "the body: must be an object, got an array".into(),
            ),
            (
                Method::POST,
                "/v1/groups",
                "/v1/groups".into(),
                json!({"name": "x", "member_ids": "bob"}),
                r#"member_ids: must be an array, got the string "bob""#.into(),
            ),
            (
                Method::POST,
                "/v1/groups",
                "/v1/groups".into(),
                json!({"member_ids": ["bob"]}),
                "name: required".into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/members",
                g("/members"),
                json!({"user_ids": ["dave", 7]}),
                "user_ids[1]: must be a string, got the integer 7".into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/messages",
                g("/messages"),
                json!({"client_msg_id": 5, "content": "x"}),
                "client_msg_id: must be a string, got the integer 5".into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/messages",
                g("/messages"),
                json!({"client_msg_id": "c", "content": "x", "mention_all": "yes"}),
                r#"mention_all: must be true or false, got the string "yes""#.into(),
            ),
            (
                Method::POST,
                "/v1/groups/{group_id}/ack",
                g("/ack"),
                json!({"last_ack_msg_id": "2"}),
                r#"last_ack_msg_id: must be an integer, got the string "2""#.into(),
            ),
            (
                Method::POST,
                "/v1/acks",
                "/v1/acks".into(),
                json!({"acks": [{"group_id": group, "last_ack_msg_id": 0}, {"group_id": "1"}]}),
                r#"acks[1].group_id: must be an integer, got the string "1""#.into(),
            ),
            (
                Method::POST,
                "/v1/acks",
                "/v1/acks".into(),
                json!({"acks": [{"group_id": group}]}),
                "acks[0].last_ack_msg_id: required".into(),
            ),
        ],
    )
    .await;
    assert_eq!(
        app.get_group("alice", group).await.body["last_msg_id"],
        0,
        "nothing was sent"
    );
}

/// JSON Schema counts 1.0 as an integer, and so do clients whose numbers are all doubles.
async fn an_integer_written_with_a_zero_fraction_is_an_integer(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for n in 1..=2 {
        assert_eq!(
            app.send("alice", group, &format!("c-{n}"), "x")
                .await
                .status,
            201
        );
    }
    let ack = |body: Value| {
        let app = &app;
        async move {
            app.call(
                Method::POST,
                "/v1/groups/{group_id}/ack",
                &format!("/v1/groups/{group}/ack"),
                Some("bob"),
                Some(body),
            )
            .await
        }
    };
    let whole = ack(json!({"last_ack_msg_id": 1.0, "last_read_msg_id": null})).await;
    assert_eq!(whole.status, 200, "{:?}", whole.body);
    assert_eq!(whole.body["last_ack_msg_id"], 1);

    let fraction = ack(json!({"last_ack_msg_id": 1.5})).await;
    assert_eq!(
        (fraction.status, fraction.error_code()),
        (400, "validation_failed")
    );
    assert_eq!(
        fraction.body["error"]["message"],
        "last_ack_msg_id: must be an integer, got the number 1.5"
    );

    let many = app
        .call(
            Method::POST,
            "/v1/acks",
            "/v1/acks",
            Some("bob"),
            Some(json!({"acks": [{"group_id": group as f64, "last_ack_msg_id": 2.0}]})),
        )
        .await;
    assert_eq!(many.status, 200, "{:?}", many.body);
    let mine = app.my_groups("bob", "").await;
    assert_eq!(
        mine.body["groups"][0]["last_ack_msg_id"], 2,
        "the cursor moved to 2"
    );
}
