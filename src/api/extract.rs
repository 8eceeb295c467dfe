//! Request extraction: the authenticated user, and actix's own extractor errors rewritten
//! into the JSON error envelope so no client ever sees a plain-text error.

use std::future::{ready, Ready};

use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{dev::Payload, http::header, web, FromRequest, HttpRequest};

use super::error::ApiError;
use super::AppState;
use crate::domain::{UserId, MAX_REQUEST_BODY_BYTES};

/// The caller, proven by a valid bearer token. Handlers take this and never read headers.
pub struct AuthUser(pub UserId);

impl AuthUser {
    pub fn id(&self) -> &str {
        self.0.as_str()
    }
}

impl FromRequest for AuthUser {
    type Error = ApiError;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req))
    }
}

fn authenticate(req: &HttpRequest) -> Result<AuthUser, ApiError> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("application state is missing")))?;
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
    state
        .keys
        .verify(token)
        .map(AuthUser)
        .map_err(|_| ApiError::Unauthorized("invalid or expired token".into()))
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
