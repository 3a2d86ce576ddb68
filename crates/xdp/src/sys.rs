//! The one raw `bpf(2)` layer of the workspace: every BPF system call that does not go
//! through aya goes through here, for the XDP filter (this crate) and for steering
//! (`ringx-steer`: its reuseport program and the XDP steering program's test runs).
//!
//! aya loads the programs written in C (`bpf/*.bpf.c`, compiled by clang): it parses their
//! ELF objects, creates their BTF-defined maps, fills their `const volatile` globals and
//! attaches them through bpf_links. This layer exists beside it because aya 0.13 (the last
//! release on the workspace's Rust 1.80) cannot do the rest:
//!
//! * load a `BPF_PROG_TYPE_SK_REUSEPORT` program or create a
//!   `BPF_MAP_TYPE_REUSEPORT_SOCKARRAY` map: aya-obj lists `sk_reuseport` among its
//!   unsupported sections and has no such map type (aya-rs/aya#215), so the reuseport
//!   steering program is assembled by hand and loaded with [`prog_load`];
//! * `BPF_PROG_TEST_RUN` ([`prog_test_run`]), which the packet tests and the benchmarks use;
//! * map element operations on a shared descriptor (`&self`, so one map handle serves many
//!   threads; aya's map types need `&mut` to write);
//! * opening any pinned object and reading its info (to refuse incompatible pinned maps
//!   before aya reuses them blindly), and `BPF_LINK_DETACH`.
//!
//! Replacing aya by this layer would mean writing an ELF, BTF and relocation loader; using aya
//! alone is not possible until it learns the above. Each `bpf_attr` variant is a `#[repr(C)]`
//! prefix of the kernel's union; the kernel accepts a shorter attr and zero-fills the rest.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

// Commands (include/uapi/linux/bpf.h, enum bpf_cmd).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_DETACH: libc::c_long = 34;

/// `BPF_ANY`: create or update.
pub const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
pub const BPF_NOEXIST: u64 = 1;
/// `BPF_F_TEST_XDP_LIVE_FRAMES` (5.18): frames of an XDP test run really go out on
/// `XDP_TX`/`XDP_REDIRECT`.
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// `BPF_MAP_TYPE_*` values the loader checks pinned maps against.
pub mod map_type {
    pub const HASH: u32 = 1;
    pub const ARRAY: u32 = 2;
    pub const PROG_ARRAY: u32 = 3;
    pub const PERCPU_ARRAY: u32 = 6;
    pub const LRU_HASH: u32 = 9;
    pub const LPM_TRIE: u32 = 11;
    pub const REUSEPORT_SOCKARRAY: u32 = 20;
}

/// `BPF_PROG_TYPE_*` values of the programs loaded through [`prog_load`].
pub mod prog_type {
    pub const SK_REUSEPORT: u32 = 21;
}

