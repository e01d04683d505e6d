//! A stand-in for kubelet's PodResources API, for tests where no kubelet
//! serves it.
//!
//! A real kubelet runs on the one-node cluster (`node`), and the tests
//! there read its API (tests/cluster_devices.rs, with the test device
//! plugin). This stand-in stays for what runs without that node: the VM
//! harness (no cluster), tests that run plexus without a node
//! (tests/podresources.rs, tests/kube/device_info.rs), and kubelets other than the one
//! built here (with `Get`, with it disabled, hung). It serves the real v1
//! proto (`plexus_podresources::v1`, gRPC over HTTP/2 on a unix socket, as
//! kubelet does) from a fixed set of pods, answers errors with the gRPC
//! codes kubelet uses, records which methods were called, and stops when
//! dropped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use plexus_podresources::v1::{
    ContainerDevices, ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse,
    ListPodResourcesRequest, ListPodResourcesResponse, PodResources, GET_PATH, LIST_PATH,
};
use tonic::codec::ProstCodec;
use tonic::{Request, Response, Status};

use plexus_podresources::server::{unknown_method, Answering, Routes, Server};

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
    _server: Server,
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
        let calls = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(State {
            kubelet,
            pods,
            calls: calls.clone(),
        });
        PodResourcesServer {
            socket,
            calls,
            _server: Server::start(listener, state),
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

/// Routes a request to its method by path, as a generated gRPC server does.
impl Routes for State {
    fn route(self: Arc<Self>, request: http::Request<Incoming>) -> Answering {
        Box::pin(async move {
            match request.uri().path() {
                LIST_PATH => {
                    let list = tower::service_fn(|_: Request<ListPodResourcesRequest>| self.list());
                    tonic::server::Grpc::new(ProstCodec::default())
                        .unary(list, request)
                        .await
                }
                GET_PATH => {
                    let get = tower::service_fn(|r| self.get(r));
                    tonic::server::Grpc::new(ProstCodec::default())
                        .unary(get, request)
                        .await
                }
                other => unknown_method(other),
            }
        })
    }
}
