//! A request between the pipeline's looks at it, whichever protocol carries it: what the
//! stages decided so far ([`Progress`]: charged to the rate, the `auth_request` answer, how
//! long it waited for a cache fill), the error pages of the location proxying it, the
//! `error_page` location it is re-served at, and, where the protocol cannot keep it in
//! place, the request itself and the body that arrived while it waited.
//!
//! HTTP/1 keeps one per connection: a waiting request's head stays in the connection's
//! input, and only a request on its way to an `error_page` location is copied (the input
//! has moved on). HTTP/2 makes one per stream from its decoded fields and keeps it with the
//! stream while the request waits; HTTP/3 does the same with its QPACK fields.

use std::sync::Arc;

use ringx_h2proto::{Framing, RequestHead};

use crate::answer::fallback::Fallback;
use crate::answer::PageCtx;
use crate::guard::Progress;
use crate::pipeline::fields::head_of;
use crate::route::Routes;

/// A request while the pipeline decides it.
#[derive(Default)]
pub struct Pending {
    /// What the location's guard and cache decided so far.
    pub progress: Progress,
    /// It was looked at before: it was counted and logged already.
    pub resumed: bool,
    /// It is re-served at an `error_page` location (`answer/fallback.rs`): routed there,
    /// not by its URI.
    pub fallback: Option<Box<Rerouted>>,
    /// The error pages of the location that proxies it: a failure to reach the upstream is
    /// answered with them.
    pub page: Option<Box<PageCtx>>,
    /// The request and its body, kept here (None: they are kept where they arrived).
    pub kept: Option<Box<Kept>>,
}

/// A request kept to be made a request again on each look, and its body that arrived, or
/// was kept, while it waited (boxed: an HTTP/1 connection needs it only on a fallback's way).
pub struct Kept {
    pub request: Saved,
    pub body: SavedBody,
}

/// A request kept as its protocol delivered it.
pub enum Saved {
    /// Decoded fields (HTTP/2's HPACK) and the body's framing.
    Fields(RequestHead, Framing),
    /// An HTTP/1 head, copied for its way to an `error_page` location; `keep`: the
    /// connection stays open after its response.
    Text { head: Vec<u8>, keep: bool },
}

/// Where a request is re-served: an `error_page` location.
#[derive(Clone)]
pub struct Rerouted {
    pub fb: Fallback,
    /// The routes `fb` indexes: a reload meanwhile leaves them meaningless.
    pub routes: Arc<Routes>,
}

/// Request body that arrived while the request waited.
#[derive(Default)]
pub struct SavedBody {
    pub data: Vec<u8>,
    /// The body ended (HTTP/2's END_STREAM; an HTTP/1 body is kept only whole).
    pub end: bool,
    /// Trailer lines that ended it.
    pub trailers: Option<Vec<u8>>,
    /// It is a body sent again (to an `error_page` location): the peer's window for it was
    /// given back already.
    pub replayed: bool,
}

impl Pending {
    /// A request decoded into fields, looked at for the first time.
    pub fn of_fields(head: RequestHead, framing: Framing) -> Pending {
        Pending {
            kept: Some(Box::new(Kept {
                request: Saved::Fields(head, framing),
                body: SavedBody::default(),
            })),
            ..Pending::default()
        }
    }

    /// Keeps `body` with the request (a request kept where it arrived has none to keep).
    pub fn keep_body(&mut self, body: SavedBody) {
        if let Some(k) = self.kept.as_mut() {
            k.body = body;
        }
    }

    /// A request made again from its fields, `req` as it came and `body` (all of it, kept
    /// when it was proxied), to be re-served at the proxying location `fb` (of `routes`) an
    /// `error_page` names. It was looked at before: counted and logged already, and what the
    /// limits charged stays with it (each applies once per request, as in nginx), while what
    /// the failed location's `auth_request` or cache decided is not the fallback's. Made for
    /// a stream (its body comes from here, its window given back when it first arrived).
    pub fn rerouted(
        req: &ringx_http::Request,
        body: Option<Vec<u8>>,
        fb: &Fallback,
        routes: &Arc<Routes>,
    ) -> Box<Pending> {
        let framing = body
            .as_ref()
            .map_or(Framing::None, |b| Framing::Length(b.len() as u64));
        let mut pending = Box::new(Pending::of_fields(head_of(req), framing));
        if let Some(data) = body {
            pending.keep_body(SavedBody {
                data,
                end: true,
                trailers: None,
                replayed: true,
            });
        }
        pending.resumed = true;
        pending.progress.touched = true;
        pending.fallback = Some(Box::new(Rerouted {
            fb: fb.clone(),
            routes: routes.clone(),
        }));
        pending
    }

    /// Keeps a request on its way to the `error_page` location `fb` (of `routes`) to be
    /// looked at again after a wait: its head as it came (`head`, HTTP/1's text; `keep`: the
    /// connection stays open after its response) and its body, whole.
    pub fn wait_rerouted(
        &mut self,
        head: Vec<u8>,
        body: Option<Vec<u8>>,
        (fb, routes): (&Fallback, &Arc<Routes>),
        keep: bool,
    ) {
        self.kept = Some(Box::new(Kept {
            request: Saved::Text { head, keep },
            body: SavedBody::whole(body),
        }));
        self.fallback = Some(Box::new(Rerouted {
            fb: fb.clone(),
            routes: routes.clone(),
        }));
    }

    /// Forgets what was decided for the last request (a keep-alive connection's next one).
    /// Only a location with a guard, a cache or error pages sets anything, so on every
    /// other request this is a few tests.
    #[inline]
    pub fn clear(&mut self) {
        self.progress.clear();
        self.fallback = None;
        self.page = None;
        self.kept = None;
    }
}

impl Rerouted {
    /// Whether `routes` are still the ones it was routed by.
    pub fn is_current(&self, routes: &Arc<Routes>) -> bool {
        Arc::ptr_eq(&self.routes, routes)
    }
}

impl SavedBody {
    /// A whole body, kept to be sent again (None: the request had none).
    pub fn whole(body: Option<Vec<u8>>) -> SavedBody {
        match body {
            Some(data) => SavedBody {
                data,
                end: true,
                ..SavedBody::default()
            },
            None => SavedBody::default(),
        }
    }

    /// The body kept whole by [`SavedBody::whole`].
    pub fn take_whole(&mut self) -> Option<Vec<u8>> {
        let b = std::mem::take(self);
        b.end.then_some(b.data)
    }
}
