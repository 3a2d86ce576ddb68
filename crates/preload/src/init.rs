//! Start-up: the constructor reads the settings, builds the port tables, maps the shared
//! group registry and registers the `fork` and exit handlers. Everything that allocates
//! happens here (or at the first `listen` of an address, which loads its BPF program); the
//! hooks only read what this left in statics.

use std::sync::OnceLock;

use crate::outbound::Outbound;
use crate::passive::GROUPS_LOCAL;
use crate::settings::{self, Settings};
use crate::{log, real, registry, stats};

static SETTINGS: OnceLock<Settings> = OnceLock::new();
static OUTBOUND: OnceLock<Outbound> = OnceLock::new();

/// The settings; None when the library is inert.
pub fn settings() -> Option<&'static Settings> {
    SETTINGS.get()
}

/// The active side's tables; None when it is off.
pub fn outbound() -> Option<&'static Outbound> {
    OUTBOUND.get()
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

#[cfg_attr(test, allow(dead_code))]
extern "C" fn constructor() {
    // A panic must not cross into the program (or abort it): the library stays inert.
    if std::panic::catch_unwind(start).is_err() {
        log::emit(format_args!("start-up failed; every call passes through"));
    }
}

fn start() {
    real::resolve_all();
    let mut s = match settings::parse(|k| std::env::var(k).ok()) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            log::emit(format_args!(
                "ignoring the settings ({e}); every call passes through"
            ));
            return;
        }
    };
    if s.cpus.is_empty() {
        let set = crate::sock::thread_cpus();
        s.cpus = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| crate::sock::cpu_in(&set, c))
            .collect();
    }
    if s.listen_cpu && !registry::create() {
        log::emit(format_args!(
            "cannot map the listener registry ({}): listeners keep the kernel's hash",
            std::io::Error::last_os_error()
        ));
        s.listen_cpu = false;
    }
    match Outbound::build(&s) {
        Ok(None) => {}
        Ok(Some(o)) => {
            log::emit(format_args!(
                "connect: source ports from {} tables (zones on CPUs {:?}) for {} destination(s)",
                o.mode.as_str(),
                o.cpus(),
                o.dests().len()
            ));
            let _ = OUTBOUND.set(o);
        }
        Err(e) => log::emit(format_args!(
            "connect: the kernel chooses source ports: {} tables: {e}",
            s.mode.as_str()
        )),
    }
    let stats_dir = s.stats.is_some();
    let _ = SETTINGS.set(s);
    // SAFETY: the three handlers are plain `extern "C" fn()` that stay loaded with the
    // library (it is never unloaded: it is preloaded).
    unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    if stats_dir {
        // SAFETY: as above, for a handler that runs at exit.
        unsafe { libc::atexit(write_stats) };
    }
}

/// Takes every lock of the library, in one order (groups, then each table), so the child
/// gets them all free (see [`crate::lock`]).
extern "C" fn before_fork() {
    GROUPS_LOCAL.lock_raw();
    if let Some(o) = outbound() {
        for t in &o.tables {
            t.lock_raw();
        }
    }
}

/// In the parent and in the child: releases what [`before_fork`] took.
extern "C" fn after_fork() {
    if let Some(o) = outbound() {
        for t in o.tables.iter().rev() {
            // SAFETY: before_fork took this lock on this thread (the forking one: in the
            // child, the only one) and no guard of it exists.
            unsafe { t.unlock_raw() };
        }
    }
    // SAFETY: as above.
    unsafe { GROUPS_LOCAL.unlock_raw() };
}

/// At exit: the counters, with the tables' summed, into `STATS/ringx-preload.PID`.
extern "C" fn write_stats() {
    let _ = std::panic::catch_unwind(|| {
        let Some(dir) = settings().and_then(|s| s.stats.as_ref()) else {
            return;
        };
        let mut sums = [0u64; 5];
        if let Some(o) = outbound() {
            for t in &o.tables {
                let c = t.lock().counters;
                for (s, v) in sums.iter_mut().zip([
                    c.table_hits,
                    c.dynamic_searches,
                    c.dynamic_hits,
                    c.hash_evals,
                    c.kernel_fallbacks,
                ]) {
                    *s += v;
                }
            }
        }
        let names = [
            "table_hits",
            "dynamic_searches",
            "dynamic_hits",
            "hash_evals",
            "kernel_fallbacks",
        ];
        let extra: Vec<(&str, u64)> = names.into_iter().zip(sums).collect();
        if !stats::any() && sums.iter().all(|&v| v == 0) {
            // A process that steered nothing (a shell, a helper the program ran) leaves no file.
            return;
        }
        let path = dir.join(format!("ringx-preload.{}", std::process::id()));
        let _ = std::fs::write(path, stats::render(&extra));
    });
}
