//! Requests the HTTP/1 parser refuses before the application sees them (a URL too long, too
//! many headers, ambiguous framing). actix-http answers these itself, with an empty body and
//! no hook to give them the JSON envelope, so openapi.yaml lists them; what Chorus controls is
//! the log: they are the client's mistakes, logged as such, never as server errors.
//!
//! Runs on SQLite only: the parser refuses these before any route or database is involved.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::child_server::start_healthy;

/// A request that cannot be parsed, and the status the spec documents for it.
struct Unparsable {
    what: &'static str,
    head: String,
    status: u16,
}

fn unparsable_requests(host: &str) -> Vec<Unparsable> {
    let long_url = format!(
        "GET /v1/sync?cursor={} HTTP/1.1\r\nHost: {host}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let many_headers = {
        let extra: String = (0..200).map(|i| format!("X-Filler-{i}: {i}\r\n")).collect();
        format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
    };
    let two_lengths = format!(
        "POST /v1/groups HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\
         Content-Length: 3\r\n\r\n{{}}"
    );
    let length_and_chunked = format!(
        "POST /v1/groups HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\
         Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    vec![
        Unparsable {
            what: "a 100 KiB URL",
            head: long_url,
            status: 400,
        },
        Unparsable {
            what: "200 extra headers",
            head: many_headers,
            status: 431,
        },
        Unparsable {
            what: "two Content-Length headers",
            head: two_lengths,
            status: 400,
        },
        Unparsable {
            what: "Content-Length and Transfer-Encoding together",
            head: length_and_chunked,
            status: 400,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_get_their_documented_status_and_are_not_logged_as_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, _) = start_healthy(dir.path(), None, &[("CHORUS_LOG", "info")]).await;
    let host = format!("127.0.0.1:{}", server.port);

    for request in unparsable_requests(&host) {
        let answer = raw_exchange(&host, &request.head).await;
        let status = status_of(&answer);
        assert_eq!(
            status, request.status,
            "{}: the status openapi.yaml documents; got {answer:?}",
            request.what
        );
    }
    // The refusals are logged once the connection closes: give the log a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let log = server.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "a client's malformed request is not a server error: {errors:#?}"
    );
    let refusals = log
        .lines()
        .filter(|l| l.contains("refused a request it could not parse"))
        .count();
    assert_eq!(
        refusals, 4,
        "each refusal is logged once, as the client's mistake:\n{log}"
    );
}

#[test]
fn the_spec_lists_the_errors_that_carry_no_json_envelope() {
    let spec = include_str!("../../openapi.yaml");
    for must_say in [
        "Errors without the JSON envelope",
        "`400`",
        "`408`",
        "`431`",
    ] {
        assert!(spec.contains(must_say), "openapi.yaml says {must_say:?}");
    }
}

/// Writes `head` on a fresh connection and reads until the server closes it (it closes after
/// refusing a request it cannot parse).
async fn raw_exchange(host: &str, head: &str) -> String {
    let mut stream = TcpStream::connect(host).await.expect("connect");
    // The server may answer and close before it has read everything; a failed write then is
    // part of the exchange, not an error of the test.
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server closed the connection in time");
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
