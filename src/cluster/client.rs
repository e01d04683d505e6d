//! A client of the API server for plexus: the one place a kubeconfig is
//! read, the HTTP/2 client stack, and what runs a client's futures (a
//! plugin process's own runtime, or the daemon's). [`super::kube`] and
//! [`super::pools`] build on it.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::credentials::LiveCredentials;
use super::error::{error_chain, ClusterError};
use crate::config::ApiTimeouts;

/// What runs the client's futures.
pub(crate) enum Driver {
    /// A plugin process's own current-thread runtime, driven by the caller.
    Owned(tokio::runtime::Runtime),
    /// The daemon's runtime, shared by every call it serves; a call blocks
    /// its own worker thread, never one of the runtime's.
    Shared(tokio::runtime::Handle),
}

impl Driver {
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        match self {
            Driver::Owned(runtime) => runtime.block_on(future),
            Driver::Shared(handle) => handle.block_on(future),
        }
    }
}

/// The client configuration of `kubeconfig` (its current context): the one
/// place a kubeconfig is read, for the plugin's client and the daemon's.
pub(super) async fn load_kubeconfig(
    kubeconfig: &Path,
    timeouts: ApiTimeouts,
) -> Result<kube::Config, String> {
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| error_chain(&e))?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| error_chain(&e))?;
    // Each request is bounded as a whole (`call`); the connector is told the
    // same bound for connecting.
    config.connect_timeout = Some(timeouts.request);
    Ok(config)
}

/// A plugin process's client for the cluster `kubeconfig` names (its
/// current context), on a current-thread runtime of its own.
pub(crate) fn owned_client(
    kubeconfig: &Path,
    timeouts: ApiTimeouts,
) -> Result<(tokio::runtime::Runtime, kube::Client), ClusterError> {
    let failed = |reason: String| ClusterError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        reason,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::io("tokio runtime", e))?;
    let config = runtime
        .block_on(load_kubeconfig(kubeconfig, timeouts))
        .map_err(failed)?;
    // A client's tower stack spawns onto the runtime it is built in.
    let client = {
        let _guard = runtime.enter();
        http2_client(&config, None, None).map_err(|e| failed(error_chain(&e)))?
    };
    Ok((runtime, client))
}

/// The namespace the current context of `kubeconfig` names, if any.
pub(crate) fn context_namespace(kubeconfig: &Path) -> Result<Option<String>, ClusterError> {
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| ClusterError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        reason: error_chain(&e),
    })?;
    let current = parsed.current_context.as_deref();
    Ok(parsed
        .contexts
        .iter()
        .find(|c| Some(c.name.as_str()) == current)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty()))
}

/// kube's client stack (base URI, credentials, headers) over a hyper client
/// that speaks HTTP/2 when the server offers it (ALPN), as kube-apiserver
/// does: concurrent requests then share one TLS connection, where HTTP/1.1
/// pays a handshake per extra connection. TCP_NODELAY, since every request
/// is small and waits for its answer.
///
/// With `live` (the daemon's, when its kubeconfig holds a bearer token and
/// a CA), the token and the CA are read from the kubeconfig as it is when
/// each request is sent ([`LiveCredentials`]).
pub(super) fn http2_client(
    config: &kube::Config,
    observe: Option<RequestObserver>,
    live: Option<Arc<LiveCredentials>>,
) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    let tls = match &live {
        Some(live) => live.tls_config(),
        None => config.rustls_client_config()?,
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(tcp);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(https);
    let service = tower::ServiceBuilder::new()
        .map_request(move |request: hyper::Request<kube::client::Body>| {
            if let Some(observe) = &observe {
                observe(request.method(), request.uri());
            }
            request
        })
        .layer(config.base_uri_layer())
        .option_layer(match live {
            Some(_) => None,
            None => config.auth_layer()?,
        })
        .map_request(move |mut request: hyper::Request<kube::client::Body>| {
            if let Some(live) = &live {
                let authorization = live.authorization();
                request
                    .headers_mut()
                    .insert(hyper::header::AUTHORIZATION, authorization);
            }
            request
        })
        .layer(config.extra_headers_layer()?)
        .map_err(
            |e: hyper_util::client::legacy::Error| -> Box<dyn std::error::Error + Send + Sync> {
                Box::new(e)
            },
        )
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// Sees each request a client sends (the daemon's metrics).
pub type RequestObserver = Arc<dyn Fn(&hyper::Method, &hyper::Uri) + Send + Sync>;
