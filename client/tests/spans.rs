//! A span per call after the OpenTelemetry HTTP client semantic
//! conventions, checked twice: with a `tracing-subscriber` layer that
//! captures spans, and through `tracing-opentelemetry` into the
//! OpenTelemetry SDK's in-memory exporter (the names as exported).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{Script, Sim, get};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use polite_client::api::Jitter;
use polite_client::{CallOptions, Client, Config};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Every span's name and fields, and the events inside each span.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<Span>>>);

#[derive(Clone, Debug, Default)]
struct Span {
    name: String,
    fields: HashMap<String, String>,
    events: Vec<HashMap<String, String>>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);
impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

struct Index(usize);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Captured {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut span = Span {
            name: attrs.metadata().name().to_owned(),
            ..Span::default()
        };
        attrs.record(&mut Fields(&mut span.fields));
        let mut all = self.0.lock().unwrap();
        all.push(span);
        ctx.span(id)
            .unwrap()
            .extensions_mut()
            .insert(Index(all.len() - 1));
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        let i = ctx.span(id).unwrap().extensions().get::<Index>().unwrap().0;
        values.record(&mut Fields(&mut self.0.lock().unwrap()[i].fields));
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.event_span(event) {
            let i = span.extensions().get::<Index>().unwrap().0;
            let mut fields = HashMap::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap()[i].events.push(fields);
        }
    }
}

fn quiet() -> Config {
    let mut config = Config {
        seed: Some(1),
        ..Config::default()
    };
    config.retry.backoff.jitter = Jitter::None;
    config
}

#[test]
fn a_call_has_one_span_with_the_http_client_conventions() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    tracing::subscriber::with_default(subscriber, || {
        let script = Script::of(&[
            (503, &[], ""),
            (429, &[("retry-after", "1")], ""),
            (200, &[], "ok"),
        ]);
        let client: Client<Sim, Script> = Client::with_transport(script, quiet()).unwrap();
        let mut req = http::Request::get("http://alice:pw@127.0.0.1:9/items/1?token=SECRET")
            .body(bytes::Bytes::new())
            .unwrap();
        req.extensions_mut()
            .insert(CallOptions::new().label("checkout"));
        let outer = tracing::info_span!("handler");
        let _entered = outer.enter();
        client.send(req).unwrap();
    });
    let spans = captured.0.lock().unwrap().clone();
    let call = spans
        .iter()
        .find(|s| s.name == "polite.send")
        .expect("a span per call");
    let f = &call.fields;
    assert_eq!(f["otel.name"], "GET");
    assert_eq!(f["otel.kind"], "client");
    assert_eq!(f["http.request.method"], "GET");
    assert_eq!(f["server.address"], "127.0.0.1");
    assert_eq!(f["server.port"], "9");
    assert_eq!(f["url.full"], "http://127.0.0.1:9/items/1?token=REDACTED");
    assert_eq!(f["http.response.status_code"], "200");
    assert_eq!(f["http.request.resend_count"], "2");
    assert_eq!(f["polite.label"], "checkout");
    assert!(
        !f.contains_key("error.type"),
        "a success has no error.type: {f:?}"
    );
    assert!(
        !format!("{spans:?}").contains("SECRET"),
        "no credential anywhere"
    );
    assert!(
        !format!("{spans:?}").contains("alice"),
        "no user info anywhere"
    );
    // One event per attempt inside the span, with class and delay source.
    assert_eq!(call.events.len(), 3, "{:?}", call.events);
    assert_eq!(call.events[0]["class"], "server error");
    assert_eq!(call.events[0]["next_source"], "backoff");
    assert_eq!(call.events[1]["next_source"], "retry-after");
    assert_eq!(call.events[1]["next_delay_ms"], "1000");
    assert_eq!(call.events[2]["http.request.resend_count"], "2");
}

#[test]
fn a_failed_call_says_why_in_error_type() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    tracing::subscriber::with_default(subscriber, || {
        let client: Client<Sim, Script> =
            Client::with_transport(Script::of(&[(404, &[], "")]), quiet()).unwrap();
        assert!(client.send(get("/x")).is_err());
    });
    let spans = captured.0.lock().unwrap().clone();
    let call = spans.iter().find(|s| s.name == "polite.send").unwrap();
    assert_eq!(call.fields["error.type"], "not_retryable");
    assert_eq!(call.fields["http.response.status_code"], "404");
    assert!(!call.fields.contains_key("http.request.resend_count"));
}

