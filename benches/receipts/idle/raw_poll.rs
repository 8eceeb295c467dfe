//! One long-poll per TCP connection, written as raw HTTP/1.1 from a tokio task, and its answer
//! read to the end of its `content-length` body.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::IDLE_POLL_TIMEOUT_S;

/// What one raw long-poll got: its user's index, when the answer arrived, and its status
/// (or the error).
pub struct PollAnswer {
    pub user: usize,
    pub at: Instant,
    pub status: Result<u16, String>,
}

/// One long-poll over its own TCP connection: connect, write the request (bounded by the
/// connect semaphore), then wait for the whole answer.
pub async fn raw_poll(
    port: u16,
    request: String,
    permits: Arc<tokio::sync::Semaphore>,
    opened: Arc<AtomicUsize>,
) -> Result<u16, String> {
    let permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    drop(request);
    drop(permit);
    opened.fetch_add(1, Ordering::Relaxed);
    let limit = Duration::from_secs(IDLE_POLL_TIMEOUT_S + 15);
    let mut buf = Vec::with_capacity(512);
    let answer = tokio::time::timeout(limit, async {
        loop {
            if let Some(status) = complete_response(&buf) {
                return Ok(status);
            }
            let mut chunk = [0u8; 1024];
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return parse_status(&buf).ok_or_else(|| "closed without an answer".to_owned());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    answer.unwrap_or_else(|_| Err("no answer in time".into()))
}

fn parse_status(buf: &[u8]) -> Option<u16> {
    let line = buf.split(|b| *b == b'\r').next()?;
    std::str::from_utf8(line)
        .ok()?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// The status once the head and a `content-length` body have arrived.
fn complete_response(buf: &[u8]) -> Option<u16> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let length: usize = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })?;
    (buf.len() >= head_end + length).then(|| parse_status(buf))?
}
