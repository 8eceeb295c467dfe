//! One `TestApp` method per endpoint: the path, its openapi.yaml template and the body, so a
//! test reads as the calls it makes.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{random_suffix, TestApp, TestResponse};

/// The messages' ids of a page of messages, in its order.
pub fn msg_ids(page: &Value) -> Vec<i64> {
    page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["msg_id"].as_i64().expect("msg_id"))
        .collect()
}

/// The groups' ids of a page that lists groups (the chat list, a sync answer), in its order.
pub fn group_ids(page: &Value) -> Vec<i64> {
    page["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["group_id"].as_i64().expect("group_id"))
        .collect()
}

impl TestApp {
    pub async fn create_group(&self, user: &str, name: &str, members: &[&str]) -> TestResponse {
        let body = json!({"name": name, "member_ids": members});
        self.call(
            Method::POST,
            "/v1/groups",
            "/v1/groups",
            Some(user),
            Some(body),
        )
        .await
    }

    /// Creates a group and returns its id, failing the test on anything but 201.
    pub async fn group_with(&self, owner: &str, members: &[&str]) -> i64 {
        let r = self.create_group(owner, "test group", members).await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        r.body["group_id"].as_i64().expect("group_id")
    }

    pub async fn get_group(&self, user: &str, group_id: i64) -> TestResponse {
        let path = format!("/v1/groups/{group_id}");
        self.call(
            Method::GET,
            "/v1/groups/{group_id}",
            &path,
            Some(user),
            None,
        )
        .await
    }

    pub async fn list_members(&self, user: &str, group_id: i64, query: &str) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/members{query}");
        self.call(
            Method::GET,
            "/v1/groups/{group_id}/members",
            &path,
            Some(user),
            None,
        )
        .await
    }

    pub async fn add_members(&self, user: &str, group_id: i64, ids: &[&str]) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/members");
        let body = json!({ "user_ids": ids });
        self.call(
            Method::POST,
            "/v1/groups/{group_id}/members",
            &path,
            Some(user),
            Some(body),
        )
        .await
    }

    pub async fn remove_member(&self, user: &str, group_id: i64, target: &str) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/members/{target}");
        self.call(
            Method::DELETE,
            "/v1/groups/{group_id}/members/{user_id}",
            &path,
            Some(user),
            None,
        )
        .await
    }

    pub async fn send(
        &self,
        user: &str,
        group_id: i64,
        client_msg_id: &str,
        content: &str,
    ) -> TestResponse {
        let body = json!({"client_msg_id": client_msg_id, "content": content});
        self.send_entry(user, group_id, body).await
    }

    /// Appends any entry: `body` is the whole request (a `client_msg_id` is added when absent).
    pub async fn send_entry(&self, user: &str, group_id: i64, mut body: Value) -> TestResponse {
        if body.get("client_msg_id").is_none() {
            body["client_msg_id"] = json!(format!("c-{}", random_suffix()));
        }
        let path = format!("/v1/groups/{group_id}/messages");
        self.call(
            Method::POST,
            "/v1/groups/{group_id}/messages",
            &path,
            Some(user),
            Some(body),
        )
        .await
    }

    /// A recall, edit or delete of `target`; `content` only for an edit.
    pub async fn change(
        &self,
        user: &str,
        group_id: i64,
        kind: &str,
        target: i64,
        content: Option<&str>,
    ) -> TestResponse {
        let mut body = json!({"kind": kind, "target_msg_id": target});
        if let Some(content) = content {
            body["content"] = json!(content);
        }
        self.send_entry(user, group_id, body).await
    }

    pub async fn rename_group(&self, user: &str, group_id: i64, name: &str) -> TestResponse {
        let path = format!("/v1/groups/{group_id}");
        self.call(
            Method::PATCH,
            "/v1/groups/{group_id}",
            &path,
            Some(user),
            Some(json!({ "name": name })),
        )
        .await
    }

    /// Sends and returns the new msg_id, failing the test on anything but 201.
    pub async fn send_ok(&self, user: &str, group_id: i64, content: &str) -> i64 {
        let client_msg_id = format!("c-{}", random_suffix());
        let r = self.send(user, group_id, &client_msg_id, content).await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        r.body["msg_id"].as_i64().expect("msg_id")
    }

    pub async fn list_messages(&self, user: &str, group_id: i64, query: &str) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/messages{query}");
        self.call(
            Method::GET,
            "/v1/groups/{group_id}/messages",
            &path,
            Some(user),
            None,
        )
        .await
    }

    pub async fn ack(&self, user: &str, group_id: i64, body: Value) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/ack");
        self.call(
            Method::POST,
            "/v1/groups/{group_id}/ack",
            &path,
            Some(user),
            Some(body),
        )
        .await
    }

    pub async fn ack_many(&self, user: &str, body: Value) -> TestResponse {
        self.call(Method::POST, "/v1/acks", "/v1/acks", Some(user), Some(body))
            .await
    }

    pub async fn my_groups(&self, user: &str, query: &str) -> TestResponse {
        let path = format!("/v1/me/groups{query}");
        self.call(Method::GET, "/v1/me/groups", &path, Some(user), None)
            .await
    }

    pub async fn message_receipts(
        &self,
        user: &str,
        group_id: i64,
        msg_id: i64,
        query: &str,
    ) -> TestResponse {
        let path = format!("/v1/groups/{group_id}/messages/{msg_id}/receipts{query}");
        let template = "/v1/groups/{group_id}/messages/{msg_id}/receipts";
        self.call(Method::GET, template, &path, Some(user), None)
            .await
    }

    pub async fn poll_receipts(&self, user: &str, query: &str) -> TestResponse {
        let path = format!("/v1/receipts{query}");
        self.call(Method::GET, "/v1/receipts", &path, Some(user), None)
            .await
    }

    pub async fn my_devices(&self, user: &str) -> TestResponse {
        self.call(
            Method::GET,
            "/v1/me/devices",
            "/v1/me/devices",
            Some(user),
            None,
        )
        .await
    }

    pub async fn remove_device(&self, user: &str, device_id: &str) -> TestResponse {
        let path = format!("/v1/me/devices/{device_id}");
        let template = "/v1/me/devices/{device_id}";
        self.call(Method::DELETE, template, &path, Some(user), None)
            .await
    }

    pub async fn put_push_target(&self, user: &str, device_id: &str, body: Value) -> TestResponse {
        let path = format!("/v1/me/devices/{device_id}/push-target");
        let template = "/v1/me/devices/{device_id}/push-target";
        self.call(Method::PUT, template, &path, Some(user), Some(body))
            .await
    }

    pub async fn delete_push_target(&self, user: &str, device_id: &str) -> TestResponse {
        let path = format!("/v1/me/devices/{device_id}/push-target");
        let template = "/v1/me/devices/{device_id}/push-target";
        self.call(Method::DELETE, template, &path, Some(user), None)
            .await
    }

    /// Pulls the whole offline backlog of a group page by page, acking each page, and returns
    /// the message ids received in order.
    pub async fn pull_and_ack_all(&self, user: &str, group_id: i64) -> Vec<i64> {
        let mut received = Vec::new();
        loop {
            let page = self.list_messages(user, group_id, "?limit=200").await;
            assert_eq!(page.status, 200, "{:?}", page.body);
            let ids = msg_ids(&page.body);
            let Some(&last) = ids.last() else {
                return received;
            };
            received.extend(ids);
            let ack = self
                .ack(user, group_id, json!({"last_ack_msg_id": last}))
                .await;
            assert_eq!(ack.status, 200, "{:?}", ack.body);
        }
    }

    pub async fn poll_sync(&self, user: &str, query: &str) -> TestResponse {
        let path = format!("/v1/sync{query}");
        self.call(Method::GET, "/v1/sync", &path, Some(user), None)
            .await
    }

    /// A fresh cursor for the feed at `path` ("/v1/sync" or "/v1/receipts").
    pub async fn cursor(&self, user: &str, path: &str) -> String {
        let r = self.call(Method::GET, path, path, Some(user), None).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["cursor"].as_str().expect("cursor").to_owned()
    }
}
