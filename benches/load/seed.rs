//! Fixtures seeded through the db layer on one direct connection, because seeding 20,000
//! messages over HTTP would take longer than the runs. Each db write the bench makes is in one
//! function here, so a change of the db layer's signatures is an edit in one place.

use chorus::config::defaults;
use chorus::db::engine::publish::publish_now;
use chorus::db::group::access::Checked;
use chorus::db::message::message_changes::{Change, ChangeWindows};
use chorus::db::message::messages::{Author, MessageDraft, SendOutcome, UserEntry};
use chorus::db::AnyConnection;
use chorus::domain::{GroupId, MsgId};
// Seeding writes straight through the db layer, outside any server: it wakes no one.
use chorus::wake_ups::events::Wakes;
use diesel::prelude::*;

use crate::support::scratch_db::analyze;
use crate::CONTENT;

/// The name seeding publishes under (it wakes no one, so nobody reads it).
const SEEDER: &str = "bench-seeder";

/// Messages per seeding transaction: enough that seeding is not bound by one flush per
/// message. (On PostgreSQL 100 beat 1000: 1.3 vs 2.4 ms per message over the first 2000.)
const SEED_BATCH: usize = 100;

/// Creates a group owned by `users[0]` with the others as members; returns its id.
pub fn seed_group(conn: &mut AnyConnection, name: &str, users: &[String]) -> i64 {
    let (owner, others) = users.split_first().expect("a group needs an owner");
    let max_members = chorus::config::defaults::MAX_GROUP_MEMBERS;
    let mut wakes = Wakes::default();
    let group_id = chorus::db::group::group_lifecycle::create_group(
        conn,
        owner,
        name,
        others,
        max_members,
        &mut wakes,
    )
    .expect("seed group through the db layer")
    .expect("a seeded group fits under the cap")
    .group_id;
    publish(conn);
    group_id
}

/// Gives what seeding committed its feed positions, as every tool that writes outside a
/// server must: on SQLite the server publishes only what its own writer stores (on PostgreSQL
/// its once-a-second sweep would find the rows, later), so a feed read after seeding would
/// otherwise miss the seeded changes, and find them all after the server's next write.
fn publish(conn: &mut AnyConnection) {
    again_while_locked(|| publish_now(conn, SEEDER, &Wakes::default()))
        .expect("publish what seeding stored");
}

/// One message of [`CONTENT`] from `sender`, through the same db call as a send.
fn seed_message(
    conn: &mut AnyConnection,
    group_id: i64,
    sender: &str,
    client_msg_id: &str,
) -> Checked<SendOutcome> {
    let author = Author {
        user_id: sender,
        device: None,
    };
    let entry = UserEntry::Message(MessageDraft::text(CONTENT));
    let windows = ChangeWindows {
        recall_secs: defaults::RECALL_WINDOW_SECS,
        edit_secs: defaults::EDIT_WINDOW_SECS,
    };
    let mut wakes = Wakes::default();
    chorus::db::message::messages::send(
        conn,
        GroupId(group_id),
        author,
        client_msg_id,
        &entry,
        windows,
        &mut wakes,
    )
}

/// Runs one seeding transaction and publishes it, each again while SQLite says the database
/// is locked: the server under test may be writing beside the seeder (its push job does), and
/// a transaction that read before another writer committed cannot write and must start over.
fn seed_transaction<F>(conn: &mut AnyConnection, mut f: F) -> diesel::QueryResult<()>
where
    F: FnMut(&mut AnyConnection) -> diesel::QueryResult<()>,
{
    again_while_locked(|| conn.transaction(&mut f))?;
    publish(conn);
    Ok(())
}

/// Runs `f` again, a few milliseconds later, for as long as SQLite answers "locked" (at most
/// 200 times): a seeding statement that meets the server's writer waits its turn.
fn again_while_locked<T>(mut f: impl FnMut() -> diesel::QueryResult<T>) -> diesel::QueryResult<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(diesel::result::Error::DatabaseError(_, info))
                if info.message().contains("locked") && tries < 200 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

/// `prefix-0` … `prefix-(n-1)`.
pub fn users(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Stores `count` messages from `sender`, in transactions
/// of [`SEED_BATCH`] so that seeding is not bound by one flush per message.
pub fn seed_messages(conn: &mut AnyConnection, group_id: i64, sender: &str, count: usize) {
    for start in (0..count).step_by(SEED_BATCH) {
        let end = (start + SEED_BATCH).min(count);
        seed_transaction(conn, |conn| {
            for i in start..end {
                let client_msg_id = format!("seed-{group_id}-{i}");
                let outcome = seed_message(conn, group_id, sender, &client_msg_id)?;
                assert!(
                    matches!(outcome, Ok(SendOutcome::Created(_))),
                    "seeding message {i} in group {group_id} did not create it"
                );
            }
            Ok(())
        })
        .expect("seed messages through the db layer");
        if (start / SEED_BATCH) % 20 == 19 {
            analyze(conn);
        }
    }
    analyze(conn);
}

/// Edits messages 1..=`count` of `sender` in the group: change entries appended to its log,
/// through the same db call as an edit over HTTP, in transactions of [`SEED_BATCH`].
pub fn seed_edits(conn: &mut AnyConnection, group_id: i64, sender: &str, count: usize) {
    let author = Author {
        user_id: sender,
        device: None,
    };
    for start in (1..=count).step_by(SEED_BATCH) {
        let end = (start + SEED_BATCH).min(count + 1);
        seed_transaction(conn, |conn| {
            for target in start..end {
                let entry = UserEntry::Change {
                    change: Change::Edit {
                        content: format!("{CONTENT} (edited)"),
                    },
                    target: MsgId(target as i64),
                };
                let client_msg_id = format!("edit-{group_id}-{target}");
                let outcome = chorus::db::message::messages::send(
                    conn,
                    GroupId(group_id),
                    author,
                    &client_msg_id,
                    &entry,
                    windows(),
                    &mut Wakes::default(),
                )?;
                assert!(
                    matches!(outcome, Ok(SendOutcome::Created(_))),
                    "seeding an edit of message {target} in group {group_id}: {outcome:?}"
                );
            }
            Ok(())
        })
        .expect("seed edits through the db layer");
    }
}

/// The default recall and edit windows.
fn windows() -> ChangeWindows {
    ChangeWindows {
        recall_secs: defaults::RECALL_WINDOW_SECS,
        edit_secs: defaults::EDIT_WINDOW_SECS,
    }
}

/// A phone for each of `users` (device `<user>-phone`) with a push target, as if each had
/// signed in and registered; one transaction.
pub fn seed_push_targets(conn: &mut AnyConnection, users: &[String]) {
    use chorus::db::device::devices::touch_device;
    use chorus::db::device::push_targets::{register_push_target, Caller};
    use chorus::domain::{DeviceId, PushPlatform, PushToken};
    let platform = PushPlatform::parse("apns").expect("platform");
    seed_transaction(conn, |conn| {
        for user in users {
            let device = DeviceId::parse("device", &format!("{user}-phone")).expect("device id");
            touch_device(conn, &device, user, 0)?;
            let token = PushToken::parse(&format!("token-of-{user}")).expect("token");
            let caller = Caller {
                user_id: user,
                device: Some(&device),
            };
            register_push_target(conn, caller, device.as_str(), &platform, &token)?
                .expect("the device registers its own target");
        }
        Ok(())
    })
    .expect("seed push targets through the db layer");
}
