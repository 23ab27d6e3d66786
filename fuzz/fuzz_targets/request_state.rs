//! `requestState` tokens (`tl1.…`) presented by clients: `StateSealer::open` on
//! arbitrary strings must reject them without panicking; a sealed state opens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tasklift::tasks::input::{StateClaims, StateSealer};

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let sealer = StateSealer::default();
    assert!(
        sealer.open(&s, "owner", "tools/call:t", 0).is_err(),
        "a forged state opened"
    );
    // Claims made of the input seal and open again for their owner only.
    let c = StateClaims {
        park: s.to_string(),
        owner: s.chars().rev().collect(),
        request: "tools/call:t".into(),
        exp: u64::MAX,
        issuer: String::new(),
    };
    let sealed = sealer.seal(&c);
    let opened = sealer.open(&sealed, &c.owner, &c.request, 1).ok();
    assert_eq!(
        opened.map(|o| (o.park, o.owner, o.request, o.exp)),
        Some((c.park.clone(), c.owner.clone(), c.request.clone(), c.exp))
    );
    assert!(sealer
        .open(&sealed, &format!("{}x", c.owner), &c.request, 1)
        .is_err());
});
