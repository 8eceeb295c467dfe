//! Handlers for acks: one group, or many groups in one request (the login sync).

use crate::domain::refusal::Refusal;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::json_body::JsonBody;
use super::views::{AcksView, CursorsView};
use super::AppState;
use crate::db::acks::cursors::{AckRequest, AcksOf, CursorState};

use crate::domain::{parse_msg_id, MAX_ACKS_PER_REQUEST};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckBody {
    #[serde(deserialize_with = "super::json_body::whole_number")]
    last_ack_msg_id: i64,
    #[serde(default, deserialize_with = "super::json_body::optional_whole_number")]
    last_read_msg_id: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckManyBody {
    acks: Vec<AckManyItem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckManyItem {
    #[serde(deserialize_with = "super::json_body::whole_number")]
    group_id: i64,
    #[serde(deserialize_with = "super::json_body::whole_number")]
    last_ack_msg_id: i64,
    #[serde(default, deserialize_with = "super::json_body::optional_whole_number")]
    last_read_msg_id: Option<i64>,
}

fn ack_request(
    field: &str,
    group_id: i64,
    last_ack_msg_id: i64,
    last_read_msg_id: Option<i64>,
) -> Result<AckRequest, ApiError> {
    Ok(AckRequest {
        group_id,
        last_ack_msg_id: parse_msg_id(&format!("{field}last_ack_msg_id"), last_ack_msg_id)?,
        last_read_msg_id: last_read_msg_id
            .map(|v| parse_msg_id(&format!("{field}last_read_msg_id"), v))
            .transpose()?,
    })
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn ack_group(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: JsonBody<AckBody>,
) -> Result<HttpResponse, ApiError> {
    let request = ack_request("", path.0, body.last_ack_msg_id, body.last_read_msg_id)?;
    let mut states = apply(&state, &user, vec![request], false).await?;
    let state = states
        .pop()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("ack returned nothing")))?;
    Ok(HttpResponse::Ok().json(CursorsView::from(state)))
}

#[tracing::instrument(skip_all, fields(user = %user.user_id, count = body.acks.len()))]
pub async fn ack_many(
    user: AuthUser,
    state: web::Data<AppState>,
    body: JsonBody<AckManyBody>,
) -> Result<HttpResponse, ApiError> {
    if body.acks.is_empty() || body.acks.len() > MAX_ACKS_PER_REQUEST {
        return Err(ApiError::Validation(format!(
            "acks: must hold 1 to {MAX_ACKS_PER_REQUEST} entries"
        )));
    }
    let requests = body
        .acks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            ack_request(
                &format!("acks[{i}]."),
                a.group_id,
                a.last_ack_msg_id,
                a.last_read_msg_id,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let states = apply(&state, &user, requests, true).await?;
    Ok(HttpResponse::Ok().json(AcksView {
        results: states.into_iter().map(CursorsView::from).collect(),
    }))
}

async fn apply(
    state: &AppState,
    user: &AuthUser,
    requests: Vec<AckRequest>,
    batch: bool,
) -> Result<Vec<CursorState>, ApiError> {
    let request = AcksOf {
        user_id: user.id().to_owned(),
        device: user.device.clone(),
        acks: requests,
    };
    let states = state
        .shared_acks
        .ack(request)
        .await?
        .map_err(|refusal| match refusal {
            // One group's ack: its refusal needs no position.
            Refusal::InBatch { refusal, .. } if !batch => ApiError::from(*refusal),
            refusal => ApiError::from(refusal),
        })?;
    let moved = states.iter().filter(|s| s.receipts_changed).count();
    state.metrics.acks.inc_by(moved as u64);
    Ok(states)
}
