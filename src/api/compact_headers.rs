//! Request header maps sized to the headers a request has.
//!
//! actix-http gives every request head a header map with room for 16 headers (about 6.5 KiB:
//! each entry keeps inline room for four values), and a request keeps its head until it is
//! answered. Most requests send three to eight headers and answer in a millisecond, but a
//! long-poll holds its head for up to a minute, and ten thousand of them waiting held some
//! 60 MiB of empty header slots. Rebuilding the map at its own size costs one small
//! allocation per request; heads are pooled per worker, so a head that was compacted once
//! is usually already small the next time.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderMap;
use actix_web::middleware::Next;

/// Runs every request with its header map compacted (see the module documentation).
pub async fn compact(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    shrink_to_fit(req.headers_mut());
    next.call(req).await
}

/// Replaces `headers` with a map of the same entries and room for little more, unless it is
/// already small for them. The values move (their bytes are shared, not copied), in order.
fn shrink_to_fit(headers: &mut HeaderMap) {
    let keys = headers.len_keys();
    if headers.capacity() <= 2 * keys.max(2) {
        return;
    }
    let mut compact = HeaderMap::with_capacity(keys);
    for (name, value) in std::mem::take(headers) {
        compact.append(name, value);
    }
    *headers = compact;
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, HOST};

    fn header(value: &'static str) -> HeaderValue {
        HeaderValue::from_static(value)
    }

    #[test]
    fn a_roomy_map_keeps_every_header_and_every_repeated_value_in_order() {
        let mut headers = HeaderMap::with_capacity(16);
        headers.insert(HOST, header("127.0.0.1"));
        headers.append(ACCEPT, header("application/json"));
        headers.append(ACCEPT, header("text/plain"));
        headers.insert(AUTHORIZATION, header("Bearer t"));
        let custom = HeaderName::from_static("x-request-id");
        headers.insert(custom.clone(), header("abc"));
        let before = headers.capacity();

        shrink_to_fit(&mut headers);

        assert!(
            headers.capacity() < before,
            "{} !< {before}",
            headers.capacity()
        );
        assert_eq!(headers.len(), 5);
        assert_eq!(headers.len_keys(), 4);
        let accepts: Vec<_> = headers.get_all(ACCEPT).collect();
        assert_eq!(
            accepts,
            [&header("application/json"), &header("text/plain")]
        );
        assert_eq!(headers.get(HOST), Some(&header("127.0.0.1")));
        assert_eq!(headers.get(AUTHORIZATION), Some(&header("Bearer t")));
        assert_eq!(headers.get(custom), Some(&header("abc")));
    }

    #[test]
    fn a_map_already_its_size_is_left_alone_and_an_empty_one_stays_empty() {
        let mut small = HeaderMap::with_capacity(2);
        small.insert(HOST, header("h"));
        let capacity = small.capacity();
        shrink_to_fit(&mut small);
        assert_eq!(small.capacity(), capacity);
        assert_eq!(small.get(HOST), Some(&header("h")));

        let mut empty = HeaderMap::with_capacity(16);
        shrink_to_fit(&mut empty);
        assert!(empty.is_empty());
    }
}
