//! A device plugin for tests, speaking kubelet's device-plugin API v1beta1
//! ([`v1beta1`]) as sriov-network-device-plugin does, without hardware.
//!
//! It serves the `v1beta1.DevicePlugin` service (GetDevicePluginOptions,
//! ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer) on a
//! unix socket in kubelet's device-plugins directory, then registers with
//! kubelet (`v1beta1.Registration/Register` on its `kubelet.sock`). kubelet
//! then advertises the devices as the node's allocatable resource, hands
//! them to pods that request it, and reports them through its PodResources
//! API, which is where plexus reads them (device-info-SPEC §4.2.1).
//!
//! The devices are made-up PCI addresses (SR-IOV VFs' IDs in
//! sriov-network-device-plugin): on Allocate the plugin writes each
//! allocated device's Device Plugin Device Information file (§4.1,
//! `<devinfo dir>/<resource, / as ->-<device ID>-device.json`, type `pci`,
//! §3.1.3), and removes the files it wrote when it stops (§4.1.1). The
//! container gets `PCIDEVICE_<RESOURCE>` in its environment, as with
//! sriov-network-device-plugin.
//!
//! When a restarting kubelet removes its socket, it serves anew and
//! registers again, as device plugins must.
//!
//! A test runs it in its own process ([`DevicePlugin::start`]); the
//! `plexus-test-device-plugin` binary runs it on a node by hand.

pub mod v1beta1;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hyper::body::Incoming;
use plexus_podresources::{grpc_over_unix, unary};
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::ProstCodec;
use tonic::server::Grpc;
use tonic::{Request, Response, Status};

use plexus_podresources::server::{unknown_method, Answering, Routes, Server};
use v1beta1::*;

/// kubelet's device-plugins directory on a node: its `kubelet.sock`, and
/// the plugins' sockets.
pub const PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// Where device plugins write their device-info files (device-info-SPEC §4.1).
pub const DEVINFO_DIR: &str = "/var/run/k8s.cni.cncf.io/devinfo/dp";
/// How long registration with kubelet may take.
const REGISTER_BOUND: Duration = Duration::from_secs(10);

/// What a plugin serves, and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// kubelet's device-plugins directory ([`PLUGIN_DIR`] on the node).
    pub plugin_dir: PathBuf,
    /// The device plugins' device-info directory ([`DEVINFO_DIR`] on the node).
    pub devinfo_dir: PathBuf,
    /// The extended resource, `vendor-domain/name` (`plexus.test/netdev`).
    pub resource: String,
    /// The devices' IDs: PCI addresses in BDF form (`0000:f0:00.1`).
    pub devices: Vec<String>,
}

/// The running plugin: registered with kubelet, serving it, and
/// registered again after kubelet restarts (kubelet then removes every
/// plugin's socket, and a plugin serves anew and registers, as device
/// plugins do). Dropping it stops it: its socket and the device-info files
/// it wrote are removed.
pub struct DevicePlugin {
    state: Arc<State>,
    stop: Arc<AtomicBool>,
    keeper: Option<JoinHandle<()>>,
}

/// How often the plugin looks whether kubelet removed its socket.
const RESTART_POLL: Duration = Duration::from_millis(250);

impl DevicePlugin {
    /// Serves `config`'s devices and registers them with kubelet; fails
    /// with the reason (a device ID that is no PCI address, kubelet
    /// refusing or not answering).
    pub fn start(config: Config) -> Result<DevicePlugin, String> {
        if let Some(bad) = config.devices.iter().find(|id| !is_pci_address(id)) {
            return Err(format!(
                "device {bad:?}: not a PCI address in BDF form (dddd:bb:dd.f)"
            ));
        }
        let endpoint = format!("plexus-test-{}.sock", file_part(&config.resource));
        let state = Arc::new(State {
            socket: config.plugin_dir.join(&endpoint),
            endpoint,
            config,
            written: Mutex::default(),
            allocations: Mutex::default(),
            calls: Mutex::default(),
            watchers: Mutex::default(),
        });
        let server = state.clone().serve()?;
        state.register()?;
        let stop = Arc::new(AtomicBool::new(false));
        let keeper = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || state.keep_registered(server, &stop))
        };
        Ok(DevicePlugin {
            state,
            stop,
            keeper: Some(keeper),
        })
    }

    /// The device IDs of each container kubelet asked `Allocate` for, in
    /// order.
    pub fn allocations(&self) -> Vec<Vec<String>> {
        self.state.allocations.lock().expect("allocations").clone()
    }

    /// The methods kubelet called so far (`"ListAndWatch"`, `"Allocate"`, ...).
    pub fn calls(&self) -> Vec<&'static str> {
        self.state.calls.lock().expect("calls").clone()
    }

    /// The device-info file of device `id` (device-info-SPEC §4.1).
    pub fn device_info_file(&self, id: &str) -> PathBuf {
        self.state.device_info_file(id)
    }

    /// The device-info file's content for device `id` (§3: type `pci`).
    pub fn device_info(id: &str) -> String {
        format!(r#"{{"type":"pci","version":"1.1.0","pci":{{"pci-address":"{id}"}}}}"#)
    }
}