/// Issues one bpf(2) command.
///
/// # Safety
///
/// `attr` must be the attr layout `cmd` expects, and every pointer inside it must be valid
/// for the reads and writes the kernel does for that command (sizes included).
unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees that `attr` and the memory it points to match `cmd`;
    // the size passed is exactly the attr's.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cpath(path: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt as _;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `BPF_OBJ_GET`: opens a pinned map, program or link.
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct Attr {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let c = cpath(path)?;
    let mut attr = Attr {
        pathname: c.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: OBJ_GET reads the NUL-terminated path, which `c` keeps alive for the call.
    let fd = unsafe { bpf(BPF_OBJ_GET, &mut attr)? };
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_map_info`, the prefix the loader needs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MapInfo {
    pub map_type: u32,
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub name: [u8; 16],
}

impl MapInfo {
    pub fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// `struct bpf_link_info` up to the XDP member of its union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkInfo {
    pub link_type: u32,
    pub id: u32,
    pub prog_id: u32,
    _pad: u32,
    /// `xdp.ifindex` for an XDP link; 0 once its device is gone (the link is defunct).
    pub ifindex: u32,
    _rest: [u32; 7],
}

/// `BPF_LINK_TYPE_XDP`.
pub const BPF_LINK_TYPE_XDP: u32 = 6;

/// `struct bpf_prog_info`'s prefix.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgInfo {
    pub prog_type: u32,
    pub id: u32,
    pub tag: [u8; 8],
}

/// `BPF_OBJ_GET_INFO_BY_FD` into `T`, one of the info structs above.
fn obj_info<T: Default>(fd: BorrowedFd<'_>) -> io::Result<T> {
    let mut info = T::default();
    let mut attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: size_of::<T>() as u32,
        info: &mut info as *mut T as u64,
    };
    // SAFETY: the kernel writes at most info_len bytes into `info`, which is that large and
    // lives for the call; T is a plain repr(C) struct for which any bytes are valid.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)? };
    Ok(info)
}

pub fn map_info(fd: BorrowedFd<'_>) -> io::Result<MapInfo> {
    obj_info(fd)
}

pub fn link_info(fd: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    obj_info(fd)
}

pub fn prog_info(fd: BorrowedFd<'_>) -> io::Result<ProgInfo> {
    obj_info(fd)
}

/// `BPF_LINK_DETACH` (5.9): detaches the link from its hook now, whoever else holds it.
pub fn link_detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    #[repr(C)]
    struct Attr {
        link_fd: u32,
    }
    let mut attr = Attr {
        link_fd: fd.as_raw_fd() as u32,
    };
    // SAFETY: LINK_DETACH reads only the descriptor number.
    unsafe { bpf(BPF_LINK_DETACH, &mut attr)? };
    Ok(())
}

/// `BPF_PROG_GET_FD_BY_ID` / `BPF_MAP_GET_FD_BY_ID` (4.13, `CAP_SYS_ADMIN`): a descriptor of
/// the object with this id, for a process that did not create it.
fn fd_by_id(cmd: libc::c_long, id: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct Attr {
        id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let mut attr = Attr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: GET_FD_BY_ID reads the id and flags only; the attr holds no pointer.
    let fd = unsafe { bpf(cmd, &mut attr)? };
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A descriptor of the program with id `id` (see [`prog_info`] for a program's id).
pub fn prog_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    fd_by_id(BPF_PROG_GET_FD_BY_ID, id)
}

/// A descriptor of the map with id `id` (see [`map_info`] for a map's id).
pub fn map_fd_by_id(id: u32) -> io::Result<OwnedFd> {
    fd_by_id(BPF_MAP_GET_FD_BY_ID, id)
}

/// A 16-byte object name as the kernel stores it (truncated to 15 bytes, NUL-terminated).
fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    let len = s.len().min(15);
    n[..len].copy_from_slice(&s.as_bytes()[..len]);
    n
}

/// `BPF_MAP_CREATE` (the leading fields of `union bpf_attr`): a map with no BTF, for the
/// programs loaded through [`prog_load`] (aya creates the C programs' maps).
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    name: &str,
) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct Attr {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
        inner_map_fd: u32,
        numa_node: u32,
        map_name: [u8; 16],
    }
    let mut attr = Attr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags: 0,
        inner_map_fd: 0,
        numa_node: 0,
        map_name: name16(name),
    };
    // SAFETY: a MAP_CREATE attribute holds no pointers.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr)? };
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// One eBPF instruction (`struct bpf_insn`), for programs assembled in Rust.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    /// dst_reg in the low nibble, src_reg in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

const _: () = assert!(size_of::<Insn>() == 8, "struct bpf_insn is 8 bytes");

impl Insn {
    /// `code` with registers `dst` and `src`, offset `off` and immediate `imm`.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (dst & 0xf) | (src << 4),
            off,
            imm,
        }
    }
}

/// `BPF_PROG_LOAD` of `insns` as a program of type `prog_type` (see [`prog_type`]). When the
/// verifier refuses it, loads it once more with the verifier's log and puts the log's last
/// line into the error.
pub fn prog_load(
    prog_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
) -> io::Result<OwnedFd> {
    /// `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
    #[repr(C)]
    struct Attr {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    let insn_cnt = u32::try_from(insns.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "program too long"))?;
    let load = |log: Option<&mut Vec<u8>>| {
        let (log_level, log_size, log_buf) = match log {
            Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut attr = Attr {
            prog_type,
            insn_cnt,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level,
            log_size,
            log_buf,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name16(name),
            prog_ifindex: 0,
            expected_attach_type: 0,
        };
        // SAFETY: `insns` (insn_cnt instructions of the kernel's layout, asserted above),
        // the NUL-terminated license and the optional log buffer are live for the call with
        // the lengths given; the kernel writes at most log_size bytes into the log.
        unsafe { bpf(BPF_PROG_LOAD, &mut attr) }
    };
    let fd = match load(None) {
        Ok(fd) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EACCES)) => {
            // The verifier refused it: load again with its log to say why.
            let mut log = vec![0u8; 64 * 1024];
            let _ = load(Some(&mut log));
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            return Err(match last {
                Some(line) => io::Error::new(e.kind(), format!("{e}; verifier: {line}")),
                None => e,
            });
        }
        Err(e) => return Err(e),
    };
    // SAFETY: on success the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A map descriptor with the sizes the kernel will read and write through it, so that
/// element operations can check their buffers before handing them over.
#[derive(Debug)]
pub struct MapFd {
    fd: OwnedFd,
    info: MapInfo,
    /// Bytes of one lookup's value: value_size, or for per-CPU maps value_size rounded up to
    /// 8 times the possible CPUs.
    value_buf: usize,
}

#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

impl MapFd {
    pub fn new(fd: OwnedFd) -> io::Result<MapFd> {
        let info = map_info(fd.as_fd())?;
        let value_buf = if info.map_type == map_type::PERCPU_ARRAY {
            (info.value_size as usize).div_ceil(8) * 8 * possible_cpus()?
        } else {
            info.value_size as usize
        };
        Ok(MapFd {
            fd,
            info,
            value_buf,
        })
    }

    pub fn open_pinned(path: &Path) -> io::Result<MapFd> {
        MapFd::new(obj_get(path)?)
    }

    pub fn info(&self) -> &MapInfo {
        &self.info
    }

    /// Bytes a lookup writes (see the field).
    pub fn value_buf_len(&self) -> usize {
        self.value_buf
    }

    fn check(&self, key: &[u8], value: Option<usize>) -> io::Result<()> {
        let bad =
            key.len() != self.info.key_size as usize || value.is_some_and(|v| v != self.value_buf);
        if bad {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map {}: key of {} bytes, value of {:?} bytes; the map has {} and {}",
                    self.info.name(),
                    key.len(),
                    value,
                    self.info.key_size,
                    self.value_buf
                ),
            ));
        }
        Ok(())
    }

    fn attr(&self, key: *const u8, value: *const u8, flags: u64) -> ElemAttr {
        ElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: key as u64,
            value: value as u64,
            flags,
        }
    }

    /// Copies the value of `key` into `value`; false when the key is absent.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        self.check(key, Some(value.len()))?;
        let mut attr = self.attr(key.as_ptr(), value.as_mut_ptr(), 0);
        // SAFETY: `check` made sure the kernel reads exactly key.len() bytes of key and
        // writes exactly value.len() bytes of value; both slices outlive the call.
        match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check(key, Some(value.len()))?;
        let mut attr = self.attr(key.as_ptr(), value.as_ptr(), flags);
        // SAFETY: as in `lookup`; the kernel only reads both buffers.
        unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr)? };
        Ok(())
    }

    /// Deletes `key`; false when it was absent.
    pub fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check(key, None)?;
        let mut attr = self.attr(key.as_ptr(), std::ptr::null(), 0);
        // SAFETY: the kernel reads key_size bytes of the checked key.
        match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every key of a hash or trie map (for arrays, use the index range instead).
    pub fn keys(&self) -> io::Result<Vec<Vec<u8>>> {
        let ks = self.info.key_size as usize;
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut next = vec![0u8; ks];
        loop {
            let prev = out.last();
            let mut attr = self.attr(
                prev.map_or(std::ptr::null(), |p| p.as_ptr()),
                next.as_mut_ptr(),
                0,
            );
            // SAFETY: the kernel reads key_size bytes of `prev` (a key it returned before,
            // or NULL for the first) and writes key_size bytes into `next`.
            match unsafe { bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
                Ok(_) => out.push(next.clone()),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Err(e) => return Err(e),
            }
            if out.len() > self.info.max_entries as usize {
                // Keys deleted while we walk can restart an LPM trie walk; do not loop on.
                return Ok(out);
            }
        }
    }
}

