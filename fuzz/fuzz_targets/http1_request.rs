//! The front door's HTTP/1.1 request reader (`serving::h1`): any bytes as the
//! start of a connection. It must not panic; a request it reads has one of the
//! methods it takes, its whole declared body, and no field that takes it out of
//! its hands (those go to hyper).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift::serving::h1::first_request;
use tasklift::serving::ReqBody;

fuzz_target!(|data: &[u8]| {
    let Some(req) = first_request(data, 4096) else {
        return;
    };
    assert!(matches!(req.method().as_str(), "GET" | "POST" | "DELETE"));
    for refused in ["transfer-encoding", "expect", "upgrade"] {
        assert!(!req.headers().contains(refused), "{refused} read here");
    }
    let declared = req
        .headers()
        .get("content-length")
        .map_or(0, |v| v.to_str().unwrap().parse::<usize>().unwrap());
    let ReqBody::Whole(Some(body)) = &req.body else {
        panic!("a body read here is whole");
    };
    assert_eq!(body.len(), declared);
    assert!(req.uri().path().starts_with('/'));
});
