//! nginx's tokenizer (`ngx_conf_read_token` in `src/core/ngx_conf_file.c`), byte for byte:
//!
//! * words are separated by space, tab, CR and LF; `;` ends a directive, `{` opens a block
//!   and `}` closes one — `}` only where a word would start (`a}b` is one word);
//! * `#` starts a comment only where a word would start (`a#b` is one word);
//! * a word that starts with `"` or `'` runs to the matching quote, and must then be followed
//!   by a space, `;`, `{` or `)`;
//! * `\` takes the next byte into the word whatever it is; when the word is stored, `\"`,
//!   `\'` and `\\` lose their backslash and `\t`, `\r`, `\n` become tab, CR and LF, in quoted
//!   and bare words alike (any other `\x` stays as written: regexes keep `\.`);
//! * `${` inside a word does not open a block (`${var}`).
//!
//! A word longer than nginx's buffer (4096 bytes) is refused as nginx refuses it.

use crate::error::Error;

/// nginx's `NGX_CONF_BUFFER`: no token may be longer.
pub const MAX_TOKEN: usize = 4096;

/// One word of a directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Word {
    /// The value after nginx's unescaping.
    pub text: String,
    /// Written in quotes (`"..."` or `'...'`).
    pub quoted: bool,
    /// 1-based line where the word starts.
    pub line: usize,
}

/// What ends a run of words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `;`
    Semicolon,
    /// `{`
    BlockStart,
    /// `}` (with no words before it)
    BlockEnd,
    /// The end of the file (with no words before it)
    Eof,
}

