//! `ringx rss`: the real binary against Microsoft's published RSS verification vectors, and
//! `rss show` on loopback (which has no RSS).

use std::path::Path;
use std::process::{Command, Output};

fn ringx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ringx"))
        .args(args)
        .output()
        .expect("run ringx")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn hash(args: &[&str]) -> String {
    let mut all = vec!["rss", "hash"];
    all.extend_from_slice(args);
    let o = ringx(&all);
    assert!(o.status.success(), "{all:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn ipv4_vectors() {
    // (src, dst, with ports, ip only): the suite's table lists the destination first.
    let rows = [
        (
            "66.9.149.187:2794",
            "161.142.100.80:1766",
            "0x51ccc178\n",
            "0x323e8fc2\n",
        ),
        (
            "199.92.111.2:14230",
            "65.69.140.83:4739",
            "0xc626b0ea\n",
            "0xd718262a\n",
        ),
        (
            "153.39.163.191:44251",
            "202.188.127.2:1303",
            "0x10e828a2\n",
            "0x5d1809c5\n",
        ),
    ];
    for (src, dst, l4, l3) in rows {
        assert_eq!(hash(&["--src", src, "--dst", dst]), l4);
        assert_eq!(hash(&["--src", src, "--dst", dst, "--ip-only"]), l3);
    }
    // IP-only without ports.
    assert_eq!(
        hash(&[
            "--src",
            "66.9.149.187",
            "--dst",
            "161.142.100.80",
            "--ip-only"
        ]),
        "0x323e8fc2\n"
    );
}

#[test]
fn ipv6_vectors() {
    assert_eq!(
        hash(&[
            "--src",
            "[3ffe:2501:200:1fff::7]:2794",
            "--dst",
            "[3ffe:2501:200:3::1]:1766"
        ]),
        "0x40207d3d\n"
    );
    assert_eq!(
        hash(&[
            "--src",
            "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251",
            "--dst",
            "[fe80::200:f8ff:fe21:67cf]:38024"
        ]),
        "0x02d1feef\n"
    );
    assert_eq!(
        hash(&[
            "--src",
            "[3ffe:501:8::260:97ff:fe40:efab]",
            "--dst",
            "ff02::1",
            "--ip-only"
        ]),
        "0x0f0c461c\n"
    );
}

#[test]
fn explicit_key() {
    let key = "6d:5a:56:da:25:5b:0e:c2:41:67:25:3d:43:a3:8f:b0:d0:ca:2b:cb:ae:7b:30:b4:77:cb:\
               2d:a3:80:30:f2:0c:6a:42:b7:3b:be:ac:01:fa";
    assert_eq!(
        hash(&[
            "--key",
            key,
            "--src",
            "24.19.198.95:12898",
            "--dst",
            "12.22.207.184:38024"
        ]),
        "0x5c2b394a\n"
    );
    // A different key, a different hash.
    let zero = "00".repeat(40);
    assert_eq!(
        hash(&[
            "--key",
            &zero,
            "--src",
            "24.19.198.95:12898",
            "--dst",
            "12.22.207.184:38024"
        ]),
        "0x00000000\n"
    );
}

#[test]
fn hash_input_errors() {
    for args in [
        // Port missing without --ip-only.
        &[
            "rss",
            "hash",
            "--src",
            "66.9.149.187",
            "--dst",
            "161.142.100.80:1766",
        ][..],
        // Mixed families.
        &["rss", "hash", "--src", "66.9.149.187:1", "--dst", "[::1]:2"][..],
        // Key too short for an IPv6 4-tuple.
        &[
            "rss", "hash", "--key", "6d5a56da", "--src", "[::1]:1", "--dst", "[::2]:2",
        ][..],
        // Not hex.
        &[
            "rss",
            "hash",
            "--key",
            "xyz0",
            "--src",
            "1.2.3.4:1",
            "--dst",
            "1.2.3.5:2",
        ][..],
    ] {
        let o = ringx(args);
        assert!(!o.status.success(), "{args:?} should fail");
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
        assert!(
            stderr(&o).contains("ringx rss hash:"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn show_loopback_recommends_software_steering() {
    if !Path::new("/sys/class/net/lo").exists() {
        ringx_kerneltest::skip("no /sys/class/net/lo in this environment");
        return;
    }
    let o = ringx(&["rss", "show", "--dev", "lo"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("device: lo"), "{out}");
    assert!(out.contains("rx queues: "), "{out}");
    assert!(out.contains("no RSS: use software steering"), "{out}");
}

#[test]
fn show_missing_device_fails_clearly() {
    let o = ringx(&["rss", "show", "--dev", "ringxnodev9"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no network device named \"ringxnodev9\""),
        "{}",
        stderr(&o)
    );
}
