//! The HTTP/1 role's side of the proxy cache (`crate::cache`): looking a request up, writing
//! an answer from the cache, the capture a fill's exchange carries, and storing what it
//! brought. The role acts on the decisions (`Http1::cache_step` and the completions in
//! `proxy.rs`).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use ringx_engine::ConnId;
use ringx_http::Request;

use crate::cache::fill::Asked;
use crate::cache::fill::Fill;
use crate::cache::loc::{count, Ctx, Decision};
use crate::cache::object::Object;
use crate::cache::Found;
use crate::ctx::base::Base;
use crate::ctx::Cx;
use crate::response::{ConnHdr, FilePart, Written};
use crate::role::exchange::capture::Capture;

/// What the cache of location `at` does with `req`; None: the location has no cache.
pub(crate) fn decide(
    cx: &Cx,
    b: &Base,
    req: &Request,
    uri: &str,
    at: (usize, usize),
    keep: bool,
    waiting: Option<(Instant, u32)>,
) -> Option<Decision> {
    let cl = cx.ctx.routes.servers[at.0].locations[at.1]
        .cache
        .as_deref()?;
    let ctx = Ctx {
        client: b.real_ip.or(b.addr.map(|a| a.ip())),
        tls: b.tr.is_tls(),
        uri,
        keep,
        now: cx.io.now(),
        now_ms: cx.ctx.wall_ms(cx.io.now()),
        waiting,
    };
    Some(cl.decide(req, &ctx))
}

/// The capture of a request the cache passes by (counted, and its status on the response).
pub(crate) fn passing(cx: &Cx, at: (usize, usize), status: &'static str) -> Capture {
    let cl = cx.ctx.routes.servers[at.0].locations[at.1].cache.as_deref();
    Capture {
        to_client: true,
        client: true,
        client_line: cl.map_or_else(Vec::new, |cl| cl.status_line(status)),
        client_status: status,
        ..Capture::default()
    }
}

/// The capture of a fill: the response goes to the client and is kept, up to the cache's
/// largest object.
pub(crate) fn filling(fill: Box<Fill>, to_client: bool) -> Capture {
    Capture {
        to_client,
        client: to_client,
        client_line: fill.status_line.clone(),
        client_status: fill.status,
        body_limit: fill.zone.max_object as usize,
        fill: Some(fill),
        ..Capture::default()
    }
}

/// Writes the answer from `found` for what `asked` asked, with cache status `status`.
/// Returns what was written and the file part of the body (an entry kept on disk).
pub(crate) fn write_found(
    cx: &mut Cx,
    b: &mut Base,
    c: ConnId,
    found: Found,
    status: &'static str,
    line: &[u8],
    asked: &Asked,
) -> Option<(Written, Option<FilePart>)> {
    let (obj, file) = match found {
        Found::Mem(o) => (o, None),
        Found::Disk(o, f, off) => (o, Some((f, off))),
    };
    // A status told instead of the stored one leaves no 304 to make.
    let nm = asked.status_as.is_none()
        && asked
            .if_none_match
            .as_deref()
            .is_some_and(|v| obj.matches_etag(v));
    let ch = ConnHdr::new(asked.version11, asked.keep);
    let now = cx.ctx.wall_ms(cx.io.now());
    let out = b.tr.out_buf(cx.io, c)?;
    let w = write_object(
        &obj,
        out,
        now,
        line,
        ch,
        (asked.head_only, asked.status_as),
        nm,
        file.is_some(),
    );
    cx.ctx.log.status(cx.io, c, w, b);
    cx.ctx.log.cache_status(c, status);
    count(&cx.ctx.log.counters, status);
    let part = file
        .filter(|_| !asked.head_only && !nm && obj.body_len > 0)
        .map(|(f, off)| (Rc::new(f), off, obj.body_len));
    Some((w, part))
}

