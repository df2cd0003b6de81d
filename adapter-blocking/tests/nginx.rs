//! polite-blocking against a real third-party server: nginx with
//! `limit_req` at 10 requests per second (burst 0, refusals as 429) in front
//! of a static file, on 127.0.0.1 only.
//!
//! The test starts nginx itself (in the foreground, `daemon off;
//! master_process off;`, everything under a temporary directory) and kills
//! it at the end. Without nginx (not on `PATH`, not `/usr/sbin/nginx`) it
//! prints why and returns: `.ci/nginx.sh` installs it for CI.
//!
//! Two batches of 50 GETs, counted in nginx's own access log:
//! * without a client throttle: nginx refuses many with 429 and polite
//!   retries them with backoff until every item succeeds;
//! * with the throttle matched to nginx's rate: 0 × 429.
//!
//! Why the throttle is 1 per 100 ms and not "9 per second": nginx's
//! `rate=10r/s` with `burst=0` is a leaky bucket that accepts a request only
//! when 100 ms have passed since the last accepted one (it counts in
//! milliseconds). A sliding window of 9 per second would still let 9
//! requests go back to back, and nginx would refuse 8 of them. A window of 1
//! per 100 ms, with the throttle's 50 ms margin, spaces sends at least
//! 150 ms apart: 50 ms of slack for loopback jitter and nginx's cached clock,
//! at an effective 6.7 requests per second.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{Client, Config, UreqTransport};

fn find_nginx() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/nginx");
        sbin.is_file().then_some(sbin)
    })
}

/// Kills and reaps nginx however the test ends.
struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn start(binary: &Path) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("html")).unwrap();
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::write(root.join("html/file.txt"), "hello from nginx\n").unwrap();
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let r = root.display();
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {r}/nginx.pid;
error_log {r}/error.log warn;
events {{ worker_connections 128; }}
http {{
    default_type text/plain;
    log_format status '$status $request_uri';
    access_log {r}/access.log status;
    client_body_temp_path {r}/tmp/body;
    proxy_temp_path {r}/tmp/proxy;
    fastcgi_temp_path {r}/tmp/fastcgi;
    uwsgi_temp_path {r}/tmp/uwsgi;
    scgi_temp_path {r}/tmp/scgi;
    limit_req_zone $binary_remote_addr zone=z:1m rate=10r/s;
    server {{
        listen 127.0.0.1:{port};
        root {r}/html;
        location / {{
            # burst 0 is the default (nginx 1.22 rejects an explicit burst=0)
            limit_req zone=z nodelay;
            limit_req_status 429;
        }}
    }}
}}
"#
        );
        std::fs::write(root.join("nginx.conf"), conf).unwrap();
        let child = Command::new(binary)
            .arg("-p")
            .arg(root)
            .arg("-e")
            .arg(root.join("error.log"))
            .arg("-c")
            .arg(root.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let mut nginx = Nginx { child, port, dir };
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if let Ok(Some(status)) = nginx.child.try_wait() {
                panic!("nginx exited ({status}):\n{}", nginx.file("error.log"));
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx did not listen within 10 s:\n{}",
                nginx.file("error.log")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    fn file(&self, name: &str) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join(name)) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// The statuses in the access log, in order.
    fn statuses(&self) -> Vec<u16> {
        self.file("access.log")
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// The statuses once the access log holds `ok` lines of 200 (nginx
    /// writes a line after sending the answer, so the last one may land
    /// just after the client has it); bounded wait.
    fn statuses_with(&self, ok: usize) -> Vec<u16> {
        let started = Instant::now();
        loop {
            let statuses = self.statuses();
            let done = statuses.iter().filter(|&&s| s == 200).count() >= ok;
            if done || started.elapsed() > Duration::from_secs(2) {
                return statuses;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn batch_of_50(nginx: &Nginx, config: Config) -> Duration {
    let client = Client::with_transport(UreqTransport::default(), config).unwrap();
    let requests = (0..50)
        .map(|i| {
            http::Request::get(nginx.url(&format!("/file.txt?item={i}")))
                .body(Bytes::new())
                .unwrap()
        })
        .collect();
    let started = Instant::now();
    let results = client.batch(requests).unwrap();
    let took = started.elapsed();
    for (i, r) in results.iter().enumerate() {
        let r = r
            .as_ref()
            .unwrap_or_else(|e| panic!("item {i} failed: {e}"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.body().as_ref(), b"hello from nginx\n");
    }
    took
}

#[test]
fn a_batch_through_nginx_limit_req_succeeds_and_a_matched_throttle_sends_no_429() {
    let Some(binary) = find_nginx() else {
        eprintln!(
            "SKIPPED: nginx not found on PATH nor at /usr/sbin/nginx (run .ci/nginx.sh to install it)"
        );
        return;
    };
    let nginx = Nginx::start(&binary);
    let count = |statuses: &[u16], s: u16| statuses.iter().filter(|&&x| x == s).count();

    // 1. No client throttle: nginx refuses, polite retries with backoff.
    //    nginx's 429 carries no Retry-After, so nothing slows the other
    //    items down: with the default budgets (3 rate-limited retries, 2
    //    restarts) some items end `RateLimited`. The budgets are raised here
    //    so that every item gets through and the 429 count is the cost.
    let mut config = Config {
        timeout: Duration::from_secs(60),
        concurrency: 4,
        max_restarts: 10,
        ..Config::default()
    };
    config.retry.max_retries.rate_limited = 20;
    let took = batch_of_50(&nginx, config);
    let unthrottled = nginx.statuses_with(50);
    let refused = count(&unthrottled, 429);
    eprintln!(
        "nginx 10r/s burst 0, 50 GETs, concurrency 4, no throttle: {refused} x 429, {} x 200, {took:?}",
        count(&unthrottled, 200)
    );
    assert_eq!(count(&unthrottled, 200), 50);
    assert_eq!(unthrottled.len(), 50 + refused);

    // Let nginx's bucket drain before the second run.
    std::thread::sleep(Duration::from_millis(500));

    // 2. A throttle matched to nginx: 1 send per 100 ms (+50 ms margin).
    let config = Config {
        timeout: Duration::from_secs(60),
        concurrency: 4,
        throttle: Some((1, Duration::from_millis(100))),
        ..Config::default()
    };
    let took = batch_of_50(&nginx, config);
    let all = nginx.statuses_with(100);
    let throttled = &all[unthrottled.len()..];
    eprintln!(
        "nginx 10r/s burst 0, 50 GETs, concurrency 4, throttle 1 per 100 ms: {} x 429, {} x 200, {took:?}",
        count(throttled, 429),
        count(throttled, 200)
    );
    assert_eq!(count(throttled, 429), 0, "{throttled:?}");
    assert_eq!(count(throttled, 200), 50);
    let _ = std::io::stderr().flush();
}
