//! Request extraction: the authenticated user, and actix's own extractor errors rewritten
//! into the JSON error envelope so no client ever sees a plain-text error.

use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::{dev::Payload, http::header, web, FromRequest, HttpRequest};
use std::future::Future;
use std::pin::Pin;
use url::form_urlencoded;

use super::error::ApiError;
use super::poll_timeout::TIMEOUT_RULE;
use super::AppState;
use crate::auth::{Identity, TokenError};
use crate::db::device::devices::{check_device, touch_device, DeviceStanding};
use crate::domain::{DeviceId, UserId, MAX_PAGE_LIMIT, MAX_REQUEST_BODY_BYTES};

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

/// A query parameter that does not deserialize gets a message naming it and what it accepts,
/// never serde's words (`number too large to fit in target type`).
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, req| {
        let QueryPayloadError::Deserialize(e) = &err else {
            return ApiError::InvalidQuery("invalid query string".into()).into();
        };
        let pairs: Vec<(String, String)> = form_urlencoded::parse(req.query_string().as_bytes())
            .into_owned()
            .collect();
        let message = explain_bad_parameter(&pairs)
            .or_else(|| explain_repeated_parameter(&pairs, &e.to_string()))
            .unwrap_or_else(|| format!("invalid query string: {e}"));
        ApiError::InvalidQuery(message).into()
    })
}

/// The same for path parameters (`/v1/groups/abc`), found through the matched route.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|err, req| {
        let PathError::Deserialize(e) = &err else {
            return ApiError::InvalidPath("invalid path".into()).into();
        };
        let segments: Vec<(String, String)> = req
            .match_info()
            .iter()
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        let message = explain_bad_parameter(&segments)
            .unwrap_or_else(|| format!("invalid path parameter: {e}"));
        ApiError::InvalidPath(message).into()
    })
}

/// What a typed path or query parameter accepts. Parameters not listed are text, which
/// always deserializes (handlers validate it and answer `validation_failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accepts {
    WholeNumber { min: i64, max: i64 },
    TrueOrFalse,
}

use Accepts::{TrueOrFalse, WholeNumber};

/// Every typed parameter of the API by name; a name means the same everywhere. A test checks
/// this table against the parameters of openapi.yaml, so neither can change alone. Each says
/// what it accepts in its errors: from its type and range, or in words of its own.
const TYPED_PARAMETERS: &[(&str, Accepts, Said)] = &[
    (
        "group_id",
        WholeNumber {
            min: 1,
            max: i64::MAX,
        },
        Said::ByItsType,
    ),
    (
        "msg_id",
        WholeNumber {
            min: 1,
            max: i64::MAX,
        },
        Said::ByItsType,
    ),
    (
        "limit",
        WholeNumber {
            min: 1,
            max: MAX_PAGE_LIMIT,
        },
        Said::ByItsType,
    ),
    (
        "after_msg_id",
        WholeNumber {
            min: 0,
            max: i64::MAX,
        },
        Said::ByItsType,
    ),
    (
        "before_msg_id",
        WholeNumber {
            min: 0,
            max: i64::MAX,
        },
        Said::ByItsType,
    ),
    (
        "timeout_s",
        WholeNumber {
            min: 0,
            max: i64::MAX,
        },
        // Said the same way whether the value is no number or a negative one.
        Said::As(TIMEOUT_RULE),
    ),
    ("with_receipts", TrueOrFalse, Said::ByItsType),
    ("unread_only", TrueOrFalse, Said::ByItsType),
];

/// How a parameter's errors say what it accepts.
#[derive(Debug, Clone, Copy)]
enum Said {
    ByItsType,
    As(&'static str),
}

impl Accepts {
    fn with_words(name: &str) -> Option<(Accepts, Said)> {
        TYPED_PARAMETERS
            .iter()
            .find(|(known, _, _)| *known == name)
            .map(|(_, accepts, said)| (*accepts, *said))
    }

    /// Whether serde will read `value` as this type: the same `str::parse` it uses. The range
    /// is the handlers' to check, so that an out-of-range number is `validation_failed`.
    fn parses(self, value: &str) -> bool {
        match self {
            WholeNumber { .. } => value.parse::<i64>().is_ok(),
            TrueOrFalse => value.parse::<bool>().is_ok(),
        }
    }

