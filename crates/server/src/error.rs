//! Typed errors, in the manner of `pingora-error`: what failed ([`Kind`]), on which side of the
//! proxy the fault lies ([`Side`]), and the context an operator needs (the upstream, the
//! address, the file). Whether another server may be tried follows from the first two
//! ([`Error::retryable`]), as the status a client gets does ([`Error::status`]).
//!
//! The request path never allocates for an error it handles itself: a [`Kind`] and a [`Side`]
//! are plain values, and `context` is filled only for errors that are logged or reported.

use std::borrow::Cow;
use std::fmt;

/// Who is at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client (downstream): a bad request, a timeout waiting for it, a reset.
    Client,
    /// An upstream server: refused, reset, timed out, answered garbage.
    Upstream,
    /// ringx itself or its host: configuration, descriptors, memory.
    Internal,
}

/// What failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A connect was refused or could not be started (socket, bind, no free slot).
    Connect,
    /// The connection was reset or closed before the exchange was complete.
    Reset,
    /// A connect, read or send did not finish in time.
    Timeout,
    /// The peer's message could not be parsed or broke its own framing.
    Malformed,
    /// The upstream answered with a status that another server may not give (502, 503).
    Status(u16),
    /// A request that is refused with this status (400, 413, 414, 431, 501...).
    Refused(u16),
    /// The configuration is invalid (reported before anything changes).
    Config,
    /// An argument or input the operator gave cannot be used (a command-line value, a pid
    /// file that names no process).
    Invalid,
    /// A system call failed.
    Io,
}

/// An error with its place and its remedy.
#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub side: Side,
    /// What was being done, where: "upstream app (10.0.0.5:8080)", "bind 0.0.0.0:80".
    pub context: Option<Cow<'static, str>>,
    pub cause: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` on `side`, without context.
    pub fn new(kind: Kind, side: Side) -> Error {
        Error {
            kind,
            side,
            context: None,
            cause: None,
        }
    }

    /// A configuration error: `message` says what is wrong and where.
    pub fn config(message: impl Into<Cow<'static, str>>) -> Error {
        Error::new(Kind::Config, Side::Internal).context(message)
    }

    /// An operator's argument or input that cannot be used: `message` says which and why.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Error {
        Error::new(Kind::Invalid, Side::Internal).context(message)
    }

    /// A failed system call on ringx's side (`what`: the operation and its object).
    pub fn io(what: impl Into<Cow<'static, str>>, e: std::io::Error) -> Error {
        Error::new(Kind::Io, Side::Internal).context(what).cause(e)
    }

    pub fn context(mut self, c: impl Into<Cow<'static, str>>) -> Error {
        self.context = Some(c.into());
        self
    }

    pub fn cause(mut self, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        self.cause = Some(e.into());
        self
    }

    /// Whether another server may answer in its stead (pingora's `retry`): a fault of an
    /// upstream server or of the connection to it (refused, reset, timed out, broken framing,
    /// a 502 or 503), not of the client or of ringx. Whether the request is retried also
    /// depends on the request (nothing of the response sent yet, an idempotent method, a
    /// body that can be replayed) and on the tries left: `Exchange::can_retry`.
    pub fn retryable(&self) -> bool {
        self.side == Side::Upstream
            && matches!(
                self.kind,
                Kind::Connect
                    | Kind::Reset
                    | Kind::Timeout
                    | Kind::Malformed
                    | Kind::Status(502 | 503)
            )
    }

    /// The HTTP status a client gets for this error when nothing of the response was sent:
    /// 504 for an upstream timeout, 502 for other upstream faults, the refusal's own status,
    /// 408 for a client timeout, 500 otherwise.
    pub fn status(&self) -> u16 {
        match (self.kind, self.side) {
            (Kind::Refused(s), _) => s,
            (Kind::Timeout, Side::Upstream) => 504,
            (Kind::Timeout, Side::Client) => 408,
            (Kind::Malformed, Side::Client) => 400,
            (_, Side::Upstream) => 502,
            _ => 500,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Connect => f.write_str("connect failed"),
            Kind::Reset => f.write_str("connection reset"),
            Kind::Timeout => f.write_str("timed out"),
            Kind::Malformed => f.write_str("malformed message"),
            Kind::Status(s) => write!(f, "answered {s}"),
            Kind::Refused(s) => write!(f, "refused with {s}"),
            Kind::Config => f.write_str("invalid configuration"),
            Kind::Invalid => f.write_str("invalid"),
            Kind::Io => f.write_str("system call failed"),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.context, self.kind) {
            // A configuration error's context is the whole message.
            (Some(c), Kind::Config | Kind::Invalid) => f.write_str(c)?,
            (Some(c), k) => write!(f, "{c}: {k}")?,
            (None, k) => write!(f, "{k}")?,
        }
        if let Some(e) = &self.cause {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A message about an operator's input (a command-line value that cannot be used).
impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::invalid(message)
    }
}

impl From<&'static str> for Error {
    fn from(message: &'static str) -> Error {
        Error::invalid(message)
    }
}

impl From<ringx_config::ConfigError> for Error {
    fn from(e: ringx_config::ConfigError) -> Error {
        Error::config(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_side_at_fault() {
        assert_eq!(Error::new(Kind::Timeout, Side::Upstream).status(), 504);
        assert_eq!(Error::new(Kind::Timeout, Side::Client).status(), 408);
        assert_eq!(Error::new(Kind::Reset, Side::Upstream).status(), 502);
        assert_eq!(Error::new(Kind::Malformed, Side::Upstream).status(), 502);
        assert_eq!(Error::new(Kind::Malformed, Side::Client).status(), 400);
        assert_eq!(Error::new(Kind::Refused(413), Side::Client).status(), 413);
        assert_eq!(Error::new(Kind::Io, Side::Internal).status(), 500);
    }

    #[test]
    fn only_an_upstreams_fault_may_go_to_another_server() {
        for k in [Kind::Connect, Kind::Reset, Kind::Timeout, Kind::Malformed] {
            assert!(Error::new(k, Side::Upstream).retryable(), "{k}");
            assert!(!Error::new(k, Side::Client).retryable(), "{k}");
            assert!(!Error::new(k, Side::Internal).retryable(), "{k}");
        }
        assert!(Error::new(Kind::Status(502), Side::Upstream).retryable());
        assert!(Error::new(Kind::Status(503), Side::Upstream).retryable());
        assert!(!Error::new(Kind::Status(500), Side::Upstream).retryable());
        assert!(!Error::new(Kind::Io, Side::Internal).retryable());
    }

    #[test]
    fn display_names_the_context_and_the_cause() {
        let e = Error::new(Kind::Connect, Side::Upstream)
            .context("upstream app (10.0.0.5:8080)")
            .cause(std::io::Error::from_raw_os_error(libc::ECONNREFUSED));
        let s = e.to_string();
        assert!(
            s.starts_with("upstream app (10.0.0.5:8080): connect failed: "),
            "{s}"
        );
        assert!(s.contains("refused"), "{s}");
        assert_eq!(
            Error::config("t.toml:3:1: bad").to_string(),
            "t.toml:3:1: bad"
        );
    }
}
