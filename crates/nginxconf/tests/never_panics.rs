//! Whatever the bytes, parsing ends with a tree or an error at a line of the input.

use proptest::prelude::*;

fn check(text: &str) {
    match ringx_nginxconf::parse_str("p.conf", text) {
        Ok(_) => {}
        Err(e) if e.file == "p.conf" => {
            assert_eq!(e.file, "p.conf");
            assert!(
                e.line >= 1 && e.line <= text.matches('\n').count() + 1,
                "{e}"
            );
            assert!(!e.message.is_empty());
        }
        // An `include` the input wrote, with an error in the file it reached.
        Err(e) => assert!(!e.message.is_empty()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn nginx_like_text(parts in proptest::collection::vec(
        prop_oneof![
            Just("{"), Just("}"), Just(";"), Just("\""), Just("'"), Just("\\"), Just("$"),
            Just("${"), Just("#"), Just("\n"), Just(" "), Just("("), Just(")"),
            Just("server"), Just("include"), Just("location ~ ^/a"), Just("x"),
        ],
        0..60,
    )) {
        check(&parts.concat());
    }
}
