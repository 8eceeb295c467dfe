//! Authorization: every route of `chorus::api::ROUTES` called by every kind of caller, token
//! variants beyond auth.rs, and one user's token never reaching another user's data.
//!
//! The matrix is generated from the route table. A route without a row in [`CASES`] fails the
//! test, so a new route has to say who may call it before it can ship. Request bodies are the
//! first `requestBody` example of openapi.yaml with its ids rewritten to the fixture's.

use std::io::Write;
use std::time::Duration;

use base64::Engine;
use chorus::api::{Audience, RouteSpec, ROUTES};
use chorus::auth::TokenKeys;
use chorus::domain::UserId;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::TestApp;
use crate::on_both_engines;
use crate::spec_check::{check_against_spec, spec};
use crate::support::tokens::SECRET;

on_both_engines!(
    receipt_feed_reports_only_groups_and_messages_the_sender_may_see,
    every_route_answers_every_caller_as_the_table_says,
    token_variants_authenticate_only_well_formed_hs256_tokens,
    one_users_token_never_reaches_another_users_data,
);

const OWNER: &str = "owner";
const MEMBER: &str = "member";
const SENDER: &str = "sender";
const OUTSIDER: &str = "outsider";
/// The `{user_id}` of DELETE …/members/{user_id}: re-added before every such request.
const VICTIM: &str = "victim";
/// Added by the owner through POST …/members (the rewritten spec example).
const NEWCOMER: &str = "newcomer";

/// Who calls. The first four have no valid token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    NoToken,
    GarbageToken,
    ForgedToken,
    ExpiredToken,
    NonMember,
    Member,
    Owner,
    /// A plain member who sent message 1.
    Sender,
}

impl Caller {
    const ALL: [Caller; 8] = [
        Caller::NoToken,
        Caller::GarbageToken,
        Caller::ForgedToken,
        Caller::ExpiredToken,
        Caller::NonMember,
        Caller::Member,
        Caller::Owner,
        Caller::Sender,
    ];

    /// The Authorization header values this caller sends.
    fn authorization(self, app: &TestApp) -> Vec<String> {
        let bearer = |token: String| vec![format!("Bearer {token}")];
        match self {
            Caller::NoToken => vec![],
            Caller::GarbageToken => vec!["Bearer not-a-jwt".to_owned()],
            // Valid in every respect but signed with another secret.
            Caller::ForgedToken => bearer(issue(&[9u8; 32], OWNER, 600)),
            // Signed with the server's secret, expired well beyond the 5 s leeway.
            Caller::ExpiredToken => bearer(issue(SECRET.as_bytes(), OWNER, -600)),
            Caller::NonMember => bearer(app.token(OUTSIDER)),
            Caller::Member => bearer(app.token(MEMBER)),
            Caller::Owner => bearer(app.token(OWNER)),
            Caller::Sender => bearer(app.token(SENDER)),
        }
    }
}

/// One route's row: what a signed-in caller gets. Callers without a valid token get 401 from
/// the AnyUser and GroupMember routes; Public and Development routes do not look at tokens,
/// so every caller gets the row's one status there.
struct Case {
    method: &'static str,
    path: &'static str,
    /// Sent as is; every key must be a query parameter openapi.yaml documents for the route.
    query: &'static str,
    /// Statuses for the non-member, a plain member, the owner, and the sender of message 1.
    expect: [u16; 4],
}

const fn case(
    method: &'static str,
    path: &'static str,
    query: &'static str,
    expect: [u16; 4],
) -> Case {
    Case {
        method,
        path,
        query,
        expect,
    }
}