impl Drop for DevicePlugin {
    fn drop(&mut self) {
        // Stopped first, so no Allocate writes a file after the clean-up.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        let _ = std::fs::remove_file(&self.state.socket);
        for file in self.state.written.lock().expect("written").iter() {
            let _ = std::fs::remove_file(file);
        }
    }
}

const OPTIONS: DevicePluginOptions = DevicePluginOptions {
    pre_start_required: false,
    get_preferred_allocation_available: true,
};

type Watch = ReceiverStream<Result<ListAndWatchResponse, Status>>;

struct State {
    config: Config,
    /// The plugin's socket, and its name in kubelet's directory.
    socket: PathBuf,
    endpoint: String,
    written: Mutex<BTreeSet<PathBuf>>,
    allocations: Mutex<Vec<Vec<String>>>,
    calls: Mutex<Vec<&'static str>>,
    /// Every ListAndWatch stream kubelet holds open, kept open while the
    /// plugin runs.
    watchers: Mutex<Vec<tokio::sync::mpsc::Sender<Result<ListAndWatchResponse, Status>>>>,
}

// The results are what tonic's service trait returns (on musl its Status
// is past clippy's size limit).
#[allow(clippy::result_large_err)]
impl State {
    fn record(&self, method: &'static str) {
        self.calls.lock().expect("calls").push(method);
    }

    /// Listens on the plugin's socket (a stale one removed) and serves.
    fn serve(self: Arc<Self>) -> Result<Server, String> {
        let _ = std::fs::remove_file(&self.socket);
        let listener = std::os::unix::net::UnixListener::bind(&self.socket)
            .map_err(|e| format!("{}: {e}", self.socket.display()))?;
        Ok(Server::start(listener, self))
    }

    fn kubelet_socket(&self) -> PathBuf {
        self.config.plugin_dir.join("kubelet.sock")
    }