#[test]
fn the_attribute_names_arrive_in_opentelemetry_as_the_conventions_spell_them() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::with_default(subscriber, || {
        let script = Script::of(&[(503, &[], ""), (200, &[], "")]);
        let client: Client<Sim, Script> = Client::with_transport(script, quiet()).unwrap();
        client.send(get("/items/1?page=2")).unwrap();
    });
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let call = spans
        .iter()
        .find(|s| s.name == "GET")
        .expect("exported under the method's name");
    assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Client);
    let attr = |k: &str| {
        call.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attr("http.request.method").as_deref(), Some("GET"));
    assert_eq!(attr("server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(attr("server.port").as_deref(), Some("9"));
    assert_eq!(
        attr("url.full").as_deref(),
        Some("http://127.0.0.1:9/items/1?page=REDACTED")
    );
    assert_eq!(attr("http.response.status_code").as_deref(), Some("200"));
    assert_eq!(attr("http.request.resend_count").as_deref(), Some("1"));
    assert_eq!(call.events.len(), 2, "one event per attempt");
}

/// A request of a batch item, for `url`.
fn item(url: &str) -> http::Request<bytes::Bytes> {
    http::Request::get(url).body(bytes::Bytes::new()).unwrap()
}

/// A batch has one span for all its items, over any number of servers:
/// each attempt event names its item's server (host and port only, never
/// the URL's user info, path or query; SPEC §5.1).
#[test]
fn a_batchs_attempt_events_name_their_items_server() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    tracing::subscriber::with_default(subscriber, || {
        // Item 0's first send gets a 503 (two attempts), the others a 200.
        let script = Script::of(&[(503, &[], "")]);
        let client: Client<Sim, Script> = Client::with_transport(script, quiet()).unwrap();
        let results = client
            .batch(vec![
                item("http://user:secret@127.0.0.1:9/x?token=abc"),
                item("http://localhost:8080/y"),
                item("https://api.test/z"),
            ])
            .unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let spans = captured.0.lock().unwrap().clone();
    let batch = spans
        .iter()
        .find(|s| s.name == "polite.batch")
        .expect("a span per batch");
    let attempts: Vec<_> = batch
        .events
        .iter()
        .filter(|e| e.get("message").is_some_and(|m| m == "attempt"))
        .collect();
    assert_eq!(attempts.len(), 4, "{attempts:?}");
    let want = ["127.0.0.1:9", "localhost:8080", "api.test:443"];
    for e in &attempts {
        let item: usize = e["item"].parse().unwrap();
        let server = format!(
            "{}:{}",
            e.get("server.address").map_or("", String::as_str),
            e.get("server.port").map_or("", String::as_str)
        );
        assert_eq!(server, want[item], "{e:?}");
    }
    let all = format!("{spans:?}");
    for secret in ["secret", "abc", "user", "token", "/x"] {
        assert!(!all.contains(secret), "{secret:?} in {all}");
    }
}

/// The same, as a `fmt` subscriber writes it: one line per attempt, its
/// item's host and port in it, no credential.
#[test]
fn a_batchs_attempt_lines_name_their_server_and_no_credential() {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let out = Sink::default();
    let sink = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let client: Client<Sim, Script> =
            Client::with_transport(Script::default(), quiet()).unwrap();
        let results = client
            .batch(vec![
                item("http://user:secret@127.0.0.1:9/x?token=abc"),
                item("http://localhost:8080/y"),
            ])
            .unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" attempt ")).collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (item, server) in [
        (0, "127.0.0.1\" server.port=9"),
        (1, "localhost\" server.port=8080"),
    ] {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!(" item={item} ")))
            .unwrap_or_else(|| panic!("no event of item {item}: {text}"));
        assert!(
            line.contains(&format!("server.address=\"{server}")),
            "{line}"
        );
    }
    for secret in ["secret", "abc", "user"] {
        assert!(!text.contains(secret), "{secret:?} in {text}");
    }
}
