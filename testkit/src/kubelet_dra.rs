//! kubelet's DRA manager, played for tests: it stands in for a Kubernetes
//! 1.34+ kubelet, which these machines cannot build (the kubelet here is
//! 1.20, without DRA). It follows the published kubelet code
//! (`pkg/kubelet/pluginmanager` and `pkg/kubelet/cm/dra`):
//!
//! - **registration** ([`KubeletDra::register`]): the plugin watcher finds
//!   a socket in the `plugins_registry` directory, calls
//!   `Registration.GetInfo`, checks the type (`DRAPlugin`) and that a
//!   version it speaks (`v1.DRAPlugin`) is offered, then tells the plugin
//!   with `NotifyRegistrationStatus`;
//! - **Prepare** ([`Registered::prepare`]) before a pod's sandbox, for the
//!   pod's claims (namespace, name, uid), each claim already reserved for
//!   the pod by the scheduler (the test plays it, `crate::dra::allocate`);
//! - **Unprepare** ([`Registered::unprepare`]) after the sandbox's DEL.
//!
//! Every call is bounded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plexus_podresources::dra_v1::{
    self, Claim, NodePrepareResourceResponse, NodePrepareResourcesRequest,
    NodePrepareResourcesResponse, NodeUnprepareResourcesRequest, NodeUnprepareResourcesResponse,
};
use plexus_podresources::pluginregistration::{
    self, InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use plexus_podresources::{grpc_over_unix, unary};

/// How long one call may take.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// The stand-in, watching `registry` (kubelet's `plugins_registry`).
pub struct KubeletDra {
    pub registry: PathBuf,
}

/// A plugin registered: its driver name and endpoint.
#[derive(Debug, Clone)]
pub struct Registered {
    pub driver: String,
    pub endpoint: PathBuf,
}

/// One claim as kubelet names it to the plugin.
pub fn claim(namespace: &str, name: &str, uid: &str) -> Claim {
    Claim {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.into(),
    }
}

fn call<T>(
    what: &str,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        match tokio::time::timeout(CALL_BOUND, work).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("{what}: not answered within {CALL_BOUND:?}")),
        }
    })
}

impl KubeletDra {
    /// The registration sockets in the directory now.
    pub fn sockets(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.registry)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "sock"))
            .collect();
        found.sort();
        found
    }

    /// Wait (at most `within`) for a registration socket that answers, and
    /// register its plugin as kubelet does; an error says what kubelet
    /// would refuse. A socket nobody serves (a killed plugin's) is tried
    /// again, as kubelet's watcher tries the socket a restarted plugin
    /// makes anew.
    pub fn register(&self, within: Duration) -> Result<Registered, String> {
        let deadline = std::time::Instant::now() + within;
        let mut last = format!("no registration socket in {}", self.registry.display());
        while std::time::Instant::now() < deadline {
            if let Some(socket) = self.sockets().into_iter().next() {
                match register_at(&socket) {
                    Ok(registered) => return Ok(registered),
                    // Refused by the plugin's answer: final.
                    Err(Refusal::Refused(e)) => return Err(e),
                    Err(Refusal::Unreachable(e)) => last = e,
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{last} (for {within:?})"))
    }
}

/// Why registration did not happen.
#[derive(Debug)]
pub enum Refusal {
    /// Nothing answered on the socket (yet).
    Unreachable(String),
    /// kubelet refuses what the plugin said, or the plugin failed a call.
    Refused(String),
}

/// kubelet's plugin watcher on one socket: GetInfo, check, notify.
pub fn register_at(socket: &Path) -> Result<Registered, Refusal> {
    let outcome = call("registration", async {
        let mut grpc = match grpc_over_unix(socket).await {
            Ok(grpc) => grpc,
            Err(e) => return Ok(Err(Refusal::Unreachable(e.to_string()))),
        };
        let refused = |e: plexus_podresources::Error| e.to_string();
        let info: PluginInfo = unary(
            &mut grpc,
            socket,
            "GetInfo",
            pluginregistration::GET_INFO_PATH,
            InfoRequest {},
        )
        .await
        .map_err(refused)?;
        let problem = if info.r#type != pluginregistration::DRA_PLUGIN {
            Some(format!("type {:?} is not DRAPlugin", info.r#type))
        } else if !info.supported_versions.iter().any(|v| v == dra_v1::SERVICE) {
            Some(format!(
                "none of the versions {:?} is {}",
                info.supported_versions,
                dra_v1::SERVICE
            ))
        } else {
            None
        };
        let status = RegistrationStatus {
            plugin_registered: problem.is_none(),
            error: problem.clone().unwrap_or_default(),
        };
        let _: RegistrationStatusResponse = unary(
            &mut grpc,
            socket,
            "NotifyRegistrationStatus",
            pluginregistration::NOTIFY_PATH,
            status,
        )
        .await
        .map_err(refused)?;
        Ok(match problem {
            Some(p) => Err(Refusal::Refused(p)),
            None => Ok(Registered {
                driver: info.name,
                endpoint: PathBuf::from(info.endpoint),
            }),
        })
    });
    outcome.map_err(Refusal::Refused)?
}

impl Registered {
    /// `NodePrepareResources` for `claims`: each claim's answer, by uid.
    pub fn prepare(
        &self,
        claims: &[Claim],
    ) -> Result<HashMap<String, NodePrepareResourceResponse>, String> {
        let request = NodePrepareResourcesRequest {
            claims: claims.to_vec(),
        };
        let answer: NodePrepareResourcesResponse =
            self.call("NodePrepareResources", dra_v1::PREPARE_PATH, request)?;
        Ok(answer.claims)
    }

    /// `NodeUnprepareResources` for `claims`: each claim's error ("" when
    /// done), by uid.
    pub fn unprepare(&self, claims: &[Claim]) -> Result<HashMap<String, String>, String> {
        let request = NodeUnprepareResourcesRequest {
            claims: claims.to_vec(),
        };
        let answer: NodeUnprepareResourcesResponse =
            self.call("NodeUnprepareResources", dra_v1::UNPREPARE_PATH, request)?;
        Ok(answer
            .claims
            .into_iter()
            .map(|(uid, r)| (uid, r.error))
            .collect())
    }

    /// One call of the plugin's DRA service, on a connection of its own.
    fn call<Q, R>(&self, method: &'static str, path: &'static str, request: Q) -> Result<R, String>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let socket = self.endpoint.clone();
        call(method, async move {
            let mut grpc = grpc_over_unix(&socket).await.map_err(|e| e.to_string())?;
            unary(&mut grpc, &socket, method, path, request)
                .await
                .map_err(|e| e.to_string())
        })
    }
}