impl AsFd for MapFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// CPUs the kernel sizes per-CPU maps for (`/sys/devices/system/cpu/possible`).
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_cpu_list(s.trim())
        .map(|v| v.iter().max().map_or(0, |m| m + 1))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("cpu list {s:?}")))
}

fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

/// The result of one `BPF_PROG_TEST_RUN`.
#[derive(Clone, Debug)]
pub struct TestRun {
    /// The program's return value (an `xdp_action` for XDP).
    pub retval: u32,
    /// Mean run time per repetition in nanoseconds, as the kernel measured it.
    pub duration_ns: u32,
    /// The packet as the program left it (empty for live-frame runs).
    pub data_out: Vec<u8>,
}

/// `BPF_PROG_TEST_RUN` (4.12; XDP live frames 5.18): runs `prog` on `data` `repeat` times
/// (0 counts as 1) in the kernel, without a device. With `BPF_F_TEST_XDP_LIVE_FRAMES` in
/// `flags`, redirected frames are really transmitted, in batches of `batch` (0: 64).
pub fn prog_test_run(
    prog: BorrowedFd<'_>,
    data: &[u8],
    repeat: u32,
    flags: u32,
    batch: u32,
) -> io::Result<TestRun> {
    #[repr(C)]
    struct Attr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        _pad: u32,
    }
    let live = flags & BPF_F_TEST_XDP_LIVE_FRAMES != 0;
    // Room for what the program may add with bpf_xdp_adjust_head/tail.
    let mut out = if live {
        Vec::new()
    } else {
        vec![0u8; data.len() + 4096]
    };
    let mut attr = Attr {
        prog_fd: prog.as_raw_fd() as u32,
        retval: 0,
        data_size_in: data.len() as u32,
        data_size_out: out.len() as u32,
        data_in: data.as_ptr() as u64,
        data_out: if live { 0 } else { out.as_mut_ptr() as u64 },
        repeat,
        duration: 0,
        ctx_size_in: 0,
        ctx_size_out: 0,
        ctx_in: 0,
        ctx_out: 0,
        flags,
        cpu: 0,
        batch_size: batch,
        _pad: 0,
    };
    // SAFETY: the kernel reads data_size_in bytes of `data` and writes at most
    // data_size_out bytes into `out` (none for live frames, where data_out is NULL); both
    // outlive the call. No context is passed.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr)? };
    out.truncate(attr.data_size_out as usize);
    Ok(TestRun {
        retval: attr.retval,
        duration_ns: attr.duration,
        data_out: out,
    })
}

