//! Static files beneath a `root` or `alias` directory: path mapping that cannot escape the
//! directory (`openat2` with `RESOLVE_BENEATH`, so `..` and symlinks pointing outside are
//! refused by the kernel itself), index files, validators (Last-Modified, ETag) with
//! conditional requests, and single byte ranges.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ringx_http::{parse_http_date, Method, Request};

use super::mime;
use super::route::FileRoot;

/// What to answer.
pub enum FileReply {
    /// 200 or 206: send `len` bytes from `off`; `headers` are the entity headers.
    Body {
        status: u16,
        file: Rc<File>,
        off: u64,
        len: u64,
        headers: String,
        /// The type of what the path names (of the file before compression).
        ctype: &'static str,
        /// A precompressed file was chosen (`headers` has its `Content-Encoding`).
        encoded: bool,
    },
    NotModified {
        headers: String,
        ctype: &'static str,
    },
    /// 301 to the directory with a trailing slash.
    Redirect(String),
    /// 416 for a range beyond the end.
    Unsatisfiable {
        size: u64,
    },
    Error(u16),
}

/// `openat2(2)`'s `struct open_how` (Linux 5.6).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

fn open_beneath(dir: &FileRoot, rel: &str) -> io::Result<File> {
    let rel = if rel.is_empty() { "." } else { rel };
    let c = std::ffi::CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64,
        mode: 0,
        resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 reads a NUL-terminated path and `size_of::<OpenHow>()` bytes of a live
    // struct laid out as the kernel's open_how; a non-negative result is a new descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

fn status_of(e: &io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => 404,
        // EXDEV: the path (or a symlink in it) leads outside the directory.
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EXDEV) | Some(libc::ELOOP) => 403,
        _ => 500,
    }
}

fn etag(m: &std::fs::Metadata) -> String {
    format!("\"{:x}-{:x}\"", m.mtime(), m.size())
}

/// A precompressed variant to look for: the file's suffix and its `Content-Encoding`.
pub type Precompressed = (&'static str, &'static str);

/// The path relative to the root's directory (`alias`: the location's prefix stripped).
fn relative<'p>(root: &FileRoot, path: &'p str) -> &'p str {
    let rel = match &root.strip_prefix {
        Some(p) => path.strip_prefix(p.as_str()).unwrap_or(path),
        None => path,
    };
    rel.trim_start_matches('/')
}

/// Whether `path` (decoded, normalised) names a regular file beneath the root, or a directory
/// when `dir` (`try_files`).
pub fn exists(root: &FileRoot, path: &str, dir: bool) -> bool {
    open_beneath(root, relative(root, path))
        .and_then(|f| f.metadata())
        .is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
}

