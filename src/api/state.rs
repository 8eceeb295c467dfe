//! What every handler shares: the database, token keys, metrics, cursor signer, the waiting
//! long-polls, and their settings. Built once at start-up (see `startup`).

use std::sync::Arc;

use actix_web::web;

use crate::auth::TokenKeys;
use crate::db::acks::shared_acks::SharedAcks;
use crate::db::message::message_changes::ChangeWindows;
use crate::db::message::shared_sends::SharedSends;
use crate::db::Db;
use crate::feeds::position::CursorSigner;
use crate::metrics::Metrics;
use crate::wake_ups::waiters::Waiters;

pub struct AppState {
    pub db: Db,
    /// Sends to one group that arrive together share a transaction (PostgreSQL).
    pub shared_sends: SharedSends,
    /// Acks that arrive together share a transaction (PostgreSQL).
    pub shared_acks: SharedAcks,
    pub keys: TokenKeys,
    /// Also registered on its own, so the metrics middleware needs nothing from `api`.
    pub metrics: web::Data<Metrics>,
    pub cursors: CursorSigner,
    pub waiters: Arc<Waiters>,
    pub longpoll: LongPollSettings,
    /// How long after sending a message its sender may recall or edit it.
    pub change_windows: ChangeWindows,
    /// The most members a group may have.
    pub max_group_members: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct LongPollSettings {
    /// Change-feed cursors older than this get 410; feed rows older than this are deleted.
    pub retention_secs: i64,
}
