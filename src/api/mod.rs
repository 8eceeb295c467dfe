//! The HTTP API: shared state, the route table, and access checks common to handlers.
//!
//! Every route is listed once in [`ROUTES`]; the server is built from it and the OpenAPI drift
//! test compares it with `openapi.yaml`, so a route cannot exist undocumented.

pub mod acks;
pub mod error;
pub mod extract;
pub mod groups;
pub mod me;
pub mod messages;
pub mod meta;
pub mod views;

use actix_web::http::Method;
use actix_web::web;

use crate::auth::TokenKeys;
use crate::db::members::{self, Access};
use crate::db::models::{GroupRow, MemberRow};
use crate::db::Db;
use error::ApiError;
use extract::AuthUser;

pub struct AppState {
    pub db: Db,
    pub keys: TokenKeys,
}

/// Who may call a route; the authorization matrix test reads this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Public,
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

pub static ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: Method::POST,
        path: "/v1/groups",
        audience: Audience::AnyUser,
        handler: || web::post().to(groups::create_group),
    },
    RouteSpec {
        method: Method::GET,
        path: "/v1/groups/{group_id}",
        audience: Audience::GroupMember,
        handler: || web::get().to(groups::get_group),
    },
    RouteSpec {
        method: Method::GET,
        path: "/v1/groups/{group_id}/members",
        audience: Audience::GroupMember,
        handler: || web::get().to(groups::list_members),
    },
    RouteSpec {
        method: Method::POST,
        path: "/v1/groups/{group_id}/members",
        audience: Audience::GroupMember,
        handler: || web::post().to(groups::add_members),
    },
    RouteSpec {
        method: Method::DELETE,
        path: "/v1/groups/{group_id}/members/{user_id}",
        audience: Audience::GroupMember,
        handler: || web::delete().to(groups::remove_member),
    },
    RouteSpec {
        method: Method::POST,
        path: "/v1/groups/{group_id}/messages",
        audience: Audience::GroupMember,
        handler: || web::post().to(messages::send_message),
    },
    RouteSpec {
        method: Method::GET,
        path: "/v1/groups/{group_id}/messages",
        audience: Audience::GroupMember,
        handler: || web::get().to(messages::list_messages),
    },
    RouteSpec {
        method: Method::POST,
        path: "/v1/groups/{group_id}/ack",
        audience: Audience::GroupMember,
        handler: || web::post().to(acks::ack_group),
    },
    RouteSpec {
        method: Method::POST,
        path: "/v1/acks",
        audience: Audience::AnyUser,
        handler: || web::post().to(acks::ack_many),
    },
    RouteSpec {
        method: Method::GET,
        path: "/v1/me/groups",
        audience: Audience::AnyUser,
        handler: || web::get().to(me::list_my_groups),
    },
    RouteSpec {
        method: Method::GET,
        path: "/openapi.yaml",
        audience: Audience::Public,
        handler: || web::get().to(meta::openapi_spec),
    },
    RouteSpec {
        method: Method::GET,
        path: "/healthz",
        audience: Audience::Public,
        handler: || web::get().to(meta::healthz),
    },
    RouteSpec {
        method: Method::GET,
        path: "/readyz",
        audience: Audience::Public,
        handler: || web::get().to(meta::readyz),
    },
];

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

/// The group and the caller's membership, or the error a non-member gets: 404 for a group
/// that does not exist, 403 for one they are not in.
pub async fn member_of(
    state: &AppState,
    group_id: i64,
    user: &AuthUser,
) -> Result<(GroupRow, MemberRow), ApiError> {
    let user_id = user.id().to_owned();
    let access = state
        .db
        .read(move |conn| members::access(conn, group_id, &user_id))
        .await?;
    match access {
        Access::NoGroup => Err(ApiError::NotFound(format!(
            "group {group_id} does not exist"
        ))),
        Access::NotMember(_) => Err(ApiError::Forbidden(format!(
            "you are not a member of group {group_id}"
        ))),
        Access::Member(group, member) => Ok((group, member)),
    }
}
