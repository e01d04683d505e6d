//! The daemon's Prometheus metrics and its HTTP endpoints on a local port:
//! `/metrics` (text format), `/healthz` (the process serves) and `/readyz`
//! (the socket listens and the watch caches are synced).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode, Uri};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::cluster::outbox::Delivery;
use crate::cluster::policy_watch::CacheSizes;
use crate::cni::env::CniCommand;
use crate::run::AttachmentObserver;
use crate::run::RunError;

/// Latency buckets, seconds: an attachment takes milliseconds; a call that
/// waits for the cluster network, seconds.
const BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0, 2.0, 4.0, 8.0, 16.0,
    32.0,
];

pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    errors: IntCounterVec,
    call_seconds: HistogramVec,
    attachment_seconds: HistogramVec,
    api_requests: IntCounterVec,
    cache_objects: IntGaugeVec,
    status_writes: IntCounterVec,
    status_write_delay: HistogramVec,
    hotplugs: IntCounterVec,
    hotplug_seconds: HistogramVec,
    pub status_writes_queued: IntGauge,
    pub in_flight: IntGauge,
    pub waiting: IntGauge,
    pub tokio_tasks: IntGauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry =
            Registry::new_custom(Some("plexus".into()), None).expect("a constant prefix is valid");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry
                .register(Box::new(c.clone()))
                .expect("registered once");
            c
        };
        let histogram = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(BUCKETS.to_vec());
            let h = HistogramVec::new(opts, labels).expect("valid metric");
            registry
                .register(Box::new(h.clone()))
                .expect("registered once");
            h
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("registered once");
            g
        };
        let cache_objects = IntGaugeVec::new(
            Opts::new("cache_objects", "Objects in the watch caches."),
            &["kind"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(cache_objects.clone()))
            .expect("registered once");
        crate::whereabouts::metrics()
            .register(&registry)
            .expect("registered once");
        Metrics {
            calls: counter(
                "cni_calls_total",
                "CNI calls served, by command and result.",
                &["command", "result"],
            ),
            errors: counter(
                "cni_errors_total",
                "Failed CNI calls, by command and CNI error code.",
                &["command", "code"],
            ),
            call_seconds: histogram(
                "cni_call_duration_seconds",
                "Time to serve a CNI call.",
                &["command"],
            ),
            attachment_seconds: histogram(
                "attachment_duration_seconds",
                "Time of one attachment's plugin chain, by command and driver type.",
                &["command", "driver"],
            ),
            api_requests: counter(
                "api_requests_total",
                "Requests to the Kubernetes API server, by verb and resource.",
                &["verb", "resource"],
            ),
            cache_objects,
            status_writes: counter(
                "status_writes_total",
                "Queued network-status writes delivered, by result (written, pod_gone, failed).",
                &["result"],
            ),
            status_write_delay: histogram(
                "status_write_delay_seconds",
                "From an ADD's answer to its network-status write delivered, by result.",
                &["result"],
            ),
            hotplugs: counter(
                "hotplugs_total",
                "Attachments hot-plugged on running pods, by operation (attach, detach) and \
                 result (ok, error, refused).",
                &["operation", "result"],
            ),
            hotplug_seconds: histogram(
                "hotplug_duration_seconds",
                "Time to bring a pod's attachments to its changed annotation, from the \
                 change seen to its network-status queued (or written).",
                &["result"],
            ),
            status_writes_queued: gauge(
                "status_writes_queued",
                "network-status writes queued in the outbox, not yet delivered.",
            ),
            in_flight: gauge("cni_calls_in_flight", "CNI calls being served."),
            waiting: gauge("cni_calls_waiting", "CNI calls waiting for a free worker."),
            tokio_tasks: gauge(
                "tokio_alive_tasks",
                "Tasks alive on the daemon's async runtime (watches, the status outbox, \
                 metrics connections): a leak of tasks shows here (issue 47's soak).",
            ),
            registry,
        }
    }

    /// One served call: `code` is the CNI error code when it failed.
    pub fn call_done(&self, command: &str, elapsed: Duration, code: Option<u32>) {
        let result = if code.is_some() { "error" } else { "ok" };
        self.calls.with_label_values(&[command, result]).inc();
        if let Some(code) = code {
            self.errors
                .with_label_values(&[command, &code.to_string()])
                .inc();
        }
        self.call_seconds
            .with_label_values(&[command])
            .observe(elapsed.as_secs_f64());
    }

    /// One hot-plugged attachment: `operation` attach or detach; `result`
    /// ok, error or refused.
    pub fn hotplug(&self, operation: &str, result: &str) {
        self.hotplugs.with_label_values(&[operation, result]).inc();
    }

    /// One pod's hot-plug pass, done or failed.
    pub fn hotplug_done(&self, elapsed: Duration, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.hotplug_seconds
            .with_label_values(&[result])
            .observe(elapsed.as_secs_f64());
    }

    /// One request to the API server.
    pub fn api_request(&self, method: &Method, uri: &Uri) {
        let (verb, resource) = api_verb_and_resource(method, uri);
        self.api_requests
            .with_label_values(&[verb.as_str(), resource.as_str()])
            .inc();
    }

    /// The MultiNetworkPolicy caches: policies, namespaces, the peer pods
    /// this node's policies can name (issue 46), and the scopes watched
    /// for them.
    pub fn policy_cache_sizes(&self, sizes: CacheSizes) {
        for (kind, n) in [
            ("multi-networkpolicies", sizes.policies),
            ("namespaces", sizes.namespaces),
            ("policy-peer-pods", sizes.peer_pods),
            ("policy-peer-scopes", sizes.peer_scopes),
        ] {
            self.cache_objects.with_label_values(&[kind]).set(n as i64);
        }
    }

    pub fn cache_sizes(&self, pods: usize, nads: usize) {
        self.cache_objects
            .with_label_values(&["pods"])
            .set(pods as i64);
        self.cache_objects
            .with_label_values(&["network-attachment-definitions"])
            .set(nads as i64);
    }

    /// The DRA caches' sizes: (ResourceClaims, ResourceSlices).
    pub fn dra_cache_sizes(&self, (claims, slices): (usize, usize)) {
        for (kind, n) in [("resourceclaims", claims), ("resourceslices", slices)] {
            self.cache_objects.with_label_values(&[kind]).set(n as i64);
        }
    }

    /// One queued status write delivered, `delay` after it was queued.
    pub fn status_write(&self, outcome: Delivery, delay: Duration) {
        let result = [outcome.as_str()];
        self.status_writes.with_label_values(&result).inc();
        self.status_write_delay
            .with_label_values(&result)
            .observe(delay.as_secs_f64());
    }

    /// Everything, in Prometheus's text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding into memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl AttachmentObserver for Metrics {
    fn chain_done(
        &self,
        command: CniCommand,
        driver: &str,
        elapsed: Duration,
        _failed: Option<&RunError>,
    ) {
        self.attachment_seconds
            .with_label_values(&[command.as_str(), driver])
            .observe(elapsed.as_secs_f64());
    }
}

