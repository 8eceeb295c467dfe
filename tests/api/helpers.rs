//! The black-box harness: a real server on port 0 per test, its own database (a temporary
//! SQLite file, or a fresh PostgreSQL database dropped afterwards), a real HTTP client, and a
//! check of every response body against the schema `openapi.yaml` gives for it.

use std::sync::OnceLock;

use chorus::auth::TokenKeys;
use chorus::config::{Settings, SqliteSync};
use chorus::domain::{DeviceId, UserId};
use chorus::startup::{Application, Stopper};
use reqwest::Method;
use serde_json::{json, Value};

use crate::scratch_pg::ScratchPg;

pub const TEST_SECRET: &str = "test-secret-test-secret-test-secret-0123";
pub const PG_URL_VAR: &str = "CHORUS_TEST_DATABASE_URL";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates `mod <scenario> { fn sqlite(); fn postgres(); }` for scenarios written once as
/// `async fn <scenario>(app: TestApp)`. The PostgreSQL run is ignored unless
/// CHORUS_TEST_DATABASE_URL was set when the tests were built (see build.rs).
#[macro_export]
macro_rules! on_both_backends {
    (with $adjust:ident: $($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let backend = $crate::helpers::Backend::Sqlite;
                let app = $crate::helpers::spawn_app_with(backend, super::$adjust).await;
                super::$scenario(app.expect("sqlite app")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                let backend = $crate::helpers::Backend::Postgres;
                match $crate::helpers::spawn_app_with(backend, super::$adjust).await {
                    Some(app) => super::$scenario(app).await,
                    None => eprintln!("skipped: {} is not set", $crate::helpers::PG_URL_VAR),
                }
            }
        }
    )* };
    ($($scenario:ident),* $(,)?) => { $(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let app = $crate::helpers::spawn_app($crate::helpers::Backend::Sqlite).await;
                super::$scenario(app.expect("sqlite app")).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(chorus_pg_tests), ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL")]
            async fn postgres() {
                match $crate::helpers::spawn_app($crate::helpers::Backend::Postgres).await {
                    Some(app) => super::$scenario(app).await,
                    None => eprintln!("skipped: {} is not set", $crate::helpers::PG_URL_VAR),
                }
            }
        }
    )* };
}

/// A database that exists for one test only.
pub enum TestDb {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] ScratchPg),
    /// Owned by another TestApp.
    Borrowed,
}

impl TestDb {
    /// Creates the database; returns it with its URL. None when PostgreSQL is not configured.
    pub fn create(backend: Backend) -> Option<(TestDb, String)> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = dir.path().join("chorus.sqlite3").display().to_string();
                Some((TestDb::Sqlite(dir), url))
            }
            Backend::Postgres => {
                let admin_url = std::env::var(PG_URL_VAR).ok()?;
                let db = ScratchPg::create(&admin_url, "chorus_test").expect("test database");
                let url = db.url();
                Some((TestDb::Postgres(db), url))
            }
        }
    }
}

pub fn random_suffix() -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

pub struct TestApp {
    pub address: String,
    pub backend: Backend,
    pub database_url: String,
    pub stopper: Stopper,
    pub client: reqwest::Client,
    keys: TokenKeys,
    _data_dir: tempfile::TempDir,
    _db: TestDb,
}

/// A response with its status and JSON body (Null when there is none), already checked
/// against the spec.
#[derive(Debug)]
pub struct TestResponse {
    pub status: u16,
    pub body: Value,
}

impl TestResponse {
    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

pub fn test_settings(database_url: &str, data_dir: &std::path::Path) -> Settings {
    let mut settings = Settings::defaults();
    settings.bind = "127.0.0.1:0".into();
    settings.database_url = Some(database_url.to_owned());
    settings.data_dir = data_dir.to_path_buf();
    settings.jwt_secret = Some(TEST_SECRET.into());
    settings.pool_size = 4;
    settings.workers = 2;
    settings.sqlite_sync = SqliteSync::Normal;
    settings
}

pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    spawn_app_with(backend, |_| {}).await
}

pub async fn spawn_app_with(
    backend: Backend,
    adjust: impl FnOnce(&mut Settings),
) -> Option<TestApp> {
    let data_dir = tempfile::tempdir().expect("data dir");
    let (db, database_url) = TestDb::create(backend)?;
    let mut settings = test_settings(&database_url, data_dir.path());
    adjust(&mut settings);
    let app = Application::build(&settings)
        .await
        .expect("build application");
    let address = format!("http://127.0.0.1:{}", app.port());
    let stopper = app.stopper();
    tokio::spawn(app.run_until_stopped());
    Some(TestApp {
        address,
        backend,
        database_url,
        stopper,
        client: reqwest::Client::new(),
        keys: TokenKeys::new(TEST_SECRET.as_bytes(), false).expect("keys"),
        _data_dir: data_dir,
        _db: db,
    })
}

