//! The error log (`[runtime] error_log`, nginx's `error_log`): where `tracing` writes, at the
//! level `log_level` names in nginx's words.
//!
//! The file is opened at start, before privileges are dropped, and given to the `user` the
//! server will run as. Every line is one `write(2)` on an `O_APPEND` descriptor, from whichever
//! thread logs it, so lines from zones never interleave. SIGUSR1 reopens it (after logrotate
//! moved it): the new file is opened and `dup2`'d over the descriptor every writer uses, so
//! no writer ever sees a closed one and no lock is taken to log.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The open error log: its descriptor (kept for the life of the process) and its path.
struct ErrorLog {
    file: File,
    path: PathBuf,
}

static LOG: OnceLock<ErrorLog> = OnceLock::new();

/// A line's writer: the error log's descriptor.
struct FdWriter(RawFd);

impl Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // SAFETY: `self.0` is the error log's descriptor, which lives in `LOG` for the rest of
        // the process (a reopen replaces what it refers to with dup2, never closes it); `buf`
        // is valid for `buf.len()` bytes.
        let n = unsafe { libc::write(self.0, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sets up logging: to the file at `path` (None, or `stderr`: standard error), at `level`
/// (a name `ringx check` accepted; `RUST_LOG` overrides it). `owner`: who the file is given to.
pub fn init(level: &str, path: Option<&Path>, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let level = ringx_config::ops::tracing_level(level);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let path = path.filter(|p| p.as_os_str() != "stderr");
    let Some(path) = path else {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
        return Ok(());
    };
    let file = ringx_server::accesslog::open_for(path, owner)?;
    let fd = file.as_raw_fd();
    let _ = LOG.set(ErrorLog {
        file,
        path: path.to_path_buf(),
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || FdWriter(fd))
        .with_ansi(false)
        .try_init();
    Ok(())
}

/// Reopens the error log at its path (SIGUSR1). A file that cannot be opened (after the
/// privileges drop, in a directory the user may not write) leaves the old one in use, and says
/// so in it.
pub fn reopen() {
    let Some(log) = LOG.get() else { return };
    match ringx_server::accesslog::open(&log.path) {
        Ok(new) => {
            // SAFETY: both descriptors are open and owned (`new` by this function, the log's by
            // `LOG`); dup2 atomically makes the log's descriptor refer to the new file, and
            // `new` is closed when it drops.
            let r = unsafe { libc::dup2(new.as_raw_fd(), log.file.as_raw_fd()) };
            if r < 0 {
                tracing::error!(
                    "error log {}: cannot switch to the reopened file: {}",
                    log.path.display(),
                    std::io::Error::last_os_error()
                );
            }
        }
        Err(e) => tracing::error!(
            "error log {}: cannot reopen ({e}); still writing to the old file",
            log.path.display()
        ),
    }
}