/// Writes the response for a hit into `out`: status line, the stored fields, `Age`, the
/// cache status line (`status_line`, may be empty), framing and connection; the body
/// unless `head_only` or `not_modified` (a 304 for the client's validator), and unless
/// the body is on disk (`body_follows`: the caller sends it). `status_as`: the status the
/// client is told instead of the stored one (an `error_page` without `=`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_object(
    obj: &Object,
    out: &mut Vec<u8>,
    now: u64,
    status_line: &[u8],
    ch: ConnHdr,
    (head_only, status_as): (bool, Option<u16>),
    not_modified: bool,
    body_follows: bool,
) -> Written {
    let before = out.len();
    let status = if not_modified {
        304
    } else {
        status_as.unwrap_or(obj.status)
    };
    ringx_http::write_status_line(out, status);
    out.extend_from_slice(&obj.head);
    let age = now.saturating_sub(obj.stored) / 1000;
    out.extend_from_slice(b"Age: ");
    out.extend_from_slice(age.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(status_line);
    if status != 304 && status != 204 {
        out.extend_from_slice(b"Content-Length: ");
        out.extend_from_slice(obj.body_len.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(ch.bytes());
    out.extend_from_slice(b"\r\n");
    let head_len = (out.len() - before) as u32;
    if !head_only && !not_modified && !body_follows {
        out.extend_from_slice(&obj.body);
    }
    Written { status, head_len }
}

/// The client's fields a fill does not forward: its own validators and ranges (the cache
/// wants the whole, current response).
pub(crate) const FILL_DROP: [&str; 6] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
];

/// The cache's validators for a fill that revalidates its stale copy (field lines).
pub(crate) fn validators(fill: &Fill, out: &mut Vec<u8>) {
    let Some(s) = fill
        .stale
        .as_ref()
        .filter(|_| fill.mode != crate::cache::fill::Mode::Fetch)
    else {
        return;
    };
    for (name, v) in [
        ("If-None-Match", &s.etag),
        ("If-Modified-Since", &s.last_modified),
    ] {
        if let Some(v) = v {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// What a request asked, for an answer written now.
pub(crate) fn asked_now(req: &Request, keep: bool) -> Asked {
    Asked {
        head_only: req.method == ringx_http::Method::Head,
        version11: req.version == ringx_http::Version::Http11,
        keep,
        fields: Vec::new(),
        if_none_match: req.header("if-none-match").map(<[u8]>::to_vec),
        status_as: None,
    }
}

/// A fill's response reached the client whole: stored if it may be.
pub(crate) fn finish(cap: &mut Capture, now: u64) {
    if let Some(mut fill) = cap.fill.take() {
        let whole = cap.complete && !cap.overflow;
        if let Some(built) = fill.object(&cap.head, &cap.body, now).filter(|_| whole) {
            fill.store(built);
        }
    }
}

/// A background update (or a fill turned into one) ended: the entry stored or refreshed
/// (a 304). Returns the object the client can be answered from, and its status: the new or
/// refreshed entry, else the stale copy.
pub(crate) fn settle(
    cap: &mut Capture,
    fill: &mut Fill,
    now: u64,
) -> Option<(Arc<Object>, &'static str)> {
    if cap.complete && cap.status == 304 {
        if let Some(built) = fill.refreshed(&cap.head, now) {
            return Some((fill.store(built), "REVALIDATED"));
        }
    } else if cap.complete && !cap.overflow && !fill.stale_for_status {
        if let Some(built) = fill.object(&cap.head, &cap.body, now) {
            return Some((fill.store(built), "MISS"));
        }
    }
    fill.stale.clone().map(|s| (s, "STALE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Object {
        Object {
            key: b"k".to_vec().into(),
            status: 200,
            head: b"Content-Type: text/plain\r\nETag: W/\"v1\"\r\n"
                .to_vec()
                .into(),
            body: b"hello".to_vec().into(),
            body_len: 5,
            stored: 1_000_000,
            fresh_until: 1_060_000,
            swr_until: 1_060_000,
            sie_until: 1_060_000,
            vary: Vec::new(),
            marker: false,
            etag: Some("W/\"v1\"".into()),
            last_modified: None,
        }
    }

    #[test]
    fn a_hit_is_written_with_age_status_and_length() {
        let mut out = Vec::new();
        let w = write_object(
            &obj(),
            &mut out,
            1_003_000,
            b"X-Cache-Status: HIT\r\n",
            ConnHdr::Keep11,
            (false, None),
            false,
            false,
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nETag: W/\"v1\"\r\nAge: 3\r\n\
             X-Cache-Status: HIT\r\nContent-Length: 5\r\n\r\nhello"
        );
        assert_eq!(w.head_len as usize, text.len() - 5);
        let mut out = Vec::new();
        let w = write_object(
            &obj(),
            &mut out,
            1_003_000,
            b"",
            ConnHdr::Close,
            (false, None),
            true,
            false,
        );
        assert_eq!(w.status, 304);
        assert!(out.ends_with(b"Connection: close\r\n\r\n"));
    }
}
