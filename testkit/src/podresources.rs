//! A stand-in for kubelet's PodResources API, for tests.
//!
//! kubelet cannot run here (it needs a container runtime, a node object and
//! device plugins), so tests that need the devices kubelet allocated to a
//! pod start this server instead. It serves the real v1 proto
//! (`plexus_podresources::v1`, gRPC over HTTP/2 on a unix socket, as kubelet
//! does) from a fixed set of pods, answers errors with the gRPC codes
//! kubelet uses, records which methods were called, and stops when dropped.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use plexus_podresources::v1::{
    ContainerDevices, ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse,
    ListPodResourcesRequest, ListPodResourcesResponse, PodResources, GET_PATH, LIST_PATH,
};
use tonic::codec::ProstCodec;
use tonic::{Request, Response, Status};

/// Which kubelet the server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubelet {
    /// Serves `List` and `Get` (1.34+, or 1.27+ with `KubeletPodResourcesGet`).
    Current,
    /// Answers `Get` with `Unimplemented`, as kubelets before 1.27 do.
    WithoutGet,
    /// Answers `Get` with `Unknown`, as kubelet does with the feature gate off.
    GetDisabled,
    /// Accepts connections and never answers a call (a hung kubelet).
    Hung,
}

/// The server; it stops, and its socket goes, when dropped.
pub struct PodResourcesServer {
    socket: PathBuf,
    calls: Arc<Mutex<Vec<&'static str>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl PodResourcesServer {
    /// A current kubelet reporting `pods`.
    pub fn start(pods: Vec<PodResources>) -> PodResourcesServer {
        Self::start_as(Kubelet::Current, pods)
    }

    /// `kubelet` reporting `pods`, listening on `kubelet.sock` in a new
    /// temporary directory before this returns.
    pub fn start_as(kubelet: Kubelet, pods: Vec<PodResources>) -> PodResourcesServer {
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("kubelet.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind the socket");
        listener.set_nonblocking(true).expect("non-blocking socket");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            kubelet,
            pods,
            calls: calls.clone(),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            // Dropping the runtime afterwards cancels the connections' tasks.
            runtime.block_on(serve(listener, state, stopped));
        });
        PodResourcesServer {
            socket,
            calls,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The methods called so far (`"List"`, `"Get"`), in order.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().expect("calls").clone()
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A pod as kubelet reports it.
pub fn pod(namespace: &str, name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers,
        ..Default::default()
    }
}

/// A container and its devices: `(resource name, device IDs)`, each in the
/// order kubelet happens to list them.
pub fn container(name: &str, devices: &[(&str, &[&str])]) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: devices
            .iter()
            .map(|(resource, ids)| ContainerDevices {
                resource_name: resource.to_string(),
                device_ids: ids.iter().map(|id| id.to_string()).collect(),
                topology: None,
            })
            .collect(),
        ..Default::default()
    }
}

struct State {
    kubelet: Kubelet,
    pods: Vec<PodResources>,
    calls: Arc<Mutex<Vec<&'static str>>>,
}

// The results are what tonic's service trait returns (on musl its Status
// is past clippy's size limit).
#[allow(clippy::result_large_err)]
impl State {
    fn record(&self, method: &'static str) {
        self.calls.lock().expect("calls").push(method);
    }

    async fn list(&self) -> Result<Response<ListPodResourcesResponse>, Status> {
        self.record("List");
        if self.kubelet == Kubelet::Hung {
            std::future::pending::<()>().await;
        }
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: self.pods.clone(),
        }))
    }

    /// kubelet's answers, codes included: its errors are plain Go errors,
    /// which gRPC sends as `Unknown`.
    async fn get(
        &self,
        request: Request<GetPodResourcesRequest>,
    ) -> Result<Response<GetPodResourcesResponse>, Status> {
        self.record("Get");
        let wanted = request.into_inner();
        match self.kubelet {
            Kubelet::Hung => std::future::pending().await,
            Kubelet::WithoutGet => Err(Status::unimplemented(
                "unknown method Get for service v1.PodResourcesLister",
            )),
            Kubelet::GetDisabled => Err(Status::unknown("PodResources API Get method disabled")),
            Kubelet::Current => self
                .pods
                .iter()
                .find(|p| p.namespace == wanted.pod_namespace && p.name == wanted.pod_name)
                .map(|p| {
                    Response::new(GetPodResourcesResponse {
                        pod_resources: Some(p.clone()),
                    })
                })
                .ok_or_else(|| {
                    Status::unknown(format!(
                        "pod {} in namespace {} not found",
                        wanted.pod_name, wanted.pod_namespace
                    ))
                }),
        }
    }
}

/// Accept connections until told to stop; each is served on its own task.
async fn serve(
    listener: std::os::unix::net::UnixListener,
    state: Arc<State>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = tokio::net::UnixListener::from_std(listener).expect("tokio listener");
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => return,
            },
        };
        let service = TowerToHyperService::new(Router(state.clone()));
        tokio::spawn(async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Routes a request to its method by path, as a generated gRPC server does.
#[derive(Clone)]
struct Router(Arc<State>);

type Answer = http::Response<tonic::body::Body>;

impl tower::Service<http::Request<Incoming>> for Router {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let answer = match request.uri().path() {
                LIST_PATH => {
                    let list =
                        tower::service_fn(|_: Request<ListPodResourcesRequest>| state.list());
                    tonic::server::Grpc::new(ProstCodec::default())
                        .unary(list, request)
                        .await
                }
                GET_PATH => {
                    let get = tower::service_fn(|r| state.get(r));
                    tonic::server::Grpc::new(ProstCodec::default())
                        .unary(get, request)
                        .await
                }
                other => Status::unimplemented(format!("unknown method {other}")).into_http(),
            };
            Ok(answer)
        })
    }
}
