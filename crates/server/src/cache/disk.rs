//! The disk tier's writer thread: files are written (to a temporary name, then renamed, so a
//! reader never sees half a file) and removed here, never on a zone. At start it loads the
//! index from what the directory holds, so a restart keeps the disk tier; files that are not
//! whole cache records are removed.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::object::Object;
use super::stats::Stats;

/// What the writer thread needs of its cache (the cache implements it; this file does not
/// depend on the cache's type).
pub trait Tier: Sync {
    fn name(&self) -> &str;
    fn dir(&self) -> &std::path::Path;
    /// The file of a hash.
    fn path(&self, h: u128) -> std::path::PathBuf;
    /// A file of `size` bytes is on disk for `h`.
    fn indexed(&self, h: u128, size: u64);
    /// A purge reached the writer: `h` (None: every entry) leaves the index, and its file
    /// goes with it. Returns how many entries the index held of it.
    fn forget(&self, h: Option<u128>) -> u64;
    fn unlock(&self, h: u128);
    fn stats(&self) -> &Stats;
}

pub enum Job {
    /// Write the object of this hash, then release this lock (a fill kept on disk only).
    Write(u128, Arc<Object>, Option<u128>),
    /// Remove the file of this hash (it left the index; `true`: purged).
    Unlink(u128, bool),
    /// A purge of this hash (None: of every entry), queued behind the writes before it: a
    /// write of the object purged, still in the queue when the purge came, would otherwise
    /// put it back in the index once written. The writer answers how many entries the
    /// index held of it, once they are gone.
    Forget(Option<u128>, std::sync::mpsc::Sender<u64>),
    /// Tests: the writer waits here until the sender sends or is dropped.
    #[cfg(test)]
    Pause(std::sync::mpsc::Receiver<()>),
    /// Tests: the writer says it got here (every job queued before is done).
    #[cfg(test)]
    Ping(std::sync::mpsc::Sender<()>),
}

pub fn spawn(z: &'static dyn Tier, rx: Receiver<Job>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("ringx-cache-{}", z.name()))
        .spawn(move || {
            load(z);
            for job in rx {
                match job {
                    Job::Write(h, o, unlock) => {
                        if let Err(e) = write(z, h, &o) {
                            z.stats().disk_errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                "cache {}: writing {}: {e}",
                                z.name(),
                                z.path(h).display()
                            );
                        }
                        if let Some(p) = unlock {
                            z.unlock(p);
                        }
                    }
                    Job::Forget(h, done) => {
                        let _ = done.send(z.forget(h));
                    }
                    #[cfg(test)]
                    Job::Pause(until) => {
                        let _ = until.recv();
                    }
                    #[cfg(test)]
                    Job::Ping(here) => {
                        let _ = here.send(());
                    }
                    Job::Unlink(h, purged) => {
                        if !purged {
                            z.stats().disk_evicted.fetch_add(1, Ordering::Relaxed);
                        }
                        let _ = std::fs::remove_file(z.path(h));
                    }
                }
            }
        })
        .map(drop)
}

fn write(z: &dyn Tier, h: u128, o: &Object) -> std::io::Result<()> {
    let path = z.path(h);
    let dir = path.parent().expect("a cache file is in a subdirectory");
    // The level directory only: a cache directory removed under a running server is an
    // error to report, not a tree to create again (nor, in tests, a temp dir to leak).
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let tmp = dir.join(format!(".{h:032x}.tmp"));
    let head = o.encode_head();
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&head)?;
        f.write_all(&o.body)?;
    }
    std::fs::rename(&tmp, &path)?;
    z.indexed(h, (head.len() + o.body.len()) as u64);
    Ok(())
}

/// Puts every whole cache file of the directory into the index; removes the rest.
fn load(z: &dyn Tier) {
    let Ok(subs) = std::fs::read_dir(z.dir()) else {
        return;
    };
    let (mut kept, mut removed) = (0u64, 0u64);
    for sub in subs.flatten() {
        let Ok(files) = std::fs::read_dir(sub.path()) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            let name = f.file_name();
            let h = name
                .to_str()
                .filter(|n| n.len() == 32)
                .and_then(|n| u128::from_str_radix(n, 16).ok());
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            let whole = h.is_some() && is_whole(&p, size);
            match h {
                Some(h) if whole => {
                    z.indexed(h, size);
                    kept += 1;
                }
                _ => {
                    let _ = std::fs::remove_file(&p);
                    removed += 1;
                }
            }
        }
    }
    if kept + removed > 0 {
        tracing::info!(
            "cache {}: {kept} entries loaded from {}{}",
            z.name(),
            z.dir().display(),
            if removed > 0 {
                format!(" ({removed} unusable files removed)")
            } else {
                String::new()
            }
        );
    }
}

/// Whether the file at `p` (of `size` bytes) is a whole record: its metadata reads back and
/// its body is all there.
fn is_whole(p: &std::path::Path, size: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(f) = std::fs::File::open(p) else {
        return false;
    };
    let mut buf = vec![0u8; 64 * 1024];
    let Ok(n) = f.read_at(&mut buf, 0) else {
        return false;
    };
    match Object::decode_head(&buf[..n]) {
        Some((o, off)) => off.checked_add(o.body_len) == Some(size),
        // A head larger than the first read: read it all.
        None if n == buf.len() => std::fs::read(p)
            .ok()
            .and_then(|b| {
                Object::decode_head(&b).map(|(o, off)| off + o.body_len == b.len() as u64)
            })
            .unwrap_or(false),
        None => false,
    }
}
