//! Raw-byte checks on a request head that complement `httparse`: limits on
//! incomplete heads, the 400-versus-505 decision for unknown versions, and
//! a scan for NUL and bare CR that debug builds repeat after `httparse` (release builds
//! rely on `httparse`, which `tests/head_bytes_prop.rs` checks).

use crate::bytes::is_tchar;
use crate::error::RequestError;
use crate::limits::Limits;

/// Index of the first byte after any leading empty lines (CRLF or LF) —
/// RFC 9112 §2.2. Stops at a CR that is not (yet) followed by LF.
fn request_line_start(buf: &[u8]) -> usize {
    let mut i = 0;
    loop {
        match buf.get(i..) {
            Some([b'\n', ..]) => i += 1,
            Some([b'\r', b'\n', ..]) => i += 2,
            _ => return i,
        }
    }
}

/// The request line (without its line ending) and whether it is complete.
fn request_line(buf: &[u8]) -> (&[u8], bool) {
    let line = &buf[request_line_start(buf)..];
    match line.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let line = &line[..end];
            (line.strip_suffix(b"\r").unwrap_or(line), true)
        }
        None => (line, false),
    }
}

/// The longest method token accepted. RFC 9112 §3: "A server that receives a method longer than
/// any that it implements SHOULD respond with a 501 (Not Implemented)". ringx forwards methods
/// it does not know, so the bound is not the longest it implements but twice the longest one
/// registered with IANA (`UPDATEREDIRECTREF`, 17 bytes). For a 10 KB method nginx 1.22 answers
/// 414 (its request line overflows `large_client_header_buffers`) and HAProxy 2.6 forwards it
/// (the head fits its 16 KB buffer): 501 is the status RFC 9112 names, and it comes after 33
/// bytes rather than after a buffer's worth.
pub const MAX_METHOD_LEN: usize = 32;

/// 501 if the method seen so far is already longer than [`MAX_METHOD_LEN`]. Checked before
/// anything else in the request line, so the verdict is the same however the input is split.
pub(crate) fn check_method_len(buf: &[u8]) -> Result<(), RequestError> {
    let line = &buf[request_line_start(buf)..];
    let run = line
        .iter()
        .take(MAX_METHOD_LEN + 1)
        .take_while(|&&b| is_tchar(b))
        .count();
    if run > MAX_METHOD_LEN {
        return Err(RequestError::new(501, "method too long"));
    }
    Ok(())
}

/// 414 if the request-target seen so far is already longer than `max_uri`.
pub(crate) fn check_target_len(buf: &[u8], limits: &Limits) -> Result<(), RequestError> {
    let (line, _) = request_line(buf);
    let Some(sp) = line.iter().position(|&b| b == b' ') else {
        return Ok(());
    };
    // Only a target that follows a valid method counts; otherwise the line
    // is rejected (400) for its method, whatever comes after.
    if sp == 0 || !line[..sp].iter().all(|&b| is_tchar(b)) {
        return Ok(());
    }
    let rest = &line[sp + 1..];
    // Stop at the first byte that cannot be part of a target (SP, CTL, DEL),
    // as `httparse` does, so the verdict does not depend on bytes after an
    // invalid one (and hence not on how the input was split).
    let target_len = rest
        .iter()
        .position(|&b| b <= b' ' || b == 0x7f)
        .unwrap_or(rest.len());
    if target_len > limits.max_uri {
        return Err(RequestError::new(414, "request-target too long"));
    }
    Ok(())
}

/// Limits for a head that `httparse` found incomplete. `window` is the
/// input truncated to `max_head` bytes.
pub(crate) fn check_partial(window: &[u8], limits: &Limits) -> Result<(), RequestError> {
    check_method_len(window)?;
    check_target_len(window, limits)?;
    if window.len() >= limits.max_head {
        return Err(RequestError::new(431, "request head too large"));
    }
    Ok(())
}

/// Decides what an `httparse` version error means: `Ok(())` if the version
/// is still incomplete but may become `HTTP/<digit>.<digit>` (wait for more
/// input), 505 for a complete `HTTP/<digit>.<digit>` other than 1.0/1.1,
/// and 400 for anything else.
pub(crate) fn classify_version_error(buf: &[u8]) -> Result<(), RequestError> {
    const BAD: RequestError = RequestError::bad("invalid HTTP version");
    let (line, complete) = request_line(buf);
    let mut parts = line.splitn(3, |&b| b == b' ');
    let (Some(_method), Some(_target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(BAD);
    };
    let pattern = |i: usize, b: u8| match i {
        0..=4 => b == b"HTTP/"[i],
        5 | 7 => b.is_ascii_digit(),
        6 => b == b'.',
        _ => false,
    };
    let matches_prefix = version.iter().enumerate().all(|(i, &b)| pattern(i, b));
    if complete {
        if version.len() == 8 && matches_prefix {
            return Err(RequestError::new(505, "HTTP version not supported"));
        }
        return Err(BAD);
    }
    // Incomplete: the line may still end with the CR of its CRLF.
    let version = version
        .strip_suffix(b"\r")
        .filter(|v| v.len() == 8)
        .unwrap_or(version);
    let prefix_ok = version.iter().enumerate().all(|(i, &b)| pattern(i, b));
    if prefix_ok {
        Ok(())
    } else {
        Err(BAD)
    }
}

/// Rejects NUL bytes and CRs not followed by LF anywhere in a complete head.
/// (`httparse` already rejects both; this keeps the guarantee local.)
pub(crate) fn check_raw_bytes(head: &[u8]) -> Result<(), RequestError> {
    // Jump between the only two bytes that matter (memchr2: this runs on every request head).
    for i in memchr::memchr2_iter(0, b'\r', head) {
        if head[i] == 0 {
            return Err(RequestError::bad("NUL byte in request head"));
        }
        if head.get(i + 1) != Some(&b'\n') {
            return Err(RequestError::bad("bare CR in request head"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_classification() {
        assert_eq!(
            classify_version_error(b"GET / HTTP/2.0\r\n")
                .unwrap_err()
                .status,
            505
        );
        assert_eq!(
            classify_version_error(b"\r\nGET / HTTP/1.2\n")
                .unwrap_err()
                .status,
            505
        );
        assert_eq!(classify_version_error(b"GET / HTTP/2"), Ok(()));
        assert_eq!(classify_version_error(b"GET / HTTP/2.0\r"), Ok(()));
        assert_eq!(classify_version_error(b"GET / HTTP/2.0"), Ok(()));
        assert_eq!(
            classify_version_error(b"GET / HTTP/2.00")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            classify_version_error(b"GET / HTTP/2.0 \r\n")
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            classify_version_error(b"GET / HTTX").unwrap_err().status,
            400
        );
        assert_eq!(
            classify_version_error(b"GET / http/1.1\r\n")
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn raw_bytes() {
        assert!(check_raw_bytes(b"GET / HTTP/1.1\r\n\r\n").is_ok());
        assert!(check_raw_bytes(b"GET / HTTP/1.1\n\n").is_ok());
        assert!(check_raw_bytes(b"GET / HTTP/1.1\r\rX: y\r\n\r\n").is_err());
        assert!(check_raw_bytes(b"GET / HTTP/1.1\r\nX: \0\r\n\r\n").is_err());
    }
}
