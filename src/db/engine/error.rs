//! What can go wrong below `db::`, and which failures a retry may cure.

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had in time, or the server is unreachable: the caller may retry.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Query(#[from] diesel::result::Error),
    #[error("database task panicked or was cancelled")]
    Task,
}

impl From<r2d2::Error> for DbError {
    fn from(e: r2d2::Error) -> Self {
        DbError::Unavailable(e.to_string())
    }
}

impl DbError {
    /// True when the database (not the request) is at fault and a retry may succeed: it is
    /// unreachable, the connection died, or it is too busy (a statement timeout, SQLite's
    /// lock held by another process past the busy timeout).
    pub fn is_unavailable(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        match self {
            DbError::Unavailable(_) => true,
            DbError::Query(diesel::result::Error::DatabaseError(kind, info)) => {
                matches!(
                    kind,
                    Kind::ClosedConnection | Kind::UnableToSendCommand | Kind::SerializationFailure
                ) || BUSY_MESSAGES.iter().any(|m| info.message().contains(m))
            }
            DbError::Query(diesel::result::Error::BrokenTransactionManager) => true,
            _ => false,
        }
    }
}

impl DbError {
    /// A copy of this error for another caller of the same batch (diesel's errors are not
    /// Clone). What callers look at survives: the database's kind and message (full disk,
    /// busy).
    pub(super) fn same_for_another_caller(&self) -> DbError {
        use diesel::result::Error as DieselError;
        match self {
            DbError::Query(DieselError::DatabaseError(kind, info)) => DbError::Query(
                DieselError::DatabaseError(*kind, Box::new(info.message().to_owned())),
            ),
            DbError::Query(DieselError::BrokenTransactionManager) => {
                DbError::Query(DieselError::BrokenTransactionManager)
            }
            DbError::Task => DbError::Task,
            other => DbError::Unavailable(other.to_string()),
        }
    }

    /// True when no connection could be had, the connection died, or a statement ran out
    /// of time: the database's state, not the statement's content, made it fail.
    pub fn is_unreachable_or_timed_out(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        match self {
            DbError::Unavailable(_) => true,
            DbError::Query(diesel::result::Error::DatabaseError(kind, info)) => {
                matches!(kind, Kind::ClosedConnection | Kind::UnableToSendCommand)
                    || TIMEOUT_MESSAGES.iter().any(|m| info.message().contains(m))
            }
            _ => false,
        }
    }

    /// True when the database refused a write for lack of space: SQLite's `SQLITE_FULL`, from
    /// a full disk or from the size cap (`CHORUS_SQLITE_MAX_SIZE_MB`). Only writes that need
    /// new pages fail; reads, and writes that fit in pages already there, go on.
    pub fn is_storage_full(&self) -> bool {
        match self {
            DbError::Query(diesel::result::Error::DatabaseError(_, info)) => {
                info.message().contains(SQLITE_FULL_MESSAGE)
            }
            _ => false,
        }
    }
}

/// SQLite's message for `SQLITE_FULL`, which diesel reports without a kind of its own.
const SQLITE_FULL_MESSAGE: &str = "database or disk is full";

/// Messages of errors that mean "busy, try again", which diesel reports without a kind.
const BUSY_MESSAGES: [&str; 4] = [
    "database is locked",
    "deadlock detected",
    TIMEOUT_MESSAGES[0],
    TIMEOUT_MESSAGES[1],
];

/// PostgreSQL's messages for a statement cancelled by a timeout.
const TIMEOUT_MESSAGES: [&str; 2] = [
    "canceling statement due to statement timeout",
    "canceling statement due to lock timeout",
];

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::{DatabaseErrorKind as Kind, Error as DieselError};

    fn database_error(kind: Kind, message: &str) -> DbError {
        DbError::Query(DieselError::DatabaseError(
            kind,
            Box::new(message.to_owned()),
        ))
    }

    #[test]
    fn a_timeout_or_a_lost_connection_is_the_databases_state_a_deadlock_is_not() {
        let timed_out = [
            database_error(
                Kind::Unknown,
                "canceling statement due to statement timeout",
            ),
            database_error(Kind::Unknown, "canceling statement due to lock timeout"),
            database_error(Kind::ClosedConnection, "server closed the connection"),
            DbError::Unavailable("no connection in time".into()),
        ];
        for e in &timed_out {
            assert!(e.is_unreachable_or_timed_out(), "{e}");
            assert!(e.is_unavailable(), "{e}");
        }
        // Busy, so a lone request answers 503; but the mix of a batch may have caused it.
        let deadlock = database_error(Kind::Unknown, "deadlock detected");
        assert!(deadlock.is_unavailable());
        assert!(!deadlock.is_unreachable_or_timed_out());
        for e in [
            database_error(Kind::Unknown, "refused by a trigger"),
            database_error(Kind::UniqueViolation, "duplicate key"),
            DbError::Task,
        ] {
            assert!(!e.is_unreachable_or_timed_out(), "{e}");
        }
    }
}
