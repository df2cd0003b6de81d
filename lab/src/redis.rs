//! A real Redis for tests (the fleet pace's shared store, SPEC §4.3):
//! `redis-server` on 127.0.0.1 only, on a free port, with no persistence
//! (everything in a temporary directory), killed when the [`Redis`] value
//! is dropped.
//!
//! [`Redis::find`] looks for the binary on `PATH` and at
//! `/usr/bin/redis-server` (`.ci/services.sh` installs Debian's package).
//! Without it a test must fail in CI (`CI=true`) and may skip on a
//! developer machine, saying why: [`Redis::find_or_skip`] does exactly that.
//!
//! ```no_run
//! use polite_lab::redis::Redis;
//! let Some(binary) = Redis::find_or_skip() else { return };
//! let redis = Redis::start(&binary);
//! assert_eq!(redis.command(&["PING"]), "+PONG");
//! let url = redis.url(); // redis://127.0.0.1:PORT/
//! # drop(url);
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server; killed and reaped on drop.
#[derive(Debug)]
pub struct Redis {
    child: Child,
    port: u16,
    /// With [`start_tls`](Redis::start_tls): the TLS port.
    tls_port: Option<u16>,
    /// More options (a cluster node's).
    extra: Vec<String>,
    dir: tempfile::TempDir,
    binary: PathBuf,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    /// The redis-server binary: on `PATH`, or `/usr/bin/redis-server`.
    #[must_use]
    pub fn find() -> Option<PathBuf> {
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-server"))
                .find(|p| p.is_file())
        });
        on_path.or_else(|| {
            let bin = PathBuf::from("/usr/bin/redis-server");
            bin.is_file().then_some(bin)
        })
    }

    /// [`find`](Self::find), for a test: in CI (`CI=true`) a missing
    /// redis-server panics (the test fails loudly); elsewhere it prints why
    /// the test skips and answers `None`.
    ///
    /// # Panics
    ///
    /// In CI, when redis-server is not installed.
    #[must_use]
    pub fn find_or_skip() -> Option<PathBuf> {
        let found = Self::find();
        if found.is_none() {
            let why = "redis-server not found on PATH nor at /usr/bin/redis-server (.ci/services.sh installs it)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIPPED: {why}");
        }
        found
    }

    /// Starts redis-server on a free loopback port: bound to 127.0.0.1
    /// only, protected mode on, no RDB snapshots and no AOF, its files in a
    /// temporary directory.
    ///
    /// # Panics
    ///
    /// When redis-server cannot start or does not answer `PING` within
    /// 10 s (the panic shows its log).
    #[must_use]
    pub fn start(binary: &Path) -> Redis {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let child = spawn(binary, port, None, dir.path(), &[]);
        let mut redis = Redis {
            child,
            port,
            tls_port: None,
            extra: Vec::new(),
            dir,
            binary: binary.to_owned(),
        };
        redis.wait_ready();
        redis
    }

    /// [`start`](Self::start), also serving TLS on a second loopback port
    /// with this certificate and key (PEM; e.g. a self-signed one made by
    /// the test): clients are not asked for certificates. The plain port
    /// stays open for [`command`](Self::command); [`tls_url`](Self::tls_url)
    /// is the `rediss://` one. Needs a redis-server built with TLS
    /// (Debian's is).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), and when the files cannot be written.
    #[must_use]
    pub fn start_tls(binary: &Path, cert_pem: &str, key_pem: &str) -> Redis {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("tls.crt"), cert_pem).expect("cert written");
        std::fs::write(dir.path().join("tls.key"), key_pem).expect("key written");
        let (port, tls_port) = (free_port(), free_port());
        let child = spawn(binary, port, Some(tls_port), dir.path(), &[]);
        let mut redis = Redis {
            child,
            port,
            tls_port: Some(tls_port),
            extra: Vec::new(),
            dir,
            binary: binary.to_owned(),
        };
        redis.wait_ready();
        redis
    }

    /// `rediss://127.0.0.1:TLS_PORT/` when started with
    /// [`start_tls`](Self::start_tls).
    #[must_use]
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://127.0.0.1:{p}/"))
    }

    /// Kills the server and starts a new one on the same port, with no data
    /// (as after a crash without persistence): the fleet's keys and loaded
    /// scripts are gone.
    ///
    /// # Panics
    ///
    /// When the new server does not start or answer within 10 s.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(
            &self.binary,
            self.port,
            self.tls_port,
            self.dir.path(),
            &self.extra,
        );
        self.wait_ready();
    }

    /// The server's process id (e.g. to pause it with `kill -STOP`).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if self.try_command(&["PING"]).as_deref() == Some("+PONG") {
                break;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("redis-server exited ({status}):\n{}", self.log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not answer within 10 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:PORT/`, for a Redis client.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends one command (RESP) and returns the first line of the reply
    /// without its `\r\n` (`+PONG`, `:1`, `$5`, `-ERR ...`): enough for a
    /// test to set up or inspect keys without a client library.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    #[must_use]
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args).expect("redis answers")
    }

    /// Like [`command`](Self::command), for a bulk-string reply (e.g.
    /// `CLUSTER INFO`): its whole text; other replies as `command`'s line.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached.
    #[must_use]
    pub fn command_text(&self, args: &[&str]) -> String {
        self.try_command_text(args).expect("redis answers")
    }

    fn try_command_text(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(frame(args).as_bytes()).ok()?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let Some(len) = line
            .strip_prefix('$')
            .and_then(|n| n.trim_end().parse::<usize>().ok())
        else {
            return Some(line.trim_end().to_owned());
        };
        let mut body = vec![0; len + 2];
        std::io::Read::read_exact(&mut reader, &mut body).ok()?;
        body.truncate(len);
        String::from_utf8(body).ok()
    }

    fn try_command(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(frame(args).as_bytes()).ok()?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).ok()?;
        Some(line.trim_end().to_owned())
    }

    /// The server's log, or "".
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

/// A command as a RESP array of bulk strings.
fn frame(args: &[&str]) -> String {
    let mut frame = format!("*{}\r\n", args.len());
    for a in args {
        frame.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    frame
}

/// A Redis Cluster of masters on loopback (no replicas), each node a
/// [`Redis`] with cluster mode on, the 16,384 hash slots split evenly;
/// every node is killed on drop.
///
/// ```no_run
/// use polite_lab::redis::{Redis, RedisCluster};
/// let Some(binary) = Redis::find_or_skip() else { return };
/// let cluster = RedisCluster::start(&binary, 3);
/// assert_eq!(cluster.urls().len(), 3);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts `masters` nodes, assigns the slots (`CLUSTER ADDSLOTSRANGE`),
    /// joins them (`CLUSTER MEET`) and waits until every node says
    /// `cluster_state:ok` (Redis 7).
    ///
    /// # Panics
    ///
    /// When a node does not start, or the cluster is not ok within 20 s.
    #[must_use]
    pub fn start(binary: &Path, masters: u16) -> RedisCluster {
        assert!(masters > 0, "a cluster needs a node");
        let mut first_bus = 0;
        let nodes: Vec<Redis> = (0..masters)
            .map(|i| {
                let dir = tempfile::tempdir().expect("temp dir");
                let (port, bus) = (free_port(), free_port());
                if i == 0 {
                    first_bus = bus;
                }
                let extra: Vec<String> = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus.to_string(),
                ]
                .iter()
                .map(ToString::to_string)
                .collect();
                let child = spawn(binary, port, None, dir.path(), &extra);
                let mut node = Redis {
                    child,
                    port,
                    tls_port: None,
                    extra,
                    dir,
                    binary: binary.to_owned(),
                };
                node.wait_ready();
                node
            })
            .collect();
        let per = 16_384 / u32::from(masters);
        for (i, node) in (0u32..).zip(&nodes) {
            let first = i * per;
            let last = if i + 1 == u32::from(masters) {
                16_383
            } else {
                first + per - 1
            };
            let r = node.command(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ]);
            assert_eq!(r, "+OK", "ADDSLOTSRANGE on {}", node.port);
        }
        for node in &nodes[1..] {
            let r = node.command(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &nodes[0].port.to_string(),
                &first_bus.to_string(),
            ]);
            assert_eq!(r, "+OK", "MEET from {}", node.port);
        }
        let started = Instant::now();
        while !nodes.iter().all(|n| {
            n.try_command_text(&["CLUSTER", "INFO"])
                .is_some_and(|i| i.contains("cluster_state:ok"))
        }) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the cluster is not ok within 20 s:\n{}",
                nodes[0].command_text(&["CLUSTER", "INFO"])
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisCluster { nodes }
    }

    /// Every node's `redis://127.0.0.1:PORT/`.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }

    /// The nodes (e.g. to count keys on each with `DBSIZE`).
    #[must_use]
    pub fn nodes(&self) -> &[Redis] {
        &self.nodes
    }

    /// Kills node `i` (its slots are then served by nobody: no replicas).
    ///
    /// # Panics
    ///
    /// When there is no node `i`.
    pub fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let _ = node.child.kill();
        let _ = node.child.wait();
    }
}

/// A free loopback port (free when asked).
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

/// redis-server on 127.0.0.1:`port`, loopback only, no persistence; with
/// `tls_port`, TLS there too, from `tls.crt` / `tls.key` in `dir`.
fn spawn(binary: &Path, port: u16, tls_port: Option<u16>, dir: &Path, extra: &[String]) -> Child {
    let mut command = Command::new(binary);
    command.args(extra);
    if let Some(tls) = tls_port {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        command
            .args(["--tls-port", &tls.to_string()])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .arg("--tls-ca-cert-file")
            .arg(&cert)
            .args(["--tls-auth-clients", "no"]);
    }
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--protected-mode",
            "yes",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}
