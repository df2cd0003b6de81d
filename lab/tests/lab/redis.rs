//! The Redis starter: a real redis-server on a free loopback port, answering
//! commands, gone when dropped. Fails in CI without redis-server
//! (`.ci/services.sh` installs it); skips elsewhere, saying why.

use std::net::TcpStream;

use polite_lab::redis::Redis;

#[test]
fn a_redis_starts_on_loopback_answers_and_stops_when_dropped() {
    let Some(binary) = Redis::find_or_skip() else {
        return;
    };
    let redis = Redis::start(&binary);
    let port = redis.port();
    assert!(redis.url().starts_with("redis://127.0.0.1:"));
    assert_eq!(redis.command(&["PING"]), "+PONG");
    assert_eq!(redis.command(&["SET", "polite:k", "1"]), "+OK");
    assert_eq!(redis.command(&["INCR", "polite:k"]), ":2");
    // No persistence configured: nothing would survive a restart.
    assert_eq!(redis.command(&["CONFIG", "GET", "save"]), "*2");
    // Two at once never share a port (each test starts its own).
    let other = Redis::start(&binary);
    assert_ne!(other.port(), port);
    assert_eq!(
        other.command(&["GET", "polite:k"]),
        "$-1",
        "a fresh server is empty"
    );
    drop(redis);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is gone"
    );
}
