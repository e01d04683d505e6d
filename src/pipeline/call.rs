//! What the runtime's call says: the attachment it names, the pod of
//! kubelet's `CNI_ARGS`, and the directories of a conf that may no longer
//! parse.

use std::path::PathBuf;

use crate::cluster::{Cluster, ClusterError};
use crate::cni::args::CniArgs;
use crate::cni::casefold;
use crate::cni::error::CniError;
use crate::cni::names::{ContainerId, IfName, NetnsPath};
use crate::cni::skel::Request;
use crate::config::{PlexusConf, DEFAULT_BIN_DIR, DEFAULT_CNI_DIR};
use crate::netattach::pod::Pod;
use crate::plan::PlanOptions;
use crate::policy::SelectionPolicy;
use crate::run::{Delegates, Registry, RunContext};

/// What the runtime told plexus about this attachment.
pub struct Call<'a> {
    pub container_id: ContainerId,
    pub ifname: IfName,
    pub netns: Option<NetnsPath>,
    cni_path: &'a [PathBuf],
}

impl Call<'_> {
    /// The attachment `req` names (cni-SPEC §2: ADD, DEL and CHECK need it).
    pub fn of(req: &Request) -> Result<Call<'_>, CniError> {
        let params = req.env.require_attachment()?;
        Ok(Call {
            container_id: params.container_id.clone(),
            ifname: params.ifname.clone(),
            netns: params.netns.clone(),
            cni_path: &params.path,
        })
    }

    /// The plan's options for this call of `req`, under `policy`.
    pub fn plan_options(&self, policy: SelectionPolicy, req: &Request) -> PlanOptions {
        PlanOptions::new(policy, self.ifname.clone())
            .with_container(self.container_id.clone())
            .with_cni_args(Some(req.env.args().clone()))
            .with_runtime_config(req.runtime_config.clone())
    }

    /// The executor's view of this call: plugins from `CNI_PATH`, then
    /// `bin_dir`.
    pub fn context<'r>(&self, bin_dir: PathBuf, registry: &'r Registry) -> RunContext<'r> {
        RunContext {
            container_id: self.container_id.clone(),
            ifname: self.ifname.clone(),
            netns: self.netns.clone(),
            delegates: Delegates {
                cni_path: self.cni_path.to_vec(),
                bin_dir: Some(bin_dir),
                registry,
            },
        }
    }
}

/// Where a command about the network rather than an attachment (GC,
/// STATUS) finds the plugins.
pub(super) fn network_delegates<'r>(
    req: &Request,
    conf: &PlexusConf,
    registry: &'r Registry,
) -> Delegates<'r> {
    Delegates {
        cni_path: req.env.path().to_vec(),
        bin_dir: Some(conf.bin_dir.clone()),
        registry,
    }
}

/// `cniDir` and `binDir` even from a conf that no longer parses, so a DEL can
/// still find and finish what its ADD started.
pub(super) fn dirs_of(req: &Request, conf: Option<&PlexusConf>) -> (PathBuf, PathBuf) {
    if let Some(conf) = conf {
        return (conf.cni_dir.clone(), conf.bin_dir.clone());
    }
    // Keys matched as the conf's parser matches them (Go's rule), so a
    // conf that says `CNIDir` finds on this DEL what its ADD wrote.
    let raw = |key: &str, default: &str| {
        PathBuf::from(
            casefold::get(&req.config, key)
                .and_then(|v| v.as_str())
                .unwrap_or(default),
        )
    };
    (
        raw("cniDir", DEFAULT_CNI_DIR),
        raw("binDir", DEFAULT_BIN_DIR),
    )
}

/// `chrootDir` even from a conf that no longer parses (see [`dirs_of`]).
pub(super) fn chroot_of(req: &Request, conf: Option<&PlexusConf>) -> Option<PathBuf> {
    match conf {
        Some(conf) => conf.chroot_dir.clone(),
        None => casefold::get(&req.config, "chrootDir")
            .and_then(|v| v.as_str())
            .filter(|dir| dir.starts_with('/'))
            .map(PathBuf::from),
    }
}
/// The pod this call is for, from kubelet's `CNI_ARGS`; a runtime that sends
/// none (podman) gets a pod with no annotations: the default networks only.
/// A pod whose uid differs from kubelet's `K8S_POD_UID` is another pod (the
/// one of the call was deleted and re-created under its name). On an API
/// server the pod must exist; a manifest directory may leave it out.
pub fn pod(
    args: &CniArgs,
    container_id: &str,
    cluster: &dyn Cluster,
    on_api_server: bool,
) -> Result<Pod, ClusterError> {
    let (Some(namespace), Some(name)) = (args.k8s_pod_namespace(), args.k8s_pod_name()) else {
        return Ok(Pod {
            namespace: crate::manifest::DEFAULT_NAMESPACE.into(),
            name: container_id.into(),
            uid: None,
            annotations: Default::default(),
        });
    };
    let mut found = cluster.pod(namespace, name)?;
    if let (Some(want), Some(have)) = (args.k8s_pod_uid(), found.as_ref()) {
        if have.uid.as_deref().is_some_and(|have| have != want) {
            found = cluster.pod_fresh(namespace, name)?;
        }
    }
    let pod = match found {
        Some(pod) => pod,
        None if on_api_server => {
            return Err(ClusterError::PodMissing {
                namespace: namespace.into(),
                name: name.into(),
            })
        }
        None => Pod {
            namespace: namespace.into(),
            name: name.into(),
            uid: args.k8s_pod_uid().map(String::from),
            annotations: Default::default(),
        },
    };
    if let (Some(want), Some(have)) = (args.k8s_pod_uid(), pod.uid.as_deref()) {
        if want != have {
            return Err(ClusterError::PodRecreated {
                namespace: namespace.into(),
                name: name.into(),
                want: want.into(),
                have: have.into(),
            });
        }
    }
    Ok(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dir::DirCluster;

    #[test]
    fn a_pod_whose_uid_differs_from_kubelets_is_another_pod() {
        let (_dir, cluster) =
            DirCluster::of_manifest("kind: Pod\nmetadata: {name: p, namespace: ns, uid: uid-2}\n");
        let args = |uid: &str| {
            CniArgs::parse(&format!(
                "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID={uid}"
            ))
            .unwrap()
        };
        assert_eq!(pod(&args("uid-2"), "c", &cluster, false).unwrap().name, "p");
        let e = pod(&args("uid-1"), "c", &cluster, false).unwrap_err();
        assert!(
            matches!(&e, ClusterError::PodRecreated { want, have, .. }
                if want == "uid-1" && have == "uid-2"),
            "{e}"
        );
        // A manifest directory may leave the pod out: no annotations then.
        let missing = CniArgs::parse("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=q").unwrap();
        assert!(pod(&missing, "c", &cluster, false)
            .unwrap()
            .annotations
            .is_empty());
        // On an API server it must exist.
        let e = pod(&missing, "c", &cluster, true).unwrap_err();
        assert!(
            matches!(&e, ClusterError::PodMissing { name, .. } if name == "q"),
            "{e}"
        );
    }
}
