//! Fuzz the frame parser: any bytes never panic and never consume past the input; every
//! frame read is read the same from a copy cut right after it; SETTINGS read back as
//! written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringx_h3proto::frame::{self, Frame};
use ringx_h3proto::settings::Settings;

fuzz_target!(|data: &[u8]| {
    let mut pos = 0;
    while let Ok(Some((f, n))) = frame::parse(&data[pos..], 4096) {
        assert!(n > 0 && pos + n <= data.len());
        assert_eq!(frame::parse(&data[pos..pos + n], 4096), Ok(Some((f, n))));
        if let Ok(Some((Frame::Settings(s), _))) = frame::parse(&data[pos..], 4096) {
            let mut out = Vec::new();
            s.write(&mut out);
            let (h, k) = frame::parse_header(&out).unwrap();
            assert_eq!(h.kind, frame::kind::SETTINGS);
            assert_eq!(Settings::parse(&out[k..]), Ok(s));
        }
        pos += n;
    }
    let _ = Settings::parse(data);
});
