//! Handlers about the caller: their groups with unread counts.

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::views::{MyGroupView, MyGroupsPage};
use super::AppState;
use crate::db::members;
use crate::domain::parse_limit;

#[derive(Deserialize)]
pub struct MyGroupsQuery {
    unread_only: Option<bool>,
    cursor: Option<String>,
    limit: Option<i64>,
}

#[tracing::instrument(skip_all, fields(user = %user.0))]
pub async fn list_my_groups(
    user: AuthUser,
    state: web::Data<AppState>,
    query: web::Query<MyGroupsQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = parse_limit(query.limit)?;
    let after_group_id = match query.cursor.as_deref() {
        None => 0,
        Some(c) => c.parse::<i64>().ok().filter(|v| *v >= 0).ok_or_else(|| {
            ApiError::Validation("cursor: not a cursor this server issued".into())
        })?,
    };
    let unread_only = query.unread_only.unwrap_or(false);
    let user_id = user.id().to_owned();
    let mut rows = state
        .db
        .read(move |conn| {
            members::my_groups(conn, &user_id, after_group_id, unread_only, limit + 1)
        })
        .await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| rows.last().map(|g| g.group_id.to_string()))
        .flatten();
    Ok(HttpResponse::Ok().json(MyGroupsPage {
        groups: rows.into_iter().map(MyGroupView::from).collect(),
        has_more,
        next_cursor,
    }))
}