/// `BPF_FS_MAGIC`, the f_type of a bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether `path` is on a BPF file system.
pub fn is_bpffs(path: &Path) -> io::Result<bool> {
    let c = cpath(path)?;
    // SAFETY: statfs writes into the zeroed local struct and reads the live C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's type differs between libcs
    let f_type = st.f_type as i64;
    Ok(f_type == BPF_FS_MAGIC)
}

/// Mounts a bpffs at `dir` (`mount -t bpf bpf DIR`), as bpftool does when none is mounted.
pub fn mount_bpffs(dir: &Path) -> io::Result<()> {
    let target = cpath(dir)?;
    let src = c"bpf";
    let mode = c"mode=0700";
    // SAFETY: every argument is a live NUL-terminated string; mount(2) only reads them.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            src.as_ptr(),
            0,
            mode.as_ptr() as *const libc::c_void,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `flock(fd, LOCK_EX)`: waits for an exclusive lock on `file`, released when the descriptor is
/// closed. Locks taken through separate `open`s conflict even within one process.
pub fn flock_exclusive(file: &std::fs::File) -> io::Result<()> {
    loop {
        // SAFETY: flock takes a descriptor that `file` keeps open for the call, and a flag word.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `if_nametoindex(3)`: None when there is no such device in this network namespace.
pub fn ifindex(dev: &str) -> Option<u32> {
    let c = CString::new(dev).ok()?;
    // SAFETY: reads the live NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (i != 0).then_some(i)
}

/// `if_indextoname(3)`.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: the buffer has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(s.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
