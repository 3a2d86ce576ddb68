//! The guards (`crate::guard`) for a request on an HTTP/2 stream: the same check as an
//! HTTP/1 request's (`role/http1/guard.rs`), with the same progress kept while the stream
//! waits (`wait.rs`): a `limit_req` delay holds the stream, an `auth_request` location
//! sends the subrequest and holds the stream until its answer, a password verified on the
//! auth pool holds it until the pool answers.

use std::time::Duration;

use ringx_engine::ConnId;
use ringx_http::Request;

use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::guard::limit::ConnSlot;
use crate::guard::{Progress, Verdict};
use crate::role::http1::guard as h1;

/// What a stream's request gets from its location's guard.
pub(super) enum Gate {
    /// It goes on; `limit_conn` counts it while the slot is held (for the stream's life).
    Pass(Option<ConnSlot>),
    /// Answer `status` with these header lines (CRLF-terminated).
    Refuse { status: u16, headers: String },
    /// Over the rate within the burst: look again after this long.
    Delay(Duration),
    /// Ask the `auth_request` upstream (`head` to upstream `.0`), then look again.
    Ask(usize, Vec<u8>),
    /// Its password is being verified on the auth pool: look again when the answer is in.
    Verify,
}

/// Runs the guard of location `at` for `req` (`uri`: its path after rewriting) on stream
/// `who.1` of connection `who.0`, with what was decided for it already (`progress`).
pub(super) fn check(
    cx: &mut Cx,
    b: &mut Base,
    who: (ConnId, u32),
    req: &Request,
    uri: &str,
    at: (usize, usize),
    progress: &mut Progress,
) -> Gate {
    progress.touched = true;
    match h1::check(cx, b, who, req, uri, at, progress) {
        Verdict::Pass => Gate::Pass(progress.conn.take()),
        Verdict::Refuse { status, headers } => Gate::Refuse { status, headers },
        Verdict::Delay(d) => Gate::Delay(d),
        Verdict::Verify => Gate::Verify,
        Verdict::Ask => {
            let routes = &cx.ctx.routes;
            let g = routes.servers[at.0].locations[at.1].guard.as_deref();
            match g.and_then(|g| g.auth_request.as_ref()) {
                Some(a) => Gate::Ask(a.upstream, h1::auth_head(req, &a.uri, b)),
                // Asked for by a location without one (never the case): refused as an error.
                None => Gate::Refuse {
                    status: 500,
                    headers: String::new(),
                },
            }
        }
    }
}
