//! The guards (`crate::guard`) for a request on an HTTP/2 stream: the same check as an
//! HTTP/1 request's (`role/http1/guard.rs`), with what a stream cannot do yet decided
//! at once: a `limit_req` delay is not waited for (the request was charged to the rate and
//! goes on, as with `nodelay`), and an `auth_request` location answers 500 (the subrequest
//! is HTTP/1's), so that no stream ever passes a check an HTTP/1 request would fail.

use ringx_http::Request;

use crate::guard::limit::ConnSlot;
use crate::guard::{Progress, Verdict};
use crate::role::http1::guard as h1;
use crate::zone::client::Base;
use crate::zone::ctx::Cx;

/// What a stream's request gets from its location's guard.
pub(super) enum Gate {
    /// It goes on; `limit_conn` counts it while the slot is held (for the stream's life).
    Pass(Option<ConnSlot>),
    /// Answer `status` with these header lines (CRLF-terminated).
    Refuse { status: u16, headers: String },
}

/// Runs the guard of location `at` for `req` (`uri`: its path after rewriting).
pub(super) fn check(
    cx: &mut Cx,
    b: &mut Base,
    req: &Request,
    uri: &str,
    at: (usize, usize),
) -> Gate {
    let mut progress = Progress::default();
    loop {
        match h1::check(cx, b, req, uri, at, &mut progress) {
            Verdict::Pass => return Gate::Pass(progress.conn.take()),
            Verdict::Refuse { status, headers } => return Gate::Refuse { status, headers },
            // Charged to the rate already (`progress.limited`): the next look goes on to
            // the other checks.
            Verdict::Delay(_) => continue,
            Verdict::Ask => {
                tracing::warn!(
                    "auth_request is not supported for HTTP/2 requests yet: answering 500 (uri {uri})"
                );
                return Gate::Refuse {
                    status: 500,
                    headers: String::new(),
                };
            }
        }
    }
}
