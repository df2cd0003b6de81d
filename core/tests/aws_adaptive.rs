//! Conformance with the AWS SDKs' **adaptive** retry mode: polite's
//! [`AdaptiveRate`] (and its [`Cubic`] curve) against the published
//! vectors (`tests/data/adaptive-retries.yaml` and
//! `tests/data/adaptive-cubic.json`; see `tests/data/README.md` for where
//! each comes from and its licence). The files are read at test time.
//!
//! * The CUBIC tables: the specification's harness (after a throttle,
//!   `last_max_rate` is the rate before it) and the Go and Rust SDKs'
//!   harness (after a throttle their test sets `last_max_rate` to the new,
//!   post-throttle rate) — both drive the same [`Cubic`] maths; only the
//!   harness differs, as recorded with the vectors.
//! * The end-to-end table (twice: the YAML and the JSON transcription):
//!   every answer goes through [`AdaptiveRate::on_answer`] at its
//!   timestamp, and the measured send rate and the token bucket's fill
//!   rate are compared after each (the values are rounded to 6 decimals).
//! * The TypeScript SDK's extra cases: the delay of the first send after a
//!   throttle, through [`AdaptiveRate::acquire`], and the rate a fresh
//!   limiter computes on its first throttle.
//!
//! Every table counts its cases; the test prints the totals.

use std::time::{Duration, Instant};

use polite_core::adaptive::{AdaptiveRate, Cubic};
use polite_testing::origin;
use yaml_rust2::{Yaml, YamlLoader};

fn load(name: &str) -> Yaml {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    docs.remove(0)
}

fn num(y: &Yaml) -> f64 {
    match y {
        Yaml::Integer(i) => *i as f64,
        Yaml::Real(_) => y.as_f64().expect("a number"),
        other => panic!("not a number: {other:?}"),
    }
}

fn throttled(y: &Yaml) -> bool {
    match y.as_str() {
        Some("throttle") => true,
        Some("success") => false,
        other => panic!("response {other:?}"),
    }
}

fn close(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: got {got}, want {want} (tolerance {tolerance})"
    );
}

fn at(t0: Instant, secs: f64) -> Instant {
    t0 + Duration::from_secs_f64(secs)
}

/// How a harness sets `last_max_rate` after a throttle.
#[derive(Clone, Copy, Debug)]
enum Harness {
    /// The specification's: the rate before the throttle.
    Spec,
    /// The Go and Rust SDKs' tests: the new rate after it.
    GoRust,
}

/// Runs `(throttled, timestamp, calculated_rate)` steps from
/// `last_max_rate = 10`, `last_throttle_time = 5`; returns the count.
fn cubic_table(name: &str, harness: Harness, steps: &[(bool, f64, f64)]) -> usize {
    let mut cubic = Cubic {
        last_max_rate: 10.0,
        last_throttle_time: 5.0,
    };
    let mut calculated = 0.0;
    for (i, &(throttle, t, want)) in steps.iter().enumerate() {
        if throttle {
            let rate_to_use = calculated;
            calculated = Cubic::throttle(rate_to_use);
            cubic = Cubic {
                last_max_rate: match harness {
                    Harness::Spec => rate_to_use,
                    Harness::GoRust => calculated,
                },
                last_throttle_time: t,
            };
        } else {
            calculated = cubic.success(t);
        }
        close(&format!("{name} step {i} (t={t})"), calculated, want, 1e-9);
    }
    steps.len()
}

#[test]
fn cubic_tables() {
    let yaml = load("adaptive-retries.yaml");
    let mut cases = 0;
    let mut tables = 0;
    for table in yaml["adaptiveRetryCubicTestCases"]
        .as_vec()
        .expect("cubic cases")
    {
        let name = table["name"].as_str().expect("name");
        assert_eq!(num(&table["given"]["last_max_rate"]), 10.0);
        assert_eq!(num(&table["given"]["last_throttle_time"]), 5.0);
        let steps: Vec<_> = table["cases"]
            .as_vec()
            .expect("cases")
            .iter()
            .map(|c| {
                (
                    throttled(&c["response"]),
                    num(&c["timestamp"]),
                    num(&c["calculated_rate"]),
                )
            })
            .collect();
        cases += cubic_table(name, Harness::Spec, &steps);
        tables += 1;
    }
    let json = load("adaptive-cubic.json");
    let steps: Vec<_> = json["cubic_go_rs_harness"]["steps"]
        .as_vec()
        .expect("go/rs steps")
        .iter()
        .map(|s| (throttled(&s[0]), num(&s[1]), num(&s[2])))
        .collect();
    cases += cubic_table("go/rs harness", Harness::GoRust, &steps);
    tables += 1;
    println!("aws adaptive: CUBIC: {cases} cases in {tables} tables passed");
    assert_eq!((tables, cases), (3, 23), "every table read");
}