/// The authorization table. `{group_id}` is the fixture group (owner "owner"; members
/// "member", "sender", "victim"), `{msg_id}` is message 1 (sent by "sender"), `{user_id}` is
/// "victim"; other path parameters take their openapi.yaml example. POST /v1/acks names the
/// fixture group, so the non-member is refused there too. The test server has a configured
/// secret, so the development-only POST /v1/dev/token must not exist (404) for anyone.
#[rustfmt::skip]
const CASES: &[Case] = &[
    //    method    path                                                query                                          non-member member owner sender
    case("POST",   "/v1/groups",                                       "",                                            [201, 201, 201, 201]),
    case("GET",    "/v1/groups/{group_id}",                            "",                                            [403, 200, 200, 200]),
    case("PATCH",  "/v1/groups/{group_id}",                            "",                                            [403, 403, 200, 403]),
    case("GET",    "/v1/groups/{group_id}/members",                    "?limit=50",                                   [403, 200, 200, 200]),
    case("POST",   "/v1/groups/{group_id}/members",                    "",                                            [403, 403, 200, 403]),
    case("DELETE", "/v1/groups/{group_id}/members/{user_id}",          "",                                            [403, 403, 204, 403]),
    case("POST",   "/v1/groups/{group_id}/messages",                   "",                                            [403, 201, 201, 201]),
    case("GET",    "/v1/groups/{group_id}/messages",                   "?after_msg_id=0&limit=50&with_receipts=true", [403, 200, 200, 200]),
    case("GET",    "/v1/groups/{group_id}/messages/{msg_id}/receipts", "?limit=50",                                   [403, 403, 200, 200]),
    case("POST",   "/v1/groups/{group_id}/ack",                        "",                                            [403, 200, 200, 200]),
    case("POST",   "/v1/acks",                                         "",                                            [403, 200, 200, 200]),
    case("GET",    "/v1/me/groups",                                    "?unread_only=false&limit=50",                 [200, 200, 200, 200]),
    case("GET",    "/v1/me/devices",                                   "",                                            [200, 200, 200, 200]),
    case("DELETE", "/v1/me/devices/{device_id}",                       "",                                            [404, 404, 404, 404]),
    case("PUT",    "/v1/me/devices/{device_id}/push-target",           "",                                            [404, 404, 404, 404]),
    case("DELETE", "/v1/me/devices/{device_id}/push-target",           "",                                            [404, 404, 404, 404]),
    case("GET",    "/v1/sync",                                         "?timeout_s=0&limit=50",                       [200, 200, 200, 200]),
    case("GET",    "/v1/receipts",                                     "?timeout_s=0&limit=50",                       [200, 200, 200, 200]),
    case("POST",   "/v1/dev/token",                                    "",                                            [404, 404, 404, 404]),
    case("GET",    "/",                                                "",                                            [200, 200, 200, 200]),
    case("GET",    "/assets/{name}",                                   "",                                            [200, 200, 200, 200]),
    case("GET",    "/docs",                                            "",                                            [200, 200, 200, 200]),
    case("GET",    "/openapi.yaml",                                    "",                                            [200, 200, 200, 200]),
    case("GET",    "/metrics",                                         "",                                            [200, 200, 200, 200]),
    case("GET",    "/healthz",                                         "",                                            [200, 200, 200, 200]),
    case("GET",    "/readyz",                                          "",                                            [200, 200, 200, 200]),
];

/// The table's row for a route; fails the test when there is none, or when the row
/// contradicts the route's audience.
fn case_for(route: &RouteSpec) -> &'static Case {
    let method = route.method.as_str();
    let rows: Vec<&Case> = CASES
        .iter()
        .filter(|c| c.method == method && c.path == route.path)
        .collect();
    assert!(
        !rows.is_empty(),
        "{method} {} is in chorus::api::ROUTES but has no row in tests/api/authz.rs CASES: add \
         one saying what a non-member, a member, the owner and a message's sender get",
        route.path
    );
    assert_eq!(
        rows.len(),
        1,
        "{method} {} has several rows in CASES",
        route.path
    );
    let row = rows[0];
    let [non_member, member, owner, sender] = row.expect;
    let success = |s: u16| (200..300).contains(&s);
    let uniform = row.expect.iter().all(|s| *s == non_member);
    let (ok, rule) = match route.audience {
        Audience::Public => (
            uniform && non_member == 200,
            "Public: every caller gets 200, token or not",
        ),
        Audience::Development => (
            uniform && non_member == 404,
            "Development: on a server with a configured secret it does not exist (404 for all)",
        ),
        Audience::AnyUser => (
            ([member, owner, sender].into_iter().all(success)
                && (success(non_member) || non_member == 403))
                || (uniform && non_member == 404),
            "AnyUser: every valid user succeeds (a non-member may get 403 only for a group the \
             body names), or all get 404 for a thing of their own the path names and they lack",
        ),
        Audience::GroupMember => (
            non_member == 403
                && success(owner)
                && [member, sender].into_iter().all(|s| success(s) || s == 403),
            "GroupMember: a non-member gets 403, the owner succeeds, members succeed or get 403",
        ),
    };
    assert!(
        ok,
        "the CASES row of {method} {} contradicts its audience: {rule}",
        route.path
    );
    row
}

