//! Response serialisation: status line, chunked encoder and error pages.

use crate::status::reason;

/// Appends `HTTP/1.1 <status> <reason>\r\n`.
///
/// ```
/// let mut out = Vec::new();
/// ringx_http::write_status_line(&mut out, 404);
/// assert_eq!(out, b"HTTP/1.1 404 Not Found\r\n");
/// ```
pub fn write_status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status);
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `HTTP/1.1 <status> <reason>\r\n` with a given reason phrase (a proxy passing an
/// upstream's status on). An empty reason is replaced by the standard one.
pub fn write_status_line_reason(out: &mut Vec<u8>, status: u16, reason_phrase: &str) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, status);
    out.push(b' ');
    let r = if reason_phrase.is_empty() {
        reason(status)
    } else {
        reason_phrase
    };
    out.extend_from_slice(r.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends the status code in decimal.
fn push_status(out: &mut Vec<u8>, status: u16) {
    push_decimal(out, u64::from(status));
}

pub(crate) fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0u8; 20]));
}

/// `n` in decimal, written into `buf` without an allocation; the digits.
///
/// ```
/// assert_eq!(ringx_http::decimal(1024, &mut [0; 20]), b"1024");
/// ```
pub fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Appends one chunk (`<hex size>\r\n<data>\r\n`). Empty `data` writes
/// nothing, because a zero-size chunk would end the body.
///
/// ```
/// let mut out = Vec::new();
/// ringx_http::write_chunk(&mut out, b"hello, world");
/// ringx_http::write_last_chunk(&mut out);
/// assert_eq!(out, b"c\r\nhello, world\r\n0\r\n\r\n");
/// ```
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut n = data.len() as u64;
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    while n > 0 {
        i -= 1;
        buf[i] = HEX[(n & 0xf) as usize];
        n >>= 4;
    }
    out.extend_from_slice(&buf[i..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk and an empty trailer section: `0\r\n\r\n`.
pub fn write_last_chunk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n\r\n");
}
