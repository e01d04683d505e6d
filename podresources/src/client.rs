//! A client of kubelet's PodResources API for a short-lived process (a CNI
//! plugin): each call opens one HTTP/2 connection to the unix socket, makes
//! its requests on a current-thread runtime it owns, and is bounded as a
//! whole, connecting included, by the client's timeout.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::body::Body;
use tonic::client::Grpc;
use tonic::codec::ProstCodec;
use tonic::Code;

use crate::v1::{
    GetPodResourcesRequest, ListPodResourcesRequest, ListPodResourcesResponse, PodResources,
    GET_PATH, LIST_PATH,
};

/// Where kubelet serves the API (`<kubelet root dir>/pod-resources/kubelet.sock`).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// How long a call may take by default: Multus's bound on kubelet.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// `List` answers for every pod of the node; Multus accepts 16 MiB too.
const MAX_MESSAGE_SIZE: usize = 16 << 20;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("{}: no such socket (kubelet is not running, or serves its PodResources API elsewhere)", .socket.display())]
    SocketMissing { socket: PathBuf },
    /// The socket exists but nobody accepts on it (a socket kubelet left
    /// behind, no permission), or what answers does not speak HTTP/2.
    #[error("{}: cannot connect: {reason}", .socket.display())]
    Unreachable { socket: PathBuf, reason: String },
    /// kubelet answered the call with a gRPC error.
    #[error("{}: {method} refused: {code:?}: {message}", .socket.display())]
    Refused {
        socket: PathBuf,
        method: &'static str,
        code: Code,
        message: String,
    },
    #[error("{}: no answer within {after:?}", .socket.display())]
    TimedOut { socket: PathBuf, after: Duration },
    #[error("pod {namespace}/{name} is not among the pods kubelet reports resources for")]
    PodNotFound { namespace: String, name: String },
    /// This process could not make the runtime a call runs on.
    #[error("runtime for the PodResources API: {0}")]
    Runtime(String),
}

/// A client of the API at one socket; every call is bounded by `timeout`.
#[derive(Debug, Clone, PartialEq)]
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Client {
        Client {
            socket: socket.into(),
            timeout,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `List`: the resources of every pod on the node.
    pub fn list(&self) -> Result<Vec<PodResources>, Error> {
        self.bounded(|mut api| async move { api.list().await })
    }

    /// `Get`: the resources of one pod (kubelet 1.27+ with the
    /// `KubeletPodResourcesGet` feature gate, the default from 1.34).
    pub fn get(&self, namespace: &str, name: &str) -> Result<PodResources, Error> {
        self.bounded(|mut api| async move { api.get(namespace, name).await })
    }

    /// The resources of one pod from whichever method this kubelet has:
    /// `Get`, else `List` filtered to the pod. An older kubelet answers
    /// `Get` with `Unimplemented`, one with the feature gate off (and one
    /// that does not know the pod) with `Unknown`; the gRPC code decides,
    /// never the message.
    pub fn pod(&self, namespace: &str, name: &str) -> Result<PodResources, Error> {
        self.bounded(|mut api| async move {
            match api.get(namespace, name).await {
                Err(Error::Refused {
                    code: Code::Unimplemented | Code::Unknown,
                    ..
                }) => {
                    let pods = api.list().await?;
                    pod_of(pods, namespace, name)
                }
                other => other,
            }
        })
    }

    /// Run `call` on a fresh connection, within the timeout.
    fn bounded<'a, T, F>(&'a self, call: impl FnOnce(Api<'a>) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>> + 'a,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Runtime(e.to_string()))?;
        let work = async {
            let api = Api::connect(&self.socket).await?;
            call(api).await
        };
        runtime
            .block_on(async { tokio::time::timeout(self.timeout, work).await })
            .unwrap_or_else(|_| {
                Err(Error::TimedOut {
                    socket: self.socket.clone(),
                    after: self.timeout,
                })
            })
    }
}

