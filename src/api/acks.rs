//! Handlers for acks: one group, or many groups in one request (the login sync).

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::views::{AcksView, CursorsView};
use super::AppState;
use crate::db::cursors::{self, AckRejection, AckRequest, CursorState};
use crate::domain::{parse_msg_id, MAX_ACKS_PER_REQUEST};
use crate::wake::WakeEvent;

#[derive(Deserialize)]
pub struct AckBody {
    last_ack_msg_id: i64,
    last_read_msg_id: Option<i64>,
}

#[derive(Deserialize)]
pub struct AckManyBody {
    acks: Vec<AckManyItem>,
}

#[derive(Deserialize)]
pub struct AckManyItem {
    group_id: i64,
    last_ack_msg_id: i64,
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
    body: web::Json<AckBody>,
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
    body: web::Json<AckManyBody>,
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
    let caller = user.clone();
    let instance = state.instance();
    let outcome = state
        .db
        .write(move |conn| {
            cursors::ack(
                conn,
                caller.id(),
                caller.device.as_ref(),
                &requests,
                &instance,
            )
        })
        .await?;
    let states = outcome.map_err(|rejection| rejection_error(rejection, batch))?;
    let moved = states.iter().filter(|s| s.receipts_changed).count();
    state.metrics.acks.inc_by(moved as u64);
    let read_moved = states.iter().any(|s| s.read_moved);
    state.wake(
        states
            .iter()
            .filter(|s| s.receipts_changed)
            .map(|s| WakeEvent::CursorMoved(s.group_id))
            .chain(read_moved.then(|| WakeEvent::ReadMoved(user.id().to_owned()))),
    );
    Ok(states)
}

fn rejection_error(rejection: AckRejection, batch: bool) -> ApiError {
    let at = |index: usize| {
        if batch {
            format!("acks[{index}]: ")
        } else {
            String::new()
        }
    };
    match rejection {
        AckRejection::NoGroup { index, group_id } => {
            ApiError::NotFound(format!("{}group {group_id} does not exist", at(index)))
        }
        AckRejection::NotMember { index, group_id } => ApiError::Forbidden(format!(
            "{}you are not a member of group {group_id}",
            at(index)
        )),
        AckRejection::BeyondLastMessage {
            index,
            group_id,
            requested,
            last_msg_id,
        } => ApiError::AckBeyondLastMessage(format!(
            "{}cannot ack {requested} in group {group_id}: its last message is {last_msg_id}",
            at(index)
        )),
    }
}
