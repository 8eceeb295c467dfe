//! Handlers for groups and their members.

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::json_body::JsonBody;
use super::views::{AddedMembers, GroupView, MemberView, MembersPage};
use super::{read_as_member, AppState};
use crate::db::group::{group_lifecycle, members};
use crate::domain::GroupId;
use crate::domain::{parse_group_name, parse_limit, parse_user_ids, UserId};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateGroupBody {
    name: String,
    #[serde(default)]
    member_ids: Vec<String>,
}

#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn create_group(
    user: AuthUser,
    state: web::Data<AppState>,
    body: JsonBody<CreateGroupBody>,
) -> Result<HttpResponse, ApiError> {
    let name = parse_group_name(&body.name)?;
    let member_ids = parse_user_ids("member_ids", &body.member_ids)?;
    let owner = user.id().to_owned();
    let max_members = state.max_group_members;
    let group = state
        .db
        .write_checked(move |conn, wakes| {
            group_lifecycle::create_group(conn, &owner, &name, &member_ids, max_members, wakes)
        })
        .await??;
    Ok(HttpResponse::Created().json(GroupView::from(group)))
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn get_group(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let (membership, ()) = read_as_member(&state, group_id, &user, |_, _| Ok(())).await?;
    Ok(HttpResponse::Ok().json(GroupView::from(membership.group)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameGroupBody {
    name: String,
}

/// The owner renames the group; the members see a `group_renamed` line in its log.
#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn rename_group(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: JsonBody<RenameGroupBody>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let name = parse_group_name(&body.name)?;
    let actor = user.id().to_owned();
    let group = state
        .db
        .write_checked(move |conn, wakes| {
            group_lifecycle::rename_group(conn, group_id, &actor, &name, wakes)
        })
        .await??;
    Ok(HttpResponse::Ok().json(GroupView::from(group)))
}

#[derive(Deserialize)]
pub struct MembersQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn list_members(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    query: web::Query<MembersQuery>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let limit = parse_limit(query.limit)?;
    let after = match &query.cursor {
        Some(c) => Some(UserId::parse("cursor", c)?.as_str().to_owned()),
        None => None,
    };
    let (_, mut rows) = read_as_member(&state, group_id, &user, move |conn, _| {
        members::list_members(conn, group_id, after.as_deref(), limit + 1)
    })
    .await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| rows.last().map(|m| m.user_id.clone()))
        .flatten();
    Ok(HttpResponse::Ok().json(MembersPage {
        members: rows.into_iter().map(MemberView::from).collect(),
        has_more,
        next_cursor,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMembersBody {
    user_ids: Vec<String>,
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn add_members(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: JsonBody<AddMembersBody>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let user_ids = parse_user_ids("user_ids", &body.user_ids)?;
    if user_ids.is_empty() {
        return Err(ApiError::Validation("user_ids: must not be empty".into()));
    }
    let actor = user.id().to_owned();
    let max_members = state.max_group_members;
    let added = state
        .db
        .write_checked(move |conn, wakes| {
            members::add_members(conn, group_id, &actor, &user_ids, max_members, wakes)
        })
        .await??;
    Ok(HttpResponse::Ok().json(AddedMembers { added }))
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn remove_member(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64, String)>,
) -> Result<HttpResponse, ApiError> {
    let (group_id, target) = path.into_inner();
    let target = UserId::parse("user_id", &target)?;
    let actor = user.id().to_owned();
    state
        .db
        .write_checked(move |conn, wakes| {
            members::remove_member(conn, GroupId(group_id), &actor, target.as_str(), wakes)
        })
        .await??;
    Ok(HttpResponse::NoContent().finish())
}
