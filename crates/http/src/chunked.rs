//! Incremental chunked transfer-coding decoder (RFC 9112 §7.1), one byte of
//! framing at a time so that input may be split anywhere.
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! last-chunk     = 1*("0") [ chunk-ext ] CRLF
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! chunk-ext-name = token
//! chunk-ext-val  = token / quoted-string
//! trailer-section = *( field-line CRLF )
//! ```
//!
//! Every line must end in CRLF: a bare LF or bare CR is an error, since
//! lenient line endings in chunk framing are a request smuggling vector.
//! Whitespace before the size, whitespace after the size or an extension
//! that is not followed by `;`, and obs-fold in trailers are errors too.

use crate::bytes::{is_qdtext, is_tchar};
use crate::limits::BodyLimits;

/// Most significant hex digits a chunk size may have (u64).
const MAX_SIGNIFICANT_DIGITS: u32 = 16;
/// Most digits, leading zeros included, a chunk size may have.
const MAX_SIZE_DIGITS: u32 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading chunk-size digits.
    Size,
    /// Inside chunk extensions.
    Ext(Ext),
    /// Saw the CR ending the size line.
    SizeLf,
    /// Inside chunk-data.
    Data,
    /// Expecting the CR after chunk-data.
    DataCr,
    /// Expecting the LF after chunk-data.
    DataLf,
    /// At the start of a trailer line (or the final CRLF).
    TrailerStart,
    TrailerName,
    TrailerValue,
    TrailerLf,
    /// Saw the CR of the final empty line.
    FinalLf,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ext {
    /// After the size or an extension; `ws` if BWS was seen (then only `;`
    /// may follow).
    After {
        ws: bool,
    },
    /// After `;`, before the name.
    NameStart,
    Name,
    /// BWS after the name.
    AfterName,
    /// After `=`, before the value.
    ValueStart,
    Token,
    Quoted,
    QuotedEscape,
}

/// The chunked state machine.
#[derive(Debug, Clone)]
pub(crate) struct Chunked {
    state: State,
    /// Current chunk size while reading digits, then remaining data bytes.
    size: u64,
    size_digits: u32,
    ext_len: usize,
    trailer_len: usize,
    /// The trailer section's field lines as received (each ending in CRLF), when asked to
    /// keep them; bounded by `max_trailers` like the section itself.
    kept: Option<Vec<u8>>,
}

/// One call's worth of progress.
pub(crate) struct Progress {
    pub consumed: usize,
    /// Range of chunk-data within the input.
    pub data: (usize, usize),
    /// An error found at `consumed` (after any data, which is still valid).
    pub error: Option<&'static str>,
    /// Bytes at the end of `consumed` that are the trailer section and its final CRLF.
    pub trailer: usize,
}

impl Chunked {
    pub(crate) fn new() -> Self {
        Chunked {
            state: State::Size,
            size: 0,
            size_digits: 0,
            ext_len: 0,
            trailer_len: 0,
            kept: None,
        }
    }

    /// Keeps the trailer section's field lines (for [`Chunked::take_trailers`]).
    pub(crate) fn keep_trailers(&mut self) {
        self.kept.get_or_insert_with(Vec::new);
    }

