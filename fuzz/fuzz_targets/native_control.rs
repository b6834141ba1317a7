//! The native format's control path, as a publisher with the hardening enabled receives it: the MAC
//! (`FrameMac::open`, both policies), `parse_datagram`, `Control::from_frame`, and the cookie
//! check of every Subscribe and Unsubscribe; plus the allowlist parser on the same bytes. The
//! fuzzer also gets a correctly sealed copy of its input, so it explores what lies behind a
//! valid tag. Any panic or sanitizer report is a crash; so is a cookie it forged.
#![no_main]

use std::net::SocketAddr;

use libfuzzer_sys::fuzz_target;
use llbus_net::{
    parse_datagram, Allowlist, Control, CookieJar, FrameMac, Frames, RateLimiter,
    DEFAULT_COOKIE_WINDOW, DEFAULT_MAX_DATAGRAM, MAC_TAG_LEN,
};

fn controls(frames: Frames<'_>, jar: &mut CookieJar, from: SocketAddr) {
    for frame in frames {
        match Control::from_frame(&frame) {
            Ok(Control::Subscribe {
                cookie: Some(c), ..
            })
            | Ok(Control::Unsubscribe {
                cookie: Some(c), ..
            }) => {
                // The jar's keys are secret to the fuzzer: a verified cookie is a forgery.
                assert!(!jar.verify(from, &c, 0), "forged cookie accepted");
            }
            Ok(Control::Subscribe { cookie: None, .. }) => {
                let c = jar.issue(from, 0);
                assert!(jar.verify(from, &c, 0));
            }
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let from: SocketAddr = "198.51.100.7:40000".parse().unwrap();
    let mut jar = CookieJar::new([0x5a; 32], DEFAULT_COOKIE_WINDOW);
    let mac = FrameMac::new(&[0xa5; 32]);
    let mut limiter = RateLimiter::new(Default::default(), 8);
    let _ = limiter.allow(from.ip(), data.len() as u64);

    if let Ok(frames) = parse_datagram(data, DEFAULT_MAX_DATAGRAM) {
        controls(frames, &mut jar, from);
    }
    for m in [mac.clone(), mac.clone().control_only()] {
        if let Ok(frames) = m.open(data, DEFAULT_MAX_DATAGRAM) {
            controls(frames, &mut jar, from);
        }
    }
    // Seal the input (when it is whole frames) and open it again: must round-trip.
    let mut buf = [0u8; DEFAULT_MAX_DATAGRAM + MAC_TAG_LEN];
    if let Some(dst) = buf.get_mut(..data.len()) {
        dst.copy_from_slice(data);
        if let Ok(len) = mac.seal(&mut buf, data.len()) {
            if parse_datagram(data, DEFAULT_MAX_DATAGRAM).is_ok() && len <= DEFAULT_MAX_DATAGRAM {
                let frames = mac.open(&buf[..len], DEFAULT_MAX_DATAGRAM);
                assert!(
                    frames.is_ok(),
                    "sealed valid datagram did not open: {frames:?}"
                );
                if let Ok(frames) = frames {
                    controls(frames, &mut jar, from);
                }
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(list) = text.parse::<Allowlist>() {
            let _ = list.contains(from.ip());
        }
    }
});
