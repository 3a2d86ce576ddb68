//! The frame layer (RFC 9113 §4, §6): the 9-byte frame header, the frame types and flags,
//! the error codes, and writers for every frame a server sends.

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 9;
/// The smallest (and default) SETTINGS_MAX_FRAME_SIZE.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE.
pub const MAX_MAX_FRAME: u32 = (1 << 24) - 1;
/// The default flow-control window (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest flow-control window.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    SettingsTimeout = 0x4,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Cancel = 0x8,
    Compression = 0x9,
    Connect = 0xa,
    EnhanceYourCalm = 0xb,
    InadequateSecurity = 0xc,
    Http11Required = 0xd,
}

impl ErrorCode {
    /// The code of a received RST_STREAM or GOAWAY (unknown codes are INTERNAL_ERROR's
    /// meaning for us: "something went wrong", RFC 9113 §7).
    pub fn from_u32(v: u32) -> ErrorCode {
        use ErrorCode::*;
        match v {
            0x0 => NoError,
            0x1 => Protocol,
            0x3 => FlowControl,
            0x4 => SettingsTimeout,
            0x5 => StreamClosed,
            0x6 => FrameSize,
            0x7 => RefusedStream,
            0x8 => Cancel,
            0x9 => Compression,
            0xa => Connect,
            0xb => EnhanceYourCalm,
            0xc => InadequateSecurity,
            0xd => Http11Required,
            _ => Internal,
        }
    }
}

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier (the reserved bit cleared, as receivers must).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads a frame header from the first 9 bytes of `b` (None: fewer than 9).
    pub fn parse(b: &[u8]) -> Option<FrameHeader> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(FrameHeader {
            len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Appends a frame header.
pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME as usize);
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// A DATA frame's header, for a payload the caller appends (or queues from a file).
pub fn data_header(len: usize, end_stream: bool, stream: u32) -> [u8; HEADER_LEN] {
    let mut h = Vec::with_capacity(HEADER_LEN);
    let flags = if end_stream { flag::END_STREAM } else { 0 };
    write_header(&mut h, len, kind::DATA, flags, stream);
    h.try_into().expect("a frame header is 9 bytes")
}

pub fn write_rst(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

pub fn write_goaway(out: &mut Vec<u8>, last: u32, code: ErrorCode, debug: &[u8]) {
    write_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn write_window_update(out: &mut Vec<u8>, stream: u32, inc: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(inc & 0x7fff_ffff).to_be_bytes());
}

pub fn write_ping(out: &mut Vec<u8>, ack: bool, payload: &[u8; 8]) {
    write_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(payload);
}

/// A header block split into HEADERS and CONTINUATION frames of at most `max_frame` bytes.
pub fn write_header_block(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last_is_first = block.len() <= max_frame;
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if last_is_first {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut rest = chunks.peekable();
    while let Some(c) = rest.next() {
        let f = if rest.peek().is_none() {
            flag::END_HEADERS
        } else {
            0
        };
        write_header(out, c.len(), kind::CONTINUATION, f, stream);
        out.extend_from_slice(c);
    }
}

/// What a new plaintext connection's first bytes say about the HTTP/2 preface.
#[derive(Debug, PartialEq, Eq)]
pub enum Preface {
    /// The preface opens them: at least its first 4 bytes ("PRI ", no HTTP/1 method), or
    /// all of it. HTTP/2 reads the rest.
    Yes,
    /// They are not the preface: HTTP/1.
    No,
    /// Fewer than 4 bytes, all the preface's ("P", "PR", "PRI"): either may follow. TCP may
    /// deliver a client's first write in pieces, and a PROXY header may end just before.
    Undecided,
}

/// Looks at the bytes a new connection has sent so far: `held` (kept from earlier reads)
/// then `data`.
pub fn preface(held: &[u8], data: &[u8]) -> Preface {
    let p = PREFACE;
    let mut n = 0;
    for &x in held.iter().chain(data).take(p.len()) {
        if x != p[n] {
            return Preface::No;
        }
        n += 1;
    }
    if n >= 4 {
        Preface::Yes
    } else {
        Preface::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_clears_the_reserved_bit() {
        let mut b = Vec::new();
        write_header(&mut b, 0x12_3456, kind::HEADERS, 0x25, 0xffff_ffff);
        let h = FrameHeader::parse(&b).unwrap();
        assert_eq!(
            (h.len, h.kind, h.flags, h.stream),
            (0x12_3456, 1, 0x25, 0x7fff_ffff)
        );
        assert!(FrameHeader::parse(&b[..8]).is_none());
    }

    #[test]
    fn header_blocks_split_at_the_frame_size() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut out = Vec::new();
        write_header_block(&mut out, 3, &block, true, 16);
        let mut pos = 0;
        let mut seen = Vec::new();
        let mut frames = Vec::new();
        while pos < out.len() {
            let h = FrameHeader::parse(&out[pos..]).unwrap();
            frames.push((h.kind, h.flags));
            seen.extend_from_slice(&out[pos + 9..pos + 9 + h.len as usize]);
            pos += 9 + h.len as usize;
        }
        assert_eq!(seen, block);
        assert_eq!(
            frames,
            [
                (kind::HEADERS, flag::END_STREAM),
                (kind::CONTINUATION, 0),
                (kind::CONTINUATION, flag::END_HEADERS)
            ]
        );
        let mut out = Vec::new();
        write_header_block(&mut out, 3, &block[..16], false, 16);
        assert_eq!(out.len(), 9 + 16);
        assert_eq!(FrameHeader::parse(&out).unwrap().flags, flag::END_HEADERS);
    }

    #[test]
    fn the_preface_is_told_from_http1_whatever_the_pieces() {
        // Every split of the preface's first bytes between what was held and what came.
        for n in 0..=PREFACE.len() {
            for cut in 0..=n {
                let (held, data) = (&PREFACE[..cut], &PREFACE[cut..n]);
                let want = if n >= 4 {
                    Preface::Yes
                } else {
                    Preface::Undecided
                };
                assert_eq!(preface(held, data), want, "{n} bytes cut at {cut}");
            }
        }
        let mut more = PREFACE.to_vec();
        more.extend_from_slice(b"\0\0\0\x04");
        assert_eq!(preface(b"", &more), Preface::Yes);
        assert_eq!(preface(b"P", b"OST / HTTP/1.1\r\n"), Preface::No);
        assert_eq!(preface(b"PR", b"O"), Preface::No);
        assert_eq!(preface(b"", b"GET / HTTP/1.1\r\n"), Preface::No);
        assert_eq!(
            preface(b"PRI ", b"* HTTP/1.1\r\n"),
            Preface::No,
            "HTTP/1 refuses it"
        );
    }
}
