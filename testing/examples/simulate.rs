//! Runs a `RetryMachine` against a scripted server in virtual time and prints
//! every decision: `cargo run -p polite-testing --example simulate`.

use std::time::Duration;

use polite_core::{Action, Method, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
use polite_testing::{Scripted, Simulator, origin};

fn main() {
    let t0 = origin();
    let policy = RetryPolicy::default();
    let request = RequestInfo::new(RequestId(1), Method::Get);
    let scenarios: [(&str, Vec<Scripted>, Duration); 4] = [
        (
            "503, then 429 with Retry-After: 2, then 200",
            vec![
                Scripted::status(503),
                Scripted::status(429).retry_after("2"),
                Scripted::status(200),
            ],
            Duration::from_secs(30),
        ),
        (
            "429 with a hostile Retry-After: 86400",
            vec![Scripted::status(429).retry_after("86400")],
            Duration::from_secs(30),
        ),
        (
            "429 with Retry-After: 10 and only 5 s of budget",
            vec![Scripted::status(429).retry_after("10")],
            Duration::from_secs(5),
        ),
        (
            "a server that never answers, 3 s budget",
            vec![Scripted::hang()],
            Duration::from_secs(3),
        ),
    ];
    for (name, replies, timeout) in scenarios {
        println!("== {name} (timeout {timeout:?})");
        let machine = match RetryMachine::new(policy, request, SplitMix64::new(7), t0, timeout) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("invalid policy: {e}");
                std::process::exit(2);
            }
        };
        let trace = match Simulator::new(t0)
            .replies(replies)
            .check_retry(&policy, &request)
            .run(machine)
        {
            Ok(t) => t,
            Err(v) => {
                eprintln!("invariant broken: {v}");
                std::process::exit(1);
            }
        };
        let mut in_flight = false;
        for step in &trace.steps {
            let at = step.at - t0;
            match step.action {
                Action::Send(p) => {
                    in_flight = true;
                    println!("  {at:>10.3?}  send attempt {}", p.id.attempt);
                }
                Action::SleepUntil(t) if in_flight => {
                    in_flight = false;
                    println!("  {at:>10.3?}  await the answer (deadline {:.3?})", t - t0);
                }
                Action::SleepUntil(t) => println!("  {at:>10.3?}  sleep until {:.3?}", t - t0),
                Action::Stop(o) => println!("  {at:>10.3?}  stop: {o}"),
            }
        }
        for r in &trace.records {
            if let Some(n) = r.next {
                println!(
                    "              attempt {} got {} → next in {:.3?} ({})",
                    r.id.attempt, r.reply, n.delay, n.source
                );
            }
        }
    }
}
