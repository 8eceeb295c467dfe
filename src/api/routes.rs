//! The route table: every route once, with who it serves. The server is built from it, and
//! the OpenAPI drift test and the authorization matrix read it, so a route cannot exist
//! undocumented or untested.

use actix_web::http::Method;
use actix_web::web;

use super::{
    acks, dev, docs, extract, groups, me, messages, meta, push_targets, receipts, sync, webclient,
};
use Audience::{AnyUser, Development, GroupMember, Public};

/// Who a route serves. The authorization matrix (tests/api/authz.rs) checks every route
/// against this for every kind of caller; it is not enforced from here. `AnyUser` and
/// `GroupMember` handlers take an [`AuthUser`](super::extract::AuthUser), so they need a valid
/// token, and `GroupMember` handlers check membership inside their one database call
/// ([`read_as_member`](super::access::read_as_member) or `db::group::access::member_of`).
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
    route(Method::PATCH,  "/v1/groups/{group_id}",                            GroupMember, || web::patch().to(groups::rename_group)),
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
    route(Method::PUT,    "/v1/me/devices/{device_id}/push-target",           AnyUser,     || web::put().to(push_targets::put_push_target)),
    route(Method::DELETE, "/v1/me/devices/{device_id}/push-target",           AnyUser,     || web::delete().to(push_targets::delete_push_target)),
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
        let mut allowed: Vec<&str> = Vec::new();
        for route in ROUTES.iter().filter(|r| r.path == path) {
            resource = resource.route((route.handler)());
            allowed.push(route.method.as_str());
        }
        // RFC 9110: a 405 lists the methods the resource does support.
        let allow = allowed.join(", ");
        cfg.service(
            resource.default_service(web::to(move |req: actix_web::HttpRequest| {
                let allow = allow.clone();
                async move { extract::method_not_allowed(req, &allow) }
            })),
        );
    }
}
