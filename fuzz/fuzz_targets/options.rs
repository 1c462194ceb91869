//! Client options, any values: connecting checks them before any I/O (the empty URL is
//! rejected only once the options passed), never panics, and rejects exactly what the
//! documentation says.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use fencelock::{Client, ClientOptions, Error, InputError, MAX_LEASE, MAX_TIMEOUT, MIN_LEASE};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    lease: (u64, u32),
    connect: (u64, u32),
    response: (u64, u32),
    factor: f64,
    min: (u64, u32),
}

fn duration((secs, nanos): (u64, u32)) -> Duration {
    // Small values often, the far end sometimes.
    match secs % 4 {
        0 => Duration::from_millis(secs / 4 % 1_000_000),
        1 => Duration::new(secs / 4 % 1_000_000, nanos % 1_000_000_000),
        _ => Duration::new(secs, nanos % 1_000_000_000),
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    })
}

fuzz_target!(|input: Input| {
    let lease = duration(input.lease);
    let connect = duration(input.connect);
    let response = duration(input.response);
    let min = duration(input.min);
    let f = input.factor;
    let options = ClientOptions::default()
        .default_lease(lease)
        .connect_timeout(connect)
        .response_timeout(response)
        .clock_drift(f, min);
    let valid = (MIN_LEASE..=MAX_LEASE).contains(&lease)
        && lease.subsec_nanos().is_multiple_of(1_000_000)
        && [connect, response]
            .iter()
            .all(|t| !t.is_zero() && *t <= MAX_TIMEOUT)
        && (0.0..0.5).contains(&f)
        && lease.mul_f64(f).checked_add(min).is_some_and(|m| m < lease);
    match runtime().block_on(Client::connect_with("", options)) {
        Err(Error::InvalidInput(InputError::InvalidUrl { .. })) => assert!(valid, "{input:?}"),
        Err(Error::InvalidInput(e)) => assert!(!valid, "{input:?}: {e}"),
        other => panic!("{input:?}: {other:?}"),
    }
});
