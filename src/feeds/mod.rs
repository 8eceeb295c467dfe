//! Long-poll feeds as a service below the HTTP layer: the positions clients carry (signed),
//! reading a feed page by page, and the wait for changes. What each feed holds is read in
//! `db::read_models::changes`; wake-ups come through `wake_ups`.

pub mod page;
pub mod position;
pub mod wait;
