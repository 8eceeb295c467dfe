//! A pooled connection with the last moment it was known to work, so the pool's check-out
//! test runs only when there is reason to doubt it.
//!
//! r2d2 tests a connection each time it hands it out (`SELECT 1`, one round trip). Every
//! database call paid that round trip (in a PostgreSQL receipt storm the tests were 44% of
//! all statements): little on loopback, 0.2-1 ms to a database across a network. A
//! connection used without error moments ago
//! works now as surely as the test would say (the test cannot rule out the server dying an
//! instant later either), so the test is skipped for [`ALIVE_WITHOUT_TEST`] after the last
//! proof: a test passed, or a call that got no database error. Any error makes the next
//! check-out test it again, so a connection that a database restart broke fails at most the
//! one call that found out, and the pool then replaces it. The same rule as HikariCP's
//! `aliveBypassWindowMs`, and the same 500 ms.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::r2d2::R2D2Connection;

use super::connection::{AnyConnection, ConnectionManager};

/// How long after the last proof that a connection works the check-out test is skipped.
pub const ALIVE_WITHOUT_TEST: Duration = Duration::from_millis(500);

pub struct ProvenConnection {
    conn: AnyConnection,
    /// When the connection last proved to work; None once a call on it failed.
    proven_at: Option<Instant>,
}

impl ProvenConnection {
    /// A connection just opened, which proved to work by opening.
    pub fn opened(conn: AnyConnection) -> ProvenConnection {
        ProvenConnection {
            conn,
            proven_at: Some(Instant::now()),
        }
    }

    /// Whether the check-out test may be skipped.
    pub fn recently_proven(&self) -> bool {
        self.proven_at
            .is_some_and(|at| at.elapsed() < ALIVE_WITHOUT_TEST)
    }

    /// Records what a use of the connection showed: an outcome without error proves it
    /// works, an error (whatever its cause) makes the next check-out test it.
    pub fn record<T, E>(&mut self, outcome: &Result<T, E>) {
        self.proven_at = outcome.is_ok().then(Instant::now);
    }
}

impl Deref for ProvenConnection {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        &self.conn
    }
}

impl DerefMut for ProvenConnection {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = ProvenConnection;
    type Error = diesel::ConnectionError;

    fn connect(&self) -> Result<ProvenConnection, diesel::ConnectionError> {
        self.open().map(ProvenConnection::opened)
    }

    /// The check-out test, skipped for a connection that proved to work moments ago (see
    /// [`ProvenConnection`]).
    fn is_valid(&self, conn: &mut ProvenConnection) -> Result<(), diesel::ConnectionError> {
        if conn.recently_proven() {
            return Ok(());
        }
        let tested = conn.batch_execute("SELECT 1");
        conn.record(&tested);
        tested.map_err(diesel::ConnectionError::CouldntSetupConfiguration)
    }

    fn has_broken(&self, conn: &mut ProvenConnection) -> bool {
        match &mut **conn {
            AnyConnection::Postgresql(c) => c.is_broken(),
            AnyConnection::Sqlite(c) => c.is_broken(),
        }
    }
}

#[cfg(test)]
mod tests {
    use diesel::Connection;

    use super::*;

    fn sqlite() -> ProvenConnection {
        let conn = diesel::SqliteConnection::establish(":memory:").expect("in-memory SQLite");
        ProvenConnection::opened(AnyConnection::Sqlite(conn))
    }

    #[test]
    fn a_connection_is_trusted_for_a_while_after_each_proof_and_never_after_an_error() {
        let mut conn = sqlite();
        assert!(conn.recently_proven(), "opening proves it");

        conn.record(&Err::<(), _>("a failed call"));
        assert!(
            !conn.recently_proven(),
            "an error: test it on the next check-out"
        );

        conn.record(&Ok::<_, ()>(()));
        assert!(
            conn.recently_proven(),
            "a call without error proves it again"
        );

        conn.proven_at = Some(Instant::now() - ALIVE_WITHOUT_TEST);
        assert!(!conn.recently_proven(), "the proof has run out");
    }
}
