//! What a connection's input left for its caller: shared by the handshake ([`crate::conn`])
//! and the records after it ([`crate::traffic`]).

/// What a call to [`TlsConn::receive`](crate::TlsConn::receive) left for the caller to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    /// Nothing for the role (yet); handshake bytes may be in `out`.
    Handshaking,
    /// [`TlsConn::plain`](crate::TlsConn::plain) holds bytes for the role.
    Data,
    /// The handshake waits for the budget: call [`TlsConn::resume`](crate::TlsConn::resume) later.
    Waiting,
    /// The first bytes are not TLS but look like an HTTP request.
    PlainHttp,
    /// The peer sent close_notify (plaintext before it is in `plain`).
    Closed,
    /// The connection failed; an alert for the peer may be in `out` (or, while the kernel
    /// seals, in [`TlsConn::take_kernel_out`](crate::TlsConn::take_kernel_out)). Close after writing it.
    Failed(String),
}
