//! The clients of a run: three groups, two connections per sender and one per member device,
//! and how they run through one phase between two kills.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::member::MemberClient;
use super::sender_lane::SenderLane;
use crate::support::client::ApiClient;

const SENDERS: [&str; 4] = ["s1", "s2", "s3", "s4"];
const MEMBERS: [&str; 4] = ["m1", "m2", "m3", "m4"];

/// Members with two devices each, when a run asks for several devices per member: both
/// pull and ack the same groups, each with its own delivered cursor and one shared read cursor.
/// A device id belongs to one user only, hence the user in each.
const TWO_DEVICE_MEMBERS: [&str; 2] = ["m1", "m2"];
const DEVICES: [&str; 2] = ["phone", "laptop"];

pub struct Traffic {
    /// Each group with its owner, who reads it back at the end.
    pub owners: Vec<(i64, &'static str)>,
    pub lanes: Vec<SenderLane>,
    pub members: Vec<MemberClient>,
}

impl Traffic {
    /// Three groups; each sender is in two, each member in two or three. With
    /// `several_devices`, m1 and m2 pull and ack from two devices each.
    pub async fn create(api: &ApiClient, several_devices: bool) -> Traffic {
        let g0 = api
            .create_group("s1", "all", &["s2", "s3", "s4", "m1", "m2", "m3", "m4"])
            .await;
        let g1 = api
            .create_group("s2", "left", &["s1", "m1", "m2", "m3"])
            .await;
        let g2 = api
            .create_group("s3", "right", &["s4", "m2", "m3", "m4"])
            .await;
        let sender_groups = |s: &str| match s {
            "s1" | "s2" => vec![g0, g1],
            _ => vec![g0, g2],
        };
        let member_groups = |m: &str| match m {
            "m1" => vec![g0, g1],
            "m4" => vec![g0, g2],
            _ => vec![g0, g1, g2],
        };
        // Two lanes (connections) per sender, so a sender has two sends in flight at a kill.
        let lanes = (0..SENDERS.len() * 2)
            .map(|i| SenderLane::new(i, SENDERS[i / 2], sender_groups(SENDERS[i / 2])))
            .collect();
        let members = MEMBERS
            .iter()
            .flat_map(|m| {
                let callers: Vec<String> = match several_devices && TWO_DEVICE_MEMBERS.contains(m) {
                    true => DEVICES.iter().map(|d| format!("{m}#{m}-{d}")).collect(),
                    false => vec![m.to_string()],
                };
                callers
                    .iter()
                    .map(|caller| MemberClient::new(caller, member_groups(m)))
                    .collect::<Vec<_>>()
            })
            .collect();
        Traffic {
            owners: vec![(g0, "s1"), (g1, "s2"), (g2, "s3")],
            lanes,
            members,
        }
    }

    /// Another group the senders `senders` send to; `owner` reads it back at the end.
    pub fn add_group(&mut self, group_id: i64, owner: &'static str, senders: &[&str]) {
        self.owners.push((group_id, owner));
        for lane in &mut self.lanes {
            if senders.contains(&lane.user.as_str()) {
                lane.groups.push(group_id);
            }
        }
    }

    /// Every client runs against `api` for `window`; then no new request starts, and
    /// `kill` meets the ones in flight. Returns once every client has stopped.
    pub async fn run_until_killed(
        &mut self,
        api: &ApiClient,
        seed: u64,
        phase: usize,
        window: Duration,
        kill: impl FnOnce(),
    ) {
        let stop = Arc::new(AtomicBool::new(false));
        let lane_tasks: Vec<_> = self
            .lanes
            .drain(..)
            .map(|lane| {
                let rng = rng_for(seed, phase, lane.index);
                tokio::spawn(lane.run_phase(api.clone(), stop.clone(), rng, phase, true))
            })
            .collect();
        let member_tasks: Vec<_> = self
            .members
            .drain(..)
            .enumerate()
            .map(|(i, member)| {
                let rng = rng_for(seed, phase, 100 + i);
                tokio::spawn(member.run_phase(api.clone(), stop.clone(), rng))
            })
            .collect();
        tokio::time::sleep(window).await;
        stop.store(true, Ordering::SeqCst);
        kill();
        for task in lane_tasks {
            self.lanes.push(task.await.expect("sender lane task"));
        }
        for task in member_tasks {
            self.members.push(task.await.expect("member task"));
        }
    }

    /// After the last restart: every send still unanswered, retried until answered.
    pub async fn retry_unanswered(&mut self, api: &ApiClient, seed: u64, phase: usize) {
        let never = Arc::new(AtomicBool::new(false));
        let mut retried = Vec::new();
        for lane in self.lanes.drain(..) {
            let rng = rng_for(seed, phase, lane.index);
            retried.push(
                lane.run_phase(api.clone(), never.clone(), rng, phase, false)
                    .await,
            );
        }
        self.lanes = retried;
    }
}

/// A reproducible generator for one client in one phase of a run.
fn rng_for(seed: u64, phase: usize, client: usize) -> StdRng {
    let mix = (phase as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (client as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    StdRng::seed_from_u64(seed ^ mix)
}
