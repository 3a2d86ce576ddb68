//! Fuzz the PROXY protocol parser: never panics, the verdict never changes
//! as more bytes arrive (partial until done or refused; refusals stick), a
//! header ends exactly where the first complete verdict says and does not
//! depend on what follows, and a parsed TCP header written back (v1 and v2)
//! parses to the same addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_http::proxy_protocol::{parse, write_v1, write_v2, Parse, ProxyHeader};

const V2_SIG: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if rest.len() > 1024 {
        return;
    }
    // Start some inputs past the signatures so the fuzzer explores the
    // fields (the shared dictionary is HTTP's).
    let mut input = match mode % 5 {
        0 => Vec::new(),
        1 => b"PROXY ".to_vec(),
        2 => b"PROXY TCP4 ".to_vec(),
        3 => b"PROXY TCP6 ".to_vec(),
        _ => V2_SIG.to_vec(),
    };
    input.extend_from_slice(rest);

    // Byte by byte, as the slowest sender would deliver it.
    let mut verdict = None;
    for k in 0..=input.len() {
        let r = parse(&input[..k]);
        match &verdict {
            None => match &r {
                Ok(Parse::Partial) => {}
                Ok(Parse::Done { consumed, .. }) => {
                    assert_eq!(*consumed, k, "a header ends where it completes");
                    verdict = Some(r);
                }
                Err(_) => verdict = Some(r),
            },
            Some(Ok(Parse::Done { .. })) => assert_eq!(&r, verdict.as_ref().unwrap()),
            Some(_) => assert!(r.is_err(), "refusals stick"),
        }
    }
    let whole = parse(&input);
    match verdict {
        None => assert_eq!(whole, Ok(Parse::Partial)),
        Some(v) => assert_eq!(whole, v),
    }

    if let Ok(Parse::Done {
        header: header @ ProxyHeader::Tcp { src, dst },
        ..
    }) = whole
    {
        assert_eq!(src.is_ipv4(), dst.is_ipv4());
        for write in [write_v1, write_v2] {
            let mut out = Vec::new();
            write(&mut out, src, dst);
            assert_eq!(
                parse(&out),
                Ok(Parse::Done {
                    header: header.clone(),
                    consumed: out.len()
                })
            );
        }
    }
});
