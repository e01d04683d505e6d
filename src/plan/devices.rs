//! The devices kubelet allocated to a pod (SR-IOV VFs and the like), and
//! which attachment gets which.
//!
//! A NetworkAttachmentDefinition annotated `k8s.v1.cni.cncf.io/resourceName`
//! is backed by a device-plugin resource: the pod requests the resource in
//! its containers' `resources`, kubelet allocates devices of it, and every
//! attachment of such a network takes one of them (device-info-SPEC
//! §4.2.1). plexus asks kubelet's PodResources API which devices, once per
//! ADD and only when an attachment needs one, and hands each attachment its
//! device as Multus does: `deviceID` and `pciBusID` in the config of every
//! plugin of the chain (sriov-cni and host-device read them there), and
//! `runtimeConfig.deviceID` for the plugins that declare the `deviceID`
//! capability (cni-CONVENTIONS). The record keeps those configs, so DEL
//! hands over the same device without asking kubelet.
//!
//! **The order** (multus-cni #501: VFs went to networks in no fixed order):
//! a resource's devices are the pod's, from all its containers, each once,
//! sorted by device ID (byte order; for PCI addresses in kubelet's
//! `0000:3b:02.1` form that is address order); the attachments backed by
//! that resource are taken in plan order (`defaultNetworks`, then the
//! selections in annotation order). The n-th attachment gets the n-th
//! device. kubelet lists a container's devices in no fixed order, so only a
//! sort makes the mapping a function of what was allocated; it is the order
//! Multus sorts in too, so a pod gets the same device per network under
//! either.
//!
//! **DRA** (Kubernetes 1.34+, `crate::dra`): the devices the pod's
//! ResourceClaims were allocated that carry the attributes
//! `k8s.cni.cncf.io/resourceName` and `k8s.cni.cncf.io/deviceID` join the
//! pool of that resource name beside kubelet's, as Multus's
//! `GetPodResourceMap` adds them to the same resource map: one pool per
//! resource, deduplicated and sorted, whichever path allocated a device.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::error::PlanError;
use crate::cluster::DraSource;
use crate::dra::ClaimedDevices;
use crate::netattach::pod::Pod;
pub use plexus_podresources as podresources;
use podresources::v1::PodResources;

/// The capability (cni-CONVENTIONS) under which a plugin that declares it
/// gets the device in `runtimeConfig`.
pub const DEVICE_ID_CAPABILITY: &str = "deviceID";

