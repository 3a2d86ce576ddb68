//! What the access log keeps of a request on a stream, from its start to its log line (an
//! HTTP/1 connection logs from its parsed request and connection instead).

use std::time::Instant;

use crate::accesslog::Entry;
use crate::ctx::base::Base;
use crate::ctx::Cx;

/// What the access log keeps of a request.
pub(crate) struct RequestLog {
    pub request: Vec<u8>,
    pub referer: Vec<u8>,
    pub user_agent: Vec<u8>,
    /// The request's `$request_id`, made at its start when the log is JSON (the one its
    /// headers send is the one logged).
    pub request_id: Option<[u8; 32]>,
}

/// How a stream's response ended, for its log line.
pub(crate) struct Ended {
    pub start: Instant,
    /// The response's status; 0: none was sent (logged as 499).
    pub status: u16,
    pub body_bytes: u64,
    /// The proxy cache's status ("" where the location has no cache).
    pub cache: &'static str,
}

impl RequestLog {
    /// The log's view of a new request: its line ("METHOD path HTTP/2.0", `version` the
    /// last part).
    pub fn of(head: &ringx_h2proto::RequestHead, version: &str) -> RequestLog {
        let mut request = head.method.clone();
        request.push(b' ');
        request.extend_from_slice(head.path.as_deref().unwrap_or(b"-"));
        request.push(b' ');
        request.extend_from_slice(version.as_bytes());
        RequestLog {
            request,
            referer: Vec::new(),
            user_agent: Vec::new(),
            request_id: None,
        }
    }
}

/// Counts a stream's response and writes its access log line (`log`: None where the log is
/// off).
pub(crate) fn log_end(cx: &mut Cx, b: &Base, log: Option<&RequestLog>, e: Ended) {
    let status = match e.status {
        0 => 499,
        s => s,
    };
    let Some(l) = log else {
        return cx.ctx.log.stream_end(cx.io, None, status);
    };
    let entry = Entry {
        client: b.addr,
        tls: b.tr.tls_info(),
        request: &l.request,
        status,
        body_bytes: e.body_bytes,
        referer: &l.referer,
        user_agent: &l.user_agent,
        request_time: cx.io.now().saturating_duration_since(e.start),
        zone: cx.ctx.id,
        cache: e.cache,
        request_id: l.request_id,
    };
    cx.ctx.log.stream_end(cx.io, Some(entry), status);
}
