//! Expanding a [`Template`] for one request: everything a variable can name, gathered in
//! [`Vars`], and `$request_id`, made once per request on first use.

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::SocketAddr;

use ringx_config::template::{Part, Template, Var};
use ringx_http::Request;

/// Regex captures of the last regex matched: the matched text and each group's range in it.
#[derive(Debug, Clone, Default)]
pub struct Caps {
    pub text: String,
    pub groups: Vec<Option<(usize, usize)>>,
}

impl Caps {
    pub fn from_match(text: &str, c: &regex::Captures<'_>) -> Caps {
        Caps {
            text: text.to_string(),
            groups: c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect(),
        }
    }

    pub fn get(&self, n: usize) -> &str {
        match self.groups.get(n) {
            Some(Some((a, b))) => &self.text[*a..*b],
            _ => "",
        }
    }
}

/// The connection a request came on.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub client: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
    pub tls: bool,
}

impl ConnInfo {
    pub fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
}

/// What the variables of one request name.
pub struct Vars<'a> {
    pub req: &'a Request<'a, 'a>,
    /// The current path (decoded, normalised, after rewrites).
    pub uri: &'a str,
    /// The current query string.
    pub args: Option<&'a str>,
    pub caps: Option<&'a Caps>,
    pub conn: &'a ConnInfo,
    pub server_name: &'a str,
    pub request_id: &'a Cell<Option<[u8; 32]>>,
}

impl Vars<'_> {
    /// Appends the template's value to `out`.
    pub fn expand_into(&self, t: &Template, out: &mut String) {
        for p in &t.parts {
            match p {
                Part::Lit(s) => out.push_str(s),
                Part::Var(v) => self.var_into(v, out),
            }
        }
    }

    pub fn expand(&self, t: &Template) -> String {
        let mut s = String::new();
        self.expand_into(t, &mut s);
        s
    }

    fn var_into(&self, v: &Var, out: &mut String) {
        let req = self.req;
        match v {
            Var::Host => match req.host_name() {
                Some(h) if !h.is_empty() => {
                    out.push_str(&String::from_utf8_lossy(h).to_ascii_lowercase())
                }
                _ => out.push_str(self.server_name),
            },
            Var::RequestUri => out.push_str(req.target),
            Var::Uri => out.push_str(self.uri),
            Var::Args => out.push_str(self.args.unwrap_or("")),
            Var::IsArgs => {
                if self.args.is_some() {
                    out.push('?')
                }
            }
            Var::Arg(name) => {
                if let Some(v) = self.args.and_then(|a| arg(a, name)) {
                    out.push_str(v)
                }
            }
            Var::Scheme => out.push_str(self.conn.scheme()),
            Var::RemoteAddr => {
                if let Some(a) = self.conn.client {
                    let _ = write!(out, "{}", a.ip());
                }
            }
            Var::RemotePort => {
                if let Some(a) = self.conn.client {
                    let _ = write!(out, "{}", a.port());
                }
            }
            Var::ServerAddr => {
                if let Some(a) = self.conn.local {
                    let _ = write!(out, "{}", a.ip());
                }
            }
            Var::ServerPort => {
                if let Some(a) = self.conn.local {
                    let _ = write!(out, "{}", a.port());
                }
            }
            Var::ServerName => out.push_str(self.server_name),
            Var::RequestMethod => out.push_str(req.method_str),
            Var::RequestId => {
                let id = match self.request_id.get() {
                    Some(id) => id,
                    None => {
                        let id = new_request_id();
                        self.request_id.set(Some(id));
                        id
                    }
                };
                out.push_str(std::str::from_utf8(&id).expect("hex digits"));
            }
            Var::Http(name) => {
                // nginx joins repeated fields; a comma is right for all but Cookie.
                let mut first = true;
                for h in req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case(name))
                {
                    if !first {
                        out.push_str(if name == "cookie" { "; " } else { ", " });
                    }
                    first = false;
                    out.push_str(&String::from_utf8_lossy(h.value));
                }
            }
            Var::Capture(n) => {
                if let Some(c) = self.caps {
                    out.push_str(c.get(*n as usize))
                }
            }
        }
    }
}

/// The value of query parameter `name` in `args` (raw, as sent).
fn arg<'a>(args: &'a str, name: &str) -> Option<&'a str> {
    args.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        k.eq_ignore_ascii_case(name).then_some(v)
    })
}

thread_local! {
    /// Each zone's generator: seeded from the kernel once, then a 64-bit counter through
    /// SplitMix64 per half (nothing shared between zones).
    static RID: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into the live local buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        return t ^ (std::process::id() as u64).rotate_left(32);
    }
    u64::from_ne_bytes(b)
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 32 hex digits (128 bits), as nginx's `$request_id`: unique per request, not a secret.
pub fn new_request_id() -> [u8; 32] {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
    let (a, b) = RID.with(|s| {
        let x = s.get();
        s.set(x.wrapping_add(GOLDEN.wrapping_mul(2)));
        (splitmix(x), splitmix(x.wrapping_add(GOLDEN)))
    });
    let mut out = [0u8; 32];
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in a
        .to_be_bytes()
        .iter()
        .chain(b.to_be_bytes().iter())
        .enumerate()
    {
        out[2 * i] = HEX[(byte >> 4) as usize];
        out[2 * i + 1] = HEX[(byte & 15) as usize];
    }
    out
}

/// Percent-encodes what may not stand in a URI path: controls, space, non-ASCII, and the
/// delimiters `"`, `#`, `%`, `<`, `>`, `?`, `\`, `^`, `` ` ``, `{`, `|`, `}`. A path after
/// decoding may hold any of them, and passing it on raw would change what it means (or
/// split the request line).
pub fn escape_path(path: &str, out: &mut String) {
    for &b in path.as_bytes() {
        if b <= b' ' || b >= 0x7f || b"\"#%<>?\\^`{|}".contains(&b) {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(b as char);
        }
    }
}

/// Percent-encodes controls, space and non-ASCII in a query string (its delimiters stay).
pub fn escape_args(args: &str, out: &mut String) {
    for &b in args.as_bytes() {
        if b <= b' ' || b >= 0x7f || b == b'#' {
            let _ = write!(out, "%{b:02X}");
        } else {
            out.push(b as char);
        }
    }
}

/// A header value made safe: controls (CR, LF, NUL, ...) become `%XX`, so a variable cannot
/// end the field and inject another.
pub fn field_safe(v: &str) -> std::borrow::Cow<'_, str> {
    if v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)) {
        return std::borrow::Cow::Borrowed(v);
    }
    let mut s = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        if c != '\t' && (c < ' ' || c == '\x7f') {
            let _ = write!(s, "%{:02X}", c as u32);
        } else {
            s.push(c);
        }
    }
    std::borrow::Cow::Owned(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_hex_and_differ() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert!(a.iter().all(u8::is_ascii_hexdigit));
    }

    #[test]
    fn escaping() {
        let mut s = String::new();
        escape_path("/a b/%/é?#\r\n", &mut s);
        assert_eq!(s, "/a%20b/%25/%C3%A9%3F%23%0D%0A");
        let mut s = String::new();
        escape_args("a=1&b=x y", &mut s);
        assert_eq!(s, "a=1&b=x%20y");
        assert_eq!(field_safe("ok\tv"), "ok\tv");
        assert_eq!(field_safe("a\r\nSet-Cookie: x"), "a%0D%0ASet-Cookie: x");
    }
}
