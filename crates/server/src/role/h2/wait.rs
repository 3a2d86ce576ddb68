//! Streams whose request waits, as an HTTP/1 request is held (`Next::Defer`): for a
//! `limit_req` delay, for the `auth_request` subrequest's answer, or for another request's
//! fill of the cache entry it wants. The request's fields are kept with what was already
//! decided for it ([`Progress`]: charged to the rate, the auth answer, how long it waited),
//! and it is made and routed again when its time comes (`H2::resume` in `serve.rs`, from the
//! zone's millisecond timer) or its answer arrives. Only that stream waits: the
//! connection's other streams go on.
//!
//! Request body that arrives meanwhile is kept, and the peer's window for it is not given
//! back until the request goes on, so what a waiting stream holds is bounded by the
//! stream's window (`[http2] initial_window`).

use std::time::Instant;

use ringx_h2proto::{Framing, RequestHead};

use crate::answer::fallback::Fallback;
use crate::guard::Progress;

/// A stream's request while it is being decided.
pub(super) struct Held {
    /// The request's fields as decoded (made a request again on each look).
    pub head: RequestHead,
    pub framing: Framing,
    pub progress: Progress,
    /// When it is looked at again (None: when its subrequest answers).
    pub until: Option<Instant>,
    /// It was looked at before (the log's fields are taken once).
    pub resumed: bool,
    pub body: HeldBody,
    /// The request is re-served at an `error_page` location of server `.0`
    /// (`answer/fallback.rs`): routed there, not by its URI.
    pub fallback: Option<Box<(usize, Fallback)>>,
}

/// Request body that arrived while the stream waited.
#[derive(Default)]
pub(super) struct HeldBody {
    pub data: Vec<u8>,
    /// The body ended (END_STREAM).
    pub end: bool,
    /// Trailer lines that ended it.
    pub trailers: Option<Vec<u8>>,
    /// It is a body sent again (to an `error_page` location): the peer's window for it was
    /// given back already.
    pub replayed: bool,
}

impl Held {
    pub fn new(head: RequestHead, framing: Framing) -> Box<Held> {
        Box::new(Held {
            head,
            framing,
            progress: Progress::default(),
            until: None,
            resumed: false,
            body: HeldBody::default(),
            fallback: None,
        })
    }
}