/// Routes for signed-in users; the others answer without looking at tokens.
fn checks_tokens(route: &RouteSpec) -> bool {
    match route.audience {
        Audience::Public | Audience::Development => false,
        Audience::AnyUser | Audience::GroupMember => true,
    }
}

/// The status `caller` must get from `route`.
fn expected_status(route: &RouteSpec, row: &Case, caller: Caller) -> u16 {
    let [non_member, member, owner, sender] = row.expect;
    match caller {
        _ if !checks_tokens(route) => non_member,
        Caller::NoToken | Caller::GarbageToken | Caller::ForgedToken | Caller::ExpiredToken => 401,
        Caller::NonMember => non_member,
        Caller::Member => member,
        Caller::Owner => owner,
        Caller::Sender => sender,
    }
}

/// The fixture every matrix request runs against.
struct Fixture {
    group: i64,
    msg: i64,
    /// The `{user_id}` of member routes.
    user: &'static str,
}

async fn fixture(app: &TestApp) -> Fixture {
    let group = app.group_with(OWNER, &[MEMBER, SENDER, VICTIM]).await;
    let msg = app.send_ok(SENDER, group, "message 1").await;
    assert_eq!(msg, 1);
    Fixture {
        group,
        msg,
        user: VICTIM,
    }
}

/// The fixture's ids for its path parameters; any other parameter takes the example
/// openapi.yaml gives it.
fn fill_path(template: &str, fx: &Fixture) -> String {
    let mut path = template
        .replace("{group_id}", &fx.group.to_string())
        .replace("{msg_id}", &fx.msg.to_string())
        .replace("{user_id}", fx.user);
    while let Some(start) = path.find('{') {
        let end = start + path[start..].find('}').expect("closing brace");
        let name = path[start + 1..end].to_owned();
        let example = path_parameter_example(template, &name).unwrap_or_else(|| {
            panic!(
                "{template}: path parameter {{{name}}} is not a fixture id and has no example \
                 in openapi.yaml; add one, or teach tests/api/authz.rs fill_path"
            )
        });
        path.replace_range(start..=end, &example);
    }
    path
}

fn path_parameter_example(template: &str, name: &str) -> Option<String> {
    let item = &spec()["paths"][template];
    let lists = ["get", "post", "put", "patch", "delete"]
        .iter()
        .map(|m| &item[*m]["parameters"])
        .chain([&item["parameters"]]);
    lists
        .filter_map(Value::as_array)
        .flatten()
        .map(resolve)
        .filter(|p| p["in"] == "path" && p["name"] == name)
        .flat_map(|p| [&p["example"], &p["schema"]["example"]])
        .find_map(|e| match e {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

/// Follows a `$ref` into the spec once.
fn resolve(value: &Value) -> &Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => spec()
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or(&Value::Null),
        None => value,
    }
}

fn operation(method: &str, template: &str) -> &'static Value {
    let op = &spec()["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not in openapi.yaml");
    op
}

/// The first example of the operation's JSON request body, or None when it takes none.
fn spec_example_body(method: &str, template: &str) -> Option<Value> {
    let request_body = resolve(&operation(method, template)["requestBody"]);
    if request_body.is_null() {
        return None;
    }
    let media = &request_body["content"]["application/json"];
    let example = media["examples"]
        .as_object()
        .and_then(|examples| examples.values().next())
        .map(|e| resolve(e)["value"].clone())
        .or_else(|| media.get("example").cloned())
        .filter(|v| !v.is_null());
    Some(example.unwrap_or_else(|| {
        panic!(
            "{method} {template}: its requestBody has no example in openapi.yaml; add one \
             (the authorization matrix sends it)"
        )
    }))
}

