//! The pid file (`[runtime] pid_file`), for `ringx reload`, logrotate and service managers.
//!
//! It is opened (created) while privileges last and given to the user the server runs as, so
//! that everything after the drop — naming this process once it serves, naming the new one
//! after a binary upgrade, emptying it at exit — works through the descriptor or the file's
//! own permissions, not the directory's (nginx's master, which keeps root, does these itself).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ringx_server::Error;

pub struct PidFile {
    path: PathBuf,
    file: File,
}

impl PidFile {
    /// Opens the pid file without changing what it says (during a binary upgrade it names
    /// the old process until this one serves), owned by `owner` (uid, gid) when given.
    pub fn open(path: &Path, owner: Option<(u32, u32)>) -> Result<PidFile, Error> {
        let ctx = || format!("pid file {}", path.display());
        // Its folder (/run/ringx) is made by systemd's RuntimeDirectory; where nothing made it
        // (a container, a chroot, a boot without systemd), ringx makes it.
        if let Some(dir) = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.exists())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::io(
                    format!("{}: cannot make its folder {}", ctx(), dir.display()),
                    e,
                )
            })?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .mode(0o644)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Error::io(ctx(), e))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                .map_err(|e| Error::io(format!("{}: chown to the server's user", ctx()), e))?;
        }
        Ok(PidFile {
            path: path.to_owned(),
            file,
        })
    }

    /// This process serves: the file names it. The file is never empty on the way: a
    /// reader (a script waiting for a binary upgrade, `ringx reload`) sees the old pid or the
    /// new one. The new pid is written over the old one, padded with spaces to the old
    /// length (readers trim), and only then is the file cut to the pid's length.
    pub fn write(&self) {
        let mut pid = format!("{}\n", std::process::id()).into_bytes();
        let len = pid.len() as u64;
        let old = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        pid.resize(pid.len().max(old as usize), b' ');
        let r = self
            .file
            .write_all_at(&pid, 0)
            .and_then(|()| self.file.set_len(len));
        if let Err(e) = r {
            tracing::error!("pid file {}: {e}", self.path.display());
        }
    }

    /// At exit: if the file still names this process (after an upgrade it names the new
    /// one), it is removed, or emptied where this process may not remove it.
    pub fn remove(&self) {
        if read_pid_file(&self.path).ok() != Some(std::process::id() as i32) {
            return;
        }
        if std::fs::remove_file(&self.path).is_err() {
            let _ = self.file.set_len(0);
            let _ = (&self.file).flush();
        }
    }
}

/// The pid in a pid file.
pub fn read_pid_file(path: &Path) -> Result<i32, Error> {
    let s = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("pid file {}", path.display()), e))?;
    s.trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| {
            Error::invalid(format!(
                "pid file {}: no pid in it ({:?}); is the server running?",
                path.display(),
                s.trim()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_this_process_then_removes_itself() {
        let p = std::env::temp_dir().join(format!("ringx-pid-{}", std::process::id()));
        std::fs::write(&p, "12345\n").unwrap();
        let f = PidFile::open(&p, None).unwrap();
        assert_eq!(
            read_pid_file(&p).ok(),
            Some(12345),
            "opening does not change it"
        );
        f.write();
        assert_eq!(read_pid_file(&p).ok(), Some(std::process::id() as i32));
        f.remove();
        assert!(!p.exists());
    }

    #[test]
    fn a_longer_old_pid_is_replaced_whole() {
        let p = std::env::temp_dir().join(format!("ringx-pid3-{}", std::process::id()));
        std::fs::write(&p, "123456789012345\n").unwrap();
        let f = PidFile::open(&p, None).unwrap();
        f.write();
        let s = std::fs::read_to_string(&p).unwrap();
        assert_eq!(s, format!("{}\n", std::process::id()));
        f.remove();
    }

    #[test]
    fn another_process_named_in_it_is_left_alone() {
        let p = std::env::temp_dir().join(format!("ringx-pid2-{}", std::process::id()));
        let f = PidFile::open(&p, None).unwrap();
        std::fs::write(&p, "12345\n").unwrap();
        f.remove();
        assert_eq!(read_pid_file(&p).ok(), Some(12345));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_missing_folder_is_made() {
        let d = std::env::temp_dir().join(format!("ringx-piddir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let p = d.join("run").join("ringx.pid");
        let f = PidFile::open(&p, None).unwrap();
        f.write();
        assert_eq!(read_pid_file(&p).ok(), Some(std::process::id() as i32));
        let _ = std::fs::remove_dir_all(&d);
    }
}