/// Resolves `path` (already percent-decoded, normalised, starting with '/') under `root`.
/// `pre`: precompressed variants the client accepts, best first (`FILE.gz` beside `FILE`,
/// nginx's `gzip_static`); the first that exists is served instead, with its own validators.
pub fn serve(
    root: &FileRoot,
    path: &str,
    query: Option<&str>,
    req: &Request,
    pre: &[Precompressed],
) -> FileReply {
    if !matches!(req.method, Method::Get | Method::Head) {
        return FileReply::Error(405);
    }
    let rel = relative(root, path);
    let mut file = match open_beneath(root, rel) {
        Ok(f) => f,
        Err(e) => return FileReply::Error(status_of(&e)),
    };
    let mut meta = match file.metadata() {
        Ok(m) => m,
        Err(_) => return FileReply::Error(500),
    };
    let mut served_path = path.to_string();
    let mut served_rel = rel.to_string();
    if meta.is_dir() {
        if !path.ends_with('/') {
            let mut loc = format!("{path}/");
            if let Some(q) = query {
                loc.push('?');
                loc.push_str(q);
            }
            return FileReply::Redirect(loc);
        }
        let mut found = None;
        for idx in &root.index {
            let candidate = format!(
                "{rel}{}{idx}",
                if rel.is_empty() || rel.ends_with('/') {
                    ""
                } else {
                    "/"
                }
            );
            if let Ok(f) = open_beneath(root, &candidate) {
                if let Ok(m) = f.metadata() {
                    if m.is_file() {
                        found = Some((f, m, format!("{path}{idx}"), candidate));
                        break;
                    }
                }
            }
        }
        match found {
            Some((f, m, p, r)) => {
                file = f;
                meta = m;
                served_path = p;
                served_rel = r;
            }
            None => return FileReply::Error(403),
        }
    }
    if !meta.is_file() {
        return FileReply::Error(403);
    }
    let ctype = mime::content_type(&served_path);
    let mut encoding = None;
    for (ext, token) in pre {
        let Ok(f) = open_beneath(root, &format!("{served_rel}{ext}")) else {
            continue;
        };
        if let Ok(m) = f.metadata() {
            if m.is_file() {
                (file, meta, encoding) = (f, m, Some(*token));
                break;
            }
        }
    }
    let size = meta.size();
    let mtime = UNIX_EPOCH + Duration::from_secs(meta.mtime().max(0) as u64);
    let last_modified = ringx_http::fmt_http_date(mtime);
    let tag = etag(&meta);
    let mut headers = format!(
        "Content-Type: {ctype}\r\nLast-Modified: {last_modified}\r\nETag: {tag}\r\nAccept-Ranges: bytes\r\n",
    );
    if let Some(token) = encoding {
        headers.push_str("Content-Encoding: ");
        headers.push_str(token);
        headers.push_str("\r\n");
    }
    match preconditions(req, &tag, mtime, SystemTime::now()) {
        Precondition::Proceed => {}
        Precondition::NotModified => return FileReply::NotModified { headers, ctype },
        Precondition::Failed => return FileReply::Error(412),
    }
    let (status, off, len) = match range(req, size, &tag, &last_modified) {
        RangeSel::Full => (200, 0, size),
        RangeSel::Part(a, b) => {
            headers.push_str(&format!("Content-Range: bytes {a}-{b}/{size}\r\n"));
            (206, a, b - a + 1)
        }
        RangeSel::Unsatisfiable => return FileReply::Unsatisfiable { size },
    };
    FileReply::Body {
        status,
        file: Rc::new(file),
        off,
        len,
        headers,
        ctype,
        encoded: encoding.is_some(),
    }
}

/// The file an error page names (an index file for a directory path): whatever the request's
/// method and preconditions were, an error page is its whole file.
pub fn page(root: &FileRoot, path: &str) -> Option<(Rc<File>, u64, &'static str)> {
    let rel = relative(root, path);
    let (rel, shown) = if path.ends_with('/') {
        let idx = root.index.first()?;
        (format!("{rel}{idx}"), format!("{path}{idx}"))
    } else {
        (rel.to_string(), path.to_string())
    };
    let f = open_beneath(root, &rel).ok()?;
    let m = f.metadata().ok().filter(|m| m.is_file())?;
    Some((Rc::new(f), m.size(), mime::content_type(&shown)))
}

fn header_str<'b>(req: &Request<'_, 'b>, name: &str) -> Option<&'b str> {
    req.header(name)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
}

/// What the conditional fields say about a GET or HEAD.
#[derive(Debug, PartialEq, Eq)]
enum Precondition {
    Proceed,
    /// 304.
    NotModified,
    /// 412.
    Failed,
}