/// A second server on the same database (another instance behind a load balancer).
pub struct SecondInstance {
    pub address: String,
    _data_dir: tempfile::TempDir,
}

impl TestApp {
    pub async fn second_instance(&self) -> SecondInstance {
        let data_dir = tempfile::tempdir().expect("data dir");
        let settings = test_settings(&self.database_url, data_dir.path());
        let app = Application::build(&settings)
            .await
            .expect("build second instance");
        let address = format!("http://127.0.0.1:{}", app.port());
        tokio::spawn(app.run_until_stopped());
        SecondInstance {
            address,
            _data_dir: data_dir,
        }
    }

    /// The same app, reached through another instance's address.
    pub fn via(&self, instance: &SecondInstance) -> TestApp {
        TestApp {
            address: instance.address.clone(),
            backend: self.backend,
            database_url: self.database_url.clone(),
            stopper: self.stopper.clone(),
            client: self.client.clone(),
            keys: TokenKeys::new(TEST_SECRET.as_bytes(), false).expect("keys"),
            _data_dir: tempfile::tempdir().expect("data dir"),
            _db: TestDb::Borrowed,
        }
    }

    /// A token for `caller`: a user id for the user's default device, or `user#device` for
    /// one of their named devices (`#` never appears in either id).
    pub fn token(&self, caller: &str) -> String {
        let (user, device) = match caller.split_once('#') {
            Some((user, device)) => (user, Some(device)),
            None => (caller, None),
        };
        let user = UserId::parse("user", user).expect("valid test user id");
        let device = device.map(|d| DeviceId::parse("device", d).expect("valid test device id"));
        self.keys
            .issue_for_device(&user, device.as_ref(), 3600)
            .expect("token")
    }

    /// Sends a request as `user` (None: no Authorization header) and checks the response
    /// against the spec entry for `template` (the path as written in openapi.yaml).
    pub async fn call(
        &self,
        method: Method,
        template: &str,
        path: &str,
        user: Option<&str>,
        body: Option<Value>,
    ) -> TestResponse {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{}", self.address, path));
        if let Some(user) = user {
            request = request.bearer_auth(self.token(user));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| {
                panic!("{method} {path} -> {status}: body is not JSON ({e}): {text}")
            })
        };
        check_against_spec(method.as_str(), template, status, &body);
        TestResponse { status, body }
    }

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
        let path = format!("/v1/groups/{group_id}/messages");
        let body = json!({"client_msg_id": client_msg_id, "content": content});
        self.call(
            Method::POST,
            "/v1/groups/{group_id}/messages",
            &path,
            Some(user),
            Some(body),
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

    /// Pulls the whole offline backlog of a group page by page, acking each page, and returns
    /// the message ids received in order.
    pub async fn pull_and_ack_all(&self, user: &str, group_id: i64) -> Vec<i64> {
        let mut received = Vec::new();
        loop {
            let page = self.list_messages(user, group_id, "?limit=200").await;
            assert_eq!(page.status, 200, "{:?}", page.body);
            let ids: Vec<i64> = page.body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .map(|m| m["msg_id"].as_i64().expect("msg_id"))
                .collect();
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

pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let yaml: serde_yaml::Value =
            serde_yaml::from_str(chorus::api::meta::OPENAPI_YAML).expect("openapi.yaml parses");
        serde_json::to_value(yaml).expect("openapi.yaml converts to JSON")
    })
}

/// Fails the test when `status` is not documented for the operation, or the body does not
/// match the documented schema.
pub fn check_against_spec(method: &str, template: &str, status: u16, body: &Value) {
    let operation = &spec()["paths"][template][method.to_lowercase()];
    assert!(
        operation.is_object(),
        "{method} {template} is not in openapi.yaml"
    );
    let response = resolve(&operation["responses"][status.to_string()]);
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, which openapi.yaml does not document: {body}"
    );
    let schema = &response["content"]["application/json"]["schema"];
    if schema.is_null() {
        assert!(
            body.is_null(),
            "{method} {template} {status}: spec says no JSON body, got {body}"
        );
        return;
    }
    let mut root = schema.as_object().cloned().unwrap_or_default();
    root.insert("components".into(), spec()["components"].clone());
    let validator = jsonschema::draft202012::new(&Value::Object(root)).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: body does not match openapi.yaml: {errors:?}\nbody: {body}"
    );
}

/// Follows a `$ref` to `#/components/...` once.
fn resolve(value: &Value) -> &Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.trim_start_matches('#');
            spec().pointer(pointer).unwrap_or(&Value::Null)
        }
        None => value,
    }
}
