//! Announcing a write's wake-ups to other instances: a PostgreSQL NOTIFY inside the writing
//! transaction, so it is delivered exactly when the change commits (and never for a
//! rolled-back one). SQLite runs in one process, where wake-ups are delivered in memory only.

use diesel::prelude::*;
use diesel::sql_types::Text;

use super::AnyConnection;
use crate::wake::{Wakes, CHANNEL};

pub fn announce(conn: &mut AnyConnection, instance: &str, wakes: &Wakes) -> QueryResult<()> {
    if let AnyConnection::Postgresql(c) = conn {
        for event in wakes.events() {
            diesel::sql_query("SELECT pg_notify($1, $2)")
                .bind::<Text, _>(CHANNEL)
                .bind::<Text, _>(event.encode(instance))
                .execute(c)?;
        }
    }
    Ok(())
}
