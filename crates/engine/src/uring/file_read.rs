//! File bodies from the page cache: read into the output buffer and sent like any bytes.
//!
//! io_uring runs `IORING_OP_SPLICE` only in its worker threads (it never splices inline), so
//! every file response sent by splice cost two hand-offs to a kernel thread, and a client that
//! stopped reading held a worker blocked in the socket for as long as it kept the connection:
//! 200 such clients made 200 `iou-wrk` threads. A file's bytes that are in the page cache are
//! instead read here with `preadv2(RWF_NOWAIT)` (one copy, no wait) into the connection's
//! output buffer, behind the response head when they fit, and go out with `IORING_OP_SEND`,
//! which waits for socket space with the ring's own poll: no thread, and connections take turns
//! fairly. Bytes not in the page cache (`EAGAIN`) still go by splice, where the worker's wait
//! for the disk keeps the zone from blocking, and so do files on file systems that refuse
//! `RWF_NOWAIT`. Bodies larger than one read go by `sendfile` instead where the kernel can
//! give the socket an ordinary descriptor (`sendfile.rs`): no copy at all.

use std::os::fd::AsRawFd;

use super::close;
use super::pagecache::file_shrank;
use super::sendfile::NO_SENDFILE;
use super::state::UringDriver;
use crate::io::{Chunk, ConnId};

/// The most one read takes: with the head in front, one send's worth; larger files go in
/// rounds of this size, each read after the last one's send completed.
const FILE_READ_CHUNK: usize = 64 * 1024;

/// What [`read_ahead`] did.
pub(super) enum ReadAhead {
    /// The front chunk is bytes (possibly with file bytes appended): send it.
    Send,
    /// The front chunk is a file whose next bytes are not in the page cache: splice it.
    Splice,
    /// The front chunk is a large file: sendfile it (`sendfile.rs`).
    Sendfile,
    /// Reading failed; the connection is closing.
    Closed,
}

/// Moves file bytes that are in the page cache into the output queue as bytes: appended to
/// a front bytes chunk followed by a file (a response head and its body, one send), or
/// read into a new front chunk when the file is first; or says that the front file goes by
/// sendfile or splice. Called with nothing in flight.
pub(super) fn read_ahead(d: &mut UringDriver, c: ConnId) -> ReadAhead {
    let conn = &d.io.conns[c.index()];
    match conn.out.front() {
        Some(Chunk::Bytes { buf, pos }) => {
            let room = FILE_READ_CHUNK.saturating_sub(buf.len() - pos) as u64;
            match conn.out.get(1) {
                // A body that fits behind the head goes with it in one send; a larger
                // one by sendfile after it, or else in reads from here.
                Some(f @ Chunk::File { .. })
                    if room > 0
                        && (f.remaining() <= room || !use_sendfile(d, c, f.remaining())) => {}
                _ => return ReadAhead::Send,
            }
        }
        Some(f @ Chunk::File { .. }) => {
            if d.uconns[c.index()].pipe_fill > 0 {
                return ReadAhead::Splice; // finish what the pipe holds first
            }
            if use_sendfile(d, c, f.remaining()) {
                return ReadAhead::Sendfile;
            }
            let io = &mut d.io;
            let conn = &mut io.conns[c.index()];
            let buf = io.spares.pop().unwrap_or_default();
            conn.out.push_front(Chunk::Bytes { buf, pos: 0 });
        }
        None => return ReadAhead::Send,
    }
    let io = &mut d.io;
    let conn = &mut io.conns[c.index()];
    // The front chunk is bytes now, and a file chunk follows it.
    let (front, rest) = conn.out.as_mut_slices();
    let (buf, pos, file) = match (front, rest) {
        ([Chunk::Bytes { buf, pos }, Chunk::File { file, off, end }, ..], _)
        | ([Chunk::Bytes { buf, pos }], [Chunk::File { file, off, end }, ..]) => {
            (buf, *pos, (file.as_raw_fd(), off, *end))
        }
        _ => unreachable!("bytes then a file at the front of the queue"),
    };
    let (fd, off, end) = file;
    let room = FILE_READ_CHUNK - (buf.len() - pos);
    let want = (end - *off).min(room as u64) as usize;
    let front_empty = pos == buf.len();
    // Exact (`pread_append`): head and body stay within the 64 KiB that the zone's pool of
    // spare output vectors keeps (`Io::spares`); doubling could leave 128 KiB, freed after
    // every send.
    let res = crate::sys::pread_append(fd, buf, want, *off, libc::RWF_NOWAIT);
    let err = match res {
        Ok(0) => file_shrank(),
        Ok(n) => {
            *off += n as u64;
            if *off == end {
                conn.out.remove(1);
            }
            return ReadAhead::Send;
        }
        // EAGAIN: not in the page cache; EOPNOTSUPP: a file system without RWF_NOWAIT.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::EINTR)
            ) =>
        {
            if !front_empty {
                return ReadAhead::Send; // the head goes now, the file after it
            }
            // Nothing was cached: the empty chunk goes back, the file is spliced.
            conn.pop_front(&mut io.spares);
            return ReadAhead::Splice;
        }
        Err(e) => e,
    };
    close::begin(d, c, Some(err));
    ReadAhead::Closed
}

/// Whether `remaining` bytes of a file go by sendfile on connection `c`: bodies larger
/// than one read, and all of them while the connection has its descriptor (it is dropped
/// when no file is queued, so it costs a descriptor per file being sent, not per
/// connection; where none is left, EMFILE, the connection's files are read and sent).
fn use_sendfile(d: &UringDriver, c: ConnId, remaining: u64) -> bool {
    let u = &d.uconns[c.index()];
    d.sendfile_ok
        && u.flags & NO_SENDFILE == 0
        && (u.sock_fd.is_some() || remaining > FILE_READ_CHUNK as u64)
}
