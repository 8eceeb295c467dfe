//! Handlers for groups and their members.

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::views::{AddedMembers, GroupView, MemberView, MembersPage};
use super::{member_of, read_as_member, AppState};
use crate::db::{groups, members};
use crate::domain::{parse_group_name, parse_limit, parse_user_ids, UserId, MAX_GROUP_MEMBERS};
use crate::wake::WakeEvent;

#[derive(Deserialize)]
pub struct CreateGroupBody {
    name: String,
    #[serde(default)]
    member_ids: Vec<String>,
}

#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn create_group(
    user: AuthUser,
    state: web::Data<AppState>,
    body: web::Json<CreateGroupBody>,
) -> Result<HttpResponse, ApiError> {
    let name = parse_group_name(&body.name)?;
    let member_ids = parse_user_ids("member_ids", &body.member_ids)?;
    let owner = user.id().to_owned();
    let instance = state.instance();
    // Everyone who joins, the owner included: their waiting polls must start watching it.
    let joined: Vec<String> = std::iter::once(owner.clone())
        .chain(member_ids.iter().cloned())
        .collect();
    let (group, member_count) = state
        .db
        .write(move |conn| groups::create_group(conn, &owner, &name, &member_ids, &instance))
        .await?;
    state.wake(joined.into_iter().map(WakeEvent::MembershipChanged));
    Ok(HttpResponse::Created().json(GroupView::new(group, member_count)))
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn get_group(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
) -> Result<HttpResponse, ApiError> {
    let group_id = path.0;
    let (group, _, member_count) = read_as_member(&state, group_id, &user, move |conn, _, _| {
        groups::count_members(conn, group_id)
    })
    .await?;
    Ok(HttpResponse::Ok().json(GroupView::new(group, member_count)))
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
    let group_id = path.0;
    let limit = parse_limit(query.limit)?;
    let after = match &query.cursor {
        Some(c) => Some(UserId::parse("cursor", c)?.as_str().to_owned()),
        None => None,
    };
    let (_, _, mut rows) = read_as_member(&state, group_id, &user, move |conn, _, _| {
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
pub struct AddMembersBody {
    user_ids: Vec<String>,
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn add_members(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: web::Json<AddMembersBody>,
) -> Result<HttpResponse, ApiError> {
    let group_id = path.0;
    let user_ids = parse_user_ids("user_ids", &body.user_ids)?;
    if user_ids.is_empty() {
        return Err(ApiError::Validation("user_ids: must not be empty".into()));
    }
    let (_, me) = member_of(&state, group_id, &user).await?;
    if !me.is_owner() {
        return Err(ApiError::Forbidden(
            "only the group owner may add members".into(),
        ));
    }
    let instance = state.instance();
    let outcome = state
        .db
        .write(move |conn| {
            members::add_members(conn, group_id, &user_ids, MAX_GROUP_MEMBERS, &instance)
        })
        .await?;
    match outcome {
        members::AddOutcome::Added(added) => {
            state.wake(added.iter().cloned().map(WakeEvent::MembershipChanged));
            Ok(HttpResponse::Ok().json(AddedMembers { added }))
        }
        members::AddOutcome::TooMany { current, max } => Err(ApiError::Conflict(format!(
            "a group holds at most {max} members; it has {current}"
        ))),
    }
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn remove_member(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64, String)>,
) -> Result<HttpResponse, ApiError> {
    let (group_id, target) = path.into_inner();
    let target = UserId::parse("user_id", &target)?;
    let (group, me) = member_of(&state, group_id, &user).await?;
    let leaving = target == user.user_id;
    if !leaving && !me.is_owner() {
        return Err(ApiError::Forbidden(
            "only the owner may remove other members".into(),
        ));
    }
    if target.as_str() == group.owner_id {
        return Err(ApiError::Conflict(
            "the owner cannot leave their group".into(),
        ));
    }
    let instance = state.instance();
    let target_id = target.as_str().to_owned();
    let removed = state
        .db
        .write(move |conn| members::remove_member(conn, group_id, target.as_str(), &instance))
        .await?;
    if !removed {
        return Err(ApiError::NotFound("that user is not a member".into()));
    }
    state.wake([
        WakeEvent::CursorMoved(group_id),
        WakeEvent::MembershipChanged(target_id),
    ]);
    Ok(HttpResponse::NoContent().finish())
}