/// Points an example body at the fixture: its group, message 1, fresh user and message ids.
fn rewrite_ids(value: &mut Value, fx: &Fixture, n: usize) {
    match value {
        Value::Object(fields) => {
            for (key, v) in fields.iter_mut() {
                match key.as_str() {
                    "group_id" => *v = json!(fx.group),
                    "msg_id" | "last_ack_msg_id" | "last_read_msg_id" => *v = json!(fx.msg),
                    "member_ids" | "user_ids" => *v = json!([NEWCOMER, MEMBER]),
                    "user_id" => *v = json!(fx.user),
                    "client_msg_id" => *v = json!(format!("authz-{n}")),
                    _ => rewrite_ids(v, fx, n),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rewrite_ids(v, fx, n)),
        _ => {}
    }
}

/// Fails when `query` names a parameter openapi.yaml does not document for the operation.
fn check_query_is_documented(method: &str, template: &str, query: &str) {
    let params = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let documented: Vec<String> = params(&spec()["paths"][template]["parameters"])
        .into_iter()
        .chain(params(&operation(method, template)["parameters"]))
        .map(|p| resolve(&p).clone())
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    for pair in query
        .trim_start_matches('?')
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let name = pair.split('=').next().unwrap_or(pair);
        assert!(
            documented.iter().any(|d| d == name),
            "{method} {template}: query parameter {name} is not in openapi.yaml"
        );
    }
}

struct Reply {
    status: u16,
    body: Value,
    www_authenticate: Option<String>,
}

/// Sends one request with exactly these Authorization header values and checks the answer
/// against openapi.yaml: a JSON body with `check_against_spec` (as `TestApp::call` does), any
/// other body by its documented media type. `TestApp::call` cannot send a raw or a second
/// Authorization header, nor read the YAML of /openapi.yaml, hence this sender.
async fn send(
    app: &TestApp,
    method: &str,
    template: &str,
    path: &str,
    authorization: &[String],
    body: Option<&Value>,
) -> Reply {
    let verb = Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = app
        .client
        .request(verb, format!("{}{path}", app.address))
        .timeout(Duration::from_secs(30));
    for value in authorization {
        request = request.header("Authorization", value);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("<not ASCII>").to_owned())
    };
    let www_authenticate = header("www-authenticate");
    let media = header("content-type")
        .map(|c| c.split(';').next().unwrap_or("").trim().to_owned())
        .unwrap_or_default();
    let text = response.text().await.expect("body");
    let body = if text.is_empty() || media == "application/json" {
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| {
                panic!("{method} {path} -> {status}: body is not JSON ({e}): {text}")
            })
        };
        check_against_spec(method, template, status, &body);
        body
    } else {
        let documented = resolve(&operation(method, template)["responses"][status.to_string()]);
        assert!(
            documented["content"][media.as_str()].is_object(),
            "{method} {template} answered {status} with {media}, which openapi.yaml does not \
             document"
        );
        Value::String(text)
    };
    Reply {
        status,
        body,
        www_authenticate,
    }
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// Written straight to stderr so it shows in CI logs even when the test passes.
fn summary(line: String) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn issue(secret: &[u8], user: &str, ttl_seconds: i64) -> String {
    TokenKeys::new(secret, false)
        .expect("keys")
        .issue(&UserId::parse("sub", user).expect("user id"), ttl_seconds)
        .expect("token")
}

