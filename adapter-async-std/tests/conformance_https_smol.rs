//! The lab's adapter conformance suite over `https://`: every scenario
//! against the lab in TLS mode (a self-signed certificate made at test
//! time), through `polite_async_io::Client` and its transport trusting
//! that certificate, as a task on a `smol::Executor` run by two threads,
//! on loopback in real time.

mod support;

use polite_async_io::AsyncIo;
use support::TestCert;

fn run(name: &str) {
    let cert = TestCert::loopback();
    let executor = smol::Executor::new();
    let (stop, stopped) = smol::channel::unbounded::<()>();
    let result = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| smol::block_on(executor.run(stopped.recv())));
        }
        let task = executor.spawn(polite_lab::runner::run_tls::<AsyncIo, _>(
            name,
            support::transport(cert),
            &cert.cert_pem,
            &cert.key_pem,
        ));
        let result = smol::block_on(task);
        drop(stop); // the worker threads return
        result
    });
    if let Err(report) = result {
        panic!("{report}");
    }
}

polite_lab::conformance_tests!(run);
