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

use ringx_http::{Method, Request};

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
    },
    NotModified {
        headers: String,
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

/// Resolves `path` (already percent-decoded and normalised, starting with '/') under `root`.
pub fn serve(root: &FileRoot, path: &str, query: Option<&str>, req: &Request) -> FileReply {
    if !matches!(req.method, Method::Get | Method::Head) {
        return FileReply::Error(405);
    }
    let rel = match &root.strip_prefix {
        Some(p) => path.strip_prefix(p.as_str()).unwrap_or(path),
        None => path,
    };
    let rel = rel.trim_start_matches('/');
    let mut file = match open_beneath(root, rel) {
        Ok(f) => f,
        Err(e) => return FileReply::Error(status_of(&e)),
    };
    let mut meta = match file.metadata() {
        Ok(m) => m,
        Err(_) => return FileReply::Error(500),
    };
    let mut served_path = path.to_string();
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
                        found = Some((f, m, format!("{path}{idx}")));
                        break;
                    }
                }
            }
        }
        match found {
            Some((f, m, p)) => {
                file = f;
                meta = m;
                served_path = p;
            }
            None => return FileReply::Error(403),
        }
    }
    if !meta.is_file() {
        return FileReply::Error(403);
    }
    let size = meta.size();
    let mtime = UNIX_EPOCH + Duration::from_secs(meta.mtime().max(0) as u64);
    let last_modified = ringx_http::fmt_http_date(mtime);
    let tag = etag(&meta);
    let mut headers = format!(
        "Content-Type: {}\r\nLast-Modified: {last_modified}\r\nETag: {tag}\r\nAccept-Ranges: bytes\r\n",
        mime::content_type(&served_path)
    );
    if not_modified(req, &tag, mtime) {
        return FileReply::NotModified { headers };
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
    }
}

fn header_str<'b>(req: &Request<'_, 'b>, name: &str) -> Option<&'b str> {
    req.header(name)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
}

/// RFC 9110 §13.1.2/13.1.3: If-None-Match wins over If-Modified-Since.
fn not_modified(req: &Request, tag: &str, mtime: SystemTime) -> bool {
    if let Some(inm) = header_str(req, "if-none-match") {
        return inm == "*"
            || inm
                .split(',')
                .any(|t| t.trim().trim_start_matches("W/") == tag);
    }
    if let Some(ims) = header_str(req, "if-modified-since") {
        if let Some(t) = ringx_http::parse_http_date(ims) {
            return mtime <= t;
        }
    }
    false
}

enum RangeSel {
    Full,
    Part(u64, u64),
    Unsatisfiable,
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
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            None
        } else {
            s.parse().ok()
        }
    };
    match (a.is_empty(), num(a), num(b)) {
        (true, _, Some(n)) => {
            if n == 0 || size == 0 {
                RangeSel::Unsatisfiable
            } else {
                RangeSel::Part(size.saturating_sub(n), size - 1)
            }
        }
        (false, Some(start), end) => {
            if !b.is_empty() && end.is_none() {
                return RangeSel::Full;
            }
            if start >= size {
                return RangeSel::Unsatisfiable;
            }
            let end = end.map_or(size - 1, |e| e.min(size - 1));
            if end < start {
                return RangeSel::Full;
            }
            RangeSel::Part(start, end)
        }
        _ => RangeSel::Full,
    }
}