async fn every_route_answers_every_caller_as_the_table_says(app: TestApp) {
    // A row whose route is gone is harmless (routes land and leave while others work on
    // src/), so it is only named in the summary; a route without a row fails below.
    let unserved: Vec<String> = CASES
        .iter()
        .filter(|c| {
            !ROUTES
                .iter()
                .any(|r| r.method.as_str() == c.method && r.path == c.path)
        })
        .map(|c| format!("{} {}", c.method, c.path))
        .collect();
    let rows: Vec<&Case> = ROUTES.iter().map(case_for).collect();
    let fx = fixture(&app).await;

    let mut failures = Vec::new();
    let mut sent = 0;
    for (route, row) in ROUTES.iter().zip(rows) {
        let method = route.method.as_str();
        check_query_is_documented(method, route.path, row.query);
        let path = format!("{}{}", fill_path(route.path, &fx), row.query);
        for caller in Caller::ALL {
            if method == "DELETE" {
                // Whatever the previous caller removed comes back.
                let r = app.add_members(OWNER, fx.group, &[fx.user]).await;
                assert_eq!(r.status, 200, "re-adding {}: {:?}", fx.user, r.body);
            }
            let body = spec_example_body(method, route.path).map(|mut body| {
                rewrite_ids(&mut body, &fx, sent);
                body
            });
            let expected = expected_status(route, row, caller);
            let reply = send(
                &app,
                method,
                route.path,
                &path,
                &caller.authorization(&app),
                body.as_ref(),
            )
            .await;
            sent += 1;
            let what = format!("{method} {path} as {caller:?}");
            if reply.status != expected {
                failures.push(format!(
                    "{what}: expected {expected}, got {} {}",
                    reply.status, reply.body
                ));
                continue;
            }
            let code = error_code(&reply.body);
            match expected {
                401 if code != "unauthorized"
                    || reply.www_authenticate.as_deref() != Some("Bearer") =>
                {
                    failures.push(format!(
                        "{what}: 401 needs code unauthorized and WWW-Authenticate: Bearer, got \
                         {code:?} and {:?}",
                        reply.www_authenticate
                    ))
                }
                403 if code != "forbidden" => {
                    failures.push(format!("{what}: 403 needs code forbidden, got {code:?}"))
                }
                _ => {}
            }
        }
    }
    assert_eq!(sent, ROUTES.len() * Caller::ALL.len());
    assert!(
        failures.is_empty(),
        "{} of {sent} authorization cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let stale = if unserved.is_empty() {
        String::new()
    } else {
        format!(" (rows for routes not served: {})", unserved.join(", "))
    };
    summary(format!(
        "authz matrix [{}]: {} routes x {} callers = {sent} cases passed{stale}",
        app.engine.name(),
        ROUTES.len(),
        Caller::ALL.len()
    ));
}

/// A JWT built by hand: this header and these claims, signed with HMAC `sign_with` over the
/// server's secret (whatever the header claims).
fn hand_token(header: Value, claims: Value, sign_with: Algorithm) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let message = format!(
        "{}.{}",
        b64.encode(header.to_string()),
        b64.encode(claims.to_string())
    );
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("key");
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, sign_with).expect("sign");
    format!("{message}.{signature}")
}

/// The longest user id there is.
const SUB_64: &str = "u123456789012345678901234567890123456789012345678901234567890123";

/// What a token variant must come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Rejected,
    /// Authenticated as this user.
    As(&'static str),
}

struct Variant {
    name: &'static str,
    /// The Authorization header values sent, in order.
    headers: Vec<String>,
    outcome: Outcome,
}

fn variant(name: &'static str, headers: Vec<String>, outcome: Outcome) -> Variant {
    Variant {
        name,
        headers,
        outcome,
    }
}

