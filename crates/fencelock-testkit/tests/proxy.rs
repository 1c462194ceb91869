//! The TCP proxy against an echo server of the test's own (no JVM, no Redis).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use fencelock_testkit::TcpProxy;

/// An echo server on 127.0.0.1 (a thread per connection) and its port.
fn echo_server() -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn connect(proxy: &TcpProxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    stream
}

/// Sends `msg` and reads what comes back within the read timeout: `Some` bytes, `None` for
/// silence, `Some(empty)` for the end of the stream.
fn round_trip(stream: &mut TcpStream, msg: &[u8]) -> Option<Vec<u8>> {
    if stream.write_all(msg).is_err() {
        return Some(Vec::new());
    }
    let mut buf = vec![0u8; msg.len()];
    let mut got = 0;
    while got < msg.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (got > 0).then(|| buf[..got].to_vec());
            }
            Err(_) => break,
        }
    }
    Some(buf[..got].to_vec())
}

#[test]
fn forwards_swallows_cuts_and_refuses() {
    let proxy = TcpProxy::start(echo_server()).unwrap();
    let mut first = connect(&proxy);
    assert_eq!(
        round_trip(&mut first, b"hello").as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(proxy.accepted(), 1);

    // Swallowed: the request goes out, nothing comes back.
    assert_eq!(proxy.swallow_replies(), 1);
    let sent = proxy.forwarded_to_server();
    assert_eq!(round_trip(&mut first, b"lost"), None);
    assert_eq!(proxy.forwarded_to_server(), sent + 4);
    assert_eq!(proxy.swallowed(), 4);

    // A new connection is not swallowed.
    let mut second = connect(&proxy);
    assert_eq!(
        round_trip(&mut second, b"again").as_deref(),
        Some(&b"again"[..])
    );

    // Cut: both connections end; a new one gets through.
    assert_eq!(proxy.cut(), 2);
    assert_eq!(round_trip(&mut first, b"x").as_deref(), Some(&b""[..]));
    let mut third = connect(&proxy);
    assert_eq!(
        round_trip(&mut third, b"back").as_deref(),
        Some(&b"back"[..])
    );

    // Refused: a new connection ends at once, until the partition heals.
    proxy.refuse_new(true);
    assert_eq!(proxy.cut(), 1);
    let mut refused = connect(&proxy);
    assert_eq!(round_trip(&mut refused, b"no").as_deref(), Some(&b""[..]));
    assert_eq!(proxy.accepted(), 3);
    proxy.refuse_new(false);
    let mut healed = connect(&proxy);
    assert_eq!(
        round_trip(&mut healed, b"yes").as_deref(),
        Some(&b"yes"[..])
    );
}

#[test]
fn latency_delays_both_ways_in_order() {
    let proxy = TcpProxy::start(echo_server()).unwrap();
    let mut stream = connect(&proxy);
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let began = std::time::Instant::now();
    assert_eq!(
        round_trip(&mut stream, b"fast").as_deref(),
        Some(&b"fast"[..])
    );
    let fast = began.elapsed();
    proxy.set_latency(Duration::from_millis(100));
    assert_eq!(proxy.latency(), Duration::from_millis(100));
    let began = std::time::Instant::now();
    // Several chunks in a row come back whole and in order.
    for msg in [&b"one"[..], b"two", b"three"] {
        stream.write_all(msg).unwrap();
    }
    let mut got = vec![0u8; 11];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"onetwothree");
    let slow = began.elapsed();
    assert!(slow >= Duration::from_millis(200), "{slow:?}");
    assert!(fast < Duration::from_millis(100), "{fast:?}");
    proxy.set_latency(Duration::ZERO);
    let began = std::time::Instant::now();
    assert_eq!(
        round_trip(&mut stream, b"again").as_deref(),
        Some(&b"again"[..])
    );
    assert!(began.elapsed() < Duration::from_millis(100));
}
