//! The grammar as nginx's `ngx_conf_read_token` and `ngx_conf_parse` have it, case by case.

use std::path::Path;

use crate::{load, parse_str, Directive, Limits};

fn parse(text: &str) -> Vec<Directive> {
    parse_str("t.conf", text)
        .unwrap_or_else(|e| panic!("{e}"))
        .directives
}

fn err(text: &str) -> String {
    parse_str("t.conf", text)
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn directives_blocks_and_lines() {
    let d = parse(
        "user www-data;\nevents {\n  worker_connections 768;\n}\nhttp { server { listen 80; } }\n",
    );
    assert_eq!(d.len(), 3);
    assert_eq!(
        (d[0].name.as_str(), d[0].args(), d[0].line),
        ("user", vec!["www-data"], 1)
    );
    assert!(d[0].block.is_none());
    assert_eq!(d[1].children()[0].name, "worker_connections");
    assert_eq!(d[1].children()[0].line, 3);
    assert_eq!(d[2].children()[0].children()[0].args(), ["80"]);
    assert_eq!(d[2].children()[0].children()[0].place(), "t.conf:5");
}

#[test]
fn quotes_keep_separators_and_spaces() {
    let d = parse("return 200 \"a; b { } # c\";\nadd_header X 'it\\'s';");
    assert_eq!(d[0].args(), ["200", "a; b { } # c"]);
    assert!(d[0].words[1].quoted && !d[0].words[0].quoted);
    assert_eq!(d[1].args(), ["X", "it's"]);
}

#[test]
fn a_closing_quote_needs_a_space_after_it() {
    let e = err("add_header X 'a''b';");
    assert!(e.starts_with("t.conf:1: unexpected \"'\""), "{e}");
    let e = err("return 200 \"a\"x;");
    assert!(e.contains("unexpected \"x\""), "{e}");
}

#[test]
fn escapes_as_nginx_stores_them() {
    let d = parse(r#"a "q\"q" 'x\'y' b\\c t\tn\n r\r keep\. "\d+";"#);
    assert_eq!(
        d[0].args(),
        ["q\"q", "x'y", "b\\c", "t\tn\n", "r\r", "keep\\.", "\\d+"]
    );
    // A backslash takes the next byte into the word: an escaped space or `;` does not end it.
    let d = parse(r"a b\ c d\;e;");
    assert_eq!(d[0].args(), [r"b\ c", r"d\;e"]);
}

#[test]
fn comments_only_where_a_word_starts() {
    let d = parse("# top\nlisten 80; # after\nset $a x#y; #; {\n");
    assert_eq!(d.len(), 2);
    assert_eq!(d[1].args(), ["$a", "x#y"]);
    assert_eq!(d[1].line, 3);
}

#[test]
fn variables_with_braces_are_words_not_blocks() {
    let d = parse("return 200 ${host}x${uri};");
    assert_eq!(d[0].args(), ["200", "${host}x${uri}"]);
    // `{` after a word (not after `$`) opens the block: nginx needs such regexes quoted, and
    // an unquoted one leaves a block open.
    assert!(err("location ~ ^/a{2}$ { }").contains("a block is not closed"));
    let d = parse("location ~ \"^/a{2}$\" { return 204; }");
    assert_eq!(d[0].args(), ["~", "^/a{2}$"]);
    assert_eq!(d[0].children()[0].args(), ["204"]);
}

#[test]
fn a_closing_brace_inside_a_word_is_part_of_it() {
    let d = parse("a b}c;");
    assert_eq!(d[0].args(), ["b}c"]);
}

#[test]
fn if_conditions_split_as_nginx_splits_them() {
    let d = parse("if ($request_method = \"POST\") { return 405; }\nif (-f $request_filename) { }");
    assert_eq!(d[0].args(), ["($request_method", "=", "POST", ")"]);
    assert_eq!(d[0].children()[0].args(), ["405"]);
    assert_eq!(d[1].args(), ["(-f", "$request_filename)"]);
}

#[test]
fn location_modifiers_map_and_geo_are_words() {
    let d = parse(
        "location = /x {} location ^~ /s/ {} location ~* \\.(gif|jpg)$ {} location @app {}\n\
         map $http_upgrade $connection_upgrade { default upgrade; '' close; }\n\
         geo $remote_addr $office { default 0; 10.0.0.0/8 1; }",
    );
    assert_eq!(d[0].args(), ["=", "/x"]);
    assert_eq!(d[1].args(), ["^~", "/s/"]);
    assert_eq!(d[2].args(), ["~*", "\\.(gif|jpg)$"]);
    assert_eq!(d[3].args(), ["@app"]);
    assert_eq!(d[4].children()[1].name, "");
    assert_eq!(d[4].children()[1].args(), ["close"]);
    assert_eq!(d[5].children()[1].name, "10.0.0.0/8");
}

#[test]
fn unbalanced_braces_are_errors_at_their_line() {
    assert_eq!(
        err("http {\n server {\n listen 80;\n}\n"),
        "t.conf:5: unexpected end of file, expecting \"}\": a block is not closed"
    );
    assert_eq!(
        err("a;\n}\n"),
        "t.conf:2: unexpected \"}\": it closes no block"
    );
    assert!(err("listen 80\n}").starts_with("t.conf:2: unexpected \"}\""));
    assert!(err("listen 80").starts_with("t.conf:1: unexpected end of file"));
    assert!(err("a \"open;\n\n").starts_with("t.conf:1: unexpected end of file"));
    assert!(err("\n ;").starts_with("t.conf:2: unexpected \";\""));
    assert!(err("{").starts_with("t.conf:1: unexpected \"{\""));
}

#[test]
fn binary_junk_is_an_error_not_a_directive() {
    let e = parse_str("j.conf", "ok;\n\u{7f}ELF\u{0}\u{1};").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("binary data"), "{e}");
    let bytes = b"a \xff\xfe;";
    let e = crate::parser::parse_str("j.conf", &String::from_utf8_lossy(bytes));
    assert!(e.is_ok(), "lossy text is text");
}

#[test]
fn too_long_words_are_refused_as_nginx_refuses_them() {
    let long = format!("a \"{}\";", "x".repeat(5000));
    assert!(err(&long).contains("too long parameter"));
    let ok = format!("a \"{}\";", "x".repeat(4000));
    assert_eq!(parse(&ok)[0].words[0].text.len(), 4000);
}

#[test]
fn deep_nesting_is_bounded() {
    let text = "a {".repeat(100) + &"}".repeat(100);
    assert!(err(&text).contains("nested deeper than 64"));
}

struct Dir(std::path::PathBuf);
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tmpdir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("nginxconf-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

#[test]
fn includes_expand_in_place_with_globs_in_name_order() {
    let d = tmpdir("glob");
    let p = &d.0;
    std::fs::create_dir_all(p.join("sites")).unwrap();
    std::fs::write(p.join("sites/b.conf"), "server { listen 2; }\n").unwrap();
    std::fs::write(p.join("sites/a.conf"), "\nserver { listen 1; }\n").unwrap();
    std::fs::write(p.join("sites/.hidden.conf"), "junk").unwrap();
    std::fs::write(p.join("sites/c.txt"), "junk").unwrap();
    std::fs::write(p.join("mime.types"), "types { text/html html; }").unwrap();
    std::fs::write(
        p.join("nginx.conf"),
        "http {\n include mime.types;\n include sites/*.conf;\n include none/*.conf;\n}\n",
    )
    .unwrap();
    let c = load(&p.join("nginx.conf"), Limits::default()).unwrap();
    let http = c.directives[0].children();
    let names: Vec<_> = http.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["types", "server", "server"]);
    assert_eq!(http[1].children()[0].args(), ["1"]);
    assert!(http[1].file.ends_with("sites/a.conf"));
    assert_eq!(http[1].line, 2);
    assert_eq!(http[2].children()[0].args(), ["2"]);
}

#[test]
fn a_missing_include_is_an_error_at_the_include() {
    let d = tmpdir("missing");
    std::fs::write(d.0.join("nginx.conf"), "http {\n include nope.conf;\n}").unwrap();
    let e = load(&d.0.join("nginx.conf"), Limits::default()).unwrap_err();
    assert!(e.file.ends_with("nginx.conf") && e.line == 2, "{e}");
    assert!(
        e.message.contains("cannot open") && e.message.contains("nope.conf"),
        "{e}"
    );
}

#[test]
fn include_loops_are_errors_at_the_include_that_closes_them() {
    let d = tmpdir("loop");
    std::fs::write(d.0.join("nginx.conf"), "include a.conf;\n").unwrap();
    std::fs::write(d.0.join("a.conf"), "x;\ninclude b.conf;\n").unwrap();
    std::fs::write(d.0.join("b.conf"), "\n\ninclude a.conf;\n").unwrap();
    let e = load(&d.0.join("nginx.conf"), Limits::default()).unwrap_err();
    assert!(e.file.ends_with("b.conf") && e.line == 3, "{e}");
    assert!(e.message.starts_with("include loop:"), "{e}");
    // A file may be included twice side by side: that is no loop.
    std::fs::write(
        d.0.join("nginx.conf"),
        "include b2.conf;\ninclude b2.conf;\n",
    )
    .unwrap();
    std::fs::write(d.0.join("b2.conf"), "y;\n").unwrap();
    assert_eq!(
        load(&d.0.join("nginx.conf"), Limits::default())
            .unwrap()
            .directives
            .len(),
        2
    );
}

#[test]
fn oversized_files_are_refused_before_they_are_read() {
    let d = tmpdir("big");
    let f = std::fs::File::create(d.0.join("big.conf")).unwrap();
    f.set_len(100 << 20).unwrap();
    std::fs::write(d.0.join("nginx.conf"), "\ninclude big.conf;\n").unwrap();
    let e = load(&d.0.join("nginx.conf"), Limits::default()).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("104857600 bytes, over the limit"), "{e}");
    let e = load(&d.0.join("big.conf"), Limits::default()).unwrap_err();
    assert!(e.to_string().contains("big.conf:0: "), "{e}");
    std::fs::write(d.0.join("nginx.conf"), "include /dev/zero;\n").unwrap();
    let e = load(&d.0.join("nginx.conf"), Limits::default()).unwrap_err();
    assert!(e.message.contains("not a regular file"), "{e}");
}

#[test]
fn glob_matching() {
    use crate::glob::matches;
    assert!(matches("*.conf", "a.conf"));
    assert!(!matches("*.conf", "a.conf.bak"));
    assert!(matches("a?c", "abc"));
    assert!(matches("[a-c]x", "bx") && !matches("[!a-c]x", "bx"));
    assert!(matches("*", "anything") && matches("**a*", "xxa"));
    assert!(matches("[x", "[x"));
    assert!(!Path::new("/nonexistent/dir").exists());
    assert!(crate::glob::expand(Path::new("/nonexistent/dir/*.conf")).is_empty());
}

#[test]
fn a_non_breaking_space_is_named_where_it_is() {
    let e = err("a;\nlisten\u{a0}80;\n");
    assert!(e.starts_with("t.conf:2: a non-breaking space"), "{e}");
    // Inside quotes it is text.
    assert_eq!(parse("return 200 \"a\u{a0}b\";")[0].args()[1], "a\u{a0}b");
}
