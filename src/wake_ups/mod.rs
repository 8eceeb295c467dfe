//! Wake-ups: the one mechanism that ends waiting long-polls. A write records the events it
//! causes ([`events`]); after its commit they wake this process's waiters ([`waiters`], the
//! registry of parked polls) and, through PostgreSQL's NOTIFY, other instances' ([`listener`]).
//! An event names only where to look again, never the data.

pub mod events;
pub mod listener;
pub mod waiters;