/// Feeds one end-to-end table to a fresh [`AdaptiveRate`] created at time
/// 0; returns the number of cases.
fn end_to_end(name: &str, cases: &[Yaml]) -> usize {
    let t0 = origin();
    let mut rate = AdaptiveRate::new(t0);
    for (i, c) in cases.iter().enumerate() {
        let t = num(&c["timestamp"]);
        rate.on_answer(at(t0, t), throttled(&c["response"]));
        let what = format!("{name} case {i} (t={t})");
        close(
            &format!("{what} measured"),
            rate.measured_rate(),
            num(&c["measured_tx_rate"]),
            1e-6,
        );
        close(
            &format!("{what} fill rate"),
            rate.fill_rate(),
            num(&c["new_token_bucket_rate"]),
            1e-6,
        );
    }
    cases.len()
}

#[test]
fn end_to_end_sending_rates() {
    let yaml = load("adaptive-retries.yaml");
    let mut cases = 0;
    for table in yaml["adaptiveRetryE2eTestCases"].as_vec().expect("e2e") {
        cases += end_to_end(
            table["name"].as_str().expect("name"),
            table["cases"].as_vec().expect("cases"),
        );
    }
    let json = load("adaptive-cubic.json");
    cases += end_to_end(
        "json end_to_end",
        json["end_to_end"]["cases"].as_vec().expect("cases"),
    );
    println!("aws adaptive: end to end: {cases} cases passed");
    assert_eq!(cases, 2 * 17, "both transcriptions read");
}

#[test]
fn typescript_send_delays_and_first_throttle() {
    let json = load("adaptive-cubic.json");
    let extra = &json["smithy_typescript_extra"];
    let mut cases = 0;
    for c in extra["send_token_delay_after_first_throttle"]["cases"]
        .as_vec()
        .expect("delay cases")
    {
        let (t, want_ms) = (num(&c[0]), num(&c[1]));
        let t0 = origin();
        let mut rate = AdaptiveRate::new(t0);
        let now = at(t0, t);
        rate.on_answer(now, true);
        let Err(until) = rate.acquire(now) else {
            panic!("t={t}: a send right after the first throttle must wait");
        };
        let got_ms = (until - now).as_secs_f64() * 1000.0;
        close(
            &format!("delay after a throttle at t={t}"),
            got_ms,
            want_ms,
            1e-3,
        );
        // At that instant the token is there, and only one.
        assert_eq!(rate.acquire(until), Ok(()), "t={t}: token at the instant");
        assert!(rate.acquire(until).is_err(), "t={t}: one token");
        cases += 1;
    }
    for c in extra["cubic_throttle_fresh_limiter"]["cases"]
        .as_vec()
        .expect("fresh cases")
    {
        let (t, want) = (num(&c[0]), num(&c[1]));
        let t0 = origin();
        let mut rate = AdaptiveRate::new(t0);
        rate.on_answer(at(t0, t), true);
        close(
            &format!("fresh limiter throttled at t={t}"),
            rate.calculated_rate(),
            want,
            1e-7,
        );
        cases += 1;
    }
    println!("aws adaptive: TypeScript extras: {cases} cases passed");
    assert_eq!(cases, 8);
}

/// The runner is not vacuous: a wrong expectation fails it.
#[test]
#[should_panic(expected = "fill rate")]
fn a_wrong_expectation_fails() {
    let cases = YamlLoader::load_from_str(
        "- {response: success, timestamp: 0.2, measured_tx_rate: 0.0, new_token_bucket_rate: 0.6}",
    )
    .expect("yaml")
    .remove(0);
    end_to_end("wrong", cases.as_vec().expect("cases"));
}