/// The entries `List` reports for `namespace/name`, merged (Multus merges
/// them too); none is [`Error::PodNotFound`].
pub fn pod_of(pods: Vec<PodResources>, namespace: &str, name: &str) -> Result<PodResources, Error> {
    let mut found: Option<PodResources> = None;
    for pod in pods {
        if pod.namespace != namespace || pod.name != name {
            continue;
        }
        match found.as_mut() {
            Some(merged) => merged.containers.extend(pod.containers),
            None => found = Some(pod),
        }
    }
    found.ok_or_else(|| Error::PodNotFound {
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// One connection to the API.
struct Api<'a> {
    socket: &'a Path,
    grpc: Grpc<UnixChannel>,
}

/// A gRPC client on one new HTTP/2 connection to the unix socket `socket`,
/// as kubelet's APIs are reached (PodResources here; the device-plugin
/// registration in the test kit). Call it on a tokio runtime: the
/// connection is driven by a task spawned on it, and ends with it.
pub async fn grpc_over_unix(socket: &Path) -> Result<Grpc<UnixChannel>, Error> {
    let unreachable = |reason: String| Error::Unreachable {
        socket: socket.to_path_buf(),
        reason,
    };
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::SocketMissing {
                socket: socket.to_path_buf(),
            },
            _ => unreachable(e.to_string()),
        })?;
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(format!("HTTP/2 handshake: {e}")))?;
    tokio::spawn(connection);
    // grpc-go (kubelet) takes any authority over a unix socket.
    let origin = http::Uri::from_static("http://localhost");
    Ok(Grpc::with_origin(UnixChannel(sender), origin))
}

impl<'a> Api<'a> {
    async fn connect(socket: &'a Path) -> Result<Api<'a>, Error> {
        let grpc = grpc_over_unix(socket)
            .await?
            .max_decoding_message_size(MAX_MESSAGE_SIZE);
        Ok(Api { socket, grpc })
    }

    async fn list(&mut self) -> Result<Vec<PodResources>, Error> {
        let request = ListPodResourcesRequest {};
        let response: ListPodResourcesResponse =
            unary(&mut self.grpc, self.socket, "List", LIST_PATH, request).await?;
        Ok(response.pod_resources)
    }

    async fn get(&mut self, namespace: &str, name: &str) -> Result<PodResources, Error> {
        let request = GetPodResourcesRequest {
            pod_name: name.into(),
            pod_namespace: namespace.into(),
        };
        let response: crate::v1::GetPodResourcesResponse =
            unary(&mut self.grpc, self.socket, "Get", GET_PATH, request).await?;
        response.pod_resources.ok_or_else(|| Error::PodNotFound {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

/// One unary call `method` (at gRPC path `path`) on a client of
/// [`grpc_over_unix`]; errors name the socket and the method.
pub async fn unary<Q, R>(
    grpc: &mut Grpc<UnixChannel>,
    socket: &Path,
    method: &'static str,
    path: &'static str,
    request: Q,
) -> Result<R, Error>
where
    Q: prost::Message + Send + Sync + 'static,
    R: prost::Message + Default + Send + Sync + 'static,
{
    let refused = |status: tonic::Status| Error::Refused {
        socket: socket.to_path_buf(),
        method,
        code: status.code(),
        message: status.message().to_string(),
    };
    grpc.ready().await.map_err(|e| Error::Unreachable {
        socket: socket.to_path_buf(),
        reason: e.to_string(),
    })?;
    let response = grpc
        .unary(
            tonic::Request::new(request),
            PathAndQuery::from_static(path),
            ProstCodec::<Q, R>::default(),
        )
        .await
        .map_err(refused)?;
    Ok(response.into_inner())
}

/// The HTTP/2 connection over a unix socket as the service gRPC calls go
/// through.
#[derive(Clone)]
pub struct UnixChannel(SendRequest<Body>);

impl tower::Service<http::Request<Body>> for UnixChannel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1::ContainerResources;

    fn pod(namespace: &str, name: &str, container: &str) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: namespace.into(),
            containers: vec![ContainerResources {
                name: container.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn list_entries_of_the_pod_are_merged_and_others_ignored() {
        let pods = vec![
            pod("ns", "a", "c1"),
            pod("other", "a", "x"),
            pod("ns", "b", "y"),
            pod("ns", "a", "c2"),
        ];
        let merged = pod_of(pods.clone(), "ns", "a").unwrap();
        let names: Vec<&str> = merged.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["c1", "c2"]);
        assert_eq!(
            pod_of(pods, "ns", "c"),
            Err(Error::PodNotFound {
                namespace: "ns".into(),
                name: "c".into()
            })
        );
    }

    #[test]
    fn a_missing_socket_is_named() {
        let dir = std::env::temp_dir().join(format!("plexus-podres-{}", std::process::id()));
        let socket = dir.join("kubelet.sock");
        let err = Client::new(&socket, Duration::from_secs(1))
            .list()
            .unwrap_err();
        assert_eq!(err, Error::SocketMissing { socket });
    }
}
