//! `skip` as a test binary sees it, in a child process running this binary's `child` test:
//! without `CI` the skip passes and its line reaches stderr although the harness captures the
//! test's output; under CI as root the skip fails the test.

use std::process::{Command, Output};

#[test]
#[ignore = "the child process of the other tests"]
fn child() {
    ringx_kerneltest::skip("the reason");
}

fn run_child(ci: Option<&str>) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", "child"]);
    match ci {
        Some(v) => c.env("CI", v),
        None => c.env_remove("CI"),
    };
    c.output().expect("run the test binary")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

#[test]
fn a_skip_says_why_past_the_capture() {
    for ci in [None, Some(""), Some("false"), Some("0")] {
        let o = run_child(ci);
        assert!(o.status.success(), "CI={ci:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("SKIP child: the reason\n"), "CI={ci:?}: {err}");
    }
}

#[test]
fn under_ci_a_skip_fails_as_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let o = run_child(Some("true"));
    let out = text(&o);
    if root {
        assert!(!o.status.success(), "{out}");
        assert!(
            out.contains("child cannot run: the reason; under CI"),
            "{out}"
        );
    } else {
        assert!(o.status.success(), "{out}");
        assert!(out.contains("SKIP child: the reason"), "{out}");
    }
}
