//! `libringx_preload.so`: ringx's connection locality for programs that know nothing of it.
//!
//! `ringx run -- CMD ...` runs CMD with this library in `LD_PRELOAD` and its settings in
//! `RINGX_PRELOAD_*` variables ([`settings`]). The program keeps the kernel's TCP stack and
//! its own code; the library defines a handful of socket calls ([`hooks`]) that make the
//! real call (libc's, found with `dlsym(RTLD_NEXT)`, [`real`]) and add, on the side:
//!
//! * **passive side** ([`passive`]): `SO_REUSEPORT` TCP listeners of one address, created by
//!   any thread or process of the program, form a group steered by ringx's own reuseport
//!   program: each new connection goes to the listener claimed by a thread on the CPU that
//!   processed its SYN, and to the kernel's hash where that CPU has none;
//! * **active side** ([`outbound`]): `connect` to a destination of the steering tables binds
//!   a source port whose replies are processed on the calling thread's CPU, from the same
//!   per-zone tables (`ringx_steer::ports`) ringx uses for its upstreams.
//!
//! What the library promises the program: the real call's result and `errno` unchanged
//! ([`errno`]); no allocation on the intercepted paths after start-up ([`init`] allocates
//! what the hooks need); thread safety with one short spin lock per table ([`lock`]), which
//! `fork` never leaves taken in the child; a fresh start after `exec`; nothing at all when
//! the settings are absent; one stderr line for what it attached or why it could not
//! ([`log`]). Counters are written at exit when asked ([`stats`]).
//!
//! Limits, by design or not yet lifted:
//!
//! * a listener is claimed when a thread adds it to an epoll set or first accepts on it;
//!   a program that waits with `poll`/`select` claims at its first `accept`;
//! * at most [`registry::GROUPS`] listening addresses per process tree are steered;
//! * a steered connection's port comes back at `close`; a descriptor replaced by
//!   `dup2`/`dup3` or closed by `close_range` keeps its port out of the table until the
//!   process exits (the kernel still frees the socket: locality is lost, nothing else);
//! * descriptors at or above [`fdstate::MAX_FDS`] are never steered (counted);
//! * counters are written by processes that exit through `exit`, not by those killed.

pub mod errno;
pub mod fdstate;
#[cfg(not(test))]
pub mod hooks;
pub mod init;
pub mod lock;
pub mod log;
pub mod outbound;
pub mod passive;
pub mod real;
pub mod registry;
pub mod settings;
pub mod sock;
pub mod stats;
