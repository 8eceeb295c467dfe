//! The HTTP API: one module per resource, the route table ([`routes`]), the state handlers
//! share ([`state`]), the membership check they go through ([`access`]), and the one error
//! type with its JSON envelope ([`error`]).

pub mod access;
pub mod acks;
pub mod compact_headers;
pub mod dev;
pub mod docs;
pub mod error;
pub mod extract;
pub mod groups;
pub mod json_body;
pub mod longpoll;
pub mod me;
pub mod message_body;
pub mod messages;
pub mod meta;
pub mod poll_timeout;
pub mod push_targets;
pub mod receipts;
pub mod routes;
pub mod state;
pub mod sync;
pub mod views;
pub mod webclient;

pub use access::read_as_member;
pub use routes::{configure, Audience, RouteSpec, ROUTES};
pub use state::{AppState, LongPollSettings};