/// Every token variant; each names "owner" unless it says otherwise.
fn token_variants(app: &TestApp) -> Vec<Variant> {
    assert_eq!(SUB_64.len(), 64);
    let now = chrono::Utc::now().timestamp();
    let claims = |sub: Value, exp: Value| json!({"sub": sub, "iat": now, "exp": exp});
    let good_claims = claims(json!(OWNER), json!(now + 600));
    let hs256 = json!({"alg": "HS256", "typ": "JWT"});
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("key");
    let bearer = |token: String| vec![format!("Bearer {token}")];
    let good = hand_token(hs256.clone(), good_claims.clone(), Algorithm::HS256);
    let signed = |claims: Value| bearer(hand_token(hs256.clone(), claims, Algorithm::HS256));
    let header_says = |alg: &str| {
        let header = json!({"alg": alg, "typ": "JWT"});
        bearer(hand_token(header, good_claims.clone(), Algorithm::HS256))
    };
    let library = |alg: Algorithm| {
        bearer(jsonwebtoken::encode(&Header::new(alg), &good_claims, &key).expect("encode"))
    };
    let exp = |e: Value| signed(claims(json!(OWNER), e));
    let sub = |s: Value| signed(claims(s, json!(now + 600)));
    use Outcome::{As, Rejected};
    let mut variants = vec![
        variant(
            "hand-built HS256 (control)",
            bearer(good.clone()),
            As(OWNER),
        ),
        variant(
            "alg HS512, signed with the same secret",
            library(Algorithm::HS512),
            Rejected,
        ),
        variant(
            "alg HS384, signed with the same secret",
            library(Algorithm::HS384),
            Rejected,
        ),
        variant(
            "alg RS256 in the header, HMAC-SHA256 signature",
            header_says("RS256"),
            Rejected,
        ),
        variant("alg hs256 in lowercase", header_says("hs256"), Rejected),
        variant(
            "no exp",
            signed(json!({"sub": OWNER, "iat": now})),
            Rejected,
        ),
        variant(
            "exp as a string",
            exp(json!((now + 600).to_string())),
            Rejected,
        ),
        variant("exp negative", exp(json!(-1)), Rejected),
        variant(
            "exp huge: i64::MAX (no lifetime cap)",
            exp(json!(i64::MAX)),
            As(OWNER),
        ),
        variant(
            "exp huge: u64::MAX, beyond i64",
            exp(json!(u64::MAX)),
            Rejected,
        ),
        variant("exp huge: 1e300 as a float", exp(json!(1e300)), Rejected),
        variant(
            "no sub",
            signed(json!({"iat": now, "exp": now + 600})),
            Rejected,
        ),
        variant("sub empty", sub(json!("")), Rejected),
        variant("sub with a space", sub(json!("own er")), Rejected),
        variant("sub with a trailing space", sub(json!("owner ")), Rejected),
        variant("sub of 65 characters", sub(json!("u".repeat(65))), Rejected),
        variant(
            "sub of 64 characters (control)",
            sub(json!(SUB_64)),
            As(SUB_64),
        ),
        variant("sub a number", sub(json!(42)), Rejected),
    ];
    variants.extend(header_variants(app, &good));
    variants.extend([
        variant(
            "nbf an hour ahead (RFC 7519 4.1.5)",
            signed(json!({"sub": OWNER, "iat": now, "nbf": now + 3600, "exp": now + 7200})),
            Rejected,
        ),
        variant(
            "no iat",
            signed(json!({"sub": OWNER, "exp": now + 600})),
            As(OWNER),
        ),
    ]);
    variants
}

/// The scheme and the number of Authorization headers around a good token.
fn header_variants(app: &TestApp, good: &str) -> Vec<Variant> {
    use Outcome::{As, Rejected};
    vec![
        // RFC 7235: the auth scheme is case-insensitive.
        variant(
            "scheme in lowercase: bearer",
            vec![format!("bearer {good}")],
            As(OWNER),
        ),
        variant(
            "scheme in uppercase: BEARER",
            vec![format!("BEARER {good}")],
            As(OWNER),
        ),
        variant("token without a scheme", vec![good.to_owned()], Rejected),
        variant(
            "two Authorization headers: garbage, then valid",
            vec!["Bearer not-a-jwt".to_owned(), format!("Bearer {good}")],
            Rejected,
        ),
        variant(
            "two Authorization headers: valid, then garbage",
            vec![format!("Bearer {good}"), "Bearer not-a-jwt".to_owned()],
            Rejected,
        ),
        variant(
            "two Authorization headers: owner's, then outsider's",
            vec![
                format!("Bearer {good}"),
                format!("Bearer {}", app.token(OUTSIDER)),
            ],
            Rejected,
        ),
    ]
}

