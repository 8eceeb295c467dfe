//! Request extraction: the authenticated user, and actix's own extractor errors rewritten
//! into the JSON error envelope so no client ever sees a plain-text error.

use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{dev::Payload, http::header, web, FromRequest, HttpRequest};
use std::future::Future;
use std::pin::Pin;

use super::error::ApiError;
use super::AppState;
use crate::auth::{Identity, TokenError};
use crate::db::devices::{check_device, touch_device, DeviceStanding};
use crate::domain::{DeviceId, UserId, MAX_REQUEST_BODY_BYTES};

/// The caller, proven by a valid bearer token, and the device they call from (None: their
/// default device). Handlers take this and never read headers.
#[derive(Debug, Clone)]
pub struct AuthUser {
    pub user_id: UserId,
    pub device: Option<DeviceId>,
}

impl AuthUser {
    pub fn id(&self) -> &str {
        self.user_id.as_str()
    }
}

impl FromRequest for AuthUser {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let state = app_state(&req)?;
            let identity = verify_token(&req, &state)?;
            check_device_standing(&state, &identity).await?;
            Ok(AuthUser {
                user_id: identity.user_id,
                device: identity.device,
            })
        })
    }
}

fn app_state(req: &HttpRequest) -> Result<web::Data<AppState>, ApiError> {
    req.app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("application state is missing")))
}

/// A token naming a device may be used while the device is the caller's and not signed out.
/// The device is recorded on first use (and its last use refreshed now and then), so it can
/// be listed and signed out.
async fn check_device_standing(state: &AppState, identity: &Identity) -> Result<(), ApiError> {
    let Some(device) = identity.device.clone() else {
        return Ok(());
    };
    let (user_id, issued_at) = (identity.user_id.as_str().to_owned(), identity.issued_at);
    let mut standing = {
        let (device, user_id) = (device.clone(), user_id.clone());
        state
            .db
            .read(move |conn| check_device(conn, &device, &user_id, issued_at))
            .await?
    };
    if standing == DeviceStanding::NeedsTouch {
        let device = device.clone();
        standing = state
            .db
            .write(move |conn, _| touch_device(conn, &device, &user_id, issued_at))
            .await?;
    }
    match standing {
        DeviceStanding::Current | DeviceStanding::NeedsTouch => Ok(()),
        DeviceStanding::OtherUser => Err(ApiError::Forbidden(format!(
            "device {device} belongs to another user; every installation needs its own device id"
        ))),
        DeviceStanding::SignedOut => Err(ApiError::DeviceSignedOut(format!(
            "device {device} was signed out after this token was issued; sign in again for a new token"
        ))),
    }
}

fn verify_token(req: &HttpRequest, state: &AppState) -> Result<Identity, ApiError> {
    let mut values = req.headers().get_all(header::AUTHORIZATION);
    let value = values
        .next()
        .ok_or_else(|| ApiError::Unauthorized("missing Authorization: Bearer <token>".into()))?;
    // Two headers could make a proxy and this server disagree on who is calling.
    if values.next().is_some() {
        return Err(ApiError::Unauthorized(
            "send exactly one Authorization header".into(),
        ));
    }
    let token =
        value.to_str().ok().and_then(bearer_token).ok_or_else(|| {
            ApiError::Unauthorized("Authorization must be 'Bearer <token>'".into())
        })?;
    state.keys.verify(token).map_err(|e| match e {
        TokenError::BadClaim(message) => ApiError::Unauthorized(format!("token claim {message}")),
        _ => ApiError::Unauthorized("invalid or expired token".into()),
    })
}

/// The token of a `Bearer` credential; the scheme is case-insensitive (RFC 7235).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_REQUEST_BODY_BYTES)
        .error_handler(|err, _req| {
            let api = match &err {
                JsonPayloadError::ContentType => ApiError::UnsupportedMediaType(
                    "the request body must be JSON (Content-Type: application/json)".into(),
                ),
                JsonPayloadError::Overflow { limit }
                | JsonPayloadError::OverflowKnownLength { limit, .. } => {
                    ApiError::PayloadTooLarge(format!("the request body exceeds {limit} bytes"))
                }
                JsonPayloadError::Deserialize(e) => {
                    ApiError::InvalidJson(format!("invalid JSON body: {e}"))
                }
                other => ApiError::InvalidJson(format!("unreadable request body: {other}")),
            };
            api.into()
        })
}

pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _req| {
        let QueryPayloadError::Deserialize(e) = &err else {
            return ApiError::InvalidQuery("invalid query string".into()).into();
        };
        ApiError::InvalidQuery(format!("invalid query string: {e}")).into()
    })
}

pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err, _req| {
        let PathError::Deserialize(e) = &err else {
            return ApiError::InvalidPath("invalid path".into()).into();
        };
        ApiError::InvalidPath(format!("invalid path parameter: {e}")).into()
    })
}

pub async fn route_not_found(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}

pub async fn method_not_allowed(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed(format!(
        "{} is not allowed on {}",
        req.method(),
        req.path()
    )))
}
