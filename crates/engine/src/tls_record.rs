//! One kernel TLS record of a given content type, queued behind a connection's output
//! ([`crate::Io::send_tls_record`]).
//!
//! While kernel TLS seals a socket's records, everything written is application data unless a
//! `sendmsg(2)` carries a `SOL_TLS` / `TLS_SET_RECORD_TYPE` control message with another
//! type (`Documentation/networking/tls.rst`, "Sending TLS control messages"): that is how an
//! alert or a KeyUpdate leaves. The message header, its one `iovec` and the control buffer
//! live in the record, and a record only exists boxed ([`TlsRecord::new`]): the connection's
//! control queue moves the box when it grows, never the record, so the addresses stay put
//! while io_uring's `SENDMSG` reads them (the kernel copies the control message again at
//! each retry of a send parked for room).

/// `SOL_TLS` and `TLS_SET_RECORD_TYPE` (`include/uapi/linux/tls.h`).
pub(crate) const SOL_TLS: i32 = 282;
pub(crate) const TLS_SET_RECORD_TYPE: i32 = 1;

/// `CMSG_SPACE(1)` on 64-bit Linux: a `cmsghdr` (a `size_t` and two `int`s) and one byte,
/// aligned to `size_t`; held in `u64`s for that alignment.
const CONTROL_WORDS: usize = 3;
const _: () = assert!(std::mem::size_of::<libc::cmsghdr>() == 16);

/// A record queued on a connection. Only ever boxed: io_uring's `SENDMSG` points into it.
pub(crate) struct TlsRecord {
    pub typ: u8,
    pub buf: Vec<u8>,
    pub pos: usize,
    msg: libc::msghdr,
    iov: libc::iovec,
    control: [u64; CONTROL_WORDS],
}

impl TlsRecord {
    /// A record of type `typ` with a copy of `data`, boxed: its address is where the message
    /// header [`TlsRecord::msghdr`] makes points, for as long as the box lives, however the
    /// box itself is moved.
    pub(crate) fn new(typ: u8, data: &[u8]) -> Box<TlsRecord> {
        // SAFETY: msghdr and iovec are plain C structs for which all-zero is a valid value
        // (null pointers, zero lengths).
        let (msg, iov) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        Box::new(TlsRecord {
            typ,
            buf: data.to_vec(),
            pos: 0,
            msg,
            iov,
            control: [0; CONTROL_WORDS],
        })
    }

    /// The control message: one `SOL_TLS` `TLS_SET_RECORD_TYPE` with the type byte.
    pub(crate) fn control_bytes(typ: u8) -> [u8; CONTROL_WORDS * 8] {
        let mut b = [0u8; CONTROL_WORDS * 8];
        let len = std::mem::size_of::<libc::cmsghdr>() + 1; // CMSG_LEN(1)
        b[..8].copy_from_slice(&(len as u64).to_ne_bytes());
        b[8..12].copy_from_slice(&SOL_TLS.to_ne_bytes());
        b[12..16].copy_from_slice(&TLS_SET_RECORD_TYPE.to_ne_bytes());
        b[16] = typ;
        b
    }

    /// The message for the bytes not sent yet. It points into this record (its `iovec` and
    /// control buffer) and into `buf`'s heap bytes, so it stays valid for as long as the
    /// record is neither dropped nor changed: records are only ever boxed (`new`), so moving
    /// the box (the control queue growing) does not move them.
    pub(crate) fn msghdr(&mut self) -> *const libc::msghdr {
        let ctl = Self::control_bytes(self.typ);
        for (w, c) in self.control.iter_mut().zip(ctl.chunks_exact(8)) {
            *w = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
        }
        let rest = &mut self.buf[self.pos..];
        self.iov.iov_base = rest.as_mut_ptr().cast();
        self.iov.iov_len = rest.len();
        self.msg.msg_name = std::ptr::null_mut();
        self.msg.msg_namelen = 0;
        self.msg.msg_iov = &mut self.iov;
        self.msg.msg_iovlen = 1;
        self.msg.msg_control = self.control.as_mut_ptr().cast();
        self.msg.msg_controllen = CONTROL_WORDS * 8;
        self.msg.msg_flags = 0;
        &self.msg
    }

    /// `sendmsg(2)` of the unsent bytes on `fd` (the epoll driver's).
    pub(crate) fn send(&mut self, fd: std::os::fd::RawFd) -> isize {
        let msg = self.msghdr();
        // SAFETY: `msg` points into `self`, which lives (unmoved and unchanged) for the whole
        // call: its iovec covers the live unsent bytes, its control buffer is this record's.
        // The kernel copies both and keeps no pointer.
        unsafe { libc::sendmsg(fd, msg, libc::MSG_NOSIGNAL) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_message_is_what_the_cmsg_macros_make() {
        let b = TlsRecord::control_bytes(21);
        // SAFETY: CMSG_LEN and CMSG_SPACE are arithmetic on a length.
        let (len, space) = unsafe { (libc::CMSG_LEN(1) as usize, libc::CMSG_SPACE(1) as usize) };
        assert_eq!(space, b.len());
        // SAFETY: msghdr is plain C data (integers and pointers) for which all zeros is a
        // valid value: no buffers, no control data, no flags.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        let mut buf = b;
        msg.msg_control = buf.as_mut_ptr().cast();
        msg.msg_controllen = buf.len();
        // SAFETY: the header points at a live, aligned-enough control buffer of its length.
        let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        assert!(!c.is_null());
        // SAFETY: CMSG_FIRSTHDR returned a header inside `buf`.
        unsafe {
            assert_eq!((*c).cmsg_len as usize, len);
            assert_eq!((*c).cmsg_level, SOL_TLS);
            assert_eq!((*c).cmsg_type, TLS_SET_RECORD_TYPE);
            assert_eq!(*libc::CMSG_DATA(c), 21);
        }
    }

    #[test]
    fn on_a_socket_without_kernel_tls_the_bytes_go_as_they_are() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut r = TlsRecord::new(21, &[1, 0]);
        let n = r.send(std::os::fd::AsRawFd::as_raw_fd(&c));
        assert_eq!(n, 2, "{}", std::io::Error::last_os_error());
        let mut got = [0u8; 2];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, [1, 0]);
    }
}
