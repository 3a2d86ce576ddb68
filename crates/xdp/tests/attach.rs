//! Attaching, atomic replacement and detaching, on devices in a private network namespace.
//! Needs root; skips otherwise (`ringx_kerneltest`).

mod common;

use std::path::PathBuf;

use ringx_kerneltest::{in_netns, ip};
use ringx_xdp::bench::BenchProgs;
use ringx_xdp::{attachments, detach, Error, Filter, Mode, Settings};

fn xdp_state(dev: &str) -> String {
    let out = std::process::Command::new("ip")
        .args(["-d", "link", "show", "dev", dev])
        .output()
        .expect("ip link show");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn attach_replace_detach_on_veth() {
    let Some((_, dir)) = common::load("attach", &Settings::default()) else {
        return;
    };
    let path: PathBuf = dir.path().to_path_buf();
    in_netns(move || {
        ip("link add rxa0 type veth peer name rxa1");
        ip("link set rxa0 up");
        ip("link set rxa1 up");

        let mut first = Filter::load(&Settings::default(), &path).unwrap();
        let a = first.attach("rxa0", Mode::Native).unwrap();
        assert!(!a.replaced);
        assert!(
            xdp_state("rxa0").contains("xdp "),
            "native XDP on rxa0: {}",
            xdp_state("rxa0")
        );
        let listed = attachments(&path).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].dev.as_str(), listed[0].link_id, listed[0].prog_id),
            ("rxa0", a.link_id, a.prog_id)
        );

        // A new version (other settings) goes into the same link: no detach, no gap.
        let mut second = Filter::load(
            &Settings {
                syn_rate: 10,
                ..Settings::default()
            },
            &path,
        )
        .unwrap();
        let b = second.attach("rxa0", Mode::Native).unwrap();
        assert!(b.replaced);
        assert_eq!(b.link_id, a.link_id, "same link");
        assert_ne!(b.prog_id, a.prog_id, "new program");
        // The loaders going away does not detach: the link is pinned.
        drop((first, second, a));
        assert_eq!(attachments(&path).unwrap()[0].prog_id, b.prog_id);
        assert!(xdp_state("rxa0").contains("xdp "));

        b.detach().unwrap();
        assert!(attachments(&path).unwrap().is_empty());
        assert!(
            !xdp_state("rxa0").contains("prog/xdp"),
            "{}",
            xdp_state("rxa0")
        );
        match detach(&path, "rxa0") {
            Err(Error::NotAttached { dev }) => assert_eq!(dev, "rxa0"),
            other => panic!("detach twice: {other:?}"),
        }
    });
}

#[test]
fn detach_by_name_and_generic_mode() {
    let Some((_, dir)) = common::load("generic", &Settings::default()) else {
        return;
    };
    let path = dir.path().to_path_buf();
    in_netns(move || {
        // A bridge: no native XDP in its driver (the kernel here has no dummy driver).
        ip("link add rxd0 type bridge");
        ip("link set rxd0 up");
        let mut f = Filter::load(&Settings::default(), &path).unwrap();
        // The error says to use generic mode.
        match f.attach("rxd0", Mode::Native) {
            Err(e @ Error::NativeUnsupported { .. }) => {
                assert!(e.to_string().contains("--mode generic"), "{e}")
            }
            other => panic!("native on a bridge: {other:?}"),
        }
        let a = f.attach("rxd0", Mode::Generic).unwrap();
        assert!(
            xdp_state("rxd0").contains("xdpgeneric"),
            "{}",
            xdp_state("rxd0")
        );
        drop(a); // the pin keeps it
        detach(&path, "rxd0").unwrap();
        assert!(!xdp_state("rxd0").contains("xdpgeneric"));
    });
}

#[test]
fn clear_errors_for_missing_and_busy_devices() {
    let Some((_, dir)) = common::load("errors", &Settings::default()) else {
        return;
    };
    let path = dir.path().to_path_buf();
    in_netns(move || {
        let mut f = Filter::load(&Settings::default(), &path).unwrap();
        match f.attach("nosuchdev0", Mode::Native) {
            Err(e @ Error::NoDevice(_)) => assert!(e.to_string().contains("nosuchdev0")),
            other => panic!("missing device: {other:?}"),
        }
        // Another XDP program already on the device.
        ip("link add rxb0 type veth peer name rxb1");
        ip("link set rxb0 up");
        let mut other = BenchProgs::load(0).unwrap();
        other.attach("xdp_pass", "rxb0", Mode::Native).unwrap();
        match f.attach("rxb0", Mode::Native) {
            Err(e @ Error::Busy { .. }) => assert!(e.to_string().contains("xdp off"), "{e}"),
            other => panic!("busy device: {other:?}"),
        }
    });
}

#[test]
fn a_defunct_link_is_replaced_by_a_new_one() {
    let Some((_, dir)) = common::load("defunct", &Settings::default()) else {
        return;
    };
    let path = dir.path().to_path_buf();
    in_netns(move || {
        ip("link add rxc0 type veth peer name rxc1");
        let mut f = Filter::load(&Settings::default(), &path).unwrap();
        let a = f.attach("rxc0", Mode::Native).unwrap();
        ip("link del rxc0");
        assert_eq!(
            attachments(&path).unwrap()[0].ifindex,
            0,
            "defunct once the device is gone"
        );
        ip("link add rxc0 type veth peer name rxc1");
        let b = f.attach("rxc0", Mode::Native).unwrap();
        assert!(!b.replaced);
        assert_ne!(b.link_id, a.link_id);
        b.detach().unwrap();
    });
}
