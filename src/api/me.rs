//! Handlers about the caller: their groups as a chat list, and their devices.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, NaiveDateTime};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::views::{DeviceView, DevicesPage, MyGroupView, MyGroupsPage};
use super::AppState;
use crate::db::device::devices::{list_devices, remove_device};
use crate::db::group::member_events::device_column;
use crate::db::read_models::chat_list::{chat_list_page, total_unread, ChatListRow, ListOrder};
use crate::domain::{parse_limit, DeviceId};

#[derive(Deserialize)]
pub struct MyGroupsQuery {
    unread_only: Option<bool>,
    order: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

/// The caller's groups with unread counts and last-message previews, by group id or by
/// latest activity (`order=recent`), and the unread total over all of them.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn list_my_groups(
    user: AuthUser,
    state: web::Data<AppState>,
    query: web::Query<MyGroupsQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = parse_limit(query.limit)?;
    let recent = match query.order.as_deref() {
        None | Some("id") => false,
        Some("recent") => true,
        Some(_) => {
            return Err(ApiError::Validation(
                "order: must be id (the default) or recent".into(),
            ))
        }
    };
    let order = parse_page_token(query.cursor.as_deref(), recent)?;
    let unread_only = query.unread_only.unwrap_or(false);
    let caller = user.clone();
    let (mut rows, total_unread) = state
        .db
        .read(move |conn| {
            let device = device_column(caller.device.as_ref());
            let rows = chat_list_page(conn, caller.id(), device, order, unread_only, limit + 1)?;
            Ok((rows, total_unread(conn, caller.id())?))
        })
        .await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| rows.last().map(|g| page_token(g, recent)))
        .flatten();
    let named = user.device.is_some();
    Ok(HttpResponse::Ok().json(MyGroupsPage {
        groups: rows
            .into_iter()
            .map(|r| MyGroupView::new(r, named))
            .collect(),
        total_unread,
        has_more,
        next_cursor,
    }))
}

/// The page token after `row`: its group id, or (for `order=recent`) its activity time in
/// microseconds and its group id.
fn page_token(row: &ChatListRow, recent: bool) -> String {
    if recent {
        let micros = row.last_activity_at.and_utc().timestamp_micros();
        format!("{micros}:{}", row.group_id)
    } else {
        row.group_id.to_string()
    }
}

fn parse_page_token(raw: Option<&str>, recent: bool) -> Result<ListOrder, ApiError> {
    let invalid = || {
        ApiError::Validation(format!(
            "cursor: not a cursor this server issued for order={}",
            if recent { "recent" } else { "id" }
        ))
    };
    let group_id = |text: &str| text.parse::<i64>().ok().filter(|v| *v >= 0);
    match (raw, recent) {
        (None, false) => Ok(ListOrder::ById { after_group_id: 0 }),
        (None, true) => Ok(ListOrder::Recent { before: None }),
        (Some(c), false) => Ok(ListOrder::ById {
            after_group_id: group_id(c).ok_or_else(invalid)?,
        }),
        (Some(c), true) => {
            let (micros, id) = c.split_once(':').ok_or_else(invalid)?;
            let at: NaiveDateTime = micros
                .parse::<i64>()
                .ok()
                .and_then(DateTime::from_timestamp_micros)
                .ok_or_else(invalid)?
                .naive_utc();
            Ok(ListOrder::Recent {
                before: Some((at, group_id(id).ok_or_else(invalid)?)),
            })
        }
    }
}

/// The caller's signed-in devices (those that have used a token naming them).
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn list_my_devices(
    user: AuthUser,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let user_id = user.id().to_owned();
    let rows = state
        .db
        .read(move |conn| list_devices(conn, &user_id))
        .await?;
    let current = user.device.as_ref().map(DeviceId::as_str);
    Ok(HttpResponse::Ok().json(DevicesPage {
        devices: rows
            .into_iter()
            .map(|row| DeviceView::new(row, current))
            .collect(),
    }))
}

/// Signs one of the caller's devices out: its delivered cursors are forgotten, and tokens
/// naming it that were issued until now are refused.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn remove_my_device(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(String,)>,
) -> Result<HttpResponse, ApiError> {
    let device = DeviceId::parse("device_id", &path.0)?;
    let user_id = user.id().to_owned();
    let removed = {
        let device = device.clone();
        state
            .db
            .write(move |conn, _| remove_device(conn, &user_id, device.as_str()))
            .await?
    };
    if !removed {
        return Err(ApiError::NotFound(format!(
            "you have no signed-in device {device}"
        )));
    }
    Ok(HttpResponse::NoContent().finish())
}
