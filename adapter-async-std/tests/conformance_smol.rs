//! The lab's adapter conformance suite through `polite_async_io::Client`
//! and its HTTP/1.1 transport, executed as a task on a `smol::Executor` run by two
//! threads, on loopback in real time.

use polite_async_io::{AsyncIo, Http1Transport};

fn run(name: &str) {
    let executor = smol::Executor::new();
    let (stop, stopped) = smol::channel::unbounded::<()>();
    let result = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| smol::block_on(executor.run(stopped.recv())));
        }
        let task = executor.spawn(polite_lab::runner::run::<AsyncIo, _>(
            name,
            Http1Transport::new(),
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
