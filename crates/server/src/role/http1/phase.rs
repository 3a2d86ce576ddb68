//! Where an HTTP/1 connection is in its request cycle ([`Phase`]), and what processing one
//! request decided about the input after it ([`Next`]).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Between requests, nothing buffered.
    Idle,
    /// Part of a request head has arrived.
    Head,
    /// Reading (and discarding) a request body; the response waits in `pending`.
    Body,
    /// The last response is queued; reading and discarding until the client closes.
    Lingering,
    /// Waiting for the PROXY protocol header a load balancer sends first.
    ProxyHeader,
    /// A request is being proxied: its body streams to the upstream, then the response
    /// streams back; further requests wait (reading paused).
    Proxy,
    /// A request waits with its head still buffered (a `limit_req` delay, a subrequest's
    /// answer, a password verified on the auth pool, a cache entry being filled), to be
    /// looked at again (`Http1::resume`).
    Wait,
    /// A static file is being compressed as the client takes it (`file_body.rs`); further
    /// requests wait.
    Compressing,
}

/// What processing a request decided about the rest of the input.
pub(super) enum Next {
    Continue,
    Stop,
    /// Stop here and keep the rest of the input buffered (a proxied request is in progress).
    Hold,
    /// Stop before this request: its head stays buffered and is parsed again when the
    /// request is resumed (it waits for a delay, a subrequest, a verification or a cache
    /// fill).
    Defer,
}
