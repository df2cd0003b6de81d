//! `--traceparent` / `TRACEPARENT`: the JSON attempt log joins the caller's
//! trace; an invalid value is a usage error that does not echo it.

use std::process::{Command, Output, Stdio};

use polite_lab::{Lab, LabConfig, Step};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn polite(args: &[&str], env: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_polite"));
    c.args(args).stdin(Stdio::null()).env_remove("TRACEPARENT");
    if let Some(v) = env {
        c.env("TRACEPARENT", v);
    }
    c.output().expect("the binary runs")
}

/// The JSON objects on stderr (the summary line, if any, is text).
fn records(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

fn lab() -> polite_lab::LabHandle {
    Lab::start(LabConfig::default().script(
        "/items/t",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap()
}

#[test]
fn json_records_carry_the_trace_of_the_flag_or_the_environment() {
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    for (flag, env) in [
        (Some(traceparent.as_str()), None),
        (None, Some(traceparent.as_str())),
    ] {
        let lab = lab();
        let url = lab.url("/items/t");
        let mut args = vec!["get", url.as_str(), "--log-format", "json"];
        if let Some(f) = flag {
            args.extend(["--traceparent", f]);
        }
        let o = polite(&args, env);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let recs = records(&o);
        assert_eq!(recs.len(), 2, "{recs:?}");
        let span = recs[0]["span_id"].as_str().expect("a span id").to_owned();
        assert_eq!(span.len(), 16);
        assert!(span.bytes().all(|b| b.is_ascii_hexdigit()) && span != PARENT);
        for r in &recs {
            assert_eq!(r["trace_id"], TRACE, "{r}");
            assert_eq!(r["parent_span_id"], PARENT, "{r}");
            assert_eq!(r["span_id"], span.as_str(), "one span per command: {r}");
        }
    }
    // Without one: no ids.
    let lab = lab();
    let o = polite(&["get", &lab.url("/items/t"), "--log-format", "json"], None);
    for r in records(&o) {
        assert!(
            r.get("trace_id").is_none() && r.get("span_id").is_none(),
            "{r}"
        );
    }
}

#[test]
fn an_invalid_traceparent_exits_2_without_echoing_it() {
    let secret = "00-SECRETsecretSECRETsecretSECRET12-00f067aa0ba902b7-01";
    let url = "http://127.0.0.1:9/never";
    for (args, env) in [
        (vec!["get", url, "--traceparent", secret], None),
        (vec!["batch", "--traceparent", "Bearer hunter2"], None),
        (vec!["get", url], Some(secret)),
    ] {
        let o = polite(&args, env);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("not a W3C traceparent"), "{err}");
        assert!(
            !err.contains("SECRET") && !err.contains("hunter2") && !err.contains("secret"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
}