/// The preconditions in RFC 9110 §13.2.2's order: If-Match, else If-Unmodified-Since (412 when
/// false); then If-None-Match, else If-Modified-Since (304 when false). A field whose value is
/// not a valid HTTP-date is ignored (§13.1.3, §13.1.4).
fn preconditions(req: &Request, tag: &str, mtime: SystemTime, now: SystemTime) -> Precondition {
    if let Some(im) = header_str(req, "if-match") {
        // §13.1.1: strong comparison, so a weak tag never matches.
        if !(im == "*" || im.split(',').any(|t| t.trim() == tag)) {
            return Precondition::Failed;
        }
    } else if let Some(t) = header_str(req, "if-unmodified-since").and_then(parse_http_date) {
        if mtime > t {
            return Precondition::Failed;
        }
    }
    if let Some(inm) = header_str(req, "if-none-match") {
        // §13.1.2: weak comparison.
        let matched = inm == "*"
            || inm
                .split(',')
                .any(|t| t.trim().trim_start_matches("W/") == tag);
        return if matched {
            Precondition::NotModified
        } else {
            Precondition::Proceed
        };
    }
    if let Some(t) = header_str(req, "if-modified-since").and_then(parse_http_date) {
        // A date ahead of the server's clock is no Last-Modified the client was sent (RFC 2616
        // §14.25 calls it invalid; RFC 9110 §13.1.3 reads the date on the server's clock), so
        // it is ignored rather than taken as "newer than the file".
        if t <= now && mtime <= t {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

#[derive(Debug, PartialEq, Eq)]
enum RangeSel {
    Full,
    Part(u64, u64),
    Unsatisfiable,
}

/// One side of a byte range.
enum Num {
    Empty,
    Value(u64),
    /// `1*DIGIT` beyond u64::MAX.
    Overflow,
    Invalid,
}

fn num(s: &str) -> Num {
    if s.is_empty() {
        Num::Empty
    } else if !s.bytes().all(|c| c.is_ascii_digit()) {
        Num::Invalid
    } else {
        s.parse().map_or(Num::Overflow, Num::Value)
    }
}

/// One byte range (RFC 9110 §14); several ranges or a stale If-Range give the full body.
fn range(req: &Request, size: u64, tag: &str, last_modified: &str) -> RangeSel {
    if req.method != Method::Get {
        return RangeSel::Full;
    }
    let Some(spec) = header_str(req, "range") else {
        return RangeSel::Full;
    };
    if let Some(ir) = header_str(req, "if-range") {
        if ir != tag && ir != last_modified {
            return RangeSel::Full;
        }
    }
    let Some(set) = spec.strip_prefix("bytes=") else {
        return RangeSel::Full;
    };
    if set.contains(',') {
        return RangeSel::Full;
    }
    let Some((a, b)) = set.trim().split_once('-') else {
        return RangeSel::Full;
    };
    // A position too large for a u64 is named by a valid range-spec, but no file reaches it.
    // RFC 9110 §14.1.2 would read a last-pos (or suffix-length) beyond the end as "to the
    // end"; ringx refuses it instead, as nginx 1.22 does (416 for any position it cannot
    // represent), rather than serve a reading of a number it cannot hold. A first-pos that
    // large is plainly unsatisfiable (§14.1.1).
    let (a, b) = match (num(a), num(b)) {
        (Num::Invalid, _) | (_, Num::Invalid) => return RangeSel::Full,
        (Num::Overflow, _) | (_, Num::Overflow) => return RangeSel::Unsatisfiable,
        other => other,
    };
    match (a, b) {
        (Num::Empty, Num::Value(n)) => {
            if n == 0 || size == 0 {
                RangeSel::Unsatisfiable
            } else {
                RangeSel::Part(size.saturating_sub(n), size - 1)
            }
        }
        (Num::Value(start), end @ (Num::Value(_) | Num::Empty)) => {
            if start >= size {
                return RangeSel::Unsatisfiable;
            }
            let end = match end {
                Num::Value(e) => e.min(size - 1),
                _ => size - 1,
            };
            if end < start {
                return RangeSel::Full;
            }
            RangeSel::Part(start, end)
        }
        _ => RangeSel::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringx_http::{httparse, parse_request, Limits, Parsed};

    fn with_fields<T>(fields: &str, f: impl FnOnce(&Request) -> T) -> T {
        let raw = format!("GET /f HTTP/1.1\r\nHost: h\r\n{fields}\r\n");
        let mut h = [httparse::EMPTY_HEADER; 16];
        let Ok(Parsed::Complete(req)) = parse_request(raw.as_bytes(), &mut h, &Limits::default())
        else {
            panic!("{raw}")
        };
        f(&req)
    }

    /// Issue 26: a future If-Modified-Since gave 304 and If-Unmodified-Since was ignored.
    #[test]
    fn preconditions_in_rfc_order() {
        use Precondition::*;
        const TAG: &str = "\"5e0be100-17\"";
        let mtime = UNIX_EPOCH + Duration::from_secs(1_577_836_800); // 2020-01-01
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000); // 2023-11-14
        let (before, at, after, future) = (
            "Tue, 01 Jan 2019 00:00:00 GMT",
            "Wed, 01 Jan 2020 00:00:00 GMT",
            "Fri, 01 Jan 2021 00:00:00 GMT",
            "Fri, 01 Jan 2100 00:00:00 GMT",
        );
        let table = [
            (String::new(), Proceed),
            (format!("If-Modified-Since: {at}"), NotModified),
            (format!("If-Modified-Since: {after}"), NotModified),
            (format!("If-Modified-Since: {before}"), Proceed),
            (format!("If-Modified-Since: {future}"), Proceed),
            ("If-Modified-Since: yesterday".into(), Proceed),
            (format!("If-Unmodified-Since: {before}"), Failed),
            (format!("If-Unmodified-Since: {at}"), Proceed),
            (format!("If-Unmodified-Since: {after}"), Proceed),
            ("If-Unmodified-Since: yesterday".into(), Proceed),
            (format!("If-Unmodified-Since: {before}, {before}"), Proceed),
            (format!("If-Match: {TAG}"), Proceed),
            (format!("If-Match: \"x\", {TAG}"), Proceed),
            ("If-Match: *".into(), Proceed),
            ("If-Match: \"x\"".into(), Failed),
            (format!("If-Match: W/{TAG}"), Failed),
            // If-Match present: If-Unmodified-Since is not evaluated.
            (
                format!("If-Match: {TAG}\r\nIf-Unmodified-Since: {before}"),
                Proceed,
            ),
            // 412 is decided before 304.
            (
                format!("If-None-Match: {TAG}\r\nIf-Unmodified-Since: {before}"),
                Failed,
            ),
            (format!("If-None-Match: W/{TAG}"), NotModified),
            (
                format!("If-None-Match: \"x\"\r\nIf-Modified-Since: {at}"),
                Proceed,
            ),
            (
                format!("If-Unmodified-Since: {after}\r\nIf-Modified-Since: {at}"),
                NotModified,
            ),
        ];
        for (fields, want) in table {
            let fields = if fields.is_empty() {
                fields
            } else {
                fields + "\r\n"
            };
            let got = with_fields(&fields, |r| preconditions(r, TAG, mtime, now));
            assert_eq!(got, want, "{fields}");
        }
    }

    /// Issue 26: a position beyond u64 gave 200; nginx 1.22 answers 416 to each of these.
    #[test]
    fn byte_ranges() {
        use RangeSel::*;
        let table = [
            ("bytes=0-18446744073709551616", Unsatisfiable),
            ("bytes=18446744073709551616-", Unsatisfiable),
            ("bytes=-18446744073709551616", Unsatisfiable),
            ("bytes=0-99999999999999999999999", Unsatisfiable),
            ("bytes=0-18446744073709551615", Part(0, 22)),
            ("bytes=a-18446744073709551616", Full),
            ("bytes=0-4", Part(0, 4)),
            ("bytes=-5", Part(18, 22)),
            ("bytes=20-", Part(20, 22)),
            ("bytes=23-", Unsatisfiable),
            ("bytes=-0", Unsatisfiable),
            ("bytes=5-3", Full),
            ("bytes=0-1,3-4", Full),
            ("bytes=x", Full),
            ("items=0-1", Full),
        ];
        for (spec, want) in table {
            let got = with_fields(&format!("Range: {spec}\r\n"), |r| range(r, 23, "t", "d"));
            assert_eq!(got, want, "{spec}");
        }
    }
}
