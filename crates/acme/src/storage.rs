//! Where the account and the certificates are kept. [`Storage`] is the interface (a fleet of
//! ringx hosts can share one, with [`Storage::lock`] keeping two hosts from ordering the
//! same names at once); [`DirStorage`] keeps them in a directory: secrets (the account's
//! credentials, certificate keys) mode 0600, written to a temporary file and renamed, so a
//! crash leaves the old file or the new one. With `[cluster]`, [`RedisStorage`]
//! (`storage_redis.rs`) keeps them in Redis instead, for every host of the fleet.
//!
//! [`RedisStorage`]: crate::storage_redis::RedisStorage

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A held lock; dropping it releases the lock.
pub trait Held: Send {}

/// Keyed blobs with a lock. Keys are relative paths of `[a-z0-9._-]` and `/`.
pub trait Storage: Send + Sync {
    /// The blob at `key` (None: absent).
    fn load(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// Stores `data` at `key`, readable by the owner only when `secret`.
    fn store(&self, key: &str, data: &[u8], secret: bool) -> io::Result<()>;
    /// Waits for, and takes, the lock named `key` (one holder in the whole fleet).
    fn lock(&self, key: &str) -> io::Result<Box<dyn Held>>;
}

/// [`Storage`] in a directory (`[acme] storage`).
#[derive(Debug, Clone)]
pub struct DirStorage {
    root: PathBuf,
}

struct Flock(#[allow(dead_code)] File);
impl Held for Flock {}

impl DirStorage {
    pub fn new(root: impl Into<PathBuf>) -> DirStorage {
        DirStorage { root: root.into() }
    }

    fn path(&self, key: &str) -> io::Result<PathBuf> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    fn dirs(path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) => fs::DirBuilder::new().recursive(true).mode(0o700).create(p),
            None => Ok(()),
        }
    }
}

impl Storage for DirStorage {
    fn load(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(key)?) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn store(&self, key: &str, data: &[u8], secret: bool) -> io::Result<()> {
        let path = self.path(key)?;
        Self::dirs(&path)?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(if secret { 0o600 } else { 0o644 })
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &path)
    }

    fn lock(&self, key: &str) -> io::Result<Box<dyn Held>> {
        let path = self.path(&format!("locks/{key}.lock"))?;
        let at = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        Self::dirs(&path).map_err(at)?;
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(at)?;
        loop {
            // SAFETY: flock on a descriptor `f` owns and keeps open for this call.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            if r == 0 {
                return Ok(Box::new(Flock(f)));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Refuses a key that is not a relative path of `[a-z0-9._-]` and `/` (one that could leave
/// the storage's directory, or its prefix).
pub(crate) fn check_key(key: &str) -> io::Result<()> {
    let ok = !key.is_empty()
        && !key.starts_with('/')
        && key
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("storage key {key:?}"),
        ))
    }
}

/// The storage key of a name set's files under a directory URL: `certs/HOST/NAME/FILE`.
pub fn cert_key(directory: &str, first_name: &str, file: &str) -> String {
    format!(
        "certs/{}/{}/{file}",
        dir_key(directory),
        first_name.replace('*', "_wildcard_")
    )
}

/// The storage key of the account at a directory URL.
pub fn account_key(directory: &str) -> String {
    format!("accounts/{}/account.json", dir_key(directory))
}

/// A directory URL as one path component: its host, port and path, unsafe bytes as `_`.
fn dir_key(directory: &str) -> String {
    let s = directory
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' => b as char,
            _ => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secrets_are_0600_and_keys_stay_inside() {
        let dir = std::env::temp_dir().join(format!("ringx-acme-st-{}", std::process::id()));
        let st = DirStorage::new(&dir);
        let k = account_key("https://127.0.0.1:14000/dir");
        assert_eq!(k, "accounts/127.0.0.1_14000_dir/account.json");
        st.store(&k, b"secret", true).unwrap();
        assert_eq!(st.load(&k).unwrap().as_deref(), Some(&b"secret"[..]));
        let mode = fs::metadata(dir.join(&k)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(st.load("certs/none").unwrap().is_none());
        assert!(st.store("../x", b"", false).is_err());
        assert!(st.store("a/../../x", b"", false).is_err());
        let held = st.lock("a.test").unwrap();
        drop(held);
        fs::remove_dir_all(&dir).unwrap();
    }
}
