//! Path normalisation table.

use ringx_http::{normalize_path, PathError};

#[test]
fn normalize_path_table() {
    use PathError::*;
    let table: &[(&str, Result<&str, PathError>)] = &[
        ("/", Ok("/")),
        ("/index.html", Ok("/index.html")),
        ("/a/b/c", Ok("/a/b/c")),
        ("//a///b", Ok("/a/b")),
        ("/a/./b/.", Ok("/a/b/")),
        ("/./", Ok("/")),
        ("/.", Ok("/")),
        ("/a/../b", Ok("/b")),
        ("/a/b/..", Ok("/a/")),
        ("/a/..", Ok("/")),
        ("/a/b/../../c", Ok("/c")),
        ("/dir/", Ok("/dir/")),
        ("/dir/.", Ok("/dir/")),
        ("/dir//", Ok("/dir/")),
        ("/...", Ok("/...")),
        ("/..a/b..", Ok("/..a/b..")),
        ("/a%20b", Ok("/a b")),
        ("/%7euser/%7E", Ok("/~user/~")),
        ("/a%2Fb", Ok("/a/b")),
        ("/a%2f..%2fb", Ok("/b")),
        ("/a%5c..%5cb", Ok("/a\\..\\b")),
        ("/a\\..\\..\\b", Ok("/a\\..\\..\\b")),
        ("/%2e/a", Ok("/a")),
        ("/caf%C3%A9", Ok("/caf\u{e9}")),
        ("/%25", Ok("/%")),
        ("/a?b", Ok("/a?b")),
        ("/..", Err(Traversal)),
        ("/../etc/passwd", Err(Traversal)),
        ("/%2e%2e/x", Err(Traversal)),
        ("/%2E%2E", Err(Traversal)),
        ("/.%2e/x", Err(Traversal)),
        ("/a/%2E%2E/%2e%2e/x", Err(Traversal)),
        ("/a/../../b", Err(Traversal)),
        ("/a/b/../../..", Err(Traversal)),
        ("//..", Err(Traversal)),
        ("/a%2f..%2f..%2fetc", Err(Traversal)),
        ("", Err(NotAbsolute)),
        ("a/b", Err(NotAbsolute)),
        ("%2fa", Err(NotAbsolute)),
        ("*", Err(NotAbsolute)),
        ("http://a/b", Err(NotAbsolute)),
        ("/a%", Err(BadEncoding)),
        ("/a%2", Err(BadEncoding)),
        ("/a%zz", Err(BadEncoding)),
        ("/a%g0", Err(BadEncoding)),
        ("/%ff", Err(BadEncoding)),
        ("/%c3", Err(BadEncoding)),
        ("/%C3%28", Err(BadEncoding)),
        ("/a%00b", Err(NulByte)),
        ("/a\0b", Err(NulByte)),
    ];
    for (raw, want) in table {
        let got = normalize_path(raw);
        assert_eq!(got.as_deref().map_err(|e| *e), *want, "{raw:?}");
    }
}

#[test]
fn normalized_paths_are_fixed_points() {
    for raw in ["/a/b/", "/a//b/../c/./d", "/x%20y/z", "/"] {
        let once = normalize_path(raw).unwrap();
        // Re-normalising the (decoded) result changes nothing unless it
        // contains '%'; none of these do.
        assert_eq!(normalize_path(&once).unwrap(), once, "{raw}");
    }
}
