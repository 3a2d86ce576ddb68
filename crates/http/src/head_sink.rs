//! Where a response head is written, field by field: HTTP/1's text (`Vec<u8>`, written as
//! the fields come), or, in the server, fields for HTTP/2 and HTTP/3, which are never written
//! as text to be parsed back. The writers of this crate that make a head for a client
//! (`upstream::write_response_head`) take any.

use crate::response::{push_decimal, write_status_line_reason};

/// A response head as it is written.
pub trait HeadSink {
    /// How much has been written: a head's length (as HTTP/1.1 text, for the access log) is
    /// the difference of two marks.
    fn mark(&self) -> usize;
    /// The status, first; `reason`: the phrase to say (empty: the standard one).
    fn status(&mut self, status: u16, reason: &str);
    /// One field, its name as it is to be written.
    fn put(&mut self, name: &[u8], value: &[u8]);
    /// Lines in HTTP/1's form: `Name: value` each with CRLF, or the empty line that ends a
    /// head (which fields need not carry).
    fn lines(&mut self, lines: &[u8]);
    /// `Content-Length`.
    fn length(&mut self, len: u64);
    /// Whether the sink is HTTP/1's text, so that field lines received in exactly the form
    /// [`HeadSink::put`] writes (`Name: value` and CRLF) may be copied with
    /// [`HeadSink::lines`], many at once, rather than put one by one.
    #[inline]
    fn verbatim(&self) -> bool {
        false
    }
}

/// HTTP/1.x: the text.
impl HeadSink for Vec<u8> {
    #[inline]
    fn mark(&self) -> usize {
        self.len()
    }

    #[inline]
    fn status(&mut self, status: u16, reason: &str) {
        write_status_line_reason(self, status, reason);
    }

    #[inline]
    fn put(&mut self, name: &[u8], value: &[u8]) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        self.extend_from_slice(value);
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn lines(&mut self, lines: &[u8]) {
        self.extend_from_slice(lines);
    }

    #[inline]
    fn length(&mut self, len: u64) {
        self.extend_from_slice(b"Content-Length: ");
        push_decimal(self, len);
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn verbatim(&self) -> bool {
        true
    }
}
