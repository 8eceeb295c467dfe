//! The processes that hold the idle long-polls. A process can hold only as many sockets as its
//! open-file limit allows (`ulimit -n`; 20,000 on the bench's host, and not raisable), so the
//! polls are split over child processes of this bench, each started as `receipts idle-holder <file>`:
//! it reads its polls from the file, opens them, and reports on stdout, one line each:
//!
//! - `opened <written> <rss growth KiB>` once every request is written (or the open limit
//!   passed);
//! - `answer <user> <unix nanos> <status>` for each poll that answers (`<status>` is the
//!   HTTP status, or `error: …`).
//!
//! The parent turns the lines back into [`PollAnswer`]s; the wall clock carries the answer's
//! time across processes (one machine, one clock).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::raw_poll::{raw_poll, PollAnswer};
use super::{IDLE_CONNECT_CONCURRENCY, IDLE_OPEN_LIMIT, IDLE_POLL_TIMEOUT_S};
use crate::support::proc_status::{open_file_limit, rss_kib};

/// Polls per holder process: three quarters of the open-file limit the holders inherit, the
/// rest left for the process's own files (15,000 under a limit of 20,000). Where the limit
/// cannot be read, that of a default Linux shell (1,024) is assumed.
pub fn polls_per_holder() -> usize {
    const ASSUMED_LIMIT: u64 = 1024;
    let limit = open_file_limit().unwrap_or(ASSUMED_LIMIT);
    usize::try_from(limit / 4 * 3).unwrap_or(usize::MAX).max(1)
}

/// The subcommand a holder process is started with.
pub const HOLDER_COMMAND: &str = "idle-holder";

/// One poll to hold: whose it is (the user's index), where, and with what.
pub struct PollSpec {
    pub user: usize,
    pub port: u16,
    pub token: String,
    pub cursor: String,
}

/// The holders of a run, killed when dropped.
pub struct Holders {
    children: Vec<Child>,
    pub answers: UnboundedReceiver<PollAnswer>,
    /// Requests written, over all holders.
    pub opened: Arc<AtomicUsize>,
    /// Holders that have written all their requests.
    pub done_opening: Arc<AtomicUsize>,
    /// The holders' RSS growth for their polls, KiB, summed.
    pub rss_growth_kib: Arc<AtomicU64>,
}

/// Starts one holder per [`polls_per_holder`] polls; their files live in `dir`.
pub fn start_holders(polls: &[PollSpec], dir: &std::path::Path) -> Result<Holders, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let (tx, answers) = unbounded_channel();
    let clock = WallClock::now();
    // Built first, so that its Drop stops the holders already started if a later one fails.
    let mut holders = Holders {
        children: Vec::new(),
        answers,
        opened: Arc::new(AtomicUsize::new(0)),
        done_opening: Arc::new(AtomicUsize::new(0)),
        rss_growth_kib: Arc::new(AtomicU64::new(0)),
    };
    for (i, share) in polls.chunks(polls_per_holder()).enumerate() {
        let path = dir.join(format!("holder-{i}.tsv"));
        write_specs(&path, share)?;
        let mut child = Command::new(&exe)
            .arg(HOLDER_COMMAND)
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a poll holder: {e}"))?;
        let stdout = child.stdout.take();
        holders.children.push(child);
        let stdout = stdout.ok_or("a holder without stdout")?;
        let report = Report {
            holder: i,
            tx: tx.clone(),
            opened: holders.opened.clone(),
            done_opening: holders.done_opening.clone(),
            rss_growth_kib: holders.rss_growth_kib.clone(),
            clock,
        };
        std::thread::Builder::new()
            .name(format!("holder-{i}-reports"))
            .spawn(move || read_reports(stdout, &report))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
    }
    Ok(holders)
}

impl Holders {
    /// How many holder processes were started.
    pub fn count(&self) -> usize {
        self.children.len()
    }

