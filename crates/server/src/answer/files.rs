//! Static files as a location serves them: a precompressed variant when the client takes one
//! (`gzip_static`), otherwise the file compressed on the fly when its type, length and the
//! request allow, with `Vary`, a weak `ETag` and no `Accept-Ranges` on a compressed body. A
//! file up to [`MAX_COMPRESS_WHOLE`] is compressed at once and sent with its length; a larger
//! one is compressed piece by piece as the client takes it (chunked, or delimited by the close
//! for HTTP/1.0), with bounded memory.

use std::os::unix::fs::FileExt;

use super::{varies, Answer, UnsizedBody};
use ringx_http::{BodyKind, Version};

use crate::compress::encoder::compress;
use crate::compress::file_encoder::FileEncoder;
use crate::compress::{Accept, Codec};
use crate::response::{ConnHdr, HeadOut, Reply};
use crate::rewrite::vars::escape_path;
use crate::route::FileRoot;
use crate::static_files::{self, FileReply, Precompressed};

/// Files compressed on the fly are read and compressed whole, with a `Content-Length`, up to
/// this size; a larger one streams (`compress::file_encoder`), so one request holds a bounded
/// amount of memory.
pub const MAX_COMPRESS_WHOLE: u64 = 4 << 20;

impl Answer<'_> {
    /// A static file, its head in `out`, its body (when sent by the file) in the reply.
    pub fn files<O: HeadOut + ?Sized>(&self, out: &mut O, root: &FileRoot, path: &str) -> Reply {
        let policy = self
            .routes
            .compress
            .as_deref()
            .filter(|_| self.loc.is_some_and(|l| l.compress));
        let accept = policy.map(|_| Accept::of(self.req));
        let pre: Vec<Precompressed> = match (policy, &accept) {
            (Some(p), Some(a)) if !p.statics.is_empty() => p
                .statics_for(a)
                .into_iter()
                .map(|c| (c.ext(), c.token()))
                .collect(),
            _ => Vec::new(),
        };
        match static_files::serve(root, path, self.req.query, self.req, &pre) {
            FileReply::Body {
                status,
                file,
                off,
                len,
                mut headers,
                ctype,
                encoded,
            } => {
                if encoded || varies(self.routes, self.loc, status, ctype) {
                    headers.push_str("Vary: Accept-Encoding\r\n");
                }
                let on_the_fly = match (policy, &accept) {
                    (Some(p), Some(a)) if !encoded && status == 200 && !self.head_only => {
                        p.choose(a, ctype, Some(len))
                    }
                    _ => None,
                };
                // (A request with a body has its response prepared before the body is read,
                // in one buffer: it gets the file as it is.)
                let streams = len > MAX_COMPRESS_WHOLE
                    && self.req.body == BodyKind::None
                    && self.rq.unsized_body != UnsizedBody::No;
                if let Some(codec) = on_the_fly.filter(|_| streams) {
                    // Too large to compress at once: compressed as the client takes it. Its
                    // length is unknown until the end: chunked to HTTP/1.1, delimited by the
                    // close for HTTP/1.0, by END_STREAM for HTTP/2.
                    let frames = self.rq.unsized_body == UnsizedBody::Frames;
                    let chunked = !frames && self.req.version == Version::Http11;
                    let ch = if chunked || frames {
                        self.ch
                    } else {
                        ConnHdr::Close
                    };
                    if let Ok(s) = FileEncoder::new(file.clone(), off, len, codec, chunked) {
                        let headers = compressed_headers(&headers, codec);
                        let headers = self.with_added(200, &headers);
                        let written = self.r.head_unsized(out, 200, &headers, ch, chunked);
                        return Reply {
                            close: !chunked && !frames,
                            encoder: Some(Box::new(s)),
                            ..Reply::bytes(written)
                        };
                    }
                }
                if let Some(codec) = on_the_fly.filter(|_| len <= MAX_COMPRESS_WHOLE) {
                    if let Some(body) = read_compressed(&file, len, codec) {
                        let headers = compressed_headers(&headers, codec);
                        let headers = self.with_added(200, &headers);
                        let written = self.r.head(out, 200, &headers, body.len() as u64, self.ch);
                        out.body().extend_from_slice(&body);
                        return Reply::bytes(written);
                    }
                }
                let headers = self.with_added(status, &headers);
                Reply {
                    file: (!self.head_only).then_some((file, off, len)),
                    ..Reply::bytes(self.r.head(out, status, &headers, len, self.ch))
                }
            }
            FileReply::NotModified { mut headers, ctype } => {
                if headers.contains("Content-Encoding: ")
                    || varies(self.routes, self.loc, 200, ctype)
                {
                    headers.push_str("Vary: Accept-Encoding\r\n");
                }
                let headers = self.with_added(304, &headers);
                Reply::bytes(self.r.head(out, 304, &headers, 0, self.ch))
            }
            FileReply::Redirect(loc) => {
                // A directory without its '/': absolute, as nginx sends it.
                let mut url = String::new();
                crate::rewrite::flow::origin(self.req, &self.rq.conn, &self.server.name, &mut url);
                match loc.split_once('?') {
                    Some((p, q)) => {
                        escape_path(p, &mut url);
                        url.push('?');
                        url.push_str(q);
                    }
                    None => escape_path(&loc, &mut url),
                }
                self.redirect(out, 301, &url)
            }
            FileReply::Unsatisfiable { size } => {
                self.error(out, 416, &format!("Content-Range: bytes */{size}\r\n"))
            }
            FileReply::Error(405) => self.error(out, 405, "Allow: GET, HEAD\r\n"),
            FileReply::Error(st) => self.error(out, st, ""),
        }
    }
}

/// The whole file, compressed; None if it cannot be read as long as it was (it changed under
/// us: it is then sent as it is, by length, as any file).
fn read_compressed(file: &std::fs::File, len: u64, codec: &Codec) -> Option<Vec<u8>> {
    let mut data = vec![0u8; len as usize];
    file.read_exact_at(&mut data, 0).ok()?;
    compress(codec.coding, codec.level, &data).ok()
}

/// A file's entity headers for its compressed body: the `ETag` made weak (the bytes are not
/// the file's), no `Accept-Ranges` (ranges apply to the file), the coding named.
fn compressed_headers(headers: &str, codec: &Codec) -> String {
    let mut out = String::with_capacity(headers.len() + 32);
    for line in headers.split_inclusive("\r\n") {
        if line.starts_with("Accept-Ranges:") {
            continue;
        }
        match line.strip_prefix("ETag: \"") {
            Some(rest) => {
                out.push_str("ETag: W/\"");
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out.push_str("Content-Encoding: ");
    out.push_str(codec.coding.token());
    out.push_str("\r\n");
    out
}
