//! Fuzz the framing of forwarded requests (issue 26): for any request ringx parses, the head it
//! forwards, parsed again by ringx's own parser, declares exactly the body ringx relays, and
//! nothing after that body can be read as a second request. The oracle is shared with the
//! property tests: `tests/common/forward.rs`.
#![no_main]

#[path = "../../tests/common/forward.rs"]
mod forward;

use forward::{check_request, ForwardOpts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, input)) = data.split_first() else {
        return;
    };
    let o = ForwardOpts {
        host: (flags & 1 == 1).then_some("up.internal"),
        forwarded_headers: flags & 2 == 2,
        close: flags & 4 == 4,
    };
    if let Err(e) = check_request(input, o) {
        panic!("{e}");
    }
});