    /// What went wrong with the holders so far: one that has not reported its polls written,
    /// or that has exited (a holder runs until the run ends).
    pub fn problems(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let (done, count) = (self.done_opening.load(Ordering::Relaxed), self.count());
        if done < count {
            problems.push(format!(
                "{} of {count} holders did not report their polls written",
                count - done
            ));
        }
        for (i, child) in self.children.iter_mut().enumerate() {
            match child.try_wait() {
                Ok(Some(status)) => problems.push(format!("holder {i} exited: {status}")),
                Ok(None) => {}
                Err(e) => problems.push(format!("holder {i}: {e}")),
            }
        }
        problems
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn write_specs(path: &std::path::Path, specs: &[PollSpec]) -> Result<(), String> {
    let mut text = String::new();
    for s in specs {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            s.user, s.port, s.token, s.cursor
        ));
    }
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Where a holder's lines go in the parent.
struct Report {
    holder: usize,
    tx: UnboundedSender<PollAnswer>,
    opened: Arc<AtomicUsize>,
    done_opening: Arc<AtomicUsize>,
    rss_growth_kib: Arc<AtomicU64>,
    clock: WallClock,
}

/// Reads a holder's lines until it exits (on a thread of its own: the pipe blocks). A line
/// it cannot read is printed, so a change to the protocol cannot go unnoticed.
fn read_reports(stdout: ChildStdout, report: &Report) {
    for line in BufReader::new(stdout).lines() {
        match line {
            Ok(line) => {
                if !report.take(&line) {
                    eprintln!("idle: holder {} said {line:?}", report.holder);
                }
            }
            Err(e) => {
                eprintln!("idle: holder {}'s output: {e}", report.holder);
                return;
            }
        }
    }
}

impl Report {
    /// Takes one line of a holder's; false when it is not one of the protocol's.
    fn take(&self, line: &str) -> bool {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("opened"), Some(written), Some(rss), None) => {
                let (Ok(written), Ok(rss)) = (written.parse::<usize>(), rss.parse::<u64>()) else {
                    return false;
                };
                self.opened.fetch_add(written, Ordering::Relaxed);
                self.rss_growth_kib.fetch_add(rss, Ordering::Relaxed);
                self.done_opening.fetch_add(1, Ordering::Relaxed);
                true
            }
            (Some("answer"), Some(user), Some(nanos), Some(status)) => {
                let (Ok(user), Ok(nanos)) = (user.parse(), nanos.parse()) else {
                    return false;
                };
                let status = status
                    .parse::<u16>()
                    .map_err(|_| status.trim_start_matches("error: ").to_owned());
                let at = self.clock.instant_of(nanos);
                let _ = self.tx.send(PollAnswer { user, at, status });
                true
            }
            _ => false,
        }
    }
}

/// An [`Instant`] and the wall clock read together, to place another process's wall-clock
/// times on this process's monotonic clock.
#[derive(Clone, Copy)]
struct WallClock {
    instant: Instant,
    unix_nanos: u128,
}

impl WallClock {
    fn now() -> WallClock {
        WallClock {
            instant: Instant::now(),
            unix_nanos: unix_nanos(),
        }
    }

    fn instant_of(&self, unix_nanos: u128) -> Instant {
        let nanos = |d: u128| Duration::from_nanos(u64::try_from(d).unwrap_or(u64::MAX));
        if unix_nanos >= self.unix_nanos {
            self.instant + nanos(unix_nanos - self.unix_nanos)
        } else {
            self.instant
                .checked_sub(nanos(self.unix_nanos - unix_nanos))
                .unwrap_or(self.instant)
        }
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The holder process: opens the polls of `file`, reports, and runs until every poll has
/// answered (or the parent kills it).
pub async fn holder_main(file: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("read {file}: {e}"))?;
    let specs: Vec<PollSpec> = text
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            match f[..] {
                [user, port, token, cursor] => Ok(PollSpec {
                    user: user.parse().map_err(|_| format!("bad user in {line:?}"))?,
                    port: port.parse().map_err(|_| format!("bad port in {line:?}"))?,
                    token: token.to_owned(),
                    cursor: cursor.to_owned(),
                }),
                _ => Err(format!("bad line {line:?}")),
            }
        })
        .collect::<Result<_, _>>()?;
    let rss_before = rss_kib(std::process::id());
    let permits = Arc::new(tokio::sync::Semaphore::new(IDLE_CONNECT_CONCURRENCY));
    let opened = Arc::new(AtomicUsize::new(0));
    // Each answer's time is read in its task as the answer completes, before it waits for
    // this process's output.
    let (tx, mut answers) = unbounded_channel::<(usize, u128, Result<u16, String>)>();
    for spec in &specs {
        let request = format!(
            "GET /v1/sync?cursor={}&timeout_s={IDLE_POLL_TIMEOUT_S} HTTP/1.1\r\n\
             Host: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            spec.cursor, spec.port, spec.token
        );
        let (permits, opened, tx) = (permits.clone(), opened.clone(), tx.clone());
        let (user, port) = (spec.user, spec.port);
        tokio::spawn(async move {
            let status = raw_poll(port, request, permits, opened).await;
            let _ = tx.send((user, unix_nanos(), status));
        });
    }
    drop(tx);
    let started = Instant::now();
    while opened.load(Ordering::Relaxed) < specs.len() && started.elapsed() < IDLE_OPEN_LIMIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let growth = rss_kib(std::process::id()).saturating_sub(rss_before);
    say(&format!(
        "opened {} {growth}",
        opened.load(Ordering::Relaxed)
    ));
    while let Some((user, at, status)) = answers.recv().await {
        let status = match status {
            Ok(code) => code.to_string(),
            Err(e) => format!("error: {e}"),
        };
        say(&format!("answer {user} {at} {status}"));
    }
    Ok(())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
