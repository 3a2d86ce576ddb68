//! Whether the sockets bound to a UDP address are all this process's own.
//!
//! A QUIC listener that a reload removed stays open while its connections drain
//! (`ringx-server`'s `role/h3/reload.rs`). A later reload that serves the address again
//! must bind new sockets beside it, in the same `SO_REUSEPORT` group; the check that no
//! other server holds the address ([`crate::ensure_unclaimed_udp`]) would otherwise take the
//! draining sockets for another process's. The kernel names every socket bound in this
//! network namespace, with its inode, in `/proc/net/udp` (`udp6`); this process's own are
//! the `socket:[inode]` links of `/proc/self/fd`.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;

/// True when at least one UDP socket is bound to `addr` and every one of them is a
/// descriptor of this process; false when none is, or one is another process's (or the
/// tables cannot be read: the caller's probe then stands).
pub fn udp_held_only_by_us(addr: SocketAddr) -> bool {
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/udp",
        SocketAddr::V6(_) => "/proc/net/udp6",
    };
    let (Ok(text), Ok(ours)) = (std::fs::read_to_string(table), own_socket_inodes()) else {
        return false;
    };
    let holders = bound_inodes(&text, addr);
    !holders.is_empty() && holders.iter().all(|i| ours.contains(i))
}

/// The inodes of the sockets `table` (the text of `/proc/net/udp` or `udp6`) lists as
/// bound to `addr`.
fn bound_inodes(table: &str, addr: SocketAddr) -> Vec<u64> {
    let want = local_address(addr);
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            (f.get(1)? == &want).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

/// `addr` as the kernel prints a local address in `/proc/net/udp{,6}`: each 32-bit word of
/// the address (in network order in memory) printed as a native integer in hex, then the
/// port in hex (`udp4_format_sock`, `ip6_dgram_sock_seq_show`).
fn local_address(addr: SocketAddr) -> String {
    let words: Vec<[u8; 4]> = match addr {
        SocketAddr::V4(a) => vec![a.ip().octets()],
        SocketAddr::V6(a) => a
            .ip()
            .octets()
            .chunks_exact(4)
            .map(|w| [w[0], w[1], w[2], w[3]])
            .collect(),
    };
    let ip: String = words
        .iter()
        .map(|w| format!("{:08X}", u32::from_ne_bytes(*w)))
        .collect();
    format!("{ip}:{:04X}", addr.port())
}

/// The inodes of the sockets among this process's descriptors.
fn own_socket_inodes() -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        // A descriptor closed between the listing and the link's reading is skipped.
        let Ok(link) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        let link = link.to_string_lossy();
        if let Some(n) = link
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
            .and_then(|s| s.parse().ok())
        {
            inodes.insert(n);
        }
    }
    Ok(inodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn addresses_are_written_as_the_kernel_writes_them() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                local_address("127.0.0.1:53".parse().unwrap()),
                "0100007F:0035"
            );
            assert_eq!(
                local_address("[::1]:443".parse().unwrap()),
                "00000000000000000000000001000000:01BB"
            );
        }
    }

    #[test]
    fn a_table_line_names_its_inode() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                     \x20 12: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n\
                     \x20 13: 0100007F:0036 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0\n";
        let addr = "127.0.0.1:53".parse().unwrap();
        assert_eq!(bound_inodes(table, addr), vec![4242]);
    }

    #[test]
    fn our_own_socket_is_ours_and_a_free_port_is_not_held() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        if std::fs::metadata("/proc/net/udp").is_err() {
            eprintln!("skipped: no /proc/net/udp here");
            return;
        }
        assert!(udp_held_only_by_us(addr));
        drop(s);
        assert!(!udp_held_only_by_us(addr));
    }

    #[test]
    fn another_process_socket_is_not_ours() {
        if std::fs::metadata("/proc/net/udp").is_err() || which("python3").is_none() {
            eprintln!("skipped: needs /proc/net/udp and python3");
            return;
        }
        // A child process holds the port; this process holds a second socket beside it.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket,sys\n\
                 s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                 s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1)\n\
                 s.bind(('127.0.0.1',0))\n\
                 print(s.getsockname()[1],flush=True)\n\
                 sys.stdin.read()",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line.trim().parse().unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let ours = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )
        .unwrap();
        ours.set_reuse_port(true).unwrap();
        ours.bind(&addr.into()).unwrap();
        let held = udp_held_only_by_us(addr);
        drop(child.stdin.take());
        let _ = child.wait();
        assert!(!held, "a port another process holds counted as ours");
    }

    fn which(cmd: &str) -> Option<std::path::PathBuf> {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|d| std::path::Path::new(d).join(cmd))
            .find(|p| p.is_file())
    }
}