/// Where the devices kubelet allocated to a pod come from.
pub trait DeviceSource {
    /// What kubelet reports for pod `namespace/name`.
    fn pod_resources(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PodResources, podresources::Error>;
}

impl DeviceSource for podresources::Client {
    fn pod_resources(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PodResources, podresources::Error> {
        self.pod(namespace, name)
    }
}

/// A resource with fewer devices allocated to the pod than attachments
/// backed by it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{allocated} device(s) of {resource} were allocated to the pod (kubelet's device plugins, its ResourceClaims), for {wanted} attachment(s) backed by it")]
pub struct TooFewDevices {
    pub resource: String,
    pub allocated: usize,
    pub wanted: usize,
    /// The position in the request of the first attachment left without one.
    pub unserved: usize,
}

/// The device of each attachment of `resources` (the resource each one is
/// backed by, in plan order), from what kubelet reports for the pod, in the
/// module's stable order.
pub fn assign(pod: &PodResources, resources: &[&str]) -> Result<Vec<String>, TooFewDevices> {
    assign_devices(kubelet_devices(pod), resources)
}

/// Each device kubelet reports for the pod: (resource, device ID).
fn kubelet_devices(pod: &PodResources) -> impl Iterator<Item = (&str, &str)> {
    let devices = pod.containers.iter().flat_map(|c| &c.devices);
    devices.flat_map(|d| {
        let resource = d.resource_name.as_str();
        d.device_ids.iter().map(move |id| (resource, id.as_str()))
    })
}

/// [`assign`] from `devices` (resource, device ID), whatever allocated them.
pub fn assign_devices<'a>(
    devices: impl IntoIterator<Item = (&'a str, &'a str)>,
    resources: &[&'a str],
) -> Result<Vec<String>, TooFewDevices> {
    let mut pools: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (resource, id) in devices {
        if resources.contains(&resource) {
            pools.entry(resource).or_default().push(id);
        }
    }
    // kubelet may report a device under more than one container (an init
    // container's devices are handed on): it is still one device.
    for ids in pools.values_mut() {
        ids.sort_unstable();
        ids.dedup();
    }
    let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
    let mut assigned = Vec::with_capacity(resources.len());
    for (position, &resource) in resources.iter().enumerate() {
        let pool = pools.get(resource).map(Vec::as_slice).unwrap_or_default();
        let next = taken.entry(resource).or_default();
        let Some(id) = pool.get(*next) else {
            return Err(TooFewDevices {
                resource: resource.to_string(),
                allocated: pool.len(),
                wanted: resources.iter().filter(|r| **r == resource).count(),
                unserved: position,
            });
        };
        *next += 1;
        assigned.push(id.to_string());
    }
    Ok(assigned)
}

/// An attachment backed by a device-plugin resource, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNeed<'a> {
    /// Where the pod asked for it (`annotation k8s.v1.cni.cncf.io/networks[1]`).
    pub label: &'a str,
    /// The NAD, `namespace/name`.
    pub network: &'a str,
    pub resource: &'a str,
}

/// The device of each of `needs` (in plan order) from one look-up of the
/// pod in `source` and, where the cluster has them, one of its
/// ResourceClaims in `claims` (whose skipped devices are said in
/// `warnings`); errors name the attachment, its network and resource.
pub fn look_up(
    pod: &Pod,
    needs: &[DeviceNeed],
    source: &dyn DeviceSource,
    claims: Option<&dyn DraSource>,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, PlanError> {
    let Some(first) = needs.first() else {
        return Ok(Vec::new());
    };
    let resources = source
        .pod_resources(&pod.namespace, &pod.name)
        .map_err(|e| lookup_failed(first, &e))?;
    let claimed = match claims {
        Some(claims) => claims.claimed_devices(pod).map_err(|e| PlanError::Claims {
            need: describe(first),
            source: e,
        })?,
        None => ClaimedDevices::default(),
    };
    let devices = claimed
        .devices
        .iter()
        .map(|d| (d.resource_name.as_str(), d.device_id.as_str()));
    let wanted: Vec<&str> = needs.iter().map(|n| n.resource).collect();
    let assigned = assign_devices(kubelet_devices(&resources).chain(devices), &wanted)
        .map_err(|e| too_few(&needs[e.unserved], pod, &e, &claimed.warnings));
    warnings.extend(claimed.warnings);
    assigned
}

/// `deviceID` and `pciBusID` in the config of every plugin of a chain, as
/// Multus hands a device over (its `addDeviceIDInConfList`); a value the
/// network's config had is replaced.
pub fn hand_over(requests: &mut [Map<String, Value>], device_id: &str) {
    for request in requests {
        for key in ["deviceID", "pciBusID"] {
            request.insert(key.into(), device_id.into());
        }
    }
}

fn describe(need: &DeviceNeed) -> String {
    format!(
        "{}: NetworkAttachmentDefinition {} has resourceName {}",
        need.label, need.network, need.resource
    )
}

/// kubelet could not say.
fn lookup_failed(need: &DeviceNeed, e: &podresources::Error) -> PlanError {
    PlanError::PodResources {
        need: describe(need),
        source: e.clone(),
    }
}

/// Too few devices; `skipped`: why devices of the pod's claims were left
/// out (a device of another node's pool), which may be why.
fn too_few(need: &DeviceNeed, pod: &Pod, e: &TooFewDevices, skipped: &[String]) -> PlanError {
    PlanError::TooFewDevices {
        need: describe(need),
        pod: format!("{}/{}", pod.namespace, pod.name),
        resource: e.resource.clone(),
        allocated: e.allocated,
        wanted: e.wanted,
        skipped: skipped.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_testkit::podresources::container;
    use podresources::v1::ContainerResources;
    use std::cell::Cell;

    const VF_A: &str = "intel.com/sriov_a";
    const VF_B: &str = "intel.com/sriov_b";

    fn pod_resources(containers: Vec<ContainerResources>) -> PodResources {
        plexus_testkit::podresources::pod("ns", "p", containers)
    }

    #[test]
    fn several_devices_of_one_resource_go_in_device_id_order() {
        // kubelet lists them in no fixed order; every order gives one answer.
        let ids = [
            "0000:3b:02.3",
            "0000:3b:02.1",
            "0000:3b:0a.0",
            "0000:3b:02.2",
        ];
        let mut orders = vec![ids.to_vec()];
        orders.push(ids.iter().rev().copied().collect());
        for order in orders {
            let pod = pod_resources(vec![container("app", &[(VF_A, &order)])]);
            assert_eq!(
                assign(&pod, &[VF_A, VF_A, VF_A]).unwrap(),
                ["0000:3b:02.1", "0000:3b:02.2", "0000:3b:02.3"]
            );
        }
    }

    #[test]
    fn two_resources_interleaved_each_keep_their_own_order() {
        let pod = pod_resources(vec![container(
            "app",
            &[
                (VF_B, &["0000:5e:00.5", "0000:5e:00.4"]),
                (VF_A, &["0000:3b:02.2", "0000:3b:02.1"]),
            ],
        )]);
        assert_eq!(
            assign(&pod, &[VF_A, VF_B, VF_A, VF_B]).unwrap(),
            [
                "0000:3b:02.1",
                "0000:5e:00.4",
                "0000:3b:02.2",
                "0000:5e:00.5"
            ]
        );
    }

    #[test]
    fn devices_of_all_the_pods_containers_count_once_and_nothing_else_does() {
        let pod = pod_resources(vec![
            container("init", &[(VF_A, &["0000:3b:02.4"])]),
            container(
                "app",
                &[
                    (VF_A, &["0000:3b:02.4", "0000:3b:02.3"]),
                    ("nvidia.com/gpu", &["GPU-1"]),
                ],
            ),
            container("sidecar", &[(VF_A, &["0000:3b:02.9"])]),
        ]);
        assert_eq!(
            assign(&pod, &[VF_A, VF_A, VF_A]).unwrap(),
            ["0000:3b:02.3", "0000:3b:02.4", "0000:3b:02.9"]
        );
        // 02.4, listed twice, is one device: a fourth attachment has none.
        let e = assign(&pod, &[VF_A, VF_A, VF_A, VF_A]).unwrap_err();
        assert_eq!((e.allocated, e.wanted, e.unserved), (3, 4, 3));
    }

    #[test]
    fn too_few_devices_name_the_resource_and_the_first_attachment_without_one() {
        let pod = pod_resources(vec![container("app", &[(VF_A, &["0000:3b:02.1"])])]);
        assert_eq!(
            assign(&pod, &[VF_A, VF_B, VF_A]).unwrap_err(),
            TooFewDevices {
                resource: VF_B.into(),
                allocated: 0,
                wanted: 1,
                unserved: 1
            }
        );
        assert_eq!(
            assign(&pod, &[VF_A, VF_A]).unwrap_err(),
            TooFewDevices {
                resource: VF_A.into(),
                allocated: 1,
                wanted: 2,
                unserved: 1
            }
        );
        assert_eq!(assign(&pod, &[]).unwrap(), Vec::<String>::new());
    }

    /// A kubelet that answers from memory and counts the questions.
    struct Kubelet {
        answer: Result<PodResources, podresources::Error>,
        asked: Cell<usize>,
    }

    impl Kubelet {
        fn answering(answer: Result<PodResources, podresources::Error>) -> Kubelet {
            Kubelet {
                answer,
                asked: Cell::new(0),
            }
        }

        /// kubelet with the pod's container `app` holding `devices` of `VF_A`.
        fn with_vf_a(devices: &[&str]) -> Kubelet {
            Kubelet::answering(Ok(pod_resources(vec![container(
                "app",
                &[(VF_A, devices)],
            )])))
        }
    }

    impl DeviceSource for Kubelet {
        fn pod_resources(
            &self,
            namespace: &str,
            name: &str,
        ) -> Result<PodResources, podresources::Error> {
            assert_eq!((namespace, name), ("ns", "p"));
            self.asked.set(self.asked.get() + 1);
            self.answer.clone()
        }
    }

    fn pod() -> Pod {
        Pod {
            namespace: "ns".into(),
            name: "p".into(),
            uid: None,
            annotations: Default::default(),
        }
    }

    fn need<'a>(label: &'a str, resource: &'a str) -> DeviceNeed<'a> {
        DeviceNeed {
            label,
            network: "ns/sriov",
            resource,
        }
    }

    #[test]
    fn look_up_asks_once_and_errors_name_the_attachment() {
        let kubelet = Kubelet::with_vf_a(&["0000:3b:02.2", "0000:3b:02.1"]);
        let needs = [need("networks[0]", VF_A), need("networks[2]", VF_A)];
        assert_eq!(
            look_up(&pod(), &needs, &kubelet, None, &mut vec![]).unwrap(),
            ["0000:3b:02.1", "0000:3b:02.2"]
        );
        assert_eq!(kubelet.asked.get(), 1);
        assert!(look_up(&pod(), &[], &kubelet, None, &mut vec![])
            .unwrap()
            .is_empty());
        assert_eq!(kubelet.asked.get(), 1, "nothing needed, nothing asked");

        let three = [need("a[0]", VF_A), need("a[1]", VF_A), need("a[2]", VF_A)];
        let e = look_up(&pod(), &three, &kubelet, None, &mut vec![]).unwrap_err();
        assert!(
            matches!(&e, PlanError::TooFewDevices { need, pod, allocated: 2, wanted: 3, .. }
                if need == "a[2]: NetworkAttachmentDefinition ns/sriov has resourceName intel.com/sriov_a"
                    && pod == "ns/p"),
            "{e:?}"
        );
    }

    /// A cluster whose ResourceClaims gave `devices` (resource, ID).
    struct Claims(Result<ClaimedDevices, crate::cluster::ClusterError>);

    impl DraSource for Claims {
        fn claimed_devices(
            &self,
            pod: &Pod,
        ) -> Result<ClaimedDevices, crate::cluster::ClusterError> {
            assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("ns", "p"));
            self.0.clone()
        }
    }

    fn claimed(devices: &[(&str, &str)], warnings: &[&str]) -> Claims {
        Claims(Ok(ClaimedDevices {
            devices: devices
                .iter()
                .map(|(resource, id)| crate::dra::ClaimedDevice {
                    resource_name: resource.to_string(),
                    device_id: id.to_string(),
                    from: "ResourceClaim ns/c status.allocation.devices.results[0]".into(),
                })
                .collect(),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
        }))
    }

    /// Multus's `GetPodResourceMap` "should append device IDs to existing
    /// entry" and "should preserve existing kubelet map entries": kubelet's
    /// and the claims' devices of one resource are one pool, sorted and
    /// each once; another resource's claimed devices are their own pool.
    #[test]
    fn claimed_devices_join_kubelets_pool_of_their_resource() {
        let kubelet = Kubelet::with_vf_a(&["0000:3b:02.4", "0000:3b:02.2"]);
        let claims = claimed(
            &[
                (VF_A, "0000:3b:02.3"),
                (VF_B, "0000:5e:00.1"),
                (VF_A, "0000:3b:02.2"),
                ("example.com/gpu", "GPU-1"),
            ],
            &["skipped one"],
        );
        let needs = [
            need("n[0]", VF_A),
            need("n[1]", VF_B),
            need("n[2]", VF_A),
            need("n[3]", VF_A),
        ];
        let mut warnings = Vec::new();
        assert_eq!(
            look_up(&pod(), &needs, &kubelet, Some(&claims), &mut warnings).unwrap(),
            [
                "0000:3b:02.2",
                "0000:5e:00.1",
                "0000:3b:02.3",
                "0000:3b:02.4"
            ]
        );
        assert_eq!(warnings, ["skipped one"]);
        // A fourth of VF_A: 02.2, from both paths, is one device.
        let four = [
            need("a", VF_A),
            need("b", VF_A),
            need("c", VF_A),
            need("d", VF_A),
        ];
        let e = look_up(&pod(), &four, &kubelet, Some(&claims), &mut vec![]).unwrap_err();
        assert!(
            matches!(
                &e,
                PlanError::TooFewDevices {
                    allocated: 3,
                    wanted: 4,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("ResourceClaims"), "{e}");
        // DRA alone, kubelet reporting the pod without devices.
        let empty = Kubelet::answering(Ok(pod_resources(vec![container("app", &[])])));
        let claims = claimed(&[(VF_A, "0000:3b:02.7")], &[]);
        assert_eq!(
            look_up(
                &pod(),
                &[need("n", VF_A)],
                &empty,
                Some(&claims),
                &mut vec![]
            )
            .unwrap(),
            ["0000:3b:02.7"]
        );
    }

    #[test]
    fn claim_failures_name_the_attachment_and_keep_their_code() {
        let kubelet = Kubelet::answering(Ok(pod_resources(vec![])));
        let bad = crate::dra::DraError::ClaimMissing {
            claim: "ns/x".into(),
            pod: "ns/p".into(),
            field: "status.resourceClaimStatuses[0].resourceClaimName".into(),
        };
        let claims = Claims(Err(bad.into()));
        let e = look_up(
            &pod(),
            &[need("networks[1]", VF_A)],
            &kubelet,
            Some(&claims),
            &mut vec![],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "networks[1]: NetworkAttachmentDefinition ns/sriov has resourceName \
             intel.com/sriov_a, whose device may come from the pod's ResourceClaims (DRA): \
             ResourceClaim ns/x, named by pod ns/p \
             status.resourceClaimStatuses[0].resourceClaimName, does not exist"
        );
        let cni: crate::cni::error::CniError = e.clone().into();
        assert_eq!(
            (cni.code, cni.details),
            (crate::cni::error::ErrorCode::TryAgainLater, e.to_string())
        );
    }

    #[test]
    fn kubelet_failures_name_the_attachment() {
        let socket = std::path::PathBuf::from("/run/x.sock");
        let cases = [
            podresources::Error::TimedOut {
                socket: socket.clone(),
                after: std::time::Duration::from_secs(1),
            },
            podresources::Error::SocketMissing {
                socket: socket.clone(),
            },
            podresources::Error::PodNotFound {
                namespace: "ns".into(),
                name: "p".into(),
            },
        ];
        for failure in cases {
            let kubelet = Kubelet::answering(Err(failure.clone()));
            let e = look_up(
                &pod(),
                &[need("networks[1]", VF_A)],
                &kubelet,
                None,
                &mut vec![],
            )
            .unwrap_err();
            assert!(
                matches!(&e, PlanError::PodResources { need, source }
                    if need.starts_with("networks[1]: NetworkAttachmentDefinition ns/sriov")
                        && *source == failure),
                "{e:?}"
            );
            assert!(e.to_string().contains("podResourcesSocket"), "{e}");
        }
    }

    #[test]
    fn the_device_goes_into_every_plugin_of_the_chain() {
        let mut requests = vec![
            serde_json::json!({"type": "sriov", "deviceID": "stale"}),
            serde_json::json!({"type": "tuning"}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect::<Vec<_>>();
        hand_over(&mut requests, "0000:3b:02.1");
        for r in &requests {
            assert_eq!(r["deviceID"], "0000:3b:02.1");
            assert_eq!(r["pciBusID"], "0000:3b:02.1");
        }
    }
}
