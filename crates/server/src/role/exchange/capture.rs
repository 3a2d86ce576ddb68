//! A response the server reads itself: the answer of a subrequest (`auth_request`, a
//! background cache update), which no client sees, or a copy of a response relayed to the
//! client that goes into the cache. The exchange fills it as the response arrives
//! (`response.rs`); its owner reads it when the exchange is done.

/// What an exchange keeps of its response.
#[derive(Default)]
pub struct Capture {
    /// The response goes to the client as well (a cache fill); false: a subrequest, or an
    /// answer the cache stands in for (`client` says what the exchange was made for).
    pub to_client: bool,
    pub client: bool,
    /// Status and head as the upstream sent them (status line to the empty line).
    pub status: u16,
    pub head: Vec<u8>,
    /// The body, decoded (no chunked framing), while it fits `body_limit`.
    pub body: Vec<u8>,
    pub body_limit: usize,
    /// The body was larger than `body_limit` (what was kept is not the whole body).
    pub overflow: bool,
    /// The response arrived whole.
    pub complete: bool,
    /// What the owner needs to act on it when it is done (the cache entry being filled).
    pub fill: Option<Box<crate::cache::fill::Fill>>,
    /// Header lines added to the response the client gets (the cache status), and that
    /// status for the log and the counters.
    pub client_line: Vec<u8>,
    pub client_status: &'static str,
}

impl Capture {
    /// A subrequest whose body is not needed.
    pub fn subrequest() -> Capture {
        Capture::default()
    }

    /// Forgets what an attempt that failed brought, before the request goes to another
    /// server: a retry's response is captured from its start, and goes to the client again
    /// if the exchange was made for it.
    pub fn restart(&mut self) {
        self.to_client = self.client;
        self.status = 0;
        self.head.clear();
        self.body.clear();
        self.overflow = false;
        self.complete = false;
        if let Some(f) = self.fill.as_mut() {
            f.stale_for_status = false;
        }
    }

    /// Keeps `data` of the body, as long as it fits.
    pub fn take(&mut self, data: &[u8]) {
        if self.overflow || data.is_empty() || self.body_limit == 0 {
            return;
        }
        if self.body.len() + data.len() > self.body_limit {
            self.overflow = true;
            self.body = Vec::new();
            return;
        }
        self.body.extend_from_slice(data);
    }

    /// The values of header `name` in the captured head.
    pub fn header_lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.head
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(move |line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|&b| b == b':')?;
                line[..colon]
                    .eq_ignore_ascii_case(name.as_bytes())
                    .then(|| line[colon + 1..].trim_ascii())
            })
    }
}
