//! Whether the database is refusing writes for lack of space, so the log says so loudly once
//! when it starts and once when it is over, instead of once per refused request.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::error::DbError;

/// How long no write may have been refused for space before a successful write counts as
/// "there is room again". Writes that need no new space (most acks) succeed on a full
/// database too; without this quiet period every such write between two refused sends would
/// end the episode and the next send would start a new one.
const QUIET_BEFORE_RECOVERED: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct StorageAlarm {
    state: Mutex<Option<FullEpisode>>,
}

/// A stretch of time during which writes are being refused for lack of space.
struct FullEpisode {
    last_refused: Instant,
    refused: u64,
}

/// What the log should say after an observation, decided apart from logging so it is testable.
#[derive(Debug, PartialEq, Eq)]
enum Transition {
    BecameFull,
    HasRoomAgain { refused: u64 },
    Unchanged,
}

impl StorageAlarm {
    /// Records a failed database call; logs at ERROR when it is the first refusal for space.
    pub fn failed(&self, error: &DbError) {
        if !error.is_storage_full() {
            return;
        }
        if self.refused_at(Instant::now()) == Transition::BecameFull {
            tracing::error!(
                error = %error,
                "the database is full: writes that need more space get 507 storage_full until \
                 space is freed (free disk space, or raise CHORUS_SQLITE_MAX_SIZE_MB); reads and \
                 most acks go on"
            );
        }
    }

    /// Records a committed write; logs when it ends an episode of refusals.
    pub fn wrote(&self) {
        if let Transition::HasRoomAgain { refused } = self.wrote_at(Instant::now()) {
            tracing::warn!(
                refused,
                "the database accepts writes again after refusing some for lack of space"
            );
        }
    }

    fn refused_at(&self, now: Instant) -> Transition {
        let mut state = self.lock();
        match state.as_mut() {
            Some(episode) => {
                episode.last_refused = now;
                episode.refused += 1;
                Transition::Unchanged
            }
            None => {
                *state = Some(FullEpisode {
                    last_refused: now,
                    refused: 1,
                });
                Transition::BecameFull
            }
        }
    }

    fn wrote_at(&self, now: Instant) -> Transition {
        let mut state = self.lock();
        match state.as_ref() {
            Some(episode)
                if now.saturating_duration_since(episode.last_refused)
                    >= QUIET_BEFORE_RECOVERED =>
            {
                let refused = episode.refused;
                *state = None;
                Transition::HasRoomAgain { refused }
            }
            _ => Transition::Unchanged,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<FullEpisode>> {
        // The state is two numbers; a panic elsewhere cannot leave them inconsistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_episode_is_reported_once_and_ends_only_after_a_quiet_write() {
        let alarm = StorageAlarm::default();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);

        assert_eq!(alarm.refused_at(at(0)), Transition::BecameFull);
        assert_eq!(alarm.refused_at(at(1)), Transition::Unchanged);
        assert_eq!(
            alarm.wrote_at(at(2)),
            Transition::Unchanged,
            "an ack between two refused sends does not end it"
        );
        assert_eq!(alarm.refused_at(at(3)), Transition::Unchanged);
        assert_eq!(
            alarm.wrote_at(at(3 + QUIET_BEFORE_RECOVERED.as_secs())),
            Transition::HasRoomAgain { refused: 3 }
        );
        assert_eq!(alarm.wrote_at(at(100)), Transition::Unchanged);
        assert_eq!(
            alarm.refused_at(at(101)),
            Transition::BecameFull,
            "full again after recovering: reported again"
        );
    }
}
