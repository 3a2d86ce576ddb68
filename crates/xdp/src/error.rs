//! Errors that say what went wrong and what to do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// What the XDP loader, CLI and map API report.
#[derive(Debug)]
pub enum Error {
    /// The kernel refused a BPF operation for lack of privilege.
    Permission { op: String },
    /// No network device by that name in this network namespace.
    NoDevice(String),
    /// The device's driver has no native XDP (`XDP_FLAGS_DRV_MODE` refused).
    NativeUnsupported { dev: String },
    /// The device already runs an XDP program that is not ringx's link.
    Busy { dev: String },
    /// Nothing pinned where the CLI or API looked.
    NotPinned { path: PathBuf },
    /// No ringx link on that device.
    NotAttached { dev: String },
    /// A pinned map from another version of the program does not fit this one.
    IncompatibleMap { path: PathBuf, why: String },
    /// The BPF object did not load (verifier log included when there is one).
    Load(String),
    /// A bad argument (a prefix, a setting).
    Invalid(String),
    /// Any other system call that failed.
    Io { op: String, err: io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

const PRIV: &str = "run as root, or give the process CAP_BPF and CAP_NET_ADMIN (CAP_SYS_ADMIN on kernels before 5.8)";

impl Error {
    /// Wraps a system error, turning EPERM/EACCES into [`Error::Permission`].
    pub fn io(op: impl Into<String>, err: io::Error) -> Error {
        let op = op.into();
        match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission { op },
            _ => Error::Io { op, err },
        }
    }

    /// Classifies an error from aya by the OS error at the bottom of its chain (also for the
    /// steering program `ringx-steer` loads through aya).
    pub fn from_aya(op: &str, e: &(dyn std::error::Error + 'static)) -> Error {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let mut text = e.to_string();
        while let Some(err) = cur {
            if let Some(ioe) = err.downcast_ref::<io::Error>() {
                if matches!(ioe.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
                    return Error::Permission { op: op.into() };
                }
            }
            if let Some(src) = err.source() {
                let s = src.to_string();
                if !text.contains(&s) {
                    text = format!("{text}: {s}");
                }
            }
            cur = err.source();
        }
        Error::Load(format!("{op}: {text}"))
    }

    /// The errno underneath, when there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { err, .. } => err.raw_os_error(),
            Error::Permission { .. } => Some(libc::EPERM),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Permission { op } => write!(f, "{op}: permission denied: {PRIV}"),
            Error::NoDevice(d) => write!(
                f,
                "no network device {d:?} in this network namespace (see `ip link`)"
            ),
            Error::NativeUnsupported { dev } => write!(
                f,
                "the driver of {dev} has no native XDP support: attach with --mode generic \
                 (mode = \"generic\" in [xdp]); generic XDP runs after the kernel allocates \
                 the packet, so it is slower but filters the same"
            ),
            Error::Busy { dev } => write!(
                f,
                "{dev} already runs an XDP program that ringx did not attach (see `ip link show \
                 dev {dev}`; remove it with `ip link set dev {dev} xdp off`)"
            ),
            Error::NotPinned { path } => write!(
                f,
                "nothing pinned at {}: attach first (`ringx xdp attach --dev IF`, or an [xdp] \
                 section for `ringx serve`), or pass the --pin-dir that was attached with",
                path.display()
            ),
            Error::NotAttached { dev } => write!(f, "ringx's XDP filter is not attached to {dev}"),
            Error::IncompatibleMap { path, why } => write!(
                f,
                "the map pinned at {} was created by another version of the filter ({why}); \
                 detach with `ringx xdp detach --dev IF --purge` to remove the old maps",
                path.display()
            ),
            Error::Load(s) => write!(f, "{s}"),
            Error::Invalid(s) => write!(f, "{s}"),
            Error::Io { op, err } => write!(f, "{op}: {err}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}
