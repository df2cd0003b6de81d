//! A real third-party server for tests: nginx with `limit_req` in front of a
//! static file, on 127.0.0.1 only, started in the foreground (`daemon off;
//! master_process off;`, everything under a temporary directory) and killed
//! when the [`Nginx`] value is dropped.
//!
//! nginx's `limit_req` is the rate limiter most servers without hints have:
//! it answers 429 (with `limit_req_status 429`) and sends neither
//! `Retry-After` nor `RateLimit` fields. `rate=10r/s` is a leaky bucket
//! that accepts a request when 100 ms have passed since the last accepted
//! one (counted in milliseconds); `burst=N nodelay` lets N more through at
//! once and refills them at the rate.
//!
//! [`Nginx::find`] looks for the binary on `PATH` and at `/usr/sbin/nginx`
//! (`.ci/services.sh` installs Debian's package). Without it a test must fail
//! in CI (`CI=true`) and may skip on a developer machine, saying why:
//! [`Nginx::find_or_skip`] does exactly that.
//!
//! ```no_run
//! use polite_lab::nginx::Nginx;
//! let Some(binary) = Nginx::find_or_skip() else { return };
//! let nginx = Nginx::start(&binary, "10r/s", 10);
//! let url = nginx.url("/file.txt");
//! // ... send requests ...
//! let statuses = nginx.statuses_with(40);
//! assert!(statuses.iter().filter(|&&s| s == 200).count() <= 40);
//! ```

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx; killed and reaped on drop.
#[derive(Debug)]
pub struct Nginx {
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
    /// The nginx binary: on `PATH`, or `/usr/sbin/nginx`.
    #[must_use]
    pub fn find() -> Option<PathBuf> {
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

    /// [`find`](Self::find), for a test: in CI (`CI=true`) a missing nginx
    /// panics (the test fails loudly); elsewhere it prints why the test
    /// skips and answers `None`.
    ///
    /// # Panics
    ///
    /// In CI, when nginx is not installed.
    #[must_use]
    pub fn find_or_skip() -> Option<PathBuf> {
        let found = Self::find();
        if found.is_none() {
            let why =
                "nginx not found on PATH nor at /usr/sbin/nginx (.ci/services.sh installs it)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIPPED: {why}");
        }
        found
    }

    /// Starts nginx on a free loopback port: `limit_req` at `rate` (e.g.
    /// `10r/s`) with `burst` (0: none), refusals as 429 without any hint,
    /// serving `/file.txt` ("hello from nginx\n").
    ///
    /// # Panics
    ///
    /// When nginx cannot start or does not listen within 10 s (the panic
    /// shows its error log).
    #[must_use]
    pub fn start(binary: &Path, rate: &str, burst: u32) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("html")).expect("html dir");
        std::fs::create_dir_all(root.join("tmp")).expect("tmp dir");
        std::fs::write(root.join("html/file.txt"), "hello from nginx\n").expect("file");
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("its address").port()
        };
        let r = root.display();
        // nginx 1.22 rejects an explicit burst=0: leave it out then.
        let burst = if burst == 0 {
            String::new()
        } else {
            format!("burst={burst} ")
        };
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {r}/nginx.pid;
error_log {r}/error.log warn;
events {{ worker_connections 256; }}
http {{
    default_type text/plain;
    log_format status '$status $request_uri';
    access_log {r}/access.log status;
    client_body_temp_path {r}/tmp/body;
    proxy_temp_path {r}/tmp/proxy;
    fastcgi_temp_path {r}/tmp/fastcgi;
    uwsgi_temp_path {r}/tmp/uwsgi;
    scgi_temp_path {r}/tmp/scgi;
    limit_req_zone $binary_remote_addr zone=z:1m rate={rate};
    server {{
        listen 127.0.0.1:{port};
        root {r}/html;
        location / {{
            limit_req zone=z {burst}nodelay;
            limit_req_status 429;
        }}
    }}
}}
"#
        );
        std::fs::write(root.join("nginx.conf"), conf).expect("nginx.conf");
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

    /// A file of its directory (`access.log`, `error.log`), or "".
    #[must_use]
    pub fn file(&self, name: &str) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(self.dir.path().join(name)) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// The statuses in the access log, in order.
    #[must_use]
    pub fn statuses(&self) -> Vec<u16> {
        self.file("access.log")
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect()
    }

    /// The statuses once the access log holds `ok` lines of 200 (nginx
    /// writes a line after sending the answer, so the last one may land
    /// just after the client has it); waits at most 2 s.
    #[must_use]
    pub fn statuses_with(&self, ok: usize) -> Vec<u16> {
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

    /// `http://127.0.0.1:PORT{path}`.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}
