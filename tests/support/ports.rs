//! Free TCP ports on 127.0.0.1, for servers that must be told their port before they start.

/// A port the system just handed out and released. Another process could take it before the
/// server binds it; on a test machine that race is rare enough to accept.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}