    /// The trailer field lines kept so far (all of them once the body is done).
    pub(crate) fn take_trailers(&mut self) -> Option<Vec<u8>> {
        self.kept.take()
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing bytes and at most one run of chunk-data; stops at
    /// the end of the body, before a second run of data, or at an error.
    pub(crate) fn decode(&mut self, input: &[u8], limits: &BodyLimits) -> Progress {
        let mut i = 0;
        let mut data = (0, 0);
        let mut have_data = false;
        let mut trailer = 0;
        while i < input.len() {
            match self.state {
                State::Done => break,
                State::Data => {
                    if have_data {
                        break;
                    }
                    let available = (input.len() - i) as u64;
                    let n = self.size.min(available) as usize;
                    data = (i, i + n);
                    have_data = true;
                    i += n;
                    self.size -= n as u64;
                    if self.size == 0 {
                        self.state = State::DataCr;
                    }
                }
                _ => {
                    let in_trailer = matches!(
                        self.state,
                        State::TrailerStart
                            | State::TrailerName
                            | State::TrailerValue
                            | State::TrailerLf
                            | State::FinalLf
                    );
                    if let Err(reason) = self.step(input[i], limits) {
                        return Progress {
                            consumed: i,
                            data,
                            error: Some(reason),
                            trailer,
                        };
                    }
                    trailer += usize::from(in_trailer);
                    i += 1;
                }
            }
        }
        Progress {
            consumed: i,
            data,
            error: None,
            trailer,
        }
    }

    /// Advances over one framing byte.
    fn step(&mut self, b: u8, limits: &BodyLimits) -> Result<(), &'static str> {
        let field_byte = match self.state {
            State::TrailerStart => b != b'\r',
            State::TrailerName | State::TrailerValue | State::TrailerLf => true,
            _ => false,
        };
        self.state = match self.state {
            State::Size => match b {
                _ if b.is_ascii_hexdigit() => {
                    self.size_digits += 1;
                    if self.size_digits > MAX_SIZE_DIGITS {
                        return Err("too many chunk-size digits");
                    }
                    if self.size >> (4 * (MAX_SIGNIFICANT_DIGITS - 1)) != 0 {
                        return Err("chunk-size overflow");
                    }
                    self.size = (self.size << 4) | u64::from(hex_value(b));
                    State::Size
                }
                _ if self.size_digits == 0 => return Err("missing or invalid chunk-size"),
                b'\r' => State::SizeLf,
                _ => self.ext_step(Ext::After { ws: false }, b, limits)?,
            },
            State::Ext(ext) => {
                if b == b'\r' {
                    match ext {
                        Ext::Name | Ext::Token | Ext::After { ws: false } => State::SizeLf,
                        _ => return Err("invalid chunk extension"),
                    }
                } else {
                    self.ext_step(ext, b, limits)?
                }
            }
            State::SizeLf => match b {
                b'\n' if self.size == 0 => State::TrailerStart,
                b'\n' => State::Data,
                _ => return Err("bare CR in chunk-size line"),
            },
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err("chunk-data not followed by CRLF"),
            },
            State::DataLf => match b {
                b'\n' => self.next_chunk(),
                _ => return Err("chunk-data not followed by CRLF"),
            },
            State::TrailerStart => {
                self.count_trailer(limits)?;
                match b {
                    b'\r' => State::FinalLf,
                    _ if is_tchar(b) => State::TrailerName,
                    b' ' | b'\t' => return Err("whitespace or obs-fold in trailer section"),
                    _ => return Err("invalid trailer field"),
                }
            }
            State::TrailerName => {
                self.count_trailer(limits)?;
                match b {
                    b':' => State::TrailerValue,
                    _ if is_tchar(b) => State::TrailerName,
                    _ => return Err("invalid trailer field name"),
                }
            }
            State::TrailerValue => {
                self.count_trailer(limits)?;
                match b {
                    b'\r' => State::TrailerLf,
                    b'\t' | b' '..=b'~' | 0x80..=0xff => State::TrailerValue,
                    _ => return Err("invalid byte in trailer field value"),
                }
            }
            State::TrailerLf => {
                self.count_trailer(limits)?;
                match b {
                    b'\n' => State::TrailerStart,
                    _ => return Err("bare CR in trailer section"),
                }
            }
            State::FinalLf => {
                self.count_trailer(limits)?;
                match b {
                    b'\n' => State::Done,
                    _ => return Err("bare CR at end of chunked body"),
                }
            }
            State::Data | State::Done => unreachable!("handled by decode"),
        };
        if let (true, Some(k)) = (field_byte, self.kept.as_mut()) {
            k.push(b);
        }
        Ok(())
    }

    /// One byte of chunk-ext (not the terminating CR).
    fn ext_step(&mut self, ext: Ext, b: u8, limits: &BodyLimits) -> Result<State, &'static str> {
        self.ext_len += 1;
        if self.ext_len > limits.max_chunk_ext {
            return Err("chunk extensions too long");
        }
        let ws = b == b' ' || b == b'\t';
        let next = match ext {
            Ext::After { .. } if ws => Ext::After { ws: true },
            Ext::After { .. } | Ext::Name | Ext::AfterName | Ext::Token if b == b';' => {
                Ext::NameStart
            }
            Ext::NameStart if ws => Ext::NameStart,
            Ext::NameStart | Ext::Name if is_tchar(b) => Ext::Name,
            Ext::Name | Ext::AfterName if ws => Ext::AfterName,
            Ext::Name | Ext::AfterName if b == b'=' => Ext::ValueStart,
            Ext::ValueStart if ws => Ext::ValueStart,
            Ext::ValueStart if b == b'"' => Ext::Quoted,
            Ext::ValueStart | Ext::Token if is_tchar(b) => Ext::Token,
            Ext::Token if ws => Ext::After { ws: true },
            Ext::Quoted if b == b'"' => Ext::After { ws: false },
            Ext::Quoted if b == b'\\' => Ext::QuotedEscape,
            Ext::Quoted if is_qdtext(b) => Ext::Quoted,
            Ext::QuotedEscape if b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80 => {
                Ext::Quoted
            }
            _ if b == b'\n' => return Err("bare LF in chunk-size line"),
            _ => return Err("invalid chunk extension"),
        };
        Ok(State::Ext(next))
    }

    fn next_chunk(&mut self) -> State {
        self.size = 0;
        self.size_digits = 0;
        self.ext_len = 0;
        State::Size
    }

    fn count_trailer(&mut self, limits: &BodyLimits) -> Result<(), &'static str> {
        self.trailer_len += 1;
        if self.trailer_len > limits.max_trailers {
            return Err("trailer section too large");
        }
        Ok(())
    }
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}