/// kube-apiserver's own names for a request: the verb (`get`, `list`,
/// `watch`, `patch`, `create`, ...) and the resource (`pods/status`).
pub fn api_verb_and_resource(method: &Method, uri: &Uri) -> (String, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let after_version = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => segments.len(),
    };
    let mut rest = segments.get(after_version..).unwrap_or_default();
    if rest.first() == Some(&"namespaces") && rest.len() >= 3 {
        rest = &rest[2..];
    }
    let resource = match rest {
        [] => "(none)".to_string(),
        [resource] | [resource, _] => resource.to_string(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
    };
    let query = uri.query().unwrap_or("");
    let watching = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match *method {
        Method::GET if watching => "watch",
        Method::GET if rest.len() <= 1 => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => method.as_str(),
    };
    (verb.to_lowercase(), resource)
}

/// What the endpoints serve.
#[derive(Clone)]
pub struct Endpoints {
    pub metrics: Arc<Metrics>,
    /// What `/readyz` asks: `Err(why)` while not ready.
    pub ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// Brings the gauges read from elsewhere (cache sizes) up to date.
    pub refresh: Arc<dyn Fn(&Metrics) + Send + Sync>,
}

/// Serve the endpoints on `listener` until the runtime stops.
pub async fn serve(listener: tokio::net::TcpListener, endpoints: Endpoints) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let answer = answer(request.uri().path(), &endpoints);
                    async move { Ok::<_, Infallible>(answer) }
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

fn answer(path: &str, endpoints: &Endpoints) -> Response<Full<Bytes>> {
    let (status, body) = match path {
        "/metrics" => {
            (endpoints.refresh)(&endpoints.metrics);
            (StatusCode::OK, endpoints.metrics.render())
        }
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        "/readyz" => match (endpoints.ready)() {
            Ok(()) => (StatusCode::OK, "ready\n".to_string()),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "endpoints: /metrics /healthz /readyz\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_as_the_api_server_names_them() {
        let cases = [
            ("GET", "/api/v1/namespaces/ns/pods/p", "get", "pods"),
            (
                "PATCH",
                "/api/v1/namespaces/ns/pods/p/status",
                "patch",
                "pods/status",
            ),
            (
                "GET",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn",
                "list",
                "pods",
            ),
            (
                "GET",
                "/api/v1/pods?watch=true&resourceVersion=5",
                "watch",
                "pods",
            ),
            ("POST", "/api/v1/namespaces/ns/events", "create", "events"),
            (
                "GET",
                "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n",
                "get",
                "network-attachment-definitions",
            ),
            (
                "PATCH",
                "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ns/ipamclaims/c/status",
                "patch",
                "ipamclaims/status",
            ),
        ];
        for (method, uri, verb, resource) in cases {
            let method: Method = method.parse().unwrap();
            let got = api_verb_and_resource(&method, &uri.parse().unwrap());
            assert_eq!(got, (verb.to_string(), resource.to_string()), "{uri}");
        }
    }

    #[test]
    fn the_text_format_has_every_family() {
        let metrics = Metrics::new();
        metrics.call_done("ADD", Duration::from_millis(3), None);
        metrics.call_done("DEL", Duration::from_millis(3), Some(7));
        metrics.chain_done(CniCommand::Add, "macvlan", Duration::from_millis(1), None);
        metrics.api_request(
            &Method::PATCH,
            &"/api/v1/namespaces/a/pods/b/status".parse().unwrap(),
        );
        metrics.cache_sizes(3, 2);
        let text = metrics.render();
        for line in [
            "plexus_cni_calls_total{command=\"ADD\",result=\"ok\"} 1",
            "plexus_cni_errors_total{code=\"7\",command=\"DEL\"} 1",
            "plexus_cni_call_duration_seconds_count{command=\"ADD\"} 1",
            "plexus_attachment_duration_seconds_count{command=\"ADD\",driver=\"macvlan\"} 1",
            "plexus_api_requests_total{resource=\"pods/status\",verb=\"patch\"} 1",
            "plexus_cache_objects{kind=\"pods\"} 3",
            "plexus_cni_calls_in_flight 0",
            "plexus_tokio_alive_tasks 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
