//! Requests answered by the zone itself: routing a request to its server and location, and
//! writing the response of `return`, static-file and missing locations through the response
//! writer.

use std::borrow::Cow;

use ringx_http::{Method, Request};

use crate::response::{ConnHdr, ErrorPage, Reply, Responder};
use crate::route::{Action, FileRoot, Routes};
use crate::static_files::{self, FileReply};

/// Where a request goes: indices of its server and location in the routes (None: no
/// location matches, or the path could not be normalised).
pub type At = Option<(usize, usize)>;

/// The request's cleaned path (None: it cannot be normalised) and where it goes.
pub fn route<'r>(
    routes: &Routes,
    listener: usize,
    req: &Request<'_, 'r>,
) -> (Option<Cow<'r, str>>, At) {
    let path = clean_path(req.path);
    let at = path.as_ref().and_then(|p| {
        let si = routes.server_index(listener, || req.host_name());
        routes.servers[si].location_index(p).map(|li| (si, li))
    });
    (path, at)
}

/// Writes the response of a request the zone answers itself into `out`.
pub fn respond(
    routes: &Routes,
    r: Responder<'_>,
    out: &mut Vec<u8>,
    req: &Request,
    path: &Option<Cow<'_, str>>,
    at: At,
    ch: ConnHdr,
) -> Reply {
    let head_only = req.method == Method::Head;
    if req.path == "*" {
        // OPTIONS * (asterisk-form): what the server supports.
        let allow = "Allow: GET, HEAD, POST, OPTIONS\r\n";
        return Reply::bytes(r.head(out, 200, allow, 0, ch));
    }
    let Some(path) = path else {
        let w = r.error(out, ErrorPage::closing(400).head_only(head_only));
        return Reply {
            written: w,
            file: None,
            close: true,
        };
    };
    match at.map(|(si, li)| &routes.servers[si].locations[li].action) {
        Some(Action::Return(canned)) => Reply::bytes(r.canned(out, canned, ch, head_only)),
        Some(Action::Files(root)) => files(r, out, root, path, req, ch),
        Some(Action::Proxy(_)) => unreachable!("proxied requests do not reach the local responder"),
        None => Reply::bytes(r.error(out, ErrorPage::new(404, ch, head_only))),
    }
}

/// Static files: writes the head (or an error page) into `out`, returns the body part.
fn files(
    r: Responder<'_>,
    out: &mut Vec<u8>,
    root: &FileRoot,
    path: &str,
    req: &Request,
    ch: ConnHdr,
) -> Reply {
    let head_only = req.method == Method::Head;
    let page = |status| ErrorPage::new(status, ch, head_only);
    match static_files::serve(root, path, req.query, req) {
        FileReply::Body {
            status,
            file,
            off,
            len,
            headers,
        } => Reply {
            written: r.head(out, status, &headers, len, ch),
            file: (!head_only).then_some((file, off, len)),
            close: false,
        },
        FileReply::NotModified { headers } => Reply::bytes(r.head(out, 304, &headers, 0, ch)),
        FileReply::Redirect(loc) => {
            let extra = format!("Location: {loc}\r\n");
            Reply::bytes(r.error(out, page(301).extra(&extra)))
        }
        FileReply::Unsatisfiable { size } => {
            let extra = format!("Content-Range: bytes */{size}\r\n");
            Reply::bytes(r.error(out, page(416).extra(&extra)))
        }
        FileReply::Error(405) => {
            Reply::bytes(r.error(out, page(405).extra("Allow: GET, HEAD\r\n")))
        }
        FileReply::Error(st) => Reply::bytes(r.error(out, page(st))),
    }
}

/// Percent-decodes and normalises a request path; borrows it when it is already clean. None:
/// it cannot be normalised (it climbs above the root, or decodes to something invalid).
pub fn clean_path(raw: &str) -> Option<Cow<'_, str>> {
    if is_clean(raw.as_bytes()) {
        return Some(Cow::Borrowed(raw));
    }
    ringx_http::normalize_path(raw).ok().map(Cow::Owned)
}

/// Whether a path needs no normalisation: it starts with '/' and holds no '%', NUL, "//" or
/// "/." (one pass; this runs for every request).
fn is_clean(raw: &[u8]) -> bool {
    if raw.first() != Some(&b'/') {
        return false;
    }
    let mut prev = 0u8;
    for &b in raw {
        match b {
            b'%' | 0 => return false,
            b'/' | b'.' if prev == b'/' => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{clean_path, is_clean};
    use std::borrow::Cow;

    #[test]
    fn clean_paths_are_borrowed() {
        for p in ["/", "/r64", "/a/b.c/d", "/a.b/c..d", "/x-y_z~"] {
            assert!(is_clean(p.as_bytes()), "{p}");
            assert!(matches!(clean_path(p), Some(Cow::Borrowed(_))), "{p}");
        }
    }

    #[test]
    fn paths_needing_work_are_not_clean() {
        for p in [
            "", "r64", "//a", "/a//b", "/./a", "/a/../b", "/a/.", "/%41", "/a\0b",
        ] {
            assert!(!is_clean(p.as_bytes()), "{p:?}");
        }
        assert_eq!(clean_path("/a/../b").unwrap(), "/b");
        assert_eq!(clean_path("/%61").unwrap(), "/a");
    }
}
