//! Requests that came in 0-RTT (`quic_early_data = true`): what RFC 8470 asks of a server
//! and of a proxy.
//!
//! A request is early when its head is read before the handshake is complete: a server's
//! QUIC connection cannot read 1-RTT packets until it has the client's Finished, so what it
//! reads before then came in 0-RTT packets, which an attacker may have replayed. (A request
//! whose 0-RTT packets are read with the Finished is served as a 1-RTT one: the completed
//! handshake proves this connection is the client's own, not a replay.) The transport
//! accepts a ticket's early data once (`ringx_quic::early`); here:
//! - only a safe method (GET, HEAD, OPTIONS: RFC 9110 §9.2.1) is served early; any other
//!   is answered 425 Too Early (RFC 8470 §5.2), which tells the client to send it again
//!   once the handshake is done;
//! - a request served early carries `Early-Data: 1` (§5.1), so an upstream that proxies
//!   gets the same choice, and one that cannot tell can answer 425 itself, which goes back
//!   to the client as it came.

use quinn_proto::Connection;
use ringx_http::decoded::RequestHead;

use crate::metrics::bump;
use crate::metrics::quic::QuicCounters;

/// The methods served in 0-RTT.
const SAFE: &[&[u8]] = &[b"GET", b"HEAD", b"OPTIONS"];

/// RFC 8470 §5.1's field, as the head's lines carry fields.
const EARLY_DATA: &[u8] = b"early-data: 1\r\n";

/// Whether what `quic` delivers now came in 0-RTT (its handshake is not complete).
pub(super) fn reading_early_data(quic: &Connection) -> bool {
    quic.is_handshaking()
}

/// What a request whose head came in 0-RTT gets: Err(425) if its method is not safe;
/// otherwise its fields say `Early-Data: 1` — any `Early-Data` line of the client's own is
/// replaced, so a client cannot hide from the upstream that its request came early.
/// `q`: the zone's counters.
pub(super) fn early_request(q: &QuicCounters, head: &mut RequestHead) -> Result<(), u16> {
    if !SAFE.contains(&head.method.as_slice()) {
        bump(&q.too_early, 1);
        return Err(425);
    }
    bump(&q.early_requests, 1);
    let theirs = |l: &[u8]| l.len() >= 11 && l[..11].eq_ignore_ascii_case(b"early-data:");
    if head.lines.split(|&b| b == b'\n').any(theirs) {
        let mut kept = Vec::with_capacity(head.lines.len());
        for l in head.lines.split_inclusive(|&b| b == b'\n') {
            if !theirs(l) {
                kept.extend_from_slice(l);
            }
        }
        head.lines = kept;
    }
    head.lines.extend_from_slice(EARLY_DATA);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(method: &str, lines: &str) -> RequestHead {
        RequestHead {
            method: method.as_bytes().to_vec(),
            scheme: Some(b"https".to_vec()),
            authority: Some(b"a.test".to_vec()),
            path: Some(b"/".to_vec()),
            lines: lines.as_bytes().to_vec(),
            cookie: Vec::new(),
            host: None,
            content_length: None,
        }
    }

    #[test]
    fn safe_methods_go_with_early_data_and_others_are_too_early() {
        let q = QuicCounters::default();
        for m in ["GET", "HEAD", "OPTIONS"] {
            let mut hd = head(m, "accept: */*\r\n");
            assert_eq!(early_request(&q, &mut hd), Ok(()));
            assert_eq!(hd.lines, b"accept: */*\r\nearly-data: 1\r\n");
        }
        for m in ["POST", "PUT", "DELETE", "PATCH", "get"] {
            assert_eq!(early_request(&q, &mut head(m, "")), Err(425), "{m}");
        }
        let mut hd = head("GET", "Early-Data: 0\r\naccept: */*\r\nearly-data: 1\r\n");
        early_request(&q, &mut hd).unwrap();
        assert_eq!(
            hd.lines, b"accept: */*\r\nearly-data: 1\r\n",
            "the client's own lines give way to ours"
        );
        let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((n(&q.early_requests), n(&q.too_early)), (4, 5));
    }
}
