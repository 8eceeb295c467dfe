//! Development-only endpoints. They exist only while the server signs tokens with its
//! generated development secret; with `CHORUS_JWT_SECRET` set they answer 404.

use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::json_body::JsonBody;
use super::AppState;
use crate::domain::{DeviceId, UserId};

const DEV_TOKEN_TTL_SECS: i64 = 24 * 3600;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevTokenBody {
    user_id: String,
    device_id: Option<String>,
}

#[derive(Serialize)]
struct DevToken {
    user_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
    token: String,
    expires_in: i64,
}

/// A token for any user, so the reference client can pick a user without a login system.
pub async fn issue_dev_token(
    state: web::Data<AppState>,
    body: JsonBody<DevTokenBody>,
) -> Result<HttpResponse, ApiError> {
    if !state.keys.development {
        return Err(ApiError::NotFound(
            "development tokens are disabled: this server has a configured secret".into(),
        ));
    }
    let user = UserId::parse("user_id", &body.user_id)?;
    let device = body
        .device_id
        .as_deref()
        .map(|d| DeviceId::parse("device_id", d))
        .transpose()?;
    let token = state
        .keys
        .issue_for_device(&user, device.as_ref(), DEV_TOKEN_TTL_SECS)
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok(HttpResponse::Ok().json(DevToken {
        user_id: user.as_str().to_owned(),
        device_id: device.map(|d| d.as_str().to_owned()),
        token,
        expires_in: DEV_TOKEN_TTL_SECS,
    }))
}