    fn rule(self) -> String {
        match self {
            WholeNumber { min, max: i64::MAX } => format!("must be a whole number, {min} or more"),
            WholeNumber { min, max } => format!("must be a whole number from {min} to {max}"),
            TrueOrFalse => "must be true or false".into(),
        }
    }
}

/// `name: rule` for the first parameter whose value its type cannot hold.
fn explain_bad_parameter(pairs: &[(String, String)]) -> Option<String> {
    pairs.iter().find_map(|(name, value)| {
        let (accepts, said) = Accepts::with_words(name)?;
        let rule = match said {
            Said::As(words) => words.to_owned(),
            Said::ByItsType => accepts.rule(),
        };
        (!accepts.parses(value)).then(|| format!("{name}: {rule}"))
    })
}

/// serde refuses a field given twice (`duplicate field `limit``); say so in plain words.
fn explain_repeated_parameter(pairs: &[(String, String)], serde_error: &str) -> Option<String> {
    pairs.iter().enumerate().find_map(|(i, (name, _))| {
        let repeated = pairs[..i].iter().any(|(earlier, _)| earlier == name);
        (repeated && serde_error.contains(&format!("`{name}`")))
            .then(|| format!("{name}: must be given at most once"))
    })
}

pub async fn route_not_found(req: HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound(format!(
        "no route for {} {}",
        req.method(),
        req.path()
    )))
}

/// The JSON 405 of a path whose methods are `allow` (as the `Allow` header spells them).
pub fn method_not_allowed(req: HttpRequest, allow: &str) -> actix_web::HttpResponse {
    use actix_web::ResponseError;
    let error = ApiError::MethodNotAllowed(format!(
        "{} is not allowed on {}; allowed: {allow}",
        req.method(),
        req.path()
    ));
    let mut response = error.error_response();
    if let Ok(value) = header::HeaderValue::from_str(allow) {
        response.headers_mut().insert(header::ALLOW, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_parameter_its_type_cannot_hold_is_named_with_its_range() {
        let given = pairs(&[
            ("cursor", "x"),
            ("limit", "99999999999999999999"),
            ("with_receipts", "yes"),
        ]);
        assert_eq!(
            explain_bad_parameter(&given).as_deref(),
            Some("limit: must be a whole number from 1 to 200")
        );
        let given = pairs(&[("limit", "5"), ("with_receipts", "yes")]);
        assert_eq!(
            explain_bad_parameter(&given).as_deref(),
            Some("with_receipts: must be true or false")
        );
        assert_eq!(explain_bad_parameter(&pairs(&[("limit", "0")])), None);
    }

    #[test]
    fn a_repeated_parameter_is_named_when_serde_refused_it() {
        let given = pairs(&[("limit", "5"), ("limit", "6")]);
        assert_eq!(
            explain_repeated_parameter(&given, "duplicate field `limit`").as_deref(),
            Some("limit: must be given at most once")
        );
        assert_eq!(explain_repeated_parameter(&given, "something else"), None);
    }

    /// Every integer and boolean parameter of the spec, with the range its schema gives.
    fn typed_parameters_of_the_spec() -> Vec<(String, Accepts)> {
        let spec: Value = serde_yaml::from_str(super::super::meta::OPENAPI_YAML).unwrap();
        let resolve = |p: &Value| match p["$ref"].as_str() {
            Some(r) => spec.pointer(r.trim_start_matches('#')).unwrap().clone(),
            None => p.clone(),
        };
        let mut found = Vec::new();
        for item in spec["paths"].as_object().unwrap().values() {
            let operations = item.as_object().unwrap().values();
            let lists =
                std::iter::once(&item["parameters"]).chain(operations.map(|op| &op["parameters"]));
            for p in lists.filter_map(Value::as_array).flatten().map(resolve) {
                let schema = &p["schema"];
                let accepts = match schema["type"].as_str() {
                    Some("integer") => WholeNumber {
                        min: schema["minimum"].as_i64().unwrap_or(i64::MIN),
                        max: schema["maximum"].as_i64().unwrap_or(i64::MAX),
                    },
                    Some("boolean") => TrueOrFalse,
                    _ => continue,
                };
                found.push((p["name"].as_str().unwrap().to_owned(), accepts));
            }
        }
        found
    }

    #[test]
    fn the_table_of_typed_parameters_matches_openapi_yaml() {
        let in_spec = typed_parameters_of_the_spec();
        for (name, accepts) in &in_spec {
            assert_eq!(
                Accepts::with_words(name).map(|(known, _)| known),
                Some(*accepts),
                "{name} in openapi.yaml"
            );
        }
        for (name, _, _) in TYPED_PARAMETERS {
            assert!(
                in_spec.iter().any(|(n, _)| n == name),
                "{name} is not a parameter of openapi.yaml"
            );
        }
    }
}
