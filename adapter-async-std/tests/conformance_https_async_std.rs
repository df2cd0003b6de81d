//! The lab's adapter conformance suite over `https://`: every scenario
//! against the lab in TLS mode (a self-signed certificate made at test
//! time), through `polite_async_io::Client` and its transport trusting
//! that certificate, on async-std's executor, on loopback in real time.

mod support;

use polite_async_io::AsyncIo;
use support::TestCert;

fn run(name: &str) {
    let cert = TestCert::loopback();
    let result = async_std::task::block_on(polite_lab::runner::run_tls::<AsyncIo, _>(
        name,
        support::transport(cert),
        &cert.cert_pem,
        &cert.key_pem,
    ));
    if let Err(report) = result {
        panic!("{report}");
    }
}

polite_lab::conformance_tests!(run);
