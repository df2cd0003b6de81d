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
