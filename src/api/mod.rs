//! The HTTP API: shared state, the route table, and access checks common to handlers.
//!
//! Every route is listed once in [`ROUTES`]; the server is built from it and the OpenAPI drift
//! test compares it with `openapi.yaml`, so a route cannot exist undocumented.

pub mod acks;
pub mod dev;
pub mod docs;
pub mod error;
pub mod extract;
pub mod groups;
pub mod longpoll;
pub mod me;
pub mod messages;
pub mod meta;
pub mod receipts;
pub mod sync;
pub mod views;
pub mod webclient;

use actix_web::http::Method;
use actix_web::web;

use std::sync::Arc;

use crate::auth::TokenKeys;
use crate::db::access::{member_of, Membership};
use crate::db::{AnyConnection, Db};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use error::ApiError;
use extract::AuthUser;
use longpoll::CursorSigner;
use Audience::{AnyUser, Development, GroupMember, Public};

pub struct AppState {
    pub db: Db,
    pub keys: TokenKeys,
    pub metrics: Metrics,
    pub cursors: CursorSigner,
    pub notifier: Arc<Notifier>,
    pub longpoll: LongPollSettings,
}

#[derive(Debug, Clone, Copy)]
pub struct LongPollSettings {
    /// Change-feed cursors older than this get 410; feed rows older than this are deleted.
    pub retention_secs: i64,
}

/// Who may call a route; the authorization matrix test reads this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Public,
    /// No token; exists only in development mode (no configured secret), else 404.
    Development,
    AnyUser,
    GroupMember,
}

pub struct RouteSpec {
    pub method: Method,
    /// The path in OpenAPI syntax, which is also actix's.
    pub path: &'static str,
    pub audience: Audience,
    pub handler: fn() -> actix_web::Route,
}

#[rustfmt::skip]
pub static ROUTES: &[RouteSpec] = &[
    route(Method::POST,   "/v1/groups",                                       AnyUser,     || web::post().to(groups::create_group)),
    route(Method::GET,    "/v1/groups/{group_id}",                            GroupMember, || web::get().to(groups::get_group)),
    route(Method::GET,    "/v1/groups/{group_id}/members",                    GroupMember, || web::get().to(groups::list_members)),
    route(Method::POST,   "/v1/groups/{group_id}/members",                    GroupMember, || web::post().to(groups::add_members)),
    route(Method::DELETE, "/v1/groups/{group_id}/members/{user_id}",          GroupMember, || web::delete().to(groups::remove_member)),
    route(Method::POST,   "/v1/groups/{group_id}/messages",                   GroupMember, || web::post().to(messages::send_message)),
    route(Method::GET,    "/v1/groups/{group_id}/messages",                   GroupMember, || web::get().to(messages::list_messages)),
    route(Method::GET,    "/v1/groups/{group_id}/messages/{msg_id}/receipts", GroupMember, || web::get().to(receipts::get_message_receipts)),
    route(Method::POST,   "/v1/groups/{group_id}/ack",                        GroupMember, || web::post().to(acks::ack_group)),
    route(Method::POST,   "/v1/acks",                                         AnyUser,     || web::post().to(acks::ack_many)),
    route(Method::GET,    "/v1/me/groups",                                    AnyUser,     || web::get().to(me::list_my_groups)),
    route(Method::GET,    "/v1/me/devices",                                   AnyUser,     || web::get().to(me::list_my_devices)),
    route(Method::DELETE, "/v1/me/devices/{device_id}",                       AnyUser,     || web::delete().to(me::remove_my_device)),
    route(Method::GET,    "/v1/sync",                                         AnyUser,     || web::get().to(sync::poll_sync)),
    route(Method::GET,    "/v1/receipts",                                     AnyUser,     || web::get().to(receipts::poll_receipts)),
    route(Method::POST,   "/v1/dev/token",                                    Development, || web::post().to(dev::issue_dev_token)),
    route(Method::GET,    "/",                                                Public,      || web::get().to(webclient::index)),
    route(Method::GET,    "/assets/{name}",                                   Public,      || web::get().to(webclient::asset)),
    route(Method::GET,    "/docs",                                            Public,      || web::get().to(docs::docs)),
    route(Method::GET,    "/openapi.yaml",                                    Public,      || web::get().to(meta::openapi_spec)),
    route(Method::GET,    "/metrics",                                         Public,      || web::get().to(meta::metrics)),
    route(Method::GET,    "/healthz",                                         Public,      || web::get().to(meta::healthz)),
    route(Method::GET,    "/readyz",                                          Public,      || web::get().to(meta::readyz)),
];

const fn route(
    method: Method,
    path: &'static str,
    audience: Audience,
    handler: fn() -> actix_web::Route,
) -> RouteSpec {
    RouteSpec {
        method,
        path,
        audience,
        handler,
    }
}

/// Registers every route, one resource per path, with a JSON 405 for other methods.
pub fn configure(cfg: &mut web::ServiceConfig) {
    let mut paths: Vec<&'static str> = Vec::new();
    for route in ROUTES {
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    for path in paths {
        let mut resource = web::resource(path);
        for route in ROUTES.iter().filter(|r| r.path == path) {
            resource = resource.route((route.handler)());
        }
        cfg.service(resource.default_service(web::to(extract::method_not_allowed)));
    }
}

/// Checks membership and, for a member, runs `then` with the group and membership rows, all
/// in one database call: a read endpoint costs one pooled connection and one trip to the
/// blocking pool, not one for the check and another for the data. A non-member gets 403, a
/// group that does not exist 404.
pub async fn read_as_member<T, F>(
    state: &AppState,
    group_id: i64,
    user: &AuthUser,
    then: F,
) -> Result<(Membership, T), ApiError>
where
    F: FnOnce(&mut AnyConnection, &Membership) -> diesel::QueryResult<T> + Send + 'static,
    T: Send + 'static,
{
    let user_id = user.id().to_owned();
    let found = state
        .db
        .read(move |conn| match member_of(conn, group_id, &user_id)? {
            Ok(membership) => {
                let value = then(conn, &membership)?;
                Ok(Ok((membership, value)))
            }
            Err(refusal) => Ok(Err(refusal)),
        })
        .await??;
    Ok(found)
}