    /// `Register` on kubelet's socket: kubelet then connects to ours and
    /// calls ListAndWatch.
    fn register(&self) -> Result<(), String> {
        let kubelet = self.kubelet_socket();
        let request = RegisterRequest {
            version: VERSION.into(),
            endpoint: self.endpoint.clone(),
            resource_name: self.config.resource.clone(),
            options: Some(OPTIONS),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let call = async {
                let mut grpc = grpc_over_unix(&kubelet).await?;
                unary::<_, Empty>(&mut grpc, &kubelet, "Register", REGISTER_PATH, request).await
            };
            match tokio::time::timeout(REGISTER_BOUND, call).await {
                Ok(answer) => answer.map(drop).map_err(|e| e.to_string()),
                Err(_) => Err(format!(
                    "{}: Register not answered within {REGISTER_BOUND:?}",
                    kubelet.display()
                )),
            }
        })
    }

    /// Until `stop`: when kubelet (restarting) removed the plugin's
    /// socket, serve on a new one and register again once kubelet listens.
    fn keep_registered(self: Arc<Self>, server: Server, stop: &AtomicBool) {
        let mut server = Some(server);
        let mut registered = true;
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(RESTART_POLL);
            if !self.socket.exists() {
                drop(server.take());
                server = self.clone().serve().ok();
                registered = false;
            }
            if !registered && server.is_some() && self.kubelet_socket().exists() {
                registered = self.register().is_ok();
            }
        }
    }

    fn device_info_file(&self, id: &str) -> PathBuf {
        let resource = self.config.resource.replace('/', "-");
        self.config
            .devinfo_dir
            .join(format!("{resource}-{id}-device.json"))
    }

    /// The devices, all healthy, once; the stream stays open as kubelet
    /// expects (a closed one makes it mark them unhealthy).
    async fn list_and_watch(&self) -> Result<Response<Watch>, Status> {
        self.record("ListAndWatch");
        let (send, receive) = tokio::sync::mpsc::channel(1);
        let devices = self
            .config
            .devices
            .iter()
            .map(|id| Device {
                id: id.clone(),
                health: HEALTHY.into(),
                topology: None,
            })
            .collect();
        let _ = send.send(Ok(ListAndWatchResponse { devices })).await;
        self.watchers.lock().expect("watchers").push(send);
        Ok(Response::new(ReceiverStream::new(receive)))
    }

    /// The devices kubelet must include, then the lowest available IDs.
    async fn preferred(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        self.record("GetPreferredAllocation");
        let container_responses = request
            .into_inner()
            .container_requests
            .into_iter()
            .map(|c| {
                let mut chosen: BTreeSet<String> = c.must_include_device_ids.into_iter().collect();
                let mut available = c.available_device_ids;
                available.sort();
                for id in available {
                    if chosen.len() >= c.allocation_size.max(0) as usize {
                        break;
                    }
                    chosen.insert(id);
                }
                ContainerPreferredAllocationResponse {
                    device_ids: chosen.into_iter().collect(),
                }
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    /// Writes each allocated device's device-info file (§4.1) and gives
    /// the container `PCIDEVICE_<RESOURCE>=<IDs>`.
    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        self.record("Allocate");
        let mut container_responses = Vec::new();
        for container in request.into_inner().container_requests {
            let ids = container.devices_ids;
            if let Some(unknown) = ids.iter().find(|id| !self.config.devices.contains(id)) {
                return Err(Status::invalid_argument(format!(
                    "device {unknown} is not one of {}",
                    self.config.resource
                )));
            }
            for id in &ids {
                self.write_device_info(id)?;
            }
            let env = format!("PCIDEVICE_{}", env_part(&self.config.resource));
            container_responses.push(ContainerAllocateResponse {
                envs: [(env, ids.join(","))].into(),
                ..Default::default()
            });
            self.allocations.lock().expect("allocations").push(ids);
        }
        Ok(Response::new(AllocateResponse {
            container_responses,
        }))
    }

    fn write_device_info(&self, id: &str) -> Result<(), Status> {
        let file = self.device_info_file(id);
        // §4.1.1: the plugin creates the directory when it does not exist.
        std::fs::create_dir_all(&self.config.devinfo_dir)
            .and_then(|()| std::fs::write(&file, DevicePlugin::device_info(id)))
            .map_err(|e| Status::internal(format!("{}: {e}", file.display())))?;
        self.written.lock().expect("written").insert(file);
        Ok(())
    }
}

impl Routes for State {
    fn route(self: Arc<Self>, request: http::Request<Incoming>) -> Answering {
        Box::pin(async move {
            match request.uri().path() {
                GET_DEVICE_PLUGIN_OPTIONS_PATH => {
                    let options = tower::service_fn(|_: Request<Empty>| async {
                        self.record("GetDevicePluginOptions");
                        Ok(Response::new(OPTIONS))
                    });
                    codec().unary(options, request).await
                }
                LIST_AND_WATCH_PATH => {
                    let watch = tower::service_fn(|_: Request<Empty>| self.list_and_watch());
                    codec().server_streaming(watch, request).await
                }
                GET_PREFERRED_ALLOCATION_PATH => {
                    let preferred = tower::service_fn(|r| self.preferred(r));
                    codec().unary(preferred, request).await
                }
                ALLOCATE_PATH => {
                    let allocate = tower::service_fn(|r| self.allocate(r));
                    codec().unary(allocate, request).await
                }
                PRE_START_CONTAINER_PATH => {
                    let pre_start =
                        tower::service_fn(|_: Request<PreStartContainerRequest>| async {
                            self.record("PreStartContainer");
                            Ok(Response::new(PreStartContainerResponse {}))
                        });
                    codec().unary(pre_start, request).await
                }
                other => unknown_method(other),
            }
        })
    }
}

/// A server for one method's message types.
fn codec<T, U>() -> Grpc<ProstCodec<T, U>>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    Grpc::new(ProstCodec::default())
}

/// `dddd:bb:dd.f`, hexadecimal, the function 0-7.
fn is_pci_address(id: &str) -> bool {
    let b = id.as_bytes();
    let hex = |range: std::ops::Range<usize>| b[range].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// The resource in a file name: `plexus.test/netdev` as `plexus.test-netdev`.
fn file_part(resource: &str) -> String {
    resource.replace('/', "-")
}

/// The resource in an environment variable's name, as
/// sriov-network-device-plugin makes it: `PLEXUS_TEST_NETDEV`.
fn env_part(resource: &str) -> String {
    resource
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_must_be_pci_addresses() {
        assert!(is_pci_address("0000:f0:00.1"));
        assert!(is_pci_address("0000:3B:0a.7"));
        for bad in [
            "",
            "0000:f0:00.8",
            "f0:00.1",
            "0000:f0:00.1 ",
            "0000-f0:00.1",
        ] {
            assert!(!is_pci_address(bad), "{bad:?}");
        }
    }

    #[test]
    fn names_follow_the_resource() {
        assert_eq!(file_part("plexus.test/netdev"), "plexus.test-netdev");
        assert_eq!(env_part("plexus.test/net-dev"), "PLEXUS_TEST_NET_DEV");
    }
}
