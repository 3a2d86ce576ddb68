//! The cache's tiers with their writer thread: what a purge leaves behind.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::object::Object;
use super::{disk, key_hash, CacheZone};
use crate::testkit::TempDir;

fn object(key: &[u8], body: &[u8]) -> Object {
    Object {
        key: key.to_vec().into(),
        status: 200,
        head: b"Content-Type: text/plain\r\n".to_vec().into(),
        body: body.to_vec().into(),
        body_len: body.len() as u64,
        stored: 1_000_000,
        fresh_until: u64::MAX / 2,
        swr_until: 0,
        sie_until: 0,
        vary: Vec::new(),
        marker: false,
        etag: None,
        last_modified: None,
    }
}

/// Returns once the writer thread has done every job queued before.
fn settle(z: &CacheZone) {
    let (tx, rx) = mpsc::channel();
    z.jobs.send(disk::Job::Ping(tx)).expect("the writer runs");
    rx.recv().expect("the writer answers");
}

/// A purge that comes while the entry's write is still queued is not undone by that write:
/// the purge is answered once the writer has caught up, the entry is then found in neither
/// tier (a second purge finds nothing), and its file goes.
/// (It was found again on disk: the write indexed it after the purge, and a second purge
/// still found it there.)
#[test]
fn a_purge_is_not_undone_by_a_write_queued_before_it() {
    let dir = TempDir::new(&[]);
    let cache = dir.0.join("purge-race");
    let z = CacheZone::get(
        "purge-race",
        &cache,
        1 << 20,
        1 << 16,
        1 << 20,
        Duration::from_secs(600),
    )
    .expect("a cache");
    settle(z); // the start-up load is done
    for (i, all) in [(0, false), (1, true)] {
        // The writer waits while the entry is stored and purged: its write is queued first.
        let (hold, paused) = mpsc::channel();
        z.jobs
            .send(disk::Job::Pause(paused))
            .expect("the writer runs");
        let key = format!("http://h/obj{i}");
        let h = key_hash(key.as_bytes());
        z.store(h, Arc::new(object(key.as_bytes(), b"hello")), None, None);
        assert!(z.lookup(key.as_bytes(), h, |_| None).is_some(), "stored");
        // The purge waits for the writer, which waits for `hold`.
        let k = key.clone();
        let purge = std::thread::spawn(move || match all {
            true => z.purge_all() > 0,
            false => z.purge(k.as_bytes()),
        });
        drop(hold);
        assert!(purge.join().expect("the purge returns"), "it was there");
        assert!(
            z.lookup(key.as_bytes(), h, |_| None).is_none(),
            "purged {key} came back"
        );
        assert!(!z.purge(key.as_bytes()), "purged {key} was found again");
        settle(z); // the file's removal, queued by the purge
        assert!(!z.path(h).exists(), "{key}'s file stays");
    }
}