/// Reads a file's bytes into directives' words.
pub struct Lexer<'a> {
    file: &'a str,
    src: &'a [u8],
    pos: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(file: &'a str, src: &'a [u8]) -> Lexer<'a> {
        Lexer {
            file,
            src,
            pos: 0,
            line: 1,
        }
    }

    /// The line the lexer is on (for errors at the end of a directive, as nginx reports them).
    pub fn line(&self) -> usize {
        self.line
    }

    fn err(&self, line: usize, message: impl Into<String>) -> Error {
        Error::at(self.file, line, message)
    }

    /// The words of the next directive and what ended them.
    pub fn next_directive(&mut self) -> Result<(Vec<Word>, End), Error> {
        let mut words: Vec<Word> = Vec::new();
        let mut last_space = true;
        let mut need_space = false;
        let mut sharp_comment = false;
        let mut quoted = false;
        let mut s_quoted = false;
        let mut d_quoted = false;
        let mut variable = false;
        let mut start = 0usize;
        let mut start_line = self.line;
        loop {
            let Some(&ch) = self.src.get(self.pos) else {
                if !words.is_empty() || !last_space || quoted {
                    let line = if last_space { self.line } else { start_line };
                    return Err(self.err(
                        line,
                        "unexpected end of file, expecting \";\" or \"}\": a directive is not \
                         finished (a missing `;`, or a quote left open)",
                    ));
                }
                return Ok((words, End::Eof));
            };
            self.pos += 1;
            if ch == b'\n' {
                self.line += 1;
                if sharp_comment {
                    sharp_comment = false;
                }
            }
            if sharp_comment {
                continue;
            }
            if quoted {
                quoted = false;
                continue;
            }
            if need_space {
                if is_space(ch) {
                    last_space = true;
                    need_space = false;
                    continue;
                }
                match ch {
                    b';' => return Ok((words, End::Semicolon)),
                    b'{' => return Ok((words, End::BlockStart)),
                    b')' => {
                        last_space = true;
                        need_space = false;
                    }
                    _ => {
                        return Err(self.err(
                            self.line,
                            format!(
                                "unexpected {} after a quoted word: put a space after the \
                                 closing quote",
                                show(ch)
                            ),
                        ))
                    }
                }
            }
            if last_space {
                start = self.pos - 1;
                start_line = self.line;
                if is_space(ch) {
                    continue;
                }
                match ch {
                    b';' | b'{' => {
                        if words.is_empty() {
                            return Err(self.err(
                                self.line,
                                format!("unexpected {}: no directive before it", show(ch)),
                            ));
                        }
                        let end = if ch == b'{' {
                            End::BlockStart
                        } else {
                            End::Semicolon
                        };
                        return Ok((words, end));
                    }
                    b'}' => {
                        if !words.is_empty() {
                            return Err(self.err(
                                self.line,
                                "unexpected \"}\": the directive before it has no `;`",
                            ));
                        }
                        return Ok((words, End::BlockEnd));
                    }
                    b'#' => {
                        sharp_comment = true;
                        continue;
                    }
                    b'\\' => {
                        quoted = true;
                        last_space = false;
                        continue;
                    }
                    b'"' => {
                        start += 1;
                        d_quoted = true;
                        last_space = false;
                        continue;
                    }
                    b'\'' => {
                        start += 1;
                        s_quoted = true;
                        last_space = false;
                        continue;
                    }
                    b'$' => {
                        variable = true;
                        last_space = false;
                        continue;
                    }
                    _ => {
                        last_space = false;
                    }
                }
            } else {
                if ch == b'{' && variable {
                    continue;
                }
                variable = false;
                if ch == b'\\' {
                    quoted = true;
                    continue;
                }
                if ch == b'$' {
                    variable = true;
                    continue;
                }
                let mut found = false;
                let mut was_quoted = false;
                if d_quoted {
                    if ch == b'"' {
                        d_quoted = false;
                        need_space = true;
                        found = true;
                        was_quoted = true;
                    }
                } else if s_quoted {
                    if ch == b'\'' {
                        s_quoted = false;
                        need_space = true;
                        found = true;
                        was_quoted = true;
                    }
                } else if is_space(ch) || ch == b';' || ch == b'{' {
                    last_space = true;
                    found = true;
                }
                if found {
                    let raw = &self.src[start..self.pos - 1];
                    words.push(self.word(raw, was_quoted, start_line)?);
                    if !was_quoted {
                        if ch == b';' {
                            return Ok((words, End::Semicolon));
                        }
                        if ch == b'{' {
                            return Ok((words, End::BlockStart));
                        }
                    }
                }
            }
            if !last_space && self.pos - start > MAX_TOKEN {
                return Err(self.err(
                    start_line,
                    format!(
                        "too long parameter (over {MAX_TOKEN} bytes), probably a missing \
                         terminating quote"
                    ),
                ));
            }
        }
    }

    fn word(&self, raw: &[u8], quoted: bool, line: usize) -> Result<Word, Error> {
        if let Some(i) = raw.iter().position(|&b| b == 0 || b == 0x7f) {
            let line = line + raw[..i].iter().filter(|&&b| b == b'\n').count();
            return Err(self.err(
                line,
                format!(
                    "byte {:#04x} in a word: this is binary data, not an nginx configuration",
                    raw[i]
                ),
            ));
        }
        if !quoted {
            if let Some(i) = raw.windows(2).position(|w| w == [0xc2, 0xa0]) {
                let line = line + raw[..i].iter().filter(|&&b| b == b'\n').count();
                return Err(self.err(
                    line,
                    "a non-breaking space (U+00A0) inside a word: nginx does not take it as a \
                     space (text pasted from a web page?); replace it with a plain space",
                ));
            }
        }
        let text = std::str::from_utf8(&unescape(raw))
            .map_err(|e| {
                let bad = e.valid_up_to();
                let line = line
                    + raw[..bad.min(raw.len())]
                        .iter()
                        .filter(|&&b| b == b'\n')
                        .count();
                self.err(
                    line,
                    "a word is not UTF-8 text: is this an nginx configuration? (convert the \
                     file to UTF-8)",
                )
            })?
            .to_string();
        Ok(Word { text, quoted, line })
    }
}

fn is_space(ch: u8) -> bool {
    matches!(ch, b' ' | b'\t' | b'\r' | b'\n')
}

fn show(ch: u8) -> String {
    if ch.is_ascii_graphic() {
        format!("\"{}\"", ch as char)
    } else {
        format!("byte {ch:#04x}")
    }
}

/// nginx's unescaping of a stored word.
fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            match raw.get(i + 1) {
                Some(b'"' | b'\'' | b'\\') => {
                    out.push(raw[i + 1]);
                    i += 2;
                    continue;
                }
                Some(b't') => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                Some(b'r') => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                Some(b'n') => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}