/// Sends every variant to an AnyUser route, whose body shows whom the server took the caller
/// for, and to a GroupMember route that only "owner" may read. Returns the requests sent.
async fn check_token_variants(app: &TestApp, variants: &[Variant]) -> usize {
    let group = app.group_with(OWNER, &[MEMBER]).await;
    let group_path = format!("/v1/groups/{group}");
    let targets = [
        ("/v1/me/groups", "/v1/me/groups"),
        ("/v1/groups/{group_id}", group_path.as_str()),
    ];
    let mut failures = Vec::new();
    let mut sent = 0;
    for v in variants {
        for (template, path) in targets {
            let reply = send(app, "GET", template, path, &v.headers, None).await;
            sent += 1;
            let verdict = match (v.outcome, reply.status) {
                (Outcome::Rejected, 401) => {
                    let ok = error_code(&reply.body) == "unauthorized"
                        && reply.www_authenticate.as_deref() == Some("Bearer");
                    ok.then_some(())
                        .ok_or("401 without code unauthorized and WWW-Authenticate: Bearer")
                }
                (Outcome::Rejected, _) => Err("expected 401"),
                (Outcome::As(user), status) if template == "/v1/me/groups" => {
                    let groups = reply.body["groups"].as_array().cloned().unwrap_or_default();
                    let lists_fixture = groups.iter().any(|g| g["group_id"] == group);
                    let ok = status == 200 && lists_fixture == (user == OWNER);
                    ok.then_some(())
                        .ok_or("expected 200 listing this user's groups")
                }
                (Outcome::As(user), status) => {
                    let expected = if user == OWNER { 200 } else { 403 };
                    (status == expected)
                        .then_some(())
                        .ok_or("expected 200 for the owner, 403 for anyone else")
                }
            };
            if let Err(why) = verdict {
                failures.push(format!(
                    "{} on {path}: {why} ({:?}), got {} {}",
                    v.name, v.outcome, reply.status, reply.body
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {sent} token cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    sent
}

async fn token_variants_authenticate_only_well_formed_hs256_tokens(app: TestApp) {
    let variants = token_variants(&app);
    let sent = check_token_variants(&app, &variants).await;
    summary(format!(
        "authz tokens [{}]: {} variants x 2 routes = {sent} cases passed",
        app.engine.name(),
        variants.len()
    ));
}

/// Receipt changes as (group_id, msg_id), in answer order.
fn changes(body: &Value) -> Vec<(i64, i64)> {
    body["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["group_id"].as_i64().unwrap(),
                c["msg_id"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn synced_groups(body: &Value) -> Vec<i64> {
    body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["group_id"].as_i64().unwrap())
        .collect()
}

/// A receipts poll that answers at once.
async fn poll_receipts_now(
    app: &TestApp,
    user: &str,
    cursor: &str,
) -> crate::helpers::TestResponse {
    app.poll_receipts(user, &format!("?cursor={cursor}&timeout_s=0"))
        .await
}

async fn one_users_token_never_reaches_another_users_data(app: TestApp) {
    let (alice, bob, carol) = ("alice", "bob", "carol");
    let bobs = app.group_with(bob, &[carol]).await;
    app.send_ok(bob, bobs, "bob's first").await;
    let alices = app.group_with(alice, &[bob, carol]).await;

    // Alice's valid token on every GroupMember route of Bob's group, and on /v1/acks naming it.
    let fx = Fixture {
        group: bobs,
        msg: 1,
        user: carol,
    };
    let mut sent = 0;
    for route in ROUTES
        .iter()
        .filter(|r| r.audience == Audience::GroupMember || r.path == "/v1/acks")
    {
        let method = route.method.as_str();
        let body = spec_example_body(method, route.path).map(|mut body| {
            rewrite_ids(&mut body, &fx, sent);
            body
        });
        let path = fill_path(route.path, &fx);
        let bearer = [format!("Bearer {}", app.token(alice))];
        let reply = send(&app, method, route.path, &path, &bearer, body.as_ref()).await;
        sent += 1;
        assert_eq!(
            (reply.status, error_code(&reply.body)),
            (403, "forbidden"),
            "alice's token on {method} {path} (bob's group): {}",
            reply.body
        );
    }
    let untouched = app.get_group(bob, bobs).await;
    assert_eq!(untouched.body["last_msg_id"], 1, "nothing was sent");
    assert_eq!(untouched.body["member_count"], 2, "nobody came or went");
    let carol_cursors = app.list_messages(carol, bobs, "?limit=1").await;
    assert_eq!(
        carol_cursors.body["last_ack_msg_id"], 0,
        "nobody acked for carol"
    );

    // Receipts: Alice's feed carries changes of Alice's messages only, even in her own group.
    let alice_receipts = app.cursor(alice, "/v1/receipts").await;
    let bob_receipts = app.cursor(bob, "/v1/receipts").await;
    let alice_sync = app.cursor(alice, "/v1/sync").await;
    app.send_ok(bob, alices, "bob in alice's group").await;
    app.send_ok(bob, bobs, "bob's second").await;
    for (group, upto) in [(alices, 1), (bobs, 2)] {
        let r = app
            .ack(carol, group, json!({"last_ack_msg_id": upto}))
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    let bobs_view = poll_receipts_now(&app, bob, &bob_receipts).await;
    assert_eq!(
        changes(&bobs_view.body),
        vec![(bobs, 1), (bobs, 2), (alices, 1)],
        "control: carol's acks changed the receipts of bob's messages"
    );
    let alices_view = poll_receipts_now(&app, alice, &alice_receipts).await;
    assert_eq!(alices_view.status, 200);
    assert_eq!(
        changes(&alices_view.body),
        vec![],
        "alice sent nothing: bob's receipts must not reach her, not even in her own group"
    );
    let alices_sync = app
        .poll_sync(alice, &format!("?cursor={alice_sync}&timeout_s=0"))
        .await;
    assert_eq!(
        synced_groups(&alices_sync.body),
        vec![alices],
        "alice's sync reports her group, never bob's"
    );

    // Alice sends; carol reads it: now exactly that message shows, with its counts.
    let next = alices_view.body["cursor"].as_str().unwrap().to_owned();
    let mine = app.send_ok(alice, alices, "alice's own").await;
    app.ack(carol, alices, json!({"last_ack_msg_id": mine}))
        .await;
    let alices_view = poll_receipts_now(&app, alice, &next).await;
    assert_eq!(changes(&alices_view.body), vec![(alices, mine)]);
    assert_eq!(alices_view.body["changes"][0]["read_count"], 1);
    summary(format!(
        "authz cross-user [{}]: {sent} routes refused alice's token on bob's group; receipt \
         and sync feeds stayed per user",
        app.engine.name()
    ));
}

/// GET …/messages/{msg_id}/receipts refuses a sender who left (403) or whose message predates
/// their rejoining (404); the /v1/receipts feed must not hand them the same counts.
async fn receipt_feed_reports_only_groups_and_messages_the_sender_may_see(app: TestApp) {
    let (olga, alice, carol, dave) = ("olga", "alice", "carol", "dave");
    let group = app.group_with(olga, &[alice, carol, dave]).await;
    let msg = app.send_ok(alice, group, "before I go").await;
    assert_eq!(app.remove_member(olga, group, alice).await.status, 204);
    let refused = app.message_receipts(alice, group, msg, "").await;
    assert_eq!(refused.status, 403, "the per-message route refuses her");
    let cursor = app.cursor(alice, "/v1/receipts").await;

    app.ack(carol, group, json!({"last_ack_msg_id": msg})).await;
    let removed = poll_receipts_now(&app, alice, &cursor).await;
    assert_eq!(
        changes(&removed.body),
        vec![],
        "alice was removed from group {group}; carol's read of her message reached her anyway"
    );

    assert_eq!(app.add_members(olga, group, &[alice]).await.status, 200);
    let hidden = app.message_receipts(alice, group, msg, "").await;
    assert_eq!(
        hidden.status, 404,
        "rejoined, her old message is outside her window"
    );
    let cursor = removed.body["cursor"].as_str().unwrap().to_owned();
    app.ack(dave, group, json!({"last_ack_msg_id": msg})).await;
    let rejoined = poll_receipts_now(&app, alice, &cursor).await;
    assert_eq!(
        changes(&rejoined.body),
        vec![],
        "message {msg} predates alice's rejoining; dave's read of it reached her anyway"
    );
}
