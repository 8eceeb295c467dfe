//! Handlers for push targets: a device registers (or replaces) the token its push service
//! wakes it with, and any of the user's devices may remove it.

use actix_web::{web, HttpResponse};
use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use super::extract::AuthUser;
use super::json_body::JsonBody;
use super::views::PushTargetResponse;
use super::AppState;
use crate::db::device::push_targets::{register_push_target, remove_push_target, Caller};
use crate::domain::{DeviceId, PushPlatform, PushToken};

/// Fields are read as any JSON value and checked here, so a missing field or one of the wrong
/// type is answered with the field's name (serde's own message names only the type).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushTargetBody {
    #[serde(default)]
    platform: Value,
    #[serde(default)]
    token: Value,
}

fn string_field<'a>(field: &str, value: &'a Value) -> Result<&'a str, ApiError> {
    value
        .as_str()
        .ok_or_else(|| ApiError::Validation(format!("{field}: required, and must be a string")))
}

/// Registers the calling device's push target, replacing the one it had.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn put_push_target(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(String,)>,
    body: JsonBody<PushTargetBody>,
) -> Result<HttpResponse, ApiError> {
    let device = DeviceId::parse("device_id", &path.0)?;
    let platform = PushPlatform::parse(string_field("platform", &body.platform)?)?;
    let token = PushToken::parse(string_field("token", &body.token)?)?;
    let registered = state
        .db
        .write_checked(move |conn, _| {
            let caller = Caller {
                user_id: user.id(),
                device: user.device.as_ref(),
            };
            register_push_target(conn, caller, device.as_str(), &platform, &token)
        })
        .await??;
    Ok(HttpResponse::Ok().json(PushTargetResponse::new(registered)))
}

/// Removes a device's push target: it is not woken any more.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn delete_push_target(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(String,)>,
) -> Result<HttpResponse, ApiError> {
    let device = DeviceId::parse("device_id", &path.0)?;
    let user_id = user.id().to_owned();
    state
        .db
        .write_checked(move |conn, _| remove_push_target(conn, &user_id, device.as_str()))
        .await??;
    Ok(HttpResponse::NoContent().finish())
}
